"""A quenching producer that speaks the link protocol to its site (ROUTING §4): exact.

The network file names it, `[producers.NAME] site = "SITE"`; the network with
producers (`Network.with_producers`) has it as a leaf site with no
subscribers, linked to its site alone, its topics on its site's cluster. This
process runs that leaf's `SiteJob` over the profiles-topic lines it is given
(its clients' input), and its site's job runs the same network, so:

- the site sends it interest as to any neighbour (numbered link records, in
  event time, with watermarks), on `<site prefix><NAME>.<SITE>.tsm.link`;
- it sends the site, on `<site prefix><NAME>.tsm.link`, a profile when the
  site's interest overlaps it at its ts, and a held-back one when interest for
  it arrives while it is valid, keyed just before that interest (a catch-up:
  held there before the interest's ts, its own ts and version kept, so the
  subscriber meets it as one matcher given the unquenched input does), and
  each plane's watermark, which the site waits for as for any neighbour's;
- its advertisements go on its link (it is their publisher's site), its
  refused and late records to its site's dead letters;
- an idle producer does not stall its site: its clock ticks move its own
  watermark on after `idle_ms`, the idle rule of every site;
- at `close` it hands what it still holds to its site and ends its link:
  the valid profiles held back, keyed just before the event time its
  profiles plane has reached (no interest there overlapped them before it:
  held at the site from then on, they make no record until a subscription
  wants them, as one matcher's), and those it had not decided yet, at their
  own keys, as an unquenched producer sends them. Its site waits for it no
  more; the name is then spent for that site's state.

`ProducerJob` is the pure part (lines and link records in, records to write
out); `LinkedQuenchingProducer` adds Kafka.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from connectors.config import Topics, confluent_config
from matcher.routing.network import Network
from matcher.routing.order import CATCH_UP, EXPIRY, Key
from matcher.routing.site import ProfilePort
from matcher.routing.wire import ProfileForward
from streaming.network_site import (
    END,
    KafkaRow,
    Record,
    SiteJob,
    control_start,
    control_tick,
)
from streaming.network_topics import site_topics


@dataclass
class ProducerOutput:
    """What one step makes: link records for the site's inbound topic from this
    producer, and dead letters for the site's dead-letter topic."""

    links: list[Record] = field(default_factory=list)
    dead_letters: list[Record] = field(default_factory=list)


@dataclass
class ProducerCounts:
    lines: int = 0  # profiles-topic records read
    forwarded: int = 0  # publishes sent to the site (at their ts, caught up or handed over)
    handed_over: int = 0  # of them, held back until `close`, then handed to the site


class ProducerJob:
    """A quenching producer's leaf-site job, without Kafka (see the module docstring).

    `step` costs the leaf site's step over the lines given (one overlap test per
    publish against the site's interest, one per held publish a new filter may
    want); invariant: every record it returns is numbered on the link in order, so
    the site applies each once."""

    def __init__(self, net: Network, name: str, topics: Topics | None = None) -> None:
        net = net.with_producers()
        if not net.is_producer(name):
            raise ValueError(
                f"{name!r} is no quenching producer of the network file: give it a table "
                f'[producers.{name}] site = "SITE"'
            )
        self.name = name
        (self.site,) = net.neighbours(name)
        self.topics = site_topics(net, name, topics)
        self.site_topics = site_topics(net, self.site, topics)
        self.job = SiteJob(net, name, self.topics)
        self.counts = ProducerCounts()
        self._offset = 0  # the next line's offset in the (virtual) profiles topic
        self._control = 0
        self._watermark: int | None = None  # the largest ts read: the source's watermark
        self._ended = False

    @property
    def bootstrap(self) -> str:
        return self.topics.bootstrap

    @property
    def inbound(self) -> str:
        """The topic the site writes this producer's interest to (on its cluster)."""
        return self.topics.inbound[self.site]

    @property
    def outbound(self) -> str:
        """The topic on the site's cluster that this producer writes."""
        return self.topics.outbound[self.site][1]

    @property
    def done(self) -> bool:
        """Every plane has reached the end: the site has had all it will get."""
        return self.job.done

    @property
    def held(self) -> int:
        """How many valid profiles are held back now."""
        port = self._port()
        now = port.done
        return sum(
            1
            for f in port.spaces.values()
            for ident, (pub, _) in f.held.by_id.items()
            if pub.valid_to >= now and f.theirs.get(ident) is not pub
        )

    def step(
        self,
        lines: Iterable[bytes] = (),
        link: Iterable[tuple[int, bytes | None, bytes]] = (),
        now_ms: int | None = None,
    ) -> ProducerOutput:
        """Profiles-topic `lines` read, the site's `link` records read since the last
        step (offset, key, value), and the clock (for the idle rule): what to write."""
        rows = [self._control_row(control_start(None))] if self._control == 0 else []
        if now_ms is not None:
            rows.append(self._control_row(control_tick(now_ms)))
        topic = self.topics.topics.profiles
        for line in lines:
            ts = _ts(line)
            if ts is not None and (self._watermark is None or ts > self._watermark):
                self._watermark = ts
            rows.append(KafkaRow(topic, 0, self._offset, None, None, line, self._watermark))
            self._offset += 1
            self.counts.lines += 1
        if not any(r.topic == topic for r in rows):
            rows.append(KafkaRow(None, None, None, None, None, None, self._watermark))
        rows += [KafkaRow(self.inbound, 0, off, None, key, value, None) for off, key, value in link]
        return self._output(self.job.step(rows))

    def end(self) -> ProducerOutput:
        """The lines are done: the producer's own watermark is the end."""
        self._ended = True
        ends = {(self.topics.topics.profiles, 0): self._offset}
        return self._output(self.job.step([self._control_row(control_start(ends))]))

    def close(self) -> ProducerOutput:
        """Hand over what is held back and end the link (see the module docstring)."""
        out = ProducerOutput() if self._ended else self.end()
        port = self._port()
        at = Key(int(port.done), EXPIRY, (), CATCH_UP) if math.isfinite(port.done) else None
        handed = []
        for f in port.spaces.values():
            if at is not None:
                for ident, (pub, _) in sorted(f.held.by_id.items()):
                    if pub.valid_to >= at.ts and f.theirs.get(ident) is not pub:
                        f._sent(pub)
                        handed.append(ProfileForward(pub, at))
            f.flooding = True  # (what is not decided yet goes at its own key)
        port.flooding = True
        port.outbox = handed + port.outbox
        self.counts.handed_over += len(handed)
        site = self.job.site
        for plane in ("interest", "advert", "ask"):  # (the site's planes: heard no more)
            site.deliver(self.site, plane, [], END)
        last = self._output(self.job.step([]))
        out.links += last.links
        out.dead_letters += last.dead_letters
        return out

    def _port(self) -> ProfilePort:
        (port,) = [p for p in self.job.site.ports[self.site] if isinstance(p, ProfilePort)]
        return port

    def _control_row(self, value: bytes) -> KafkaRow:
        row = KafkaRow(self.topics.control, 0, self._control, None, None, value, None)
        self._control += 1
        return row

    def _output(self, made) -> ProducerOutput:
        self.counts.forwarded = self.job.counts[self.site].profiles_forwarded
        return ProducerOutput(made.links.get(self.site, []), made.dead_letters)


def _ts(line: bytes) -> int | None:
    """A line's ts where it has one (the rest is the site job's to judge)."""
    try:
        ts = json.loads(line).get("ts")
    except (ValueError, AttributeError, RecursionError):
        return None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


class LinkedQuenchingProducer:
    """`ProducerJob` over Kafka: the lines given, the site's link topic read as it
    goes, the records written to the site's cluster. Use as a context manager;
    `close(wait_s)` waits up to that long for interest in what is held back, then
    hands the rest to the site."""

    def __init__(
        self,
        net: Network,
        name: str,
        options: Mapping[str, str] | None = None,
        topics: Topics | None = None,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from connectors.producer import Producer

        self.job = ProducerJob(net, name, topics)
        bootstrap = self.job.bootstrap
        self._producer = Producer(confluent_config(bootstrap, options))
        self._consumer = Consumer(
            confluent_config(
                bootstrap,
                options,
                required={"group.id": f"tsm-quench-{name}", "enable.auto.commit": False},
            )
        )
        inbound = self.job.inbound
        meta = self._consumer.list_topics(timeout=10).topics
        missing = [t for t in (inbound, self.job.outbound) if t not in meta]
        if missing:
            self._consumer.close()
            raise ValueError(
                f"no topic {missing[0]!r} at {bootstrap}: is the job of site "
                f"{self.job.site!r} (tsm run --network) running with this network file?"
            )
        self._consumer.assign([TopicPartition(inbound, 0, 0)])

    def __enter__(self) -> LinkedQuenchingProducer:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()

    def send_lines(self, lines: Iterable[bytes], every: int = 200) -> None:
        chunk: list[bytes] = []
        for line in lines:
            if line.strip():
                chunk.append(line)
            if len(chunk) >= every:
                self._step(chunk)
                chunk = []
        self._step(chunk)
        self._write(self.job.end())

    def _step(self, lines: list[bytes], timeout: float = 0.0) -> None:
        messages = self._consumer.consume(1000, timeout=timeout)
        link = [(m.offset(), m.key(), m.value()) for m in messages if m.error() is None]
        self._write(self.job.step(lines, link, int(time.time() * 1000)))

    def _write(self, out: ProducerOutput) -> None:
        for key, value in out.links:
            self._producer.produce(self.job.outbound, value, key)
        for key, value in out.dead_letters:
            self._producer.produce(self.job.site_topics.topics.deadletter, value, key)
        self._producer.poll()

    def close(self, wait_s: float = 0.0) -> ProducerCounts:
        """Answer the site's interest for up to `wait_s` (until its end, if sooner);
        hand the rest over; flush; the counts."""
        deadline = time.monotonic() + wait_s
        while not self.job.done and time.monotonic() < deadline:
            self._step([], timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        if not self.job.done:
            self._write(self.job.close())
        self._producer.flush()
        return self.job.counts
