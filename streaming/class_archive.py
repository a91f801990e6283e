"""The driver JVM's class-data archive: Spark's classes mapped from one file.

Much of a job's start is its JVM loading, parsing and verifying Spark's
classes from the jars, tens of thousands of them, on every start and
restart. A Java 13+ JVM can write the classes a run loaded to an archive
when it exits (`-XX:ArchiveClassesAtExit`); a later JVM started with
`-XX:SharedArchiveFile` maps them from it instead. The archive belongs to
one JVM build and one class path (the pyspark jars it was made with): a JVM
that finds it does not match ignores it and loads its classes as usual, so
a stale archive costs nothing but its file.

`make install` builds it (`python -m streaming.class_archive`, a short local
Spark query); `streaming.job.session` starts the driver with it when it is
there. It lives in the environment (`sys.prefix`), so that a new environment
gets its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# `-Xlog:cds*=off`: a JVM that cannot use the archive (another Java, other
# jars) says so on stdout, which is the batch log's; it then runs without it.
QUIET = "-Xlog:cds*=off"
JVM_EXIT_S = 300.0  # the JVM writes the archive after the Python side has ended


def archive_path() -> Path:
    """Where this environment's archive is (whether or not it is built)."""
    import pyspark

    return Path(sys.prefix) / "share" / "tsm" / f"spark-{pyspark.__version__}-classes.jsa"


def driver_java_options() -> str | None:
    """The driver's JVM options that map the archive, or None when there is none."""
    path = archive_path()
    if not path.is_file():
        return None
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def _dump(path: Path) -> None:
    """Run a short local query in a JVM that writes the classes it loaded to `path`
    when it exits; print the JVM's pid (the caller waits for it to end)."""
    from pyspark.sql import SparkSession

    options = f"-XX:ArchiveClassesAtExit={path} {QUIET}"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tsm-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", options)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
    spark.range(1000).selectExpr("id % 7 AS key").groupBy("key").count().collect()
    spark.stop()


def _ended(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie no one has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # (no /proc: ask the kernel)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def build(path: Path | None = None) -> Path:
    """Make the archive at `path` (default `archive_path()`) and return it.

    The query runs in a child process; its JVM writes the archive to a file of
    its own as it exits, which then replaces `path` in one rename, so that a
    JVM starting meanwhile maps either the old archive or the new one, whole.
    Takes about a minute. Raises RuntimeError when no archive was written (a
    Java older than 13, a JVM that could not write it)."""
    path = path or archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    child = subprocess.run(
        [sys.executable, "-m", "streaming.class_archive", "--dump", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = child.stdout.split()
    if child.returncode != 0 or not lines or not lines[0].isdigit():
        raise RuntimeError(f"the archive's query failed: {child.stderr.strip()[-2000:]}")
    deadline = time.monotonic() + JVM_EXIT_S
    while not _ended(int(lines[0])):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the JVM did not end within {JVM_EXIT_S:g}s")
        time.sleep(0.2)
    if not partial.is_file():
        raise RuntimeError("the JVM wrote no archive (it needs Java 13 or later)")
    partial.replace(path)
    return path


def main(argv: list[str]) -> int:
    """`python -m streaming.class_archive`: build the archive; a failure is
    reported and is not an error (jobs then start without it)."""
    if argv[:1] == ["--dump"]:
        _dump(Path(argv[1]))
        return 0
    began = time.monotonic()
    try:
        path = build()
    except RuntimeError as exc:
        print(f"tsm: no class archive, jobs start without it: {exc}", file=sys.stderr)
        return 0
    took = time.monotonic() - began
    print(f"tsm: the driver's class archive is {path} ({took:.0f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
