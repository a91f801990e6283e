"""The job's Python code as a package for executors on other machines, and the settings
of a session whose master is a cluster.

In `local[N]` the Python workers are this machine's processes and import the
installed project. On a cluster they run on the workers' machines, which have
Python and the job's dependencies (numpy, pandas, pyarrow, confluent-kafka,
msgspec: `requirements.lock`) but not this checkout: the driver ships the
packages the executors import (`EXECUTOR_PACKAGES`) as one zip, which Spark
copies to every executor and puts on its Python workers' path
(`SparkContext.addPyFile`, or `spark-submit --py-files`). Spark takes `.zip`,
`.egg` and `.jar` there, not `.whl`, so the package is a zip with the packages
at its root, as a wheel would hold them.

The zip is made from the modules Python imports here (the checkout of an
editable install, or site-packages of an installed one), `.py` files only; its
name carries the version and a digest of its content, so that a changed tree
makes a new file, and an unchanged one the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

# What code running on an executor imports: the operator, the source and sink
# (connectors), the engine (matcher). Not the CLI, nor the benchmarks.
EXECUTOR_PACKAGES = ("matcher", "connectors", "streaming")
# A fixed time for every entry, so that the same tree gives the same bytes.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
PACKAGE_PREFIX = "tsm-job-"


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tsm")
    except metadata.PackageNotFoundError:
        return "0"


def _sources() -> Iterator[tuple[str, Path]]:
    """(name in the zip, file) of every module of `EXECUTOR_PACKAGES`, sorted."""
    for name in EXECUTOR_PACKAGES:
        package = importlib.import_module(name)
        root = Path(package.__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield f"{name}/{path.relative_to(root).as_posix()}", path


def package_bytes() -> bytes:
    """The zip of `EXECUTOR_PACKAGES`, deterministic for a given tree. Cost: reading and
    deflating the packages' sources (about 1 MB), well under a second."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in _sources():
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def build_job_package(out_dir: Path) -> Path:
    """Write the job's package into `out_dir` as `tsm-job-<version>-<digest>.zip`; return
    its path (an existing file of that name is the same bytes, and is kept)."""
    data = package_bytes()
    digest = hashlib.sha256(data).hexdigest()[:12]
    path = Path(out_dir) / f"{PACKAGE_PREFIX}{_version()}-{digest}.zip"
    if not path.is_file():
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        partial.write_bytes(data)
        partial.replace(path)
    return path


def is_cluster(master: str | None) -> bool:
    """Whether `master` runs executors in processes of their own (not `local`, `local[N]`)."""
    return master is not None and not master.startswith("local")


@dataclass(frozen=True)
class Executors:
    """What a session on a cluster asks of its executors.

    `count` executors of one core (None: one per state partition, so that each holds
    one), each with `memory` of heap (the state store's key snapshots are held
    several times over while written: DESIGN.md), their Python workers running
    `python` (None: this interpreter's path, as on this machine), which has the
    job's dependencies installed."""

    python: str | None = None
    memory: str = "2g"
    count: int | None = None

    def settings(self, state_partitions: int) -> dict[str, str]:
        """The Spark settings. The session waits, up to two minutes, until every executor
        has registered: the first batch's tasks go to the executors there are, and a
        state partition stays on the executor that first loaded it (Spark prefers it
        afterwards), so an executor that came late would get no state."""
        return {
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.count or state_partitions),
            "spark.executor.memory": self.memory,
            "spark.pyspark.python": self.interpreter,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        }

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable


def shipped(spark_conf_files: str) -> bool:
    """Whether a job package is among `spark.submit.pyFiles` already (`spark-submit
    --py-files`), so that the session need not add one."""
    return any(Path(f).name.startswith(PACKAGE_PREFIX) for f in spark_conf_files.split(",") if f)


# The directory of the package a session ships: the driver serves the file to the
# executors from there for as long as the application runs (removed at exit).
_SHIPPED: list[tempfile.TemporaryDirectory] = []


def job_package() -> Path:
    """The job's package, built into a directory that lasts as long as this process."""
    directory = tempfile.TemporaryDirectory(prefix="tsm-job-package-")
    _SHIPPED.append(directory)
    return build_job_package(Path(directory.name))


@contextlib.contextmanager
def on_driver_path(package: Path) -> Iterator[None]:
    """`package` first on PYTHONPATH while the block starts the driver's JVM.

    Spark runs some of the job's Python on the driver, in processes its JVM
    starts with the executors' interpreter: the planning side of the Python
    Kafka source (`connectors.kafka_source`). Their path is Spark's own plus the
    JVM's PYTHONPATH, not the files added to the context; so the JVM gets the
    package there, as the executors get it from `ship`."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(package), *filter(None, [before])])
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def ship(context: SparkContext, package: Path) -> bool:
    """Add `package` to `context`: its executors fetch it and put it on their Python
    workers' path. False, adding nothing, when `spark-submit --py-files` gave a job
    package already."""
    if shipped(context.getConf().get("spark.submit.pyFiles", "")):
        return False
    context.addPyFile(str(package))
    return True
