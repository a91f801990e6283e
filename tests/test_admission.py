"""Admission (`matcher.admission`): the job's decode stage and operator and `tsm
replay`'s `Engine` admit records alike, and parse each record once."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.config import Topics
from matcher import records
from matcher.admission import (
    Input,
    decode_input,
    in_order,
    late_letter,
    pack_record,
    unpack_record,
)
from matcher.encoding import encode
from matcher.engine import Engine
from matcher.records import Publish, Source, Subscribe
from matcher.sharding import Sharding
from matcher.times import MAX_MS, MIN_MS
from streaming.config import build_sharding
from streaming.decode_stage import DEAD_LETTER_KEY, DecodeStage
from streaming.spark_time import from_spark_ms, to_spark_ms
from tests import oracle
from tests.test_streaming_state import _Handle, _Metrics, _Timer

TOPICS = Topics(subscriptions="subs", profiles="profs", matches="m", deadletter="d")
KINDS = {"subscription": TOPICS.subscriptions, "profile": TOPICS.profiles}


def kafka_batch(lines: list[tuple[str, dict | str]]) -> pa.RecordBatch:
    """Kafka rows as the source hands them to the decode stage (one partition)."""
    values = [(r if isinstance(r, str) else json.dumps(r)).encode() for _, r in lines]
    return pa.RecordBatch.from_pydict(
        {
            "topic": [KINDS[k] for k, _ in lines],
            "partition": [0] * len(lines),
            "offset": list(range(len(lines))),
            "timestamp": pa.array([None] * len(lines), pa.timestamp("us", tz="UTC")),
            "value": values,
        }
    )


def run_job_functions(
    lines: list[tuple[str, dict | str]],
    sharding: Sharding,
    watermark_ms: int = 0,
    lateness_ms: int = 0,
) -> tuple[list[dict], list[dict]]:
    """The job's path without Spark: the decode stage, then the operator's handler for
    each state key (Spark's watermark `watermark_ms`); (match records, dead letters)."""
    from streaming.processor import MatchProcessor

    rows = DecodeStage(TOPICS, sharding).rows(kafka_batch(lines))
    matches, dead = [], []
    for key in sorted({row["skey"] for row in rows}):
        processor = MatchProcessor(TOPICS, sharding, lateness_ms, 1000, _Metrics())
        processor.init(_Handle())  # (state is per key)
        frame = pd.DataFrame([row for row in rows if row["skey"] == key])
        for out in processor.handleInputRows((key,), iter([frame]), _Timer(watermark_ms)):
            for topic, values in zip(out["topic"], out["values"], strict=True):
                target = matches if topic == TOPICS.matches else dead
                target += [json.loads(v) for v in values]
    return matches, dead


def run_engine(lines: list[tuple[str, dict | str]], sharding: Sharding, engine=None):
    engine = engine or Engine(sharding=sharding)
    items = [
        Input(kind, raw if isinstance(raw, str) else json.dumps(raw), source(offset))
        for offset, (kind, raw) in enumerate(lines)
    ]
    out = engine.process_batch(items)
    matches = [o.value for o in out if o.topic == "matches"]
    return matches, [o.value for o in out if o.topic == "deadletter"]


def source(offset: int, kind: str = "subscription") -> Source:
    return Source(topic=KINDS[kind], partition=0, offset=offset)


SUB = {"op": "subscribe", "space": "v", "subscriber": "u", "ts": 1000}
PUB = {"op": "publish", "space": "v", "ts": 1000, "valid_to": None}
# A space in four cells; the subscription's range and the profile's touch all of them.
SHARDED = {"v": {"attribute": "x", "cuts": [10, 20, 30]}}
WORKLOAD = [
    ("subscription", SUB | {"id": "s1", "where": "x BETWEEN 0 AND 40 AND kind = 'bus'"}),
    ("subscription", SUB | {"id": "s2", "filter": [[{"attr": "x", "op": ">=", "value": 5}]]}),
    ("profile", PUB | {"id": "p1", "attrs": {"x": [1, 35], "kind": "bus"}, "payload": {"n": 1}}),
    ("profile", PUB | {"id": "p2", "attrs": {"x": 25, "kind": "tram"}}),
    ("profile", "{not json"),
    ("subscription", SUB | {"id": "s1", "ts": 2000, "where": "x < 3 AND kind = 'tram'"}),
]


@pytest.fixture
def parses(monkeypatch) -> dict[str, int]:
    """Counts of the decoder's parses: JSON texts, `where` texts and `filter` forms."""
    counts = {"json": 0, "where": 0, "filter": 0}

    def counting(name, function):
        def counted(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return counted

    monkeypatch.setattr(records, "_parse_json", counting("json", records._parse_json))
    monkeypatch.setattr(records, "parse_where", counting("where", records.parse_where))
    monkeypatch.setattr(records, "parse_filter", counting("filter", records.parse_filter))
    records.compile_where.cache_clear()  # (a cached where would hide a parse)
    yield counts
    records.compile_where.cache_clear()


def test_a_record_in_many_cells_is_parsed_once_in_the_job(parses):
    sharding = build_sharding(SHARDED)
    matches, dead = run_job_functions(WORKLOAD, sharding)
    assert parses == {"json": 6, "where": 2, "filter": 1}
    # (and the cells did their work: each pair once, as the engine has it)
    want, want_dead = run_engine(WORKLOAD, Sharding())
    assert oracle.canonical(matches) == oracle.canonical(want) and len(want) == 4
    assert [d["reason"] for d in dead] == [d["reason"] for d in want_dead]


def test_a_record_in_many_cells_is_parsed_once_by_the_engine(parses):
    run_engine(WORKLOAD, build_sharding(SHARDED))
    assert parses == {"json": 6, "where": 2, "filter": 1}


def test_the_decode_stage_sends_a_record_to_every_cell_and_a_bad_one_once():
    rows = DecodeStage(TOPICS, build_sharding(SHARDED)).rows(kafka_batch(WORKLOAD))
    assert sum(row["skey"] == DEAD_LETTER_KEY for row in rows) == 1
    assert len(rows) == 5 * 4 + 1
    for row in rows:
        if row["skey"] != DEAD_LETTER_KEY:
            assert row["value"] == json.dumps(WORKLOAD[row["off"]][1]).encode()  # raw, as it came


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(("subscribe", "publish", "unsubscribe", "retract")),
    oracle.predicates(),
    oracle.profile_attrs(),
    st.booleans(),
    st.sampled_from((None, "overlaps", "covers")),
    st.one_of(st.none(), st.integers(MIN_MS, MAX_MS)),
)
def test_a_packed_record_unpacks_equal_to_the_decoded_one(
    op, dnf, attrs, as_where, relation, valid_to
):
    kind = "subscription" if op in ("subscribe", "unsubscribe") else "profile"
    raw = {"op": op, "id": "i", "space": "A", "ts": MIN_MS, "valid_to": valid_to}
    if op == "subscribe":
        text = oracle.where_text(dnf)
        raw |= {"where": text} if as_where and text else {"filter": oracle.filter_json(dnf)}
        raw |= {"subscriber": "u"} | ({"relation": relation} if relation else {})
    elif op == "publish":
        raw |= {"attrs": attrs, "payload": {"a": [1, "b", None]}}
    where = source(7, kind)
    record = decode_input(Input(kind, json.dumps(raw), where))
    assert not isinstance(record, dict), record
    back = unpack_record(pack_record(record), where)
    assert back == record and type(back) is type(record)
    if isinstance(record, Subscribe):  # (equal filters must share forest nodes)
        assert [hash(c) for c in back.predicate] == [hash(c) for c in record.predicate]
    if isinstance(record, Publish):
        assert hash(back.profile) == hash(record.profile)


def test_order_and_lateness_are_one_rule():
    a = decode_input(Input("profile", json.dumps(PUB | {"id": "a", "ts": 5}), source(1)))
    b = SUB | {"id": "b", "ts": 5, "where": "TRUE"}
    b = decode_input(Input("subscription", json.dumps(b), source(2)))
    c = decode_input(Input("profile", json.dumps(PUB | {"id": "c", "ts": 4}), source(3)))
    assert [r.id for r in in_order([a, b, c])] == ["c", "b", "a"]
    assert late_letter(5, 5, 0, b"x", source(1)) is None
    letter = late_letter(4, 5, 7, b"x", source(1))
    assert letter["reason"] == "late: ts 4 is below the watermark 5 (allowed lateness 7 ms)"


# -- times before 1970 --------------------------------------------------------------------

OLD = -315_619_200_000  # 1960-01-01T00:00:00Z
BEFORE_1970 = [
    ("subscription", SUB | {"id": "s", "ts": OLD, "where": "x > 1"}),
    ("profile", PUB | {"id": "p", "ts": OLD + 10, "attrs": {"x": 2}, "valid_to": OLD + 20}),
    ("profile", PUB | {"id": "q", "ts": "1969-12-31T23:59:59.999Z", "attrs": {"x": 3}}),
]


def test_times_before_1970_are_on_time_in_the_job_as_in_the_replay():
    """Spark's watermark starts at 0: the job's event time counts from year 1, so
    at the start of a job nothing a record may carry is late, as in `tsm replay`."""
    matches, dead = run_job_functions(BEFORE_1970, Sharding(), watermark_ms=0)
    want, want_dead = run_engine(BEFORE_1970, Sharding())
    assert dead == want_dead == []
    assert oracle.canonical(matches) == oracle.canonical(want)
    assert [m["event"] for m in want] == ["match", "unmatch", "match"]


def test_a_watermark_before_1970_judges_lateness_as_the_replay_does():
    engine = Engine(lateness_ms=5)
    run_engine(BEFORE_1970[:1], Sharding(), engine)  # the watermark: OLD - 5
    late = [("profile", PUB | {"id": "r", "ts": OLD - 6, "attrs": {"x": 2}})]
    _, want_dead = run_engine(late, Sharding(), engine)
    spark_watermark = to_spark_ms(engine.watermark)
    assert spark_watermark > 0 and from_spark_ms(spark_watermark) == engine.watermark
    _, dead = run_job_functions(late, Sharding(), spark_watermark, lateness_ms=5)
    assert [d["reason"] for d in dead] == [d["reason"] for d in want_dead]
    assert dead[0]["reason"].startswith(f"late: ts {OLD - 6} is below the watermark {OLD - 5}")


def test_job_rows_carry_event_time_from_year_1():
    rows = DecodeStage(TOPICS, Sharding()).rows(kafka_batch(BEFORE_1970))
    assert [row["ets"] for row in rows] == [
        (OLD - MIN_MS) * 1000,
        (OLD + 10 - MIN_MS) * 1000,
        (-1 - MIN_MS) * 1000,
    ]
    assert all(row["ets"] >= 0 for row in rows)


def test_dead_letters_are_encoded_once_in_the_stage():
    rows = DecodeStage(TOPICS, Sharding()).rows(kafka_batch([("profile", "{not json")]))
    (row,) = rows
    letter = decode_input(Input("profile", b"{not json", source(0, "profile")))
    assert row["value"] == encode(letter)


def test_spark_s_watermark_text_reads_as_record_time():
    from streaming.spark_time import from_spark_text

    assert from_spark_text("1970-01-01T00:00:00.000Z") == "0001-01-01T00:00:00.000Z"
    assert from_spark_text("3992-11-13T22:13:20.123Z") == "2023-11-14T22:13:20.123Z"
    assert from_spark_text("11968-12-30T23:59:59.999Z") == "9999-12-31T23:59:59.999Z"
    assert from_spark_text(None) is None and from_spark_text("soon") == "soon"
