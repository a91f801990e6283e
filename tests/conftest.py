"""Test-session settings shared by every test module.

`make test` runs the suite on two pytest-xdist workers (`-n 2`). The
integration tests (everything under tests/integration/) run real Spark jobs
and broker processes, some timed against each other (kills, outages), so the
scheduler below hands them to one worker as one unit, to run one at a time,
while the other worker takes the unit tests. (xdist's own `--dist loadgroup`
cannot be used: it renames the tests' node ids, which pytest 9 ignores.)
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

INTEGRATION = "tests/integration/"


class IntegrationTogether(LoadScopeScheduling):
    """Every integration test in one scope (one worker, in order); every other test
    a scope of its own (spread over the workers as they free up)."""

    def _split_scope(self, nodeid: str) -> str:
        return INTEGRATION if nodeid.startswith(INTEGRATION) else nodeid


def pytest_xdist_make_scheduler(config, log) -> IntegrationTogether:
    return IntegrationTogether(config, log)
