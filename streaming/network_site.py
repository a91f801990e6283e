"""One site of a network as a step over the Kafka records its query read in a batch.

`SiteJob` wraps the routing core's `matcher.routing.site.Site` (the site's
matcher and its ports toward each neighbour) with what Kafka adds: it is the
state of a site's streaming job, kept whole between batches (picklable), and
`step` is one micro-batch: the records read in, the records to write out.

In, by topic (`network_topics`):

- the clients' subscriptions and profiles, each with the batch's watermark
  from the event-time source (SEMANTICS §3): a record below the watermark at
  the batch's start is late (dead letter); the others wait here until the
  watermark passes them, and enter the site in key order (`order.Key`, its
  position `(site, partition, offset)`), as the offline network's do;
- the inbound link topics: records numbered per link; a number already applied
  (written again by a re-run batch of the sender) is skipped;
- the control topic: `start` (where the clients' input ends, for a run that
  stops when it is done, or none) and `tick` (the clock of a live run).

When the site's own input is done the site's watermark is the end (no
limit): a run over what the topics hold now, as the offline network's end. In
a live run, a site whose clients sent nothing for `idle_ms` (by the ticks)
moves its watermark to the tick's time less `idle_ms`, so that a quiet site
holds nobody up (ROUTING §4); a record that comes later with an older ts is
late.

Out: match records and `moved` markers (keyed by subscriber) and dead letters
for the site's cluster; per neighbour, the link records (interest, adverts,
profiles, asks and handovers) each plane made, then that plane's watermark,
which also carries the largest ts its sender has heard of (`max_ts`): a site
that reaches the end expires what it holds at the largest ts of the whole
network's input (every record's: moves', advertisements' and refused ones'
included), as one matcher does at the end of its input.

Moves (ROUTING §5, `matcher.routing.moves`): a client's `move` record on
either clients' topic is decoded here and keyed `(ts, MOVES, position)`; the
routing core's `Site` asks the old site, waits at the key for the handover,
and answers the asks that reach it. Asks and handovers travel on the link
topics as two more planes (`ask`, with its watermark; `handover`, with
none), written before a step's other records, so a site that has read a
neighbour's end has read every handover sent before it. A subscriber's
`moved` marker goes out with the batch's match records, at its place in the
order the site decides them (`replay.decided_order`): after all it made for
her before the move, before all it makes after she comes back, which is
what `--follow-moves` needs. What a move leaves waiting (the move itself, an
ask not answered yet, a profile's handover passing through) is part of the
`Site` and so of the pickled state: a batch run again after a crash starts
from it and sends the same asks and handovers with the same numbers, which
the receiver applies once.

Each step is a function of the state and the records read: a batch that Spark
runs again after a crash writes the same records, with the same numbers.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from matcher.admission import Input, dead_letter, late_letter
from matcher.errors import RecordError
from matcher.events import encode
from matcher.records import Source
from matcher.routing import wire
from matcher.routing.members import Delivered
from matcher.routing.moves import Move, move_key
from matcher.routing.network import Network
from matcher.routing.offline import LinkCounts
from matcher.routing.order import Key, record_key
from matcher.routing.replay import decided_order, decode_site_record
from matcher.routing.site import InterestPort, Site
from streaming.network_topics import SiteTopics

NEVER = -math.inf
END = math.inf
# The port of the interest published for quenching producers (not a site name: those
# cannot start with "~").
PRODUCERS = "~producers"
# The interest record that says "every profile is wanted" (with flooding, no site
# tells its neighbours its interest, so producers cannot be told less).
WANT_ALL = (b"*", b'{"type":"interest","all":true}')
MOVE_PLANES = ("ask", "handover")


class KafkaRow(NamedTuple):
    """One record a site's query read: where from, its bytes, and (from the clients'
    topics) the batch's watermark, epoch ms, None where the source gave none."""

    topic: str | None  # None: a row that only carries the watermark
    partition: int | None
    offset: int | None
    timestamp: int | None  # the Kafka timestamp, ms
    key: bytes | None  # a link record's number on its link
    value: bytes | None
    watermark: int | None


Record = tuple[bytes | None, bytes | None]  # (key, value); None: a tombstone


@dataclass
class StepOutput:
    """What one batch makes: records per topic of the site's own cluster, and link
    records per neighbour."""

    matches: list[Record] = field(default_factory=list)
    dead_letters: list[Record] = field(default_factory=list)
    links: dict[str, list[Record]] = field(default_factory=dict)
    interest: list[Record] = field(default_factory=list)  # for quenching producers
    done: bool = False


def interest_record(change: wire.FilterChange) -> Record:
    """A record of the compacted interest topic: keyed by space and filter; an add
    carries the change, a remove is a tombstone."""
    key = json.dumps([change.space, wire.filter_json(change.filter)], separators=(",", ":"))
    return (key.encode(), wire.encode(change) if change.op == "add" else None)


def control_start(ends: dict[tuple[str, int], int] | None) -> bytes:
    """The control record a run writes first: where its clients' input ends (None:
    it runs on)."""
    listed = None if ends is None else [[t, p, e] for (t, p), e in sorted(ends.items())]
    return json.dumps({"type": "start", "ends": listed}).encode()


def control_tick(now_ms: int) -> bytes:
    """A live run's clock, for the idle rule."""
    return json.dumps({"type": "tick", "now": now_ms}).encode()


class SiteJob:
    """A site's streaming state and its step (see the module docstring)."""

    def __init__(self, net: Network, name: str, topics: SiteTopics) -> None:
        net = self.net = net.with_producers()  # (a quenching producer is a leaf site)
        self.name = name
        self.topics = topics
        self.index = net.names.index(name)
        self.site = Site(name, net)
        if net.routing != "flooding" and not net.is_producer(name):
            # what this site's producers are told: every subscriber's interest that
            # reaches here, as a covering root set, each filter under its own key
            quench = replace(net, routing="covering", advertisements=False)
            sources = [("local", "interest"), ("hosted", "interest")]
            sources += [(n, "interest") for n in topics.inbound]
            self.site.add_port(InterestPort(PRODUCERS, quench), sources)
        clients = topics.topics
        self.kinds = {clients.subscriptions: "subscription", clients.profiles: "profile"}
        self.from_link = {topic: n for n, topic in topics.inbound.items()}
        self.local_wm = NEVER
        # (the handle of a record: its bytes in base64 and where it was read, as JSON: a
        # member's travels to its space's selecting site, which may refuse it)
        self.pending: list[tuple[Key, Any, list]] = []
        self.read_to: dict[tuple[str, int], int] = {}  # next offset of each input partition
        self.ends: dict[tuple[str, int], int] | None = None  # where the clients' input ends
        self.quiet_since: int | None = None  # tick time since the clients sent nothing
        self.applied = dict.fromkeys(topics.inbound, -1)  # last link record number applied
        self.sent = dict.fromkeys(topics.inbound, 0)  # next link record number
        self.max_ts = NEVER  # the largest ts heard of: this site's input and the links'
        self.counts = {n: LinkCounts() for n in topics.inbound}
        self.inbound_wm: dict[str, dict[str, float]] = {n: {} for n in topics.inbound}
        self.batches = 0

    # -- the step ---------------------------------------------------------------

    def step(self, rows: list[KafkaRow]) -> StepOutput:
        """One micro-batch: apply `rows`, return what to write. Deterministic."""
        out = StepOutput()
        self.batches += 1
        local, links, control = [], {}, []
        for row in rows:
            if row.topic in self.kinds:
                local.append(row)
            elif row.topic in self.from_link:
                links.setdefault(self.from_link[row.topic], []).append(row)
            elif row.topic == self.topics.control:
                control.append(row)
            if row.topic is not None:
                tp = (row.topic, row.partition)
                self.read_to[tp] = max(self.read_to.get(tp, 0), row.offset + 1)
        now = self._control(sorted(control, key=lambda r: r.offset))
        self._read_local(local, now, out)
        for neighbour in sorted(links):
            self._read_link(neighbour, sorted(links[neighbour], key=lambda r: r.offset))
        if self.batches == 1 and self.net.routing == "flooding":
            out.interest.append(WANT_ALL)
        self._write_links(self._run(out), out)
        self._match(out)
        # (what the matching made for members at other sites, and the `delivered`
        # watermark it reached, go out in this step: no later batch may come to send them)
        self._write_links(self.site.member_planes_out(), out)
        out.done = self.done
        return out

    @property
    def done(self) -> bool:
        """Every stage and plane has passed the end: nothing more can come or go."""
        return self.passed(END)

    def passed(self, until: float) -> bool:
        """Every stage has handled what lies below `until`, and so has every plane of
        delivered records (their own sent, every neighbour's read)."""
        site = self.site
        members = site.members
        delivered = [*members.wm_from["delivered"].values(), *members.sent_wm["delivered"].values()]
        return (
            all(stage.done >= until for stage in site.stages)
            and site.hosted.wm >= until
            and members.idle
            and all(wm >= until for wm in delivered)
        )

    def _control(self, rows: list[KafkaRow]) -> int | None:
        """Apply the control records; the last tick's time, if any."""
        now = None
        for row in rows:
            obj = json.loads(row.value)
            if obj["type"] == "start":
                ends = obj["ends"]
                self.ends = None if ends is None else {(t, p): e for t, p, e in ends}
            elif obj["type"] == "tick":
                now = obj["now"]
        return now

    def _read_local(self, rows: list[KafkaRow], now: int | None, out: StepOutput) -> None:
        start_wm = self.local_wm
        batch_wm = NEVER
        records = 0
        for row in sorted(rows, key=_local_order(self.topics.local_inputs)):
            if row.watermark is not None:
                batch_wm = max(batch_wm, row.watermark)
            if row.topic is None:
                continue
            records += 1
            kind = self.kinds[row.topic]
            source = Source(topic=row.topic, partition=row.partition, offset=row.offset)
            raw = row.value or b""
            try:
                record = decode_site_record(Input(kind, raw, source, row.timestamp))
            except RecordError as exc:
                out.dead_letters.append((None, encode(dead_letter(str(exc), raw, source))))
                continue
            letter = late_letter(record.ts, start_wm, 0, raw, source)
            if letter is not None:
                out.dead_letters.append((None, encode(letter)))
                continue
            handle = [base64.b64encode(raw).decode(), row.topic, row.partition, row.offset]
            position = (self.index, row.partition, row.offset)
            # (the end is the input's largest ts: every record's, as one matcher's
            # watermark counts each record it reads, advertisements, moves and records
            # refused here included)
            self.max_ts = max(self.max_ts, record.ts)
            if isinstance(record, Move):
                key = move_key(record.ts, kind, position)
            else:
                key = record_key(record.ts, kind, position)
            self.pending.append((key, record, handle))
        wm = max(start_wm, batch_wm)
        if self.ends is not None and all(
            self.read_to.get(tp, 0) >= end for tp, end in self.ends.items()
        ):
            wm = END
        elif records:
            self.quiet_since = None
        elif now is not None and self.ends is None:
            if self.quiet_since is None:
                self.quiet_since = now
            elif now - self.quiet_since >= self.net.idle_ms:
                wm = max(wm, now - self.net.idle_ms)
        self.local_wm = wm
        self.pending.sort(key=lambda p: p[0])
        cut = 0
        while cut < len(self.pending) and self.pending[cut][0].ts < wm:
            cut += 1
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        self.site.read(ready, wm)

    def _run(self, out: StepOutput) -> dict[tuple[str, str], tuple[list[Any], float]]:
        """The site's stages run; what they send each neighbour. The site's own records
        are taken there (in key order with the asks and moves): its refusals become
        dead letters."""
        made = self.site.run()
        local = self.site.local
        for handle, reason in local.refused:
            out.dead_letters.append((None, _letter(handle, reason)))
        local.refused.clear()
        local.accepted.clear()  # (kept by the offline network's report; not needed here)
        return made

    def _read_link(self, neighbour: str, rows: list[KafkaRow]) -> None:
        last = self.applied[neighbour]
        for row in rows:
            n = int(row.key)
            if n <= last:
                continue
            last = n
            message = wire.decode(row.value)
            if isinstance(message, wire.Watermark):
                heard = json.loads(row.value).get("max_ts")
                if heard is not None:
                    self.max_ts = max(self.max_ts, heard)
                self.inbound_wm[neighbour][message.plane] = message.ts
                self.site.deliver(neighbour, message.plane, [], message.ts)
            else:
                self.site.deliver(neighbour, _plane(message), [message], NEVER)
        self.applied[neighbour] = last

    def _write_links(
        self, made: dict[tuple[str, str], tuple[list[Any], float]], out: StepOutput
    ) -> None:
        """Number what goes to each neighbour, per plane, and its watermark, onto the
        neighbour's link (interest for quenching producers to the interest topic)."""
        # (asks and handovers first: a neighbour that has read a plane's end has read
        # every handover sent before it, and relayed it, before it is done)
        planes = sorted(made.items(), key=lambda kv: kv[0][1] not in MOVE_PLANES)
        for (neighbour, plane), (messages, wm) in planes:
            if neighbour == PRODUCERS:
                out.interest += [interest_record(m) for m in messages]
                continue
            counts = self.counts[neighbour]
            records = out.links.setdefault(neighbour, [])
            for m in messages:
                value = wire.encode(m)
                records.append(self._numbered(neighbour, value))
                counts.sent(m, len(value))
            if plane == "handover" or wm == NEVER:
                continue  # (a handover's waiter knows it from the ask; asks may come first)
            mark = wire.Watermark(plane, wm).to_json()
            mark["max_ts"] = None if self.max_ts == NEVER else int(self.max_ts)
            value = json.dumps(mark, separators=(",", ":")).encode()
            records.append(self._numbered(neighbour, value))
            counts.watermarks += 1
            counts.bytes += len(value)
        for neighbour, (entries, peak) in self.site.table_entries().items():
            self.counts[neighbour].table_entries = entries
            self.counts[neighbour].table_peak = peak
        for neighbour, ports in self.site.ports.items():
            for port in ports:
                if hasattr(port, "catch_ups"):
                    self.counts[neighbour].catch_ups = port.catch_ups

    def _numbered(self, neighbour: str, value: bytes) -> Record:
        n = self.sent[neighbour]
        self.sent[neighbour] = n + 1
        return (str(n).encode(), value)

    def _match(self, out: StepOutput) -> None:
        """The batch's match records and `moved` markers, in the order the site decides
        them (a subscriber's `moved` after all it made for her before her move and
        before all it makes after she comes back, as `--follow-moves` reads), then
        what the matcher's watermark expires."""
        matcher = self.site.matcher
        matcher.match()
        matcher.decided.clear()
        until = matcher.done if matcher.done != END else self.max_ts
        if until != NEVER:
            for space, m in matcher.spaces.items():
                for rank, event in m.expire_ranked(until):
                    matcher.events.append((space, None, rank, event))
        site = self.site
        for home, _, _, _, event in site.shipped():  # (to their homes, next step)
            site.members.send(Delivered(home, event))
        for home, handle, reason in site.hosted.refused:
            site.members.send(Delivered(home, None, handle, reason))
        site.hosted.refused.clear()
        for event in decided_order(matcher.events, matcher.markers):
            out.matches.append((str(event["subscriber"]).encode(), encode(event)))
        for delivered in site.members.arrived:  # (made at a selecting site for ours)
            if delivered.event is not None:
                event = delivered.event
                out.matches.append((str(event["subscriber"]).encode(), encode(event)))
            else:
                out.dead_letters.append((None, _letter(delivered.handle, delivered.reason)))
        site.members.arrived.clear()
        matcher.events.clear()
        matcher.markers.clear()
        site.delivered_wm = matcher.done

    # -- what the progress log and `tsm net status` show --------------------------

    def report(self) -> dict[str, Any]:
        """The site's watermarks, the ts of a move it waits at for its handover, per
        outbound link the §6 counts, and the members it holds per space it selects
        for, with their histograms (docs/DELIVERY.md §9)."""
        waiting = self.site.stage.waiting
        return {
            "site": self.name,
            "local_watermark": _ts(self.local_wm),
            "matcher_watermark": _ts(self.site.matcher.done),
            "pending": len(self.pending),
            "waiting_for_handover": None if waiting is None else waiting.ts,
            "links": {f"{self.name}->{n}": _counts(c) for n, c in self.counts.items()},
            "inbound_watermarks": {
                f"{n}->{self.name}": {p: _ts(w) for p, w in marks.items()}
                for n, marks in self.inbound_wm.items()
            },
            # the spaces whose members this site holds, as their selecting site
            "members": self.site.hosted.summary(),
            "done": self.done,
        }


def _letter(handle: list, reason: str) -> bytes:
    """The dead letter of a record of the site's clients, by its handle."""
    raw, topic, partition, offset = handle
    source = Source(topic=topic, partition=partition, offset=offset)
    return encode(dead_letter(reason, base64.b64decode(raw), source))


def _plane(message: wire.Message) -> str:
    """The plane a link record belongs to."""
    if isinstance(message, wire.ProfileForward):
        return "profile"
    if isinstance(message, wire.Member):
        return "member"
    if isinstance(message, wire.Delivered):
        return "delivered"
    if isinstance(message, wire.Ask):
        return "ask"
    if isinstance(message, wire.Handover):
        return "handover"
    return message.type


def _counts(counts: LinkCounts) -> dict[str, int]:
    """The counts a job knows (false positives are known only downstream)."""
    return {k: v for k, v in counts.to_json().items() if k != "false_positives"}


def _ts(value: float) -> int | str | None:
    if value == NEVER:
        return None
    return "end" if value == END else int(value)


def _local_order(topics: list[str]):
    rank = {t: i for i, t in enumerate(topics)}

    def key(row: KafkaRow) -> tuple:
        return (rank.get(row.topic, -1), row.partition or 0, row.offset or 0)

    return key
