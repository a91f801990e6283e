"""The quenching producer's decisions (`connectors.quench.Quench`), without Kafka."""

from __future__ import annotations

import json

from connectors.quench import Quench
from matcher.constraints import predicate_of
from matcher.routing.order import Key
from matcher.routing.wire import FilterChange
from matcher.where import parse_where
from streaming.network_site import WANT_ALL, interest_record


def change(op: str, where: str, space: str = "A"):
    (conj,) = predicate_of(parse_where(where))
    return interest_record(FilterChange("interest", op, space, conj, Key(0, 1, ())))


def pub(ident: str, ts: int, x: float, **more) -> bytes:
    rec = {"op": "publish", "id": ident, "space": "A", "attrs": {"x": x}, "ts": ts}
    return json.dumps(rec | {"valid_to": ts + 100} | more).encode()


def sent_ids(records) -> list[tuple[str, int]]:
    return [(json.loads(v)["id"], json.loads(v)["ts"]) for v, _ in records]


def test_what_no_interest_overlaps_waits_for_interest_while_valid():
    q = Quench()
    assert q.interest_records([change("add", "x BETWEEN 0 AND 10")]) == []
    assert sent_ids(q.line(pub("a", 1, 5))) == [("a", 1)]
    assert q.line(pub("b", 2, 50)) == []  # held back
    assert q.line(pub("c", 3, 70, valid_to=3)) == []  # held back, ends soon
    assert q.line(pub("d", 4, 80)) == []
    retract = json.dumps({"op": "retract", "id": "d", "space": "A", "ts": 5}).encode()
    assert q.line(retract) == []  # the held one goes, and nothing to retract at the site
    # interest appears: b is still valid and sent at the producer's clock; c expired
    assert sent_ids(q.interest_records([change("add", "x > 40")])) == [("b", 5)]
    # a new version of a sent id goes whether wanted or not (the site holds the old one)
    assert sent_ids(q.line(pub("a", 6, 1000))) == [("a", 6)]
    # a tombstone removes interest
    q.interest_records([change("remove", "x > 40")])
    assert q.line(pub("e", 7, 60)) == []
    assert sent_ids(q.interest_records([WANT_ALL])) == [("e", 7)]
    assert q.end().__dict__ == {"sent": 2, "held_back": 4, "released": 2, "dropped": 2}


def test_other_records_and_other_spaces():
    q = Quench()
    q.interest_records([change("add", "x < 10", space="B")])
    assert q.line(pub("a", 1, 5)) == []  # interest of another space
    assert q.line(b"not json") == [(b"not json", None)]  # the site's dead letters say why
    ad = b'{"op": "advertise", "id": "x", "space": "A", "where": "TRUE", "ts": 1}'
    assert q.line(ad) == [(ad, None)]
