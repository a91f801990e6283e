"""Delivery policies (docs/DELIVERY.md) against the oracle written from that page.

Random workloads of subscriptions in groups of every mode (anycast, manycast,
faircast, bestcast), with random dwell, exit dwell and margins, mixed with
plain subscriptions, upserts, moves across zone edges, unsubscribes,
retracts and expiries, in several batches, go through the `Engine` (plain,
and sharded, where the first cell reports every delivery pair) and
`tests.delivery_oracle`; the records per pair must be equal, the refused
positions too, and the engine deterministic.
"""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.admission import Input
from matcher.engine import Engine, SpaceMatcher
from matcher.records import Source
from matcher.sharding import Sharding, ShardSpec
from tests import delivery_oracle, oracle
from tests.test_engine_properties import run_engine, split

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 60)), deadline=None, print_blob=True
)
BASE = 1_700_000_000_000
MODES = ("anycast", "manycast", "faircast", "bestcast")
SHARDS = Sharding({"A": ShardSpec("x", (2.0, 5.0))})


@st.composite
def policies(draw) -> dict:
    mode = draw(st.sampled_from(MODES))
    k = 1 if mode == "anycast" else draw(st.integers(1, 3))
    policy = {"mode": mode}
    if mode != "anycast" or draw(st.booleans()):
        policy["k"] = k
    return policy


@st.composite
def subscription(draw, ts: int, groups: dict, crowded: bool = False) -> dict:
    lo = draw(st.sampled_from((0, 1, 2) if crowded else (0, 1, 2, 3, 4, 5)))
    hi = lo + draw(st.sampled_from((4, 6, 8) if crowded else (0, 1, 2, 4, 6)))
    rec = {
        "op": "subscribe",
        "id": draw(st.sampled_from(("s0", "s1", "s2", "s3", "s4", "s5"))),
        "space": "A",
        "subscriber": draw(st.sampled_from(("alice", "bob", "carol"))),
        "ts": ts,
    }
    if draw(st.integers(0, 4)):
        rec["filter"] = [[{"attr": "x", "op": "between", "value": [lo, hi]}]]
    else:
        rec["where"] = f"x > {lo} AND y <= {hi}"
    if draw(st.integers(0, 5)) == 0:
        rec["valid_to"] = ts + draw(st.integers(0, 40))
    if draw(st.integers(0, 4)) == 0:
        rec["relation"] = "covers"
    if crowded or draw(st.integers(0, 4)):  # mostly with delivery fields
        if crowded or draw(st.integers(0, 3)):
            group = draw(st.sampled_from(sorted(groups)))
            delivery = {"group": group, **groups[group]}
            if draw(st.integers(0, 15)) == 0:  # a member that disagrees
                delivery = {"group": group, **draw(policies())}
            if delivery["mode"] == "bestcast":
                delivery["near"] = {"x": draw(st.sampled_from((0, 1.5, 3, 4.5, 6)))}
            rec["delivery"] = delivery
        for name in ("dwell_ms", "exit_dwell_ms"):
            if draw(st.booleans()):
                rec[name] = draw(st.sampled_from((0, 1, 3, 8, 20)))
        if rec.get("relation") != "covers" and draw(st.booleans()):
            rec["margin"] = draw(st.sampled_from((0, 0.5, 1.5, {"x": 1.0}, {"y": 3})))
    return rec


@st.composite
def profile(draw, ts: int) -> dict:
    x = draw(st.sampled_from((0, 0.8, 1.5, 2, 2.2, 3, 3.9, 4.5, 5, 6.1)))
    attrs = {"x": x if draw(st.integers(0, 3)) else [x, x + draw(st.sampled_from((0.5, 2)))]}
    if draw(st.booleans()):
        attrs["y"] = draw(st.sampled_from((0, 1, 3)))
    rec = {
        "op": "publish",
        "id": draw(st.sampled_from(("p0", "p1", "p2", "p3"))),
        "space": "A",
        "attrs": attrs,
        "ts": ts,
        "payload": {"x": x},
    }
    choice = draw(st.integers(0, 3))
    if choice == 0:
        rec["valid_to"] = None
    elif choice == 1:
        rec["valid_to"] = ts + draw(st.integers(0, 30))
    else:  # (tracked objects: valid until the next report, about)
        rec["valid_to"] = ts + 25
    return rec


@st.composite
def workloads(draw, crowded: bool = False):
    """Batches of (kind, record, line). `crowded`: one group whose members all
    overlap, so that its policy decides who gets each profile."""
    groups = {g: draw(policies()) for g in (("g1",) if crowded else ("g1", "g2"))}
    ts = BASE
    records = []
    for _ in range(draw(st.integers(1, 24))):
        ts += draw(st.sampled_from((0, 1, 2, 5, 9)))
        what = draw(st.integers(0, 9))
        if what < 4:
            records.append(("subscription", draw(subscription(ts, groups, crowded))))
        elif what < 8:
            records.append(("profile", draw(profile(ts))))
        elif what == 8:
            ident = draw(st.sampled_from(("s0", "s1", "s2", "s3")))
            records.append(
                ("subscription", {"op": "unsubscribe", "id": ident, "space": "A", "ts": ts})
            )
        else:
            ident = draw(st.sampled_from(("p0", "p1", "p2")))
            records.append(("profile", {"op": "retract", "id": ident, "space": "A", "ts": ts}))
    n = len(records)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    bounds = [0, *cuts, n]
    return [
        [(k, r, i + 1) for i, (k, r) in enumerate(records[a:b], start=a)]
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def expected_of(batches, lateness: int = 0):
    ref = delivery_oracle.Engine(lateness)
    expected, refused = [], []
    for batch in batches:
        events, bad = ref.process_batch([(k, r, line) for k, r, line in batch])
        expected += events
        refused += bad
    return expected, sorted(refused)


@PROPS
@given(st.one_of(workloads(), workloads(crowded=True)))
def test_engine_equals_the_delivery_oracle(batches):
    out = run_engine(Engine(), batches)
    matches, refused = split(out)
    expected, expected_refused = expected_of(batches)
    assert sorted(refused) == expected_refused
    assert oracle.by_pair(matches) == oracle.by_pair(expected)
    assert run_engine(Engine(), batches) == out  # deterministic, byte for byte
    sharded = run_engine(Engine(sharding=SHARDS), batches)
    assert sorted(sharded) == sorted(out)


@PROPS
@given(workloads(), st.integers(0, 30))
def test_a_snapshot_or_a_rebuilt_log_carries_the_delivery_state(batches, cut):
    """A matcher dumped and loaded, or rebuilt from its logged changes (as the job's
    state store does), in the middle of a workload goes on as the one that was not."""
    from matcher.admission import decode_input, in_order
    from streaming.state import change_log

    records = [
        decode_input(Input(k, json.dumps(r), Source(file="gen", line=line)))
        for batch in batches
        for k, r, line in batch
    ]
    records = in_order([r for r in records if not isinstance(r, dict)])
    whole, logged = SpaceMatcher("A"), []
    first = [e for r in records[:cut] for e in whole.apply(r)]
    logged = whole.drain_changes()
    rebuilt = SpaceMatcher("A")
    change_log.replay(rebuilt, logged)
    rebuilt.drain_changes()
    loaded = SpaceMatcher.load(whole.dump())
    rest = [e for r in records[cut:] for e in whole.apply(r)] + whole.expire(BASE * 2)
    for other in (loaded, rebuilt):
        again = [e for r in records[cut:] for e in other.apply(r)] + other.expire(BASE * 2)
        assert again == rest
    assert first is not None
