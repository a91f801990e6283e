"""`matcher.watermark`: the common-time cut and the per-partition watermark (SEMANTICS §3).

The expectations are written from the spec: the cut is checked against a
plain sort of every pending record by (place in time, partition, offset), and
the watermark against a per-record lateness rule computed from each
partition's own history.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.errors import RecordError
from matcher.records import decode
from matcher.watermark import (
    NO_TIME,
    EventClock,
    Idleness,
    as_times,
    cut,
    event_time,
    next_watermark,
)

PROPS = settings(max_examples=300, deadline=None)

# -- event_time ----------------------------------------------------------------------

TS_VALUES = st.one_of(
    st.none(),
    st.integers(-(10**16), 10**16),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e16, max_value=1e16),
    st.sampled_from(
        ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00.5+02:00", "2026-13-01", "", "noon"]
    ),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def raw_records(draw):
    record = {"op": draw(st.sampled_from(["publish", "subscribe", "shout"])), "id": "x"}
    record |= {"space": "s", "attrs": {"x": 1}, "subscriber": "u", "where": "TRUE"}
    if draw(st.booleans()):
        record["ts"] = draw(TS_VALUES)
    if draw(st.booleans()):  # a second `ts` key: the last one counts, as in json.loads
        text = json.dumps(record)[:-1] + ', "ts": ' + json.dumps(draw(TS_VALUES)) + "}"
    else:
        text = json.dumps(record)
    raw = text.encode()
    cut_at = draw(st.integers(0, len(raw) + 5))
    return raw[:cut_at] if cut_at < len(raw) else raw


@PROPS
@given(raw_records(), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_event_time_is_the_ts_decode_reads(raw, fallback):
    """For every record decode accepts, the time read from `ts` alone is its ts."""
    kind = "subscription" if b'"subscribe"' in raw else "profile"
    try:
        record = decode(kind, raw, fallback_ts=fallback)
    except RecordError:
        return
    assert event_time(raw, fallback) == record.ts


def test_event_time_of_odd_records():
    assert event_time(b'{"ts": 5}') == 5
    assert event_time('{"ts": "1970-01-01T00:00:01Z"}') == 1000
    assert event_time(b'{"ts": null}', 7) == event_time(b"{}", 7) == 7
    assert event_time(b"{}", 2**62) is None  # a Kafka timestamp past the year 9999
    for bad in (None, b"", b"{", b"[1]", b"\xff", b'{"ts": true}', b'{"ts": 1e999}'):
        assert event_time(bad, None) is None
    assert event_time(b'{"ts": ' + b"9" * 400 + b"}") is None
    assert event_time(b"[" * 100_000) is None
    # refused for another reason, its time counts all the same
    assert event_time(b'{"op": "shout", "ts": 12}') == 12


# -- cut ---------------------------------------------------------------------------------

TIMES = st.one_of(st.integers(0, 30), st.just(None))


def merged_order(pending: dict[str, list[int | None]]) -> list[tuple[str, int]]:
    """Every pending record as (partition, index), in the order (place, partition, index),
    a record's place being the largest time up to it in its partition."""
    keyed = []
    for rank, (partition, times) in enumerate(pending.items()):
        place = None
        for index, t in enumerate(times):
            if t is not None and (place is None or t > place):
                place = t
            keyed.append(((-1 if place is None else place), rank, index, partition))
    return [(partition, index) for *_, index, partition in sorted(keyed)]


@PROPS
@given(
    st.dictionaries(st.sampled_from("abcd"), st.lists(TIMES, max_size=12), max_size=4),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_cut_takes_the_first_records_in_time_order(pending, limit):
    taken = cut({p: as_times(t) for p, t in pending.items()}, limit)
    total = sum(len(t) for t in pending.values())
    want = merged_order(pending)[: total if limit is None else limit]
    assert taken == {p: sum(1 for q, _ in want if q == p) for p in pending}
    # (so: within the limit, full when there is more, never stuck)
    assert sum(taken.values()) == min(total, limit or total)


def test_cut_by_common_time():
    pending = {"subs": as_times([1, 2, 3, 10, 11]), "profiles": as_times([5, 6, 7, 8, 9])}
    assert cut(pending, 4) == {"subs": 3, "profiles": 1}
    # a record after a later one waits for it (offset order); ties: the first partition
    pending = {"a": as_times([4, 1, 1]), "b": as_times([2, 4, 4])}
    assert cut(pending, 1) == {"a": 0, "b": 1}
    assert cut(pending, 3) == {"a": 2, "b": 1}
    assert cut({"a": as_times([None, None, 3])}, 1) == {"a": 1}
    assert cut({"a": [], "b": as_times([1])}, 5) == {"a": 0, "b": 1}
    with pytest.raises(ValueError):
        cut({"a": as_times([1, 2])}, 0)
    assert NO_TIME < -(2**62)


# -- the watermark -----------------------------------------------------------------------


def test_next_watermark():
    seen = {"a": 10, "b": 30}
    assert next_watermark(None, seen, {"a": 12, "b": None}) == 10
    assert next_watermark(20, seen, {"a": 12}) == 20  # never down
    assert next_watermark(None, seen, {}) == 30  # nothing holds it: the largest seen
    assert next_watermark(None, seen, {"c": 5}) == 5  # unseen, waiting: its next record
    assert next_watermark(3, seen, {"c": None}) == 3  # unseen, next unknown: where it is
    assert next_watermark(None, {}, {}) is None


def test_idleness():
    idle = Idleness(idle_ms=100)
    assert idle.holds("a", waiting=True, seen=False, now=0)
    assert not idle.holds("empty", waiting=False, seen=False, now=0)
    assert idle.holds("a", waiting=False, seen=True, now=10)
    assert idle.holds("a", waiting=False, seen=True, now=109)
    assert not idle.holds("a", waiting=False, seen=True, now=110)
    assert idle.holds("a", waiting=True, seen=True, now=120)  # records again
    assert idle.holds("a", waiting=False, seen=True, now=200)  # idle anew from 200


@st.composite
def backlogs(draw):
    """Partitions of times in offset order: each drifts forward with some disorder,
    at its own rate and from its own start (one lags the others)."""
    out = {}
    for name in draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True)):
        t, times = draw(st.integers(0, 50)), []
        step = draw(st.integers(0, 6))
        for _ in range(draw(st.integers(0, 25))):
            t += draw(st.integers(0, step))
            times.append(None if draw(st.integers(0, 15)) == 0 else t - draw(st.integers(0, 4)))
        out[name] = times
    return out


def run(backlog, limit):
    """Read `backlog` in cut batches; yield for each record (batch number, partition,
    index, time, the largest time before it in its partition, the watermark at its
    batch's start)."""
    clock, at, number = EventClock(), dict.fromkeys(backlog, 0), 0
    while any(at[p] < len(t) for p, t in backlog.items()):
        start = clock.watermark
        window = {p: as_times(t[at[p] : at[p] + (limit or len(t))]) for p, t in backlog.items()}
        taken = cut(window, limit)
        assert sum(taken.values()) >= 1
        for p, n in taken.items():
            for i in range(at[p], at[p] + n):
                before = max((x for x in backlog[p][:i] if x is not None), default=None)
                yield number, p, i, backlog[p][i], before, start
                clock.observe(p, backlog[p][i])
            at[p] += n
        pending = {
            p: next((x for x in t[at[p] :] if x is not None), None)
            for p, t in backlog.items()
            if at[p] < len(t)
        }
        clock.close_batch(pending)
        assert start is None or clock.watermark >= start
        number += 1


@PROPS
@given(backlogs(), st.one_of(st.none(), st.integers(1, 12)), st.integers(0, 3))
def test_no_record_on_time_in_its_partition_is_late(backlog, limit, lateness):
    """A record is late only when its ts is below the largest before it in its own
    partition, less the lateness; and the watermark never goes down (`run`)."""
    for *_, ts, before, watermark in run(backlog, limit):
        if ts is None or watermark is None:
            continue
        if before is None or ts >= before - lateness:
            assert ts >= watermark - lateness


@PROPS
@given(backlogs(), st.integers(1, 12))
def test_time_ordered_partitions_are_read_in_time_order(backlog, limit):
    """Partitions each in time order are read in the order of SEMANTICS §5 across
    batches (time, then partition, then offset): batch cuts change nothing."""
    backlog = {p: sorted(t for t in ts if t is not None) for p, ts in sorted(backlog.items())}
    read = [(ts, p, i, number) for number, p, i, ts, _b, _w in run(backlog, limit)]
    assert [r[3] for r in sorted(read)] == sorted(r[3] for r in read)
