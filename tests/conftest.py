"""Test-session settings shared by every test module.

`make test` runs the suite on two pytest-xdist workers (`-n 2`). The
integration tests (everything under tests/integration/) run real Spark jobs
and broker processes, some timed against each other (kills, outages), so the
scheduler below hands them to the workers in two lanes, each lane one unit that
one worker runs one test at a time: the jobs killed again and again (the
faults and the cluster's) in one, every other integration test in the other.
Each lane is about half of the integration tests' time, the critical path of
the suite; the unit tests go to whichever worker nears the end of its lane
first. (xdist's own `--dist loadgroup` cannot be used: it renames the tests'
node ids, which pytest 9 ignores.)
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from xdist.scheduler import LoadScopeScheduling

INTEGRATION = "tests/integration/"
# The modules of the first lane; the other integration modules make the second.
KILLED_JOBS = ("test_faults.py", "test_cluster.py")


class IntegrationLanes(LoadScopeScheduling):
    """The integration tests in two scopes (each on one worker, in order); every
    other test a scope of its own (spread over the workers as they free up)."""

    def _split_scope(self, nodeid: str) -> str:
        if not nodeid.startswith(INTEGRATION):
            return nodeid
        module = nodeid[len(INTEGRATION) :].split("::", 1)[0]
        return INTEGRATION + ("killed-jobs" if module in KILLED_JOBS else "jobs")


def pytest_xdist_make_scheduler(config, log) -> IntegrationLanes:
    return IntegrationLanes(config, log)


@pytest.fixture(autouse=True)
def _heap_thawed() -> Iterator[None]:
    """The heap as a test found it: a test that runs the processor in this
    process leaves it frozen (`streaming.processor._freeze_heap`), and then
    whatever was alive, garbage cycles of the tests before included, is out of
    the cyclic GC's sight for the rest of the worker's tests."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()
