"""The Kafka source's batch planning by event time (`connectors.offsets`), without Kafka.

A topic is modelled as each partition's records, `(offset, time)` with gaps
between offsets (transaction markers, compaction); the driver's read-ahead
is filled from it as `connectors.kafka_source` fills it from Kafka.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import offsets as off
from matcher.watermark import NO_TIME

PROPS = settings(max_examples=200, deadline=None)
TP = tuple[str, int]


def test_marks_of_both_forms():
    plain = {"t": {"1": 5, "0": 3}}
    assert off.read_mark(plain) == off.Mark({("t", 0): 3, ("t", 1): 5})
    mark = off.Mark({("t", 1): 5, ("t", 0): 3}, {("t", 0): 17}, 12)
    text = json.dumps(mark.to_json())
    assert text == (
        '{"offsets": {"t": {"0": 3, "1": 5}}, "maxTs": {"t": {"0": 17}}, "watermark": 12}'
    )
    assert off.read_mark(json.loads(text)) == mark
    assert off.positions(json.loads(text)) == off.positions(plain) == {"t": {"0": 3, "1": 5}}
    # a topic named "offsets" in the plain form is a topic
    assert off.read_mark({"offsets": {"0": 4}}).positions == {("offsets", 0): 4}


def test_read_ahead_moves_and_forgets():
    read = off.ReadAhead(10)
    read.add([10, 12, 15], [1, 2, 3], 17)
    read.move_to(12)
    assert (list(read.offsets), list(read.times), read.start, read.end) == (
        [12, 15],
        [2, 3],
        12,
        17,
    )
    read.move_to(16)  # (past a record: 15 was read)
    assert list(read.offsets) == [] and (read.start, read.end) == (16, 17)
    read.move_to(40)  # outside: start over there
    assert (read.start, read.end) == (40, 40)


@st.composite
def topics(draw):
    """{(topic, partition): [(offset, time), ...]}, offsets rising with gaps, times
    drifting forward at each partition's own rate, some missing (`NO_TIME`)."""
    out = {}
    for tp in draw(
        st.lists(st.sampled_from([("s", 0), ("s", 1), ("p", 0), ("p", 1)]), unique=True, min_size=1)
    ):
        offset, t, step, records = (
            draw(st.integers(0, 3)),
            draw(st.integers(0, 40)),
            draw(st.integers(0, 5)),
            [],
        )
        for _ in range(draw(st.integers(0, 20))):
            offset += draw(st.sampled_from([1, 1, 1, 2, 3]))
            t += draw(st.integers(0, step))
            time = NO_TIME if draw(st.integers(0, 12)) == 0 else t - draw(st.integers(0, 3))
            records.append((offset, time))
        out[tp] = records
    return out


def watermarks(topic) -> dict[TP, tuple[int, int]]:
    return {tp: (0, (recs[-1][0] + 2) if recs else 0) for tp, recs in topic.items()}


def read_ahead(cache: dict, topic, tp: TP, begin: int, high: int, max_rows: int | None):
    """`KafkaStreamReader._read_ahead` on the model: what is cached stays; more is read
    in chunks of at most 3 offsets, as a consumer with gaps would return it."""
    read = cache.setdefault(tp, off.ReadAhead(begin))
    read.move_to(begin)
    want = high - begin if max_rows is None else max_rows
    while len(read.offsets) < want and read.end < high:
        stop = min(high, read.end + 3, read.end + want - len(read.offsets))
        found = [(o, t) for o, t in topic[tp] if read.end <= o < stop]
        read.add([o for o, _ in found], [t for _, t in found], stop)
    return read


def tie_order(tp: TP) -> tuple[int, int]:
    return (0 if tp[0] == "s" else 1, tp[1])


def plan(start_json, topic, max_rows, cache):
    start = off.read_mark(start_json)
    marks = watermarks(topic)
    ahead = {
        tp: read_ahead(cache, topic, tp, start.positions.get(tp, lo), hi, max_rows)
        for tp, (lo, hi) in marks.items()
        if hi > start.positions.get(tp, lo)
    }
    end = off.plan_by_event_time(
        start, marks, ahead, max_rows, tie_order, lambda tp, waiting, seen: waiting
    )
    return json.loads(json.dumps(end.to_json()))  # (as Spark keeps it: JSON text)


@PROPS
@given(topics(), st.one_of(st.none(), st.integers(1, 9)), st.integers(0, 30))
def test_a_backlog_read_by_event_time(topic, max_rows, restart_at):
    """Every record once, at most `max_rows` a batch; none on time in its partition is
    judged late; the watermark never goes down; a driver that restarts (no read-ahead)
    plans from the stored offset exactly the batches it would have planned."""
    start = off.Mark({tp: 0 for tp in topic}).to_json()
    cache, fresh, read, batch = {}, {}, [], 0
    while True:
        end = plan(start, topic, max_rows, cache)
        if batch == restart_at:
            assert plan(start, topic, max_rows, fresh) == end
            cache = {}
        if end == start:
            break
        first, last = off.read_mark(start), off.read_mark(end)
        records = [
            (tp, o, t)
            for tp, recs in topic.items()
            for o, t in recs
            if first.positions[tp] <= o < last.positions[tp]
        ]
        # (a batch may hold no record: it passes offsets without one, a gap at the end)
        assert len(records) <= (max_rows or len(records))
        for tp, offset, t in records:
            # (on time in its partition: at or after every time read before it there,
            # in earlier batches or earlier in this one)
            earlier = read + records
            before = [x for p, o, x in earlier if p == tp and o < offset and x != NO_TIME]
            on_time = not before or t >= max(before)
            if t != NO_TIME and on_time and first.watermark is not None:
                assert t >= first.watermark
        read += records
        assert first.watermark is None or last.watermark >= first.watermark
        start, batch = end, batch + 1
    assert sorted(read) == sorted((tp, o, t) for tp, recs in topic.items() for o, t in recs)
    final = off.read_mark(start)
    seen = [t for _, _, t in read if t != NO_TIME]
    assert final.watermark == (max(seen) if seen else None)  # all read: nothing holds it


def test_idle_and_new_partitions():
    topic = {("s", 0): [(0, 100), (1, 200)], ("p", 0): [(0, 5), (1, 10), (2, 300)]}
    holding = {("s", 0)}  # (an idle clock that says "s-0 still holds")

    def plan_with(start_json, marks):
        start = off.read_mark(start_json)
        cache = {}
        ahead = {
            tp: read_ahead(cache, topic, tp, start.positions.get(tp, lo), hi, 2)
            for tp, (lo, hi) in marks.items()
            if hi > start.positions.get(tp, lo)
        }
        holds = lambda tp, waiting, seen: waiting or tp in holding  # noqa: E731
        return off.plan_by_event_time(start, marks, ahead, 2, tie_order, holds).to_json()

    marks = {("s", 0): (0, 2), ("p", 0): (0, 3)}
    first = plan_with({"s": {"0": 0}}, marks)  # p-0 appeared: read from its low watermark
    assert first["offsets"] == {"p": {"0": 2}, "s": {"0": 0}}
    assert first["watermark"] == 10  # s-0 waits at its next record's time, 100; p-0 at 10
    second = plan_with(first, marks)
    assert second["offsets"] == {"p": {"0": 2}, "s": {"0": 2}}
    assert second["watermark"] == 10  # p-0 has 300 left
    third = plan_with(second, marks)
    assert third["watermark"] == 200  # p-0 read to its end; s-0 drained but not idle
    holding.clear()
    assert plan_with(third, marks)["watermark"] == 300  # s-0 idle: nothing holds it back


class _Broker:
    """A planner consumer's view of a broker: `listings` are what successive
    metadata requests list, {topic: [partition, ...]}; every partition's
    watermarks are (0, 10)."""

    def __init__(self, *listings: dict[str, list[int]]) -> None:
        self.listings = list(listings)
        self.asked = 0

    def list_topics(self, topic, timeout):
        from types import SimpleNamespace

        listing = self.listings[min(self.asked, len(self.listings) - 1)]
        if topic == sorted(listing)[-1]:
            self.asked += 1
        meta = SimpleNamespace(error=None, partitions=dict.fromkeys(listing[topic]))
        return SimpleNamespace(topics={topic: meta})

    def get_watermark_offsets(self, tp, timeout, cached):
        return (0, 10)


def test_a_partition_missing_from_a_restarted_brokers_metadata_is_waited_for(monkeypatch):
    """A broker still loading its partitions after a restart lists fewer: the
    planner waits for the ones it listed before (or the stream has read)
    instead of planning without them, which would make their records late."""
    from connectors.kafka_source import KafkaStreamReader

    monkeypatch.setattr("connectors.kafka_source.time.sleep", lambda s: None)
    reader = KafkaStreamReader({"subscribe": "s,p", "kafka.bootstrap.servers": "x:1"})
    full = {"s": [0, 1], "p": [0, 1]}
    reader._planner = _Broker(full, {"s": [0, 1], "p": [0]}, {"s": [0, 1], "p": []}, full)
    assert len(reader._watermarks()) == 4
    assert len(reader._watermarks()) == 4 and reader._planner.asked == 4
    # a restarted job knows the partitions its checkpoint has read
    reader = KafkaStreamReader({"subscribe": "s,p", "kafka.bootstrap.servers": "x:1"})
    reader._planner = _Broker({"s": [0, 1], "p": [0]}, full)
    reader._listed.update(off.read_mark({"s": {"0": 3, "1": 3}, "p": {"0": 3, "1": 4}}).positions)
    assert len(reader._watermarks()) == 4 and reader._planner.asked == 2
    # one that stays missing fails the query at the poll timeout, saying which
    reader.poll_timeout = 0
    reader._planner = _Broker({"s": [0, 1], "p": [0]})
    with pytest.raises(TimeoutError, match=r"lacks partitions it listed: p\[1\]"):
        reader._watermarks()
