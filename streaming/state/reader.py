"""The last committed state of the job's checkpoint, read with Spark's state data source."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def has_commits(checkpoint: str) -> bool:
    """Whether the query of this checkpoint has committed a batch (and so holds state)."""
    return any(Path(checkpoint, "commits").glob("[0-9]*"))


def committed_state(spark: Any, checkpoint: str, var: str) -> Any:
    """One of the processor's state variables as a DataFrame (`key`, `value`, ...),
    or None while the checkpoint has no committed batch."""
    from pyspark.errors import PySparkException

    if not has_commits(checkpoint):
        return None
    try:
        return spark.read.format("statestore").option("stateVarName", var).load(checkpoint)
    except PySparkException as exc:  # (another query's checkpoint: no such operator or state)
        raise ValueError(
            f"checkpoint {checkpoint} does not hold this job's state: {str(exc).splitlines()[0]}"
        ) from None


def held_keys(spark: Any, checkpoint: str) -> set[str]:
    """The state keys the checkpoint holds (a cell keeps its key: `streaming.placement`)."""
    state = committed_state(spark, checkpoint, "meta")
    return set() if state is None else {row[0] for row in state.select("key.skey").collect()}
