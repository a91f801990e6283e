"""How much `tsm` says, and where: set once per command from `-q`/`-v`.

Every module logs through `logging.getLogger(__name__)`; this module is the
only place that configures logging. A human message is one line on stderr,
`tsm COMMAND: message` (`warning: ` or `error: ` after the colon where it is
one). Verbosity is the count of `-v` less the count of `-q`:

| verbosity | tsm's modules | other libraries | Spark (log4j) | librdkafka `log_level` |
|---|---|---|---|---|
| -2 or less | errors | errors | ERROR | 3 (errors) |
| -1 | warnings | errors | ERROR | 3 |
| 0 (default) | info | warnings | WARN | 4 (warnings) |
| 1 | debug | warnings | WARN | 6 (librdkafka's own default) |
| 2 or more | debug | info | INFO | 7 |

The batch log of `tsm run` (`streaming.listener.BATCH_LOG`: one JSON object a
line, for machines) is written to stderr as it is, whatever the verbosity.
What Spark's JVM and the processes it starts print by themselves (start-up
notices before any log level applies, Python worker lines, their librdkafka
log) passes by logging: `jvm_output_to` sends it to a file (`tsm demo`
unless -v, `tsm run --spark-log FILE`). So `tsm run -q --spark-log FILE 2>
batches.jsonl` gives the batches, and warnings and errors only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# The packages whose loggers follow the verbosity; others (py4j, ...) stay quieter.
PACKAGES = ("tsm_cli", "matcher", "streaming", "connectors", "benchmarks")
BATCH_LOG = "streaming.listener.batches"
# Spark's loggers that report a streaming query's end (`quiet_query_errors`).
QUERY_LOGGERS = ("org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",)
_LABELS = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}


class _Stderr(logging.StreamHandler):
    """A handler writing to the `sys.stderr` of the moment (tests and tqdm swap it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _OneLine(logging.Formatter):
    """`tsm COMMAND: [warning: |error: ]message`, and an exception as its last line."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.prefix = f"tsm {command}: " if command else "tsm: "

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text = f"{text}: {record.exc_info[1]}"
        return self.prefix + _LABELS.get(record.levelno, "") + text


def configure(command: str, verbosity: int = 0) -> None:
    """Route every log record to stderr for `command` at the level `verbosity` asks.

    Called once per `tsm` invocation (again in tests: the previous handlers
    are replaced, not added to)."""
    root = logging.getLogger()
    _set_handler(root, _OneLine(command))
    root.setLevel(
        logging.ERROR if verbosity < 0 else logging.WARNING if verbosity < 2 else logging.INFO
    )
    for name in PACKAGES:
        logging.getLogger(name).setLevel(_level(verbosity))
    batches = logging.getLogger(BATCH_LOG)
    _set_handler(batches, logging.Formatter("%(message)s"))
    batches.setLevel(logging.INFO)
    batches.propagate = False


def _set_handler(logger: logging.Logger, formatter: logging.Formatter) -> None:
    """Give `logger` one stderr handler of ours with `formatter` (others' stay)."""
    for handler in [h for h in logger.handlers if isinstance(h, _Stderr)]:
        logger.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(formatter)
    logger.addHandler(handler)


def _level(verbosity: int) -> int:
    """-2: ERROR, -1: WARNING, 0: INFO, 1: DEBUG (and beyond, the nearest)."""
    return {-1: logging.WARNING, 0: logging.INFO}.get(
        verbosity, logging.DEBUG if verbosity > 0 else logging.ERROR
    )


def spark_log_level(verbosity: int) -> str:
    """Spark's log4j level for `sparkContext.setLogLevel`."""
    return "ERROR" if verbosity < 0 else "WARN" if verbosity < 2 else "INFO"


def quiet_query_errors(spark: Any) -> None:
    """Leave the end of a streaming query to the command that runs it (`tsm run` says
    in one line why it failed, and nothing when it was stopped): Spark's query
    execution logs a failed query whole at ERROR (Java and Python stack traces, the
    plan), and py4j logs an exception raised in a Python callback (the stop of
    `streaming.stopping.StopFlag.guard`, say) as an error of its own."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in QUERY_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)


def client_log_level(verbosity: int) -> str:
    """librdkafka's `log_level` (syslog levels: 3 errors, 4 warnings, 6 info, 7 debug)."""
    return "3" if verbosity < 0 else "4" if verbosity == 0 else "6" if verbosity == 1 else "7"


def with_client_log_level(options: Mapping[str, str], verbosity: int) -> dict[str, str]:
    """`kafka.*` client options with the verbosity's `log_level` under the user's own.

    librdkafka writes its log to stderr itself; its info level (`%6|...|BGQUEUE|`
    and the like, on every client's start and end) is for -v."""
    return {"kafka.log_level": client_log_level(verbosity), **options}


@contextlib.contextmanager
def jvm_output_to(path: Path | None) -> Iterator[None]:
    """Start Spark's JVM inside this block with its stdout and stderr in `path`.

    Spark's JVM, its Python workers and the Kafka clients in them write to the
    standard streams the JVM inherits at launch, past log4j: Spark's start-up
    notices, `Streaming TransformWithStateInPandas Python worker ...` lines,
    librdkafka's own log. They go to `path` (appended) while this process's
    own streams are the terminal again after the block. None: left as they are.
    """
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
