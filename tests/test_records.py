"""SEMANTICS §6: every bad input becomes a dead letter with a reason a person can
act on, and never disturbs the other records of its batch."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher import records
from matcher.admission import RAW_KEPT_BYTES, Input
from matcher.encoding import encode
from matcher.engine import Engine
from matcher.records import (
    MAX_DEPTH,
    MAX_NAME_CHARS,
    MAX_OUTPUT_BYTES,
    MAX_PAYLOAD_BYTES,
    Source,
    decode,
    from_state,
    to_state,
)
from matcher.times import MAX_MS, MIN_MS

SPACE = {"space": "v"}
SUB = {"op": "subscribe", "id": "s1", **SPACE, "subscriber": "alice", "ts": 1000}
PUB = {"op": "publish", "id": "p1", **SPACE, "ts": 1000, "attrs": {"x": 2}}


def sub(**fields) -> str:
    return json.dumps({**SUB, "where": "x > 1"} | fields)


def pub(**fields) -> str:
    return json.dumps(PUB | fields)


def src(line: int) -> Source:
    return Source(file="in.jsonl", line=line)


def run(items: list[tuple[str, str | bytes]], engine: Engine | None = None):
    engine = engine or Engine()
    out = engine.process_batch([Input(k, raw, src(i)) for i, (k, raw) in enumerate(items, 1)])
    matches = [o.value for o in out if o.topic == "matches"]
    return matches, [o.value for o in out if o.topic == "deadletter"]


def where(text: str) -> str:
    return sub(where=text)


def flt(*atoms) -> str:
    return json.dumps({**SUB, "filter": [list(atoms)]})


DNF_BLOWUP = " AND ".join(f"(a{i} = 1 OR a{i} = 2)" for i in range(7))  # 128 conjunctions
BIG = "1" + "0" * 400  # an integer past the float range


def nested(levels: int) -> list:
    """A JSON value of `levels` nested arrays."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


DEEP = f"deeper than {MAX_DEPTH} levels"
LONE = r"unpaired UTF-16 surrogate escape \(\\ud(800|c00|fff)\)"

# (topic kind, raw record, the reason must match this regex)
BAD = [
    ("subscription", '{"op": "subscribe", ', r"malformed JSON: .* at column \d+"),
    ("profile", "[1, 2]", r"must be a JSON object, got list"),
    ("subscription", sub(op="publish"), r"unknown op 'publish' .*'subscribe' or 'unsubscribe'"),
    ("profile", pub(op="delete"), r"unknown op 'delete' .*'publish' or 'retract'"),
    ("profile", pub(id=None), r"missing 'id'"),
    ("subscription", sub(space=None), r"missing 'space'"),
    ("profile", pub(ts=None), r"missing 'ts'"),
    ("subscription", sub(subscriber=None), r"missing 'subscriber'"),
    ("subscription", json.dumps(SUB), r"exactly one of 'where' and 'filter'"),
    ("subscription", sub(relation="near"), r"'relation' must be 'overlaps' or 'covers'"),
    # only the two words or no relation at all: empty, false or 0 are no relation
    ("subscription", sub(relation=""), r"'relation' must be 'overlaps' or 'covers', got ''"),
    ("subscription", sub(relation=False), r"'relation' must be .*, got False"),
    ("subscription", sub(relation=0), r"'relation' must be .*, got 0"),
    ("subscription", sub(relation=["covers"]), r"'relation' must be .*, got \['covers'\]"),
    # a time is whole milliseconds: a fraction is not dropped silently
    ("profile", pub(ts=1000.5), r"'ts' must be a whole number of epoch milliseconds, got 1000.5"),
    ("profile", pub(valid_from=999.9), r"'valid_from' must be a whole number .* got 999.9"),
    ("subscription", sub(valid_to=1e3 + 0.25), r"'valid_to' must be a whole number"),
    ("subscription", sub(version=2), r"unsupported schema version 2"),
    ("subscription", where("speed >> 40"), r"unexpected '>' at column 8"),
    ("subscription", where("x = 1 AND (y = 2"), r"column \d+"),
    ("subscription", where("x BETWEEN 5 AND 1"), r"lo <= hi"),
    (
        "subscription",
        flt({"attr": "x", "op": "between", "value": [5, 1]}),
        r"filter\[0\]\[0\]: .*lo <= hi",
    ),
    (
        "subscription",
        flt({"attr": "x", "op": "like", "value": 1}),
        r"filter\[0\]\[0\]: unknown op 'like'",
    ),
    ("profile", pub(attrs={"x": [5, 1]}), r"attribute 'x': interval \[5, 1\] has lo > hi"),
    (
        "profile",
        pub(attrs={"x": "a", "y": [1, 2, 3]}),
        r"attribute 'y': expected a number, \[lo, hi\]",
    ),
    (
        "subscription",
        sub(valid_from=5000, valid_to=3000),
        r"valid_from 5000 is after valid_to 3000",
    ),
    ("profile", pub(ts="yesterday"), r"'ts' is not an ISO-8601 time"),
    ("profile", pub().replace('"x": 2', '"x": NaN'), r"NaN is not allowed"),
    ("profile", pub().replace('"x": 2', '"x": [0, Infinity]'), r"Infinity is not allowed"),
    ("profile", pub().replace('"x": 2', '"x": -Infinity'), r"-Infinity is not allowed"),
    ("profile", pub().replace('"x": 2', '"x": 1e999'), r"1e999 is out of range"),
    ("profile", pub().replace('"ts": 1000', '"ts": 1e999'), r"numbers must be finite"),
    ("subscription", where("x > 1e999"), r"numbers must be finite"),
    ("subscription", flt({"attr": "x", "op": "<", "value": 1e999}), r"numbers must be finite"),
    ("subscription", where(f"x > {BIG}"), r"numbers must be finite"),
    ("profile", pub(payload="x" * (1024 * 1024)), r"record is .*the limit (is|of) 1048576"),
    ("profile", pub(attrs={f"a{i}": i for i in range(257)}), r"257 attributes; the limit is 256"),
    (
        "subscription",
        where(" AND ".join(f"a{i} = 1" for i in range(257))),
        r"256 distinct attributes",
    ),
    ("subscription", where(DNF_BLOWUP), r"more than 64 conjunctions"),
    ("subscription", where("x" * (64 * 1024 + 1)), r"limit of 65536 bytes"),
    # the record object is a level: a payload of MAX_DEPTH arrays makes one more
    ("profile", pub(payload=nested(MAX_DEPTH)), DEEP),
    # past what json.loads can recurse into (its RecursionError is the same reason)
    ("profile", pub(payload=0).replace(": 0", ": " + "[" * 50_000 + "]" * 50_000), DEEP),
    ("subscription", sub(tags={"a": nested(80)}), DEEP),
    # times outside years 1 to 9999: a ts of 10**30 overflowed the job's event-time column
    ("profile", pub(ts=10**30), r"'ts' 10{30} is outside the years 1 to 9999"),
    ("profile", pub(ts=MAX_MS + 1), r"'ts' \d+ is outside the years 1 to 9999"),
    ("profile", pub(ts=MIN_MS - 1), r"'ts' -\d+ is outside the years 1 to 9999"),
    ("profile", pub(ts="0001-01-01T00:00:00+01:00"), r"'ts' '0001-01-01T00:00:00\+01:00' is out"),
    ("subscription", sub(valid_to=10**20), r"'valid_to' .* outside .* open-ended valid_to is null"),
    # what every match record carries must leave it room in a Kafka message
    ("profile", pub(id="p" * (MAX_NAME_CHARS + 1)), r"'id' is 1025 characters; the limit is 1024"),
    ("subscription", sub(subscriber="u" * 2000), r"'subscriber' is 2000 characters"),
    ("subscription", sub(space="s" * 2000), r"'space' is 2000 characters"),
    ("profile", pub(payload="x" * MAX_PAYLOAD_BYTES), r"'payload' is 900002 bytes of JSON"),
    ("profile", pub(id="\ud800"), LONE),
    ("profile", pub(payload={"name": "\udfff"}), LONE),
    ("subscription", where("name = '\udc00'"), LONE),
]


@pytest.mark.parametrize(("kind", "raw", "reason"), BAD, ids=[r for _, _, r in BAD])
def test_bad_record_is_a_dead_letter_and_disturbs_nothing(kind, raw, reason):
    good = [("subscription", sub()), ("profile", pub())]
    expected, none = run(good)
    assert len(expected) == 1 and none == []

    matches, dead = run([good[0], (kind, raw), good[1]])
    assert matches == expected
    (letter,) = dead
    assert re.search(reason, letter["reason"]), letter["reason"]
    assert "Traceback" not in letter["reason"] and len(letter["reason"]) < 400
    if letter.get("raw_truncated"):  # (the record over the size limit: too big to keep)
        data = raw.encode()
        assert letter["raw_encoding"] == "base64" and letter["raw_bytes"] == len(data)
        assert base64.b64decode(letter["raw"]) == data[:RAW_KEPT_BYTES]
    else:
        assert letter["raw"] == raw and letter["raw_encoding"] == "utf-8"
    assert letter["source"] == {"file": "in.jsonl", "line": 2}
    assert len(encode(letter)) <= MAX_OUTPUT_BYTES  # serializable, and fits a Kafka message


def test_a_payload_nests_up_to_the_limit_and_surrogate_pairs_are_text():
    # the record, its payload object, and arrays down to the last level allowed
    payload = {"path": nested(MAX_DEPTH - 2), "emoji": "\ud83d\ude00"}  # (escapes: one pair)
    raw = pub(payload=payload)
    assert "\\ud83d\\ude00" in raw
    matches, dead = run([("subscription", sub()), ("profile", raw)])
    assert dead == []
    (match,) = matches
    assert match["payload"]["emoji"] == "\U0001f600"
    assert encode(match).decode("utf-8").count("[") == MAX_DEPTH - 2


def test_text_that_is_not_unicode_is_a_dead_letter_kept_as_base64():
    # a Python str holding a lone surrogate itself (not an escape): no UTF-8 for it
    raw = json.dumps(PUB | {"id": "p\ud800"}, ensure_ascii=False)
    matches, (letter,) = run([("subscription", sub()), ("profile", raw), ("profile", pub())])
    assert len(matches) == 1
    assert "not Unicode text (character" in letter["reason"]
    assert letter["raw_encoding"] == "base64"
    assert base64.b64decode(letter["raw"]) == raw.encode("utf-8", "surrogatepass")
    encode(letter)


def test_the_largest_records_accepted_make_match_records_that_fit_a_kafka_message():
    names = "\x01" * MAX_NAME_CHARS  # (6 bytes each, escaped)
    payload = "é" * ((MAX_PAYLOAD_BYTES - 2) // 2)  # (2 bytes each: a 900 KB record)
    big = json.dumps(PUB | {"id": names, "space": names, "payload": payload}, ensure_ascii=False)
    subscription = sub(id=names, space=names, subscriber=names, relation="covers")
    matches, dead = run([("subscription", subscription), ("profile", big)])
    assert dead == []
    (match,) = matches
    assert MAX_OUTPUT_BYTES - 100_000 < len(encode(match)) <= MAX_OUTPUT_BYTES


def test_a_dead_letter_fits_a_kafka_message_whatever_it_holds():
    bad = '{"op": "publish", "payload": "' + '\\"' * 300_000  # 900 KB; 1.5 MB escaped
    _, (letter,) = run([("profile", bad)])
    assert letter["raw_truncated"] and letter["raw_bytes"] == len(bad)
    assert base64.b64decode(letter["raw"]) == bad.encode()[:RAW_KEPT_BYTES]
    assert len(encode(letter)) <= MAX_OUTPUT_BYTES
    _, (letter,) = run([("profile", pub(attrs={"x": [{"y": "z" * 900_000}]}))])
    assert len(letter["reason"]) == 1000 and letter["reason"].endswith("…")
    assert letter["raw_encoding"] == "utf-8" and len(encode(letter)) <= MAX_OUTPUT_BYTES


def test_held_state_is_read_back_whatever_limits_came_since():
    held = decode("profile", pub(payload=[1]))
    held.payload = nested(MAX_DEPTH + 10)  # (as a version without the depth limit held it)
    assert from_state(to_state(held)).payload == held.payload


def test_non_utf8_record_is_kept_as_base64():
    raw = b'{"op": "publish", "id": "\xff\xfe"}'
    matches, (letter,) = run([("subscription", sub()), ("profile", raw), ("profile", pub())])
    assert len(matches) == 1
    assert "not UTF-8" in letter["reason"]
    assert letter["raw_encoding"] == "base64"
    assert base64.b64decode(letter["raw"]) == raw


def test_kafka_source_and_timestamp():
    engine = Engine()
    record = json.dumps({k: v for k, v in PUB.items() if k != "ts"})
    out = engine.process_batch(
        [
            Input("subscription", sub(), Source("tsm.subscriptions", 0, 5), 1000),
            Input("profile", record, Source("tsm.profiles", 3, 17), 1000),
            Input("profile", "{", Source("tsm.profiles", 3, 18), 1000),
        ]
    )
    assert [o.topic for o in out] == ["deadletter", "matches"]
    assert out[0].value["source"] == {"topic": "tsm.profiles", "partition": 3, "offset": 18}
    assert out[1].value["ts"] == 1000  # the Kafka timestamp stood in for the missing ts


def test_times_of_years_1_to_9999_and_kafka_timestamps_outside_them():
    first = pub(id="first", ts="0001-01-01T00:00:00Z", valid_to=None)
    last = pub(id="last", ts="9999-12-31T23:59:59.999Z")
    assert [decode("profile", r).ts for r in (first, last)] == [MIN_MS, MAX_MS]
    no_ts = json.dumps({k: v for k, v in PUB.items() if k != "ts"})
    for stamp in (MAX_MS + 1, 2**62, MIN_MS - 1):  # (the job's source reads 2**62 as none)
        (letter,) = Engine().process_batch([Input("profile", no_ts, src(1), stamp)])
        assert "no Kafka timestamp in the years 1 to 9999" in letter.value["reason"]
    assert decode("profile", no_ts, fallback_ts=MAX_MS).ts == MAX_MS


def test_late_records_across_two_batches():
    engine = Engine(lateness_ms=100)
    matches, dead = run([("subscription", sub(ts=1000, valid_from=0, where="TRUE"))], engine)
    assert dead == []
    # the watermark is now 1000 - 100 = 900: 899 is late, 900 is not
    matches, dead = run(
        [("profile", pub(id="late", ts=899)), ("profile", pub(id="ok", ts=900))], engine
    )
    assert [m["profile_id"] for m in matches] == ["ok"]
    (letter,) = dead
    assert re.search(r"late: ts 899 is below the watermark 900", letter["reason"])
    assert letter["source"]["line"] == 1


def test_out_of_order_within_one_batch_is_not_late():
    engine = Engine(lateness_ms=0)
    matches, dead = run(
        [("profile", pub(ts=5000)), ("subscription", sub(ts=10, where="TRUE"))], engine
    )
    assert dead == []
    assert [m["reason"] for m in matches] == ["new-profile"]  # ordered by ts (§5)


def test_relation_absent_or_null_is_overlaps():
    for fields in ({}, {"relation": None}):
        assert decode("subscription", sub(**fields)).relation == "overlaps"
    assert decode("subscription", sub(relation="covers")).relation == "covers"


def test_whole_float_times_are_milliseconds_and_iso_fractions_floor():
    """A float time with no fraction is that millisecond; an ISO time's digits past
    the millisecond are dropped, toward the past (the millisecond it falls in)."""
    record = decode("profile", pub(ts=1000.0, valid_from=1e3, valid_to=2.5e3))
    assert (record.ts, record.valid_from, record.valid_to) == (1000, 1000, 2500)
    assert type(record.ts) is int and type(record.valid_to) is int
    for iso, ms in [
        ("2026-11-22T10:00:00.0009Z", 1795341600000),
        ("2026-11-22T10:00:00.123456Z", 1795341600123),
        ("1969-12-31T23:59:59.9995Z", -1),
    ]:
        assert decode("profile", pub(ts=iso)).ts == ms


def test_an_engine_without_sharding():
    assert run([("subscription", sub()), ("profile", pub())], Engine(sharding=None))[0]


def test_iso_times_convert_exactly():
    """ISO-8601 with milliseconds must give the same epoch ms as a TIMESTAMP literal."""
    for iso, ms in [
        ("2004-08-29T06:35:19.883Z", 1093761319883),
        ("2038-08-28T15:26:02.825Z", 2166621962825),
    ]:
        assert decode("profile", pub(ts=iso), src(1)).ts == ms


def test_state_form_round_trips_and_normalizes():
    rec = decode("subscription", sub(ts="2026-11-22T10:00:00Z", valid_to=None), src(1))
    again = from_state(to_state(rec))
    assert to_state(again) == to_state(rec)
    assert again.ts == rec.ts == 1795341600000 and again.valid_to == float("inf")


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        ("profile", pub().replace('"x": 2', f'"x": {BIG}')),
        ("profile", pub().replace('"ts": 1000', f'"ts": {BIG}')),
        ("subscription", sub().replace('"ts": 1000', f'"ts": 1000, "valid_to": {BIG}')),
    ],
)
def test_huge_integer_is_a_dead_letter(kind, raw):
    matches, (letter,) = run([("subscription", sub()), (kind, raw), ("profile", pub())])
    assert len(matches) == 1 and "finite" in letter["reason"]


def test_infinite_payload_number_is_a_dead_letter():
    raw = pub().replace('"attrs"', '"payload": {"v": 1e999}, "attrs"')
    matches, dead = run([("subscription", sub()), ("profile", raw)])
    for m in matches:
        json.loads(encode(m), parse_constant=lambda c: pytest.fail(f"{c} in the output"))
    assert len(dead) == 1


# -- the JSON parser: msgspec where it reads a record as json.loads does ----------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**1100), 2**1100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from((0.1, -0.0, 5e-324, 1.7976931348623157e308, 1e22, 2**53 + 1))
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _outcome(parse, raw: bytes):
    """What `parse(raw)` gives: ("value", repr) or ("error", type, message)."""
    try:
        return ("value", repr(parse(raw)))
    except (ValueError, RecursionError) as exc:
        return ("error", type(exc).__name__, str(exc))


def _json_loads(raw: bytes):
    return json.loads(
        raw.decode(),
        parse_constant=records._reject_constant,
        parse_float=records._finite_float,
        parse_int=records._bounded_int,
    )


def _parsed(raw: bytes):
    return records._loads(raw, raw.decode("utf-8"))


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans(), st.binary(max_size=3), st.integers(0, 40))
def test_the_parser_reads_and_refuses_as_json_loads(value, ascii_only, noise, cut):
    """Whole values, values cut short, and either with a few bytes after them."""
    whole = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    for raw in (whole, whole[:cut], whole + noise, whole[:cut] + noise):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # (refused before it is parsed)
        assert _outcome(_parsed, raw) == _outcome(_json_loads, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": NaN}',
        b'{"a": 1e999}',
        b'{"a": "x\ty"}',  # (a raw control character in a string)
        b'{"\\ud800": 1}',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": 01}',
        b'{"a": 1}x',
        b"[" * 5000 + b"]" * 5000,
        b'{"a": 1' + b"0" * 400 + b"}",
        b'{"a": 1' + b"0" * 305 + b"}",
        b'{"a": 1, "a": 2}',
    ],
)
def test_the_parser_refuses_with_json_s_reasons(raw):
    assert _outcome(_parsed, raw) == _outcome(_json_loads, raw)
