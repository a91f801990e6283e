"""`tsm replay --network`: raw records in, every site's match records out (ROUTING §7).

Each input record may name its home `site` (the network file's first site
where it does not); it enters the network there, as if published to that
site's topics. A record that names a site the file does not is a dead letter.

**Ids.** A subscription or profile id names it within its space at its site
(ROUTING §1). Where one id is used at two sites (in one space, for one kind
of record), each site's records of it are known as `id@site` from the start:
this is what the single matcher that the network is compared with sees, so
both make the same match records, `match_id` included. Ids used at one site
only are kept as they are, and so are ids used at sites that moves of their
client join (ROUTING §5: a client takes its ids along); where moves join the
sites of an id into several groups, `site` is the first site of each group
in file order.

**Order.** The match records of all sites come out in the order one matcher
gives the same input in one batch (`tsm replay`): space by space, by the
record that caused each (SEMANTICS §5), the records of one cause by the other
side's id; an expiry is placed where one matcher meets it, before the first
record of its space with a larger ts (or at the end). Each record gets a
`site` field: the subscriber's site, where it is written (and made, but for
a member's, made at its space's selecting site: docs/DELIVERY.md §9). The `moved` records
of moves (ROUTING §5) follow, in event-time order. `site_streams` gives each
site's records as its own matches topic holds them: in event time, each at
its place in one matcher's order, each `moved` record after everything made
for the subscriber there before the move (what `--follow-moves` reads).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from matcher.admission import dead_letter
from matcher.engine import DELIVERY_RANK, Held, Input
from matcher.errors import RecordError
from matcher.events import profile_digest
from matcher.records import Publish, decode, to_state, version_of
from matcher.routing.adverts import OPS as ADVERT_OPS
from matcher.routing.adverts import decode_advert
from matcher.routing.moves import decode_move, move_key
from matcher.routing.network import Network
from matcher.routing.offline import Delays, LinkCounts, OfflineNetwork, Result
from matcher.routing.order import MOVES, SUBSCRIPTIONS, Key, record_key

_PROFILE_OPS = ("publish", "retract", *ADVERT_OPS)


@dataclass
class Output:
    matches: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    links: dict[tuple[str, str], LinkCounts]
    result: Result

    def stats(self) -> dict[str, Any]:
        """The per-link counts of ROUTING §6 and their totals, as JSON."""
        links = {f"{a}->{b}": c.to_json() for (a, b), c in sorted(self.links.items())}
        total = {k: sum(c[k] for c in links.values()) for k in LinkCounts().to_json()}
        total["table_peak"] = max((c["table_peak"] for c in links.values()), default=0)
        total.pop("table_entries")
        return {
            "links": links,
            "total": total,
            "largest_table": total["table_peak"],
            "simulated_ms": round(self.result.simulated_ms, 3),
            "latency_ms": self.result.latency(),
            "move_wait_ms": self.result.latency(self.result.move_waits),
            "deliveries": self.result.deliveries,
        }


def replay_network(net: Network, items: list[Input], delays: Delays | None = None) -> Output:
    """Run raw subscriptions and profiles-topic records through the network (a record
    whose `site` names a quenching producer of the file enters through it)."""
    net = net.with_producers()
    dead: list[tuple[tuple, dict[str, Any]]] = []
    parsed = []
    for n, item in enumerate(items):
        obj = _peek(item.raw)
        site = net.first
        if obj is not None and "site" in obj:
            site = obj["site"]
            if not isinstance(site, str) or site not in net.names:
                reason = f"unknown site {site!r}: the network file names {', '.join(net.names)}"
                dead.append(((n,), _letter(reason, item, net.first)))
                continue
            if item.kind == "subscription" and net.is_producer(site):
                reason = f"{site!r} is a quenching producer: it has no subscribers"
                dead.append(((n,), _letter(reason, item, site)))
                continue
        parsed.append((n, item, obj, site))
    renamed = _qualified(parsed, net.names)
    inputs: dict[str, list[tuple[Key, Any, Any]]] = {name: [] for name in net.names}
    for n, item, obj, site in parsed:
        try:
            record = _decode(item, obj, renamed.get(n))
        except RecordError as exc:
            dead.append(((n,), _letter(str(exc), item, site)))
            continue
        position = item.source.position
        if record.op == "move":
            key = move_key(record.ts, item.kind, position)
        else:
            key = record_key(record.ts, item.kind, position)
        inputs[site].append((key, record, n))
    for records in inputs.values():
        records.sort(key=lambda r: r[0])
    result = OfflineNetwork(net, delays or Delays()).run(inputs)
    for site, n, reason in result.refused:
        dead.append(((n,), _letter(reason, items[n], site)))
    dead.sort(key=lambda d: d[0])
    matches = ordered_matches(result) + ordered_markers(result)
    count_false_positives(net, result)
    return Output(matches, [d for _, d in dead], result.links, result)


def _peek(raw: bytes | str) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _letter(reason: str, item: Input, site: str) -> dict[str, Any]:
    return {**dead_letter(reason, item.raw, item.source), "site": site}


def _qualified(parsed: list[tuple[int, Input, Any, str]], names: tuple[str, ...]) -> dict[int, str]:
    """The records whose id is used at two sites that no moves of its client join:
    their new id, `id@site` (the first site of their group)."""
    sites: dict[tuple, set[str]] = defaultdict(set)
    keyed = []
    subscribers: dict[tuple, set[str]] = defaultdict(set)
    joins: dict[tuple, list[tuple[str, str]]] = defaultdict(list)  # client -> moves
    for n, item, obj, site in parsed:
        op = None if obj is None else obj.get("op")
        if obj is None or item.kind == "profile" and op in ADVERT_OPS:
            continue
        if op == "move" and isinstance(obj.get("from"), str):
            if item.kind == "subscription":
                joins["subscriber", str(obj.get("subscriber"))].append((obj["from"], site))
                continue
            client = ("profile", json.dumps(obj.get("space")), str(obj.get("id")))
            joins[client].append((obj["from"], site))
        ident, space = obj.get("id"), obj.get("space")
        if isinstance(ident, str | int) and not isinstance(ident, bool):
            key = (item.kind, json.dumps(space), str(ident))
            sites[key].add(site)
            keyed.append((n, key, site))
            if op == "subscribe":
                subscribers[key].add(str(obj.get("subscriber")))
    group: dict[tuple, dict[str, str]] = {}
    for key, used in sites.items():
        if len(used) > 1:
            if key[0] == "subscription":
                clients = [("subscriber", s) for s in sorted(subscribers[key])]
            else:
                clients = [("profile", key[1], key[2])]
            first = _groups(names, [m for c in clients for m in joins.get(c, ())])
            if len({first.get(s, s) for s in used}) > 1:
                group[key] = first
    return {n: f"{key[2]}@{group[key].get(site, site)}" for n, key, site in keyed if key in group}


def _groups(names: tuple[str, ...], links: list[tuple[str, str]]) -> dict[str, str]:
    """Each site mapped to the first site (in `names` order) of the group that the
    moves in `links` join it to."""
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n

    for a, b in links:
        if a in parent and b in parent:
            ra, rb = root(a), root(b)
            if ra != rb:
                first, other = sorted((ra, rb), key=names.index)
                parent[other] = first
    return {n: root(n) for n in names}


def decode_site_record(item: Input) -> Any:
    """One record of a site's own topics: a subscription, a publish or retract, or an
    advertisement; RecordError (the dead letter's reason) for one that is not."""
    return _decode(item, _peek(item.raw), None)


def _decode(item: Input, obj: dict[str, Any] | None, new_id: str | None) -> Any:
    if obj is not None and obj.get("op") == "move":
        obj = obj if new_id is None else {**obj, "id": new_id}
        return decode_move(item.kind, obj, item.source, item.timestamp)
    if item.kind == "profile" and obj is not None:
        op = obj.get("op")
        if op in ADVERT_OPS:
            return decode_advert(obj, item.source, item.timestamp)
        if op not in _PROFILE_OPS:
            expected = " or ".join(repr(o) for o in _PROFILE_OPS)
            raise RecordError(f"unknown op {op!r} on the profiles topic: expected {expected}")
    raw = item.raw if new_id is None else json.dumps({**obj, "id": new_id}, ensure_ascii=False)
    return decode(item.kind, raw, item.source, item.timestamp)


# -- the order of one matcher --------------------------------------------------


def _causes(result: Result) -> dict[str, list[tuple]]:
    """Per space, the place in one matcher's order of every record it applies."""
    causes: dict[str, list[tuple]] = defaultdict(list)
    for space, key in result.accepted:
        causes[space].append(_global(key))
    for keys in causes.values():
        keys.sort()
    return causes


def ordered_matches(result: Result) -> list[dict[str, Any]]:
    """Every site's match records, with `site`, in one matcher's order."""
    causes = _causes(result)
    out = []
    for site, events in result.events.items():
        for space, cause, rank, event in events:
            out.append(
                (_sort_key(causes[space], space, cause, rank, event), {**event, "site": site})
            )
    out.sort(key=lambda pair: pair[0])
    return [e for _, e in out]


def ordered_markers(result: Result) -> list[dict[str, Any]]:
    """Every site's `moved` records, with `site`, in event-time order."""
    keyed = [(key, site, m) for site, ms in result.markers.items() for key, m in ms]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [{**m, "site": site} for _, site, m in keyed]


def site_streams(result: Result) -> dict[str, list[dict[str, Any]]]:
    """Each site's match and `moved` records, as its own matches topic holds them: in
    event time, each record at its place in one matcher's order (what a site
    evicts at a move, before the move's `moved`; the records a selecting site made
    for the site's subscribers among its own: docs/DELIVERY.md §9). A site that
    made every record it holds decides them in this order (`decided_order`).
    O(n log n)."""
    causes = _causes(result)
    out = {}
    for site, events in result.events.items():
        markers = result.markers.get(site, [])
        moves: dict[str, list[Key]] = defaultdict(list)  # subscriber -> her moves away
        for key, marker in sorted(markers, key=lambda pair: pair[0]):
            moves[marker["subscriber"]].append(key)
        keyed: list[tuple[tuple, dict[str, Any]]] = []
        for space, cause, rank, event in events:
            order = _sort_key(causes[space], space, cause, rank, event)
            at = (order[0], order[2])  # (0, a place in event time), or (1, ()) at the end
            away = moves.get(event["subscriber"], ())
            if rank[0] == 0 and cause is not None and away:
                # (what the site evicted before she left it stays before her `moved`)
                nxt = bisect.bisect_left(away, cause)
                if nxt < len(away):
                    at = min(at, (0, _place(away[nxt])))
            keyed.append(((*at, 0, order), event))
        for key, marker in markers:
            keyed.append(((0, _place(key), 1, ()), marker))
        keyed.sort(key=lambda pair: pair[0])
        out[site] = [event for _, event in keyed]
    return out


def decided_order(
    events: list[tuple[str, Key | None, tuple, dict]], markers: list[tuple[Key, dict]]
) -> list[dict[str, Any]]:
    """A site's match records (`Matcher.events`) and `moved` records (`Matcher.markers`)
    in the order the site decides them: by the key of what caused each (what its
    matcher evicts at a watermark or the end, with no cause, last), a `moved`
    record after the records of its move's key. O(n log n)."""
    keyed: list[tuple[tuple, dict[str, Any]]] = []
    for space, cause, rank, event in events:
        place = (0, cause, 0, space) if cause is not None else (1, (), 0, space)
        keyed.append(((*place, rank), event))
    for key, marker in markers:
        keyed.append(((0, key, 1, "", ()), marker))
    keyed.sort(key=lambda pair: pair[0])
    return [event for _, event in keyed]


def _place(key: Key) -> tuple:
    """`_global`, a move's before the records at its ts."""
    return (key.ts, -1, key.pos) if key.cls == MOVES else _global(key)


def _global(key: Key) -> tuple:
    """A record's place in one matcher's order: (ts, subscriptions first, position)."""
    return (key.ts, 0 if key.cls == SUBSCRIPTIONS else 1, key.pos)


def _sort_key(causes: list[tuple], space: str, cause: Key | None, rank: tuple, event: dict):
    if rank[0] == 0:  # an expiry: (0, valid_to, kind, id, index, key of the version's record)
        _, valid_to, kind, ident, index, made = rank  # (a timer: kind -1, made None)
        other = event["profile_id"] if kind == 0 else event["subscription_id"]
        trigger = bisect.bisect_left(causes, (valid_to + 1,))
        if made is not None:
            trigger = max(trigger, bisect.bisect_right(causes, _global(made)))
        within = _within(index, event, other) if kind != -1 else _delivered(2, event)
        if trigger < len(causes):
            return (0, space, causes[trigger], 0, valid_to, kind, ident, within)
        return (1, space, (), 0, valid_to, kind, ident, within)
    assert cause is not None
    other = event["profile_id"] if cause.cls == SUBSCRIPTIONS else event["subscription_id"]
    return (0, space, _global(cause), 1, _within(rank[1], event, other))


def _within(index: Any, event: dict, other: str) -> tuple:
    """An event's place among the records of its step, as one matcher makes them:
    the delivery records that end a version before the step's own (`first`), the
    step's own records by the other side's id, then the delivery records
    (`SpaceMatcher._deliver`); those by (subscription, profile), an `unmatch`
    before a `match` of one pair. Composed so, the records of one step made at
    two sites (a subscription that moves between its home and its space's
    selecting site: docs/DELIVERY.md §9) fall in one matcher's order."""
    if isinstance(index, str) and index.startswith(DELIVERY_RANK):
        return _delivered(2, event)
    if isinstance(index, tuple) and index[0] in ("", DELIVERY_RANK):
        return _delivered(0 if index[0] == "" else 2, event)
    return (1, other, index)


def _delivered(block: int, event: dict) -> tuple:
    return (block, event["subscription_id"], event["profile_id"], event["event"] != "unmatch")


# -- false positives -----------------------------------------------------------


def count_false_positives(net: Network, result: Result) -> None:
    """A forwarded publish is a false positive if no site behind the link made a match
    record about it (ROUTING §6): one of that version's, or one it caused (an
    `unmatch` of the version it replaced, `changed`, at its ts)."""
    versions: dict[str, set[str]] = {}
    causes: dict[str, set[tuple]] = {}
    for site, events in result.events.items():
        versions[site] = {e["match_id"][16:] for *_, e in events}
        causes[site] = {(e["space"], e["profile_id"], e["ts"]) for *_, e in events}
    for (src, dst), pubs in result.forwarded.items():
        downstream = net.behind(src, dst)
        misses = 0
        for pub in pubs:
            assert isinstance(pub, Publish)
            held = Held(pub, version_of(to_state(pub)), None)
            digests = [profile_digest(pub.space, held, e) for e in ("match", "update", "unmatch")]
            cause = (pub.space, pub.id, pub.ts)
            if not any(
                cause in causes[s] or any(d in versions[s] for d in digests) for s in downstream
            ):
                misses += 1
        result.links[src, dst].false_positives = misses
