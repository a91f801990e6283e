"""Shared fixtures for integration tests: a real broker and a real local Spark.

Both are session-scoped because they are slow to start (Spark ~6 s) and
cheap to share; tests stay independent by using their own topics
(`new_topic`), consumer groups and checkpoint directories (`tmp_path`).

    def test_something(bootstrap, spark, new_topic):
        topic = new_topic("profiles", partitions=3)
        ...
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator

import pytest

from connectors.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A noida-db process on a free port with a temporary data dir, stopped at the end."""
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("broker")) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    """`localhost:PORT` of the session's broker."""
    return broker.bootstrap


@pytest.fixture(scope="session")
def new_topic(bootstrap: str) -> Callable[..., str]:
    """`new_topic(prefix, partitions=1)` creates a uniquely named topic and returns its name.

    Created explicitly with `retention.ms=-1` (auto-created topics get one
    partition, and old CreateTime records would vanish: PLATFORM.md).
    """
    from connectors.admin import create_topics

    counter = itertools.count()

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{os.getpid()}-{next(counter)}"
        create_topics(bootstrap, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """A `local[2]` SparkSession: 2 shuffle partitions, no UI, UTC, quiet logs.

    Python workers run this interpreter, so they see the same packages
    (confluent-kafka, the project) as the tests.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    work = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tsm-integration-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "localhost")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "local"))
        # A Python worker must connect back within this; 15 s is too short for
        # its imports on a busy 2-core machine.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
