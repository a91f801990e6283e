"""The driver's class-data archive (`streaming.class_archive`): the job's session
maps Spark's classes from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

# A session as `tsm run` starts it, its JVM logging where each class came from.
SESSION = """
import sys
from streaming import class_archive
from streaming.config import JobConfig
from streaming.job import session

class_archive.QUIET = "-Xlog:class+load=info:file=" + sys.argv[1]
session(JobConfig(), "local[1]", "tsm-class-archive-test", ui=False).stop()
"""


def test_the_job_s_driver_maps_spark_s_classes_from_the_archive(tmp_path):
    from streaming import class_archive

    if class_archive.driver_java_options() is None:  # (`make install` builds it)
        class_archive.build()
    log = tmp_path / "classes.log"
    done = subprocess.run(
        [sys.executable, "-c", SESSION, str(log)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sources = log.read_text().splitlines()
    shared = [line for line in sources if "source: shared objects file (top)" in line]
    spark = [line for line in shared if " org.apache.spark." in line]
    # (thousands of Spark's classes: the session's own start loads them)
    assert len(spark) > 1000, f"{len(shared)} of {len(sources)} classes from the archive"
