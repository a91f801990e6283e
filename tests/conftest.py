"""Test-session settings shared by every test module.

`make test` runs the suite on two pytest-xdist workers (`-n 2 --dist
loadgroup`). The integration tests run real Spark jobs and broker processes,
some timed against each other (kills, outages), so they stay together in one
group, run one at a time by one worker, while the other worker takes the unit
tests; without xdist the marker does nothing.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))
