"""`tsm produce` keys and `tsm consume` prints any line, however malformed: a bad
record is the job's to dead-letter, never a crash of the client in front of it."""

from __future__ import annotations

import base64
import json

import pytest

from connectors.consume import as_json_line
from connectors.produce import record_key

DEEP = b"[" * 20_000 + b"]" * 20_000  # past what json.loads recurses into


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (b'{"op": "publish", "space": "vehicles"}', b"vehicles"),
        (b'{"space": "caf\xc3\xa9"}', "café".encode()),
        (b'{"space": "\\ud83d\\ude00"}', "\U0001f600".encode()),  # an escaped pair: one character
        (b'{"space": "\\ud800"}', None),  # a lone surrogate escape: no UTF-8 key
        (b'{"space": 5}', b"5"),  # as the engine names it
        (b'{"space": true}', None),
        (b"{not json", None),
        (b"\xff\xfe", None),
        (b'{"space": "a", "payload": ' + DEEP + b"}", None),
        (DEEP, None),
    ],
)
def test_record_key(line: bytes, key: bytes | None) -> None:
    assert record_key(line) == key


def test_consume_prints_any_value_as_one_json_line() -> None:
    assert as_json_line(b'{"a": 1}  ') == (b'{"a": 1}', True)  # as it is, trimmed
    assert as_json_line(b'{"a":\n"\\u00e9"}') == ('{"a":"é"}'.encode(), True)
    text, was_json = as_json_line(b'{"a":\n"\\ud800"}')  # kept as the escape it was
    assert was_json and json.loads(text) == {"a": "\ud800"}
    # UTF-16 JSON (which json.loads would take) would reach stdout as UTF-16
    utf16 = '{"a": 1}'.encode("utf-16")
    assert as_json_line(utf16) == (json.dumps(base64.b64encode(utf16).decode()).encode(), False)
    assert as_json_line(b'{"a":\r1}') == (b'{"a":1}', True)  # (a bare CR breaks lines too)
    text, was_json = as_json_line(DEEP)
    assert not was_json and json.loads(text) == DEEP.decode()
    assert as_json_line(b"\xff") == (b'"/w=="', False)
