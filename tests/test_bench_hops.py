"""The hops benchmark's pure parts: its clients and its verdict."""

from __future__ import annotations

import json

from benchmarks.bench_hops import SITES, Plan, readme_section, results, subscriptions


def test_every_site_has_a_subscription_that_wants_every_profile():
    subs = subscriptions(Plan(subscribers=3), now_ms=1_000)
    assert sorted(subs) == sorted(SITES)
    for site, lines in subs.items():
        records = [json.loads(line) for line in lines]
        assert len(records) == 4
        assert records[0] == records[0] | {"id": f"{site}-s0", "where": "x >= 0"}
        assert len({r["id"] for r in records}) == 4


def _run(p50: dict[str, float], missing: int = 0) -> dict:
    return {
        "profiles": 10,
        "missing": dict.fromkeys(SITES, 0) | {"west": missing},
        "by_hops": {h: {"p50_ms": v, "p95_ms": 2 * v, "count": 10} for h, v in p50.items()},
    }


def test_the_target_is_two_links_p50_within_twice_one_site_s():
    single = _run({"0": 400.0})
    assert results(Plan(), single, _run({"0": 500.0, "1": 650.0, "2": 800.0}))["target_met"]
    slow = results(Plan(), single, _run({"0": 500.0, "1": 700.0, "2": 900.0}))
    assert slow["two_hops_over_one_site"] == 2.25 and not slow["target_met"]
    lost = results(Plan(), single, _run({"0": 500.0, "2": 600.0}, missing=1))
    assert not lost["target_met"]
    text = readme_section(slow, "tsm bench hops")
    assert "**2.25x**" in text and "not met" in text and "network, 2 links" in text
