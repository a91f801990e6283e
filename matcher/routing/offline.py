"""The offline network (ROUTING §7): every site of a network file in one process.

A discrete-event simulation in processing time, deterministic for a seed:

- each site reads its own records (those that name it as their `site`, in
  the order of SEMANTICS §5) as they happen: a record arrives at its ts (from
  the start of the input) plus a lag per site; the site's input watermark is
  the ts of the last arrival, and after `idle_ms` without one it moves on to
  the next record's ts (the end: no limit), so a quiet site holds nobody up
  for longer than that;
- each link direction is a FIFO channel with a delay of its own (drawn per
  link) plus a jitter per delivery (drawn per delivery), all from the seed;
- every record that crosses a link is encoded to JSON and decoded at the
  other end (`wire`), so what is measured is what a Kafka topic would carry.

Whatever the delays, each site decides every record at its place in event
time (`site`), so the match records are the same for every seed; only the
latency changes. At the end every site's matcher evicts what expired before
the watermark of the whole input (its largest ts), as one matcher's replay does.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from matcher.routing import wire
from matcher.routing.cover_set import Boxes
from matcher.routing.network import Network
from matcher.routing.order import Key
from matcher.routing.site import Site

NO_LIMIT = math.inf


@dataclass(frozen=True)
class Delays:
    """The delay model: per link direction a base delay drawn from `base_ms`, and per
    delivery a jitter drawn from [0, `jitter` × base); per site an input lag drawn
    from `lag_ms`."""

    seed: int = 0
    base_ms: tuple[float, float] = (1.0, 50.0)
    jitter: float = 1.0
    lag_ms: tuple[float, float] = (0.0, 20.0)


@dataclass
class LinkCounts:
    """ROUTING §6, for one direction of one link."""

    interest_messages: int = 0
    advert_messages: int = 0
    profiles_forwarded: int = 0
    retracts_forwarded: int = 0
    catch_ups: int = 0
    false_positives: int = 0
    table_entries: int = 0
    table_peak: int = 0
    bytes: int = 0
    watermarks: int = 0
    move_messages: int = 0  # asks and handovers (ROUTING §5)
    handover_records: int = 0  # subscriptions and profiles handed over
    member_messages: int = 0  # subscriptions with delivery fields relayed (DELIVERY §9)
    delivered_records: int = 0  # records relayed from a selecting site to a home

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)

    def sent(self, message: wire.Message, size: int) -> None:
        """One record of `size` bytes sent on the link (not a watermark), counted."""
        self.bytes += size
        if isinstance(message, wire.FilterChange):
            if message.type == "interest":
                self.interest_messages += 1
            else:
                self.advert_messages += 1
        elif isinstance(message, wire.Member):
            self.member_messages += 1
        elif isinstance(message, wire.Delivered):
            self.delivered_records += 1
        elif isinstance(message, wire.Ask | wire.Handover):
            self.move_messages += 1
            if isinstance(message, wire.Handover):
                self.handover_records += len(message.records)
        elif isinstance(message.record, wire.Publish):
            self.profiles_forwarded += 1
        else:
            self.retracts_forwarded += 1


@dataclass
class Result:
    """What a run made: each site's matcher events, the counts per link, and the
    simulated time the run took and each match record waited."""

    events: dict[str, list[tuple[str, Key | None, tuple, dict]]]
    links: dict[tuple[str, str], LinkCounts]
    forwarded: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    refused: list[tuple[str, Any, str]] = field(default_factory=list)
    accepted: list[tuple[str, Key]] = field(default_factory=list)  # (space, key), every site
    simulated_ms: float = 0.0
    deliveries: int = 0
    latencies: list[float] = field(default_factory=list)  # ms, a match record each
    markers: dict[str, list[tuple[Key, dict]]] = field(default_factory=dict)  # `moved`, per site
    move_waits: list[float] = field(default_factory=list)  # ms, a move each (to its handover)

    def latency(self, waits: list[float] | None = None) -> dict[str, float]:
        """Simulated ms from a record's arrival at its site to its matches' being made
        at theirs (the wait for every link's watermark included): p50, p99, max. (Or
        of other `waits`: those of moves, from a move's arrival at its new site to
        its taking over there.)"""
        waits = self.latencies if waits is None else waits
        if not waits:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}
        ordered = sorted(waits)

        def at(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

        return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 3)}


class OfflineNetwork:
    """Run a network over every site's records (see the module docstring)."""

    def __init__(self, net: Network, delays: Delays = Delays()) -> None:
        net = self.net = net.with_producers()  # (a quenching producer is a leaf site)
        self.delays = delays
        rng = random.Random(f"delays:{delays.seed}")
        self.base = {d: rng.uniform(*delays.base_ms) for d in net.directed_links()}
        self.lag = {s: rng.uniform(*delays.lag_ms) for s in net.names}
        self._jitter = random.Random(f"jitter:{delays.seed}")

    def run(self, inputs: dict[str, list[tuple[Key, Any, Any]]]) -> Result:
        """`inputs`: per site, its records as (key, decoded record, handle) in key order."""
        net = self.net
        boxes: dict[str, Boxes] = {}  # (boxes are made once for every site)
        sites = {name: Site(name, net, boxes) for name in net.names}
        links = {d: LinkCounts() for d in net.directed_links()}
        forwarded: dict[tuple[str, str], list[Any]] = defaultdict(list)
        start = min((recs[0][0].ts for recs in inputs.values() if recs), default=0)
        queue: list[tuple[float, int, str, Any]] = []
        seq = 0
        arrived: dict[Key, float] = {}

        def push(at: float, kind: str, payload: Any) -> None:
            nonlocal seq
            heapq.heappush(queue, (at, seq, kind, payload))
            seq += 1

        for name in net.names:
            records = inputs.get(name, [])
            batches: list[list[tuple[Key, Any, Any]]] = []
            for rec in records:
                if batches and batches[-1][0][0].ts == rec[0].ts:
                    batches[-1].append(rec)
                else:
                    batches.append([rec])
            lag = self.lag[name]
            previous = None
            for i, batch in enumerate(batches):
                at = batch[0][0].ts - start + lag
                for key, _, _ in batch:
                    arrived[key] = at
                nxt = batches[i + 1][0][0].ts if i + 1 < len(batches) else NO_LIMIT
                push(at, "read", (name, batch, batch[0][0].ts))
                gap = (nxt - batch[0][0].ts) if nxt != NO_LIMIT else NO_LIMIT
                if gap > net.idle_ms:
                    push(at + net.idle_ms, "read", (name, [], nxt))
                previous = at
            if previous is None:
                push(0.0, "read", (name, [], NO_LIMIT))
        arrivals: dict[tuple[str, str], float] = {}
        now = 0.0
        deliveries = 0
        while queue:
            now, _, kind, payload = heapq.heappop(queue)
            if kind == "read":
                name, batch, wm = payload
                sites[name].read(batch, wm)
            else:
                (src, dst), plane, blobs, wm = payload
                deliveries += 1
                sites[dst].deliver(src, plane, [wire.decode(b) for b in blobs], wm)
                name = dst
            for (dst, plane), (messages, wm) in sites[name].run(now).items():
                direction = (name, dst)
                counts = links[direction]
                blobs = []
                for m in messages:
                    blob = wire.encode(m)
                    blobs.append(blob)
                    counts.sent(m, len(blob))
                    if isinstance(m, wire.ProfileForward) and isinstance(m.record, wire.Publish):
                        forwarded[direction].append(m.record)
                counts.watermarks += 1
                base = self.base[direction]
                at = now + base + self._jitter.uniform(0, self.delays.jitter * base)
                at = max(at, arrivals.get((direction, plane), 0.0))
                arrivals[direction, plane] = at
                push(at, "link", (direction, plane, blobs, wm))
        # (the whole input's largest ts: every record's, as one matcher's watermark counts
        # each record it reads, advertisements, moves and refused records included)
        end_ts = max((k.ts for recs in inputs.values() for k, _, _ in recs), default=-math.inf)
        for site in sites.values():
            if site.stage.pending:  # (a handover that never came: a bug, not a result)
                raise RuntimeError(f"site {site.name}: {site.stage.pending} records never taken")
        for site in sites.values():
            site.matcher.finish(end_ts)
            for n, (entries, peak) in site.table_entries().items():
                links[site.name, n].table_entries = entries
                links[site.name, n].table_peak = peak
            for ports in site.ports.values():
                for port in ports:
                    if hasattr(port, "catch_ups"):
                        links[site.name, port.neighbour].catch_ups = port.catch_ups
        latencies = [
            site.matcher.decided[cause] - arrived[cause]
            for site in sites.values()
            for _, cause, rank, _ in site.matcher.events
            if cause is not None and rank[0] == 1 and cause in arrived
        ]
        refused = [(name, h, reason) for name, s in sites.items() for h, reason in s.local.refused]
        for site in sites.values():
            refused += site.hosted.refused
            self._ship(site, sites, links)
        return Result(
            {name: s.matcher.events for name, s in sites.items()},
            links,
            dict(forwarded),
            refused,
            [a for s in sites.values() for a in s.local.accepted],
            now,
            deliveries,
            latencies,
            {name: s.matcher.markers for name, s in sites.items()},
            [at - arrived[key] for s in sites.values() for key, at in s.moved_at.items()],
        )

    def _ship(self, site: Site, sites: dict[str, Site], links: dict) -> None:
        """The records a selecting site made for members of other homes, to those homes
        (DELIVERY §9), counted on each link of the way. (Offline, they go at the end:
        the output's order is one matcher's whatever the time they arrive.)"""
        for home, space, cause, rank, event in site.shipped():
            sites[home].matcher.events.append((space, cause, rank, event))
            path = self.net.path(site.name, home)
            size = len(wire.encode(wire.Delivered(home, event)))
            for direction in zip(path, path[1:], strict=False):
                links[direction].delivered_records += 1
                links[direction].bytes += size
