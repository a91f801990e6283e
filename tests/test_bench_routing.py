"""The routing benchmark's topologies and placements (the benchmark itself is no test)."""

from __future__ import annotations

import pytest

from benchmarks.bench_routing import check_targets
from benchmarks.placement import TOPOLOGIES, network_toml, place, topology
from benchmarks.workloads import generate
from matcher.engine import Engine
from matcher.routing.network import parse_network
from tests.test_routing_equivalence import assert_equivalent


@pytest.mark.parametrize(("name", "sites"), [("line-7", 7), ("tree-15", 15), ("star-8", 8)])
def test_each_topology_is_a_tree_of_its_size(name, sites):
    names, links = topology(name)
    net = parse_network(network_toml(names, links, "covering"))
    assert len(net.sites) == sites and len(net.links) == sites - 1
    assert net.first == "s0"
    if name == "star-8":
        assert len(net.neighbours("s0")) == 7


def test_placement_keeps_an_id_at_one_site_and_locality_puts_subscribers_near():
    subs, profiles = generate("tracking", 1, 60, 300)
    reference = list(_matches(subs, profiles))
    names, _ = topology("line-7")
    for how in ("uniform", "locality"):
        placed_subs, placed_profiles = place(subs, profiles, names, how, reference)
        for records in (placed_subs, placed_profiles):
            homes: dict[str, set[str]] = {}
            for r in records:
                homes.setdefault(r["id"], set()).add(r["site"])
            assert all(len(h) == 1 for h in homes.values())
    sub_site = {r["id"]: r["site"] for r in placed_subs}
    profile_site = {r["id"]: r["site"] for r in placed_profiles}
    local = sum(sub_site[m["subscription_id"]] == profile_site[m["profile_id"]] for m in reference)
    assert local > 0.5 * len(reference)


def test_a_placed_workload_runs_equal_to_one_matcher_on_each_topology():
    subs, profiles = generate("nested", 2, 40, 40)
    for name in TOPOLOGIES:
        names, links = topology(name)
        placed = place(subs, profiles, names, "uniform")
        assert_equivalent(parse_network(network_toml(names, links, "merging")), *placed)


def test_the_targets_are_judged_per_case():
    row = dict(workload="nested", topology="line-7", placement="locality", false_positive_share=0.0)

    def r(strategy, **counts):
        base = dict(interest_messages=0, largest_table=1, profiles_forwarded=0)
        return {**row, **base, **counts, "strategy": strategy}

    rows = [
        r("flooding", profiles_forwarded=900),
        r("simple", interest_messages=1000, largest_table=500, profiles_forwarded=100),
        r("covering", interest_messages=150, largest_table=50, profiles_forwarded=100),
        r("merging-imperfect", interest_messages=200, largest_table=40, profiles_forwarded=400),
    ]
    judged = check_targets(rows)
    assert [t["met"] for t in judged] == [True, True, True, False]
    assert judged[3]["measured"].startswith("most: merging-imperfect 44.4% of flooding's")


def _matches(subs, profiles):
    from benchmarks.bench_routing import _items

    return (o.value for o in Engine().process_batch(_items(subs, profiles)) if o.topic == "matches")
