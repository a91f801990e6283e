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

A producer killed before its close stalls its site (which waits for its
watermark) until it is started again under its name: it goes on from its
state file (`save_state`, `load_state`: the `ProducerJob` as a codec snapshot,
saved after each step before what the step made is sent; see
`LinkedQuenchingProducer`), and nothing is lost or decided twice.

`ProducerJob` is the pure part (lines and link records in, records to write
out); `LinkedQuenchingProducer` adds Kafka and the state file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.config import Topics, confluent_config
from matcher.routing.members import PLANES as MEMBER_PLANES
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
from streaming.state.codec import SnapshotError, dump_snapshot, load_snapshot


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
    want); invariants: every record it returns is numbered on the link in order, so
    the site applies each once, and is in `unacknowledged` until `acknowledged`;
    `input_lines` and `input_digest` say which lines it has read. Picklable (by the
    codec): its state file is this object."""

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
        self.ended = False  # the lines are done (`end`)
        self.closed = False  # what it held is handed over and its link ended (`close`)
        self.input_lines = 0  # lines of the input read, blank ones too: where a restart goes on
        self.input_digest = b""  # a SHA-256 chain over those lines: a restart reads the same
        # what the steps made since the loop last had Kafka acknowledge it: kept in the
        # state file, so a restart sends it again (with the same link numbers)
        self.unacknowledged = ProducerOutput()

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
    def link_offset(self) -> int:
        """The offset in the site's link topic (`inbound`) to read on from."""
        return self.job.read_to.get((self.inbound, 0), 0)

    @property
    def acknowledged_count(self) -> int:
        """How many link records Kafka has acknowledged: at most the link topic's end."""
        return self.job.sent[self.site] - len(self.unacknowledged.links)

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
        """The input's next `lines` (blank ones are counted, not sent), the site's
        `link` records read since the last step (offset, key, value; one read again is
        skipped by its number), and the clock (for the idle rule): what to write."""
        if self.ended and any(line.strip() for line in lines):
            raise ValueError(
                f"producer {self.name!r} ended its input at line {self.input_lines}: "
                "send more lines under a new producer name"
            )
        rows = [self._control_row(control_start(None))] if self._control == 0 else []
        if now_ms is not None:
            rows.append(self._control_row(control_tick(now_ms)))
        topic = self.topics.topics.profiles
        for line in lines:
            self.input_lines += 1
            self.input_digest = hashlib.sha256(self.input_digest + line).digest()
            if not line.strip():
                continue
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
        self.ended = True
        ends = {(self.topics.topics.profiles, 0): self._offset}
        return self._output(self.job.step([self._control_row(control_start(ends))]))

    def close(self) -> ProducerOutput:
        """Hand over what is held back and end the link (see the module docstring)."""
        out = ProducerOutput() if self.ended else self.end()
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
        # (the site's planes: heard no more)
        for plane in ("interest", "advert", "ask", *MEMBER_PLANES):
            site.deliver(self.site, plane, [], END)
        # (a step writes the links before it matches, so the watermark of the
        # delivered plane that the first step's matching reaches goes in the second)
        for _ in range(2):
            last = self._output(self.job.step([]))
            out.links += last.links
            out.dead_letters += last.dead_letters
        self.closed = True
        return out

    def resume(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        """The input's lines after those already read (`input_lines`), once the ones
        skipped are checked to be those read. O(lines skipped)."""
        rest = iter(lines)
        digest = b""
        for _, line in zip(range(self.input_lines), rest, strict=False):
            digest = hashlib.sha256(digest + line).digest()
        if digest != self.input_digest:
            raise ValueError(
                f"producer {self.name!r} has read {self.input_lines} lines of another "
                "input: give it the same file (it may have grown), or use a new name"
            )
        return rest

    def acknowledged(self) -> None:
        """Kafka has acknowledged every record in `unacknowledged`."""
        self.unacknowledged = ProducerOutput()

    def _port(self) -> ProfilePort:
        (port,) = [p for p in self.job.site.ports[self.site] if isinstance(p, ProfilePort)]
        return port

    def _control_row(self, value: bytes) -> KafkaRow:
        row = KafkaRow(self.topics.control, 0, self._control, None, None, value, None)
        self._control += 1
        return row

    def _output(self, made) -> ProducerOutput:
        self.counts.forwarded = self.job.counts[self.site].profiles_forwarded
        out = ProducerOutput(made.links.get(self.site, []), made.dead_letters)
        self.unacknowledged.links += out.links
        self.unacknowledged.dead_letters += out.dead_letters
        return out


class _LineReader:
    """A thread that iterates `lines()` into a queue of at most `capacity` lines
    (it waits while the queue is full), so that the loop waiting for input can
    step meanwhile; an error raised by the iteration is raised again by `take`.
    A context manager: leaving it stops the thread at its next line (a thread
    blocked reading a live input stays blocked; it is a daemon)."""

    _END = object()

    def __init__(self, lines: Callable[[], Iterable[bytes]], capacity: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(capacity, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(lines,), daemon=True)

    def __enter__(self) -> _LineReader:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _read(self, lines: Callable[[], Iterable[bytes]]) -> None:
        item: Any = self._END
        try:
            for line in lines():
                if not self._put(line):
                    return
        except BaseException as exc:  # (the loop raises it)
            item = exc
        self._put(item)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def take(self, chunk: list[bytes], most: int, timeout: float) -> bool:
        """Append to `chunk` the lines there are, up to `most` in it, waiting up to
        `timeout` s for the first; whether the input has ended. O(lines taken)."""
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            while True:
                if item is self._END:
                    return True
                if isinstance(item, BaseException):
                    raise item
                chunk.append(item)
                if len(chunk) >= most:
                    return False
                item = self._queue.get_nowait()
        except queue.Empty:
            return False


def _ts(line: bytes) -> int | None:
    """A line's ts where it has one (the rest is the site job's to judge)."""
    try:
        ts = json.loads(line).get("ts")
    except (ValueError, AttributeError, RecursionError):
        return None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


def default_state_path(name: str) -> Path:
    """Where producer `name` keeps its state unless told: under the working directory."""
    return Path(".tsm") / "producers" / f"{name}.state"


def save_state(path: Path, job: ProducerJob) -> None:
    """Write the job to `path` as a codec snapshot, atomically: a temporary file,
    fsynced, renamed over `path`, the directory fsynced. O(what the job holds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        f.write(dump_snapshot(job))
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def lock_state(path: Path, name: str) -> int:
    """An exclusive lock on `path` (on `<path>.lock`, held while the descriptor
    returned is open; the system drops it when the process dies): two processes of
    one producer would number different records alike."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"producer {name!r} is running already ({path} is locked by another process)"
        ) from None
    return fd


def load_state(path: Path, net: Network, name: str) -> ProducerJob | None:
    """The job producer `name` saved at `path`, or None where there is no file; a
    `ValueError` naming the fault where it is not that producer's of this network."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        job = load_snapshot(blob)
    except SnapshotError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(job, ProducerJob) or job.name != name:
        raise ValueError(f"{path} is not the state file of producer {name!r}: give --state")
    if job.job.net != net.with_producers():
        raise ValueError(
            f"{path} was written with another network file than this one: run producer "
            f"{name!r} with the file its site runs with"
        )
    return job


class LinkedQuenchingProducer:
    """`ProducerJob` over Kafka, restartable: the input's lines, the site's link
    topic read as it goes, the records written to the site's cluster. Use as a
    context manager; `close(wait_s)` waits up to that long for interest in what is
    held back, then hands the rest to the site.

    Each step goes: read (lines, link records), step the job, save the job to the
    state file (the step's records in it, as not acknowledged yet), produce them,
    flush (Kafka acknowledges them), forget them. A producer killed anywhere in
    that goes on from the state file under the same name: the input from the line
    it had reached (the lines before it checked to be the same), the link topic
    from the offset it had applied, and first the records it had saved and not
    seen acknowledged, sent again with the same link numbers (the site applies each
    number once); a step it had not saved made nothing that reached Kafka, and is
    made again. `clients` and `clock` are for tests (a producer and a consumer;
    the time, ms, or None for no ticks)."""

    def __init__(
        self,
        net: Network,
        name: str,
        options: Mapping[str, str] | None = None,
        topics: Topics | None = None,
        *,
        state: Path | None = None,
        clients: tuple[Any, Any] | None = None,
        clock: Callable[[], int | None] | None = None,
    ) -> None:
        self.state = Path(state) if state is not None else default_state_path(name)
        self._lock = lock_state(self.state, name)
        self._consumer: Any = None
        self._saved_at = self._saving = 0.0  # when the last save ended, and its time (s)
        try:
            loaded = load_state(self.state, net, name)
            self.restarted = loaded is not None
            self.job = loaded if loaded is not None else ProducerJob(net, name, topics)
            self.clock = clock if clock is not None else lambda: int(time.time() * 1000)
            self._producer, self._consumer = clients or self._clients(options)
            self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> None:
        """Check the link topics against the state, read on where it was, and send
        what a killed run saved and may not have sent."""
        from confluent_kafka import TopicPartition

        name, inbound, outbound = self.job.name, self.job.inbound, self.job.outbound
        meta = self._consumer.list_topics(timeout=10).topics
        missing = [t for t in (inbound, outbound) if t not in meta]
        if missing:
            raise ValueError(
                f"no topic {missing[0]!r} at {self.job.bootstrap}: is the job of site "
                f"{self.job.site!r} (tsm run --network) running with this network file?"
            )
        _, written = self._consumer.get_watermark_offsets(TopicPartition(outbound, 0), timeout=10)
        if not self.restarted and written:
            raise ValueError(
                f"producer {name!r} has written to its link already and has no state "
                f"file {self.state}: give --state where it is (without it the name "
                "cannot go on; a new producer needs a new name)"
            )
        if written < self.job.acknowledged_count:
            raise ValueError(
                f"{self.state} says producer {name!r} had {self.job.acknowledged_count} "
                f"records acknowledged on {outbound}, which holds {written}: it is the "
                "state of another run (delete it to start afresh)"
            )
        self._consumer.assign([TopicPartition(inbound, 0, self.job.link_offset)])
        self._send()

    def _clients(self, options: Mapping[str, str] | None) -> tuple[Any, Any]:
        from confluent_kafka import Consumer

        from connectors.producer import Producer

        bootstrap = self.job.bootstrap
        consumer = Consumer(
            confluent_config(
                bootstrap,
                options,
                required={"group.id": f"tsm-quench-{self.job.name}", "enable.auto.commit": False},
            )
        )
        return Producer(confluent_config(bootstrap, options)), consumer

    def __enter__(self) -> LinkedQuenchingProducer:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            if self._consumer is not None:
                self._consumer.close()
        finally:
            os.close(self._lock)

    def send_lines(
        self,
        lines: Iterable[bytes],
        every: int = 200,
        saving_at_most: float = 0.2,
        idle_step_s: float | None = None,
    ) -> None:
        """Step over the lines after those the state file says were read (blank ones
        counted, not sent), then end the input. A step takes at least `every` lines,
        and more while they come faster than its save allows: the next step waits
        until saving has taken at most `saving_at_most` of the time (a save costs
        O(what the producer holds), so a large one steps less often).

        A reader thread takes the lines into a bounded queue (`_LineReader`), so a
        live input that pauses stalls nobody: every `idle_step_s` (default half the
        network's `idle_ms`, as a site's ticks) the loop steps on what it has, even
        no line, reading the site's interest, sending a clock tick (the idle rule
        moves its watermark on) and catching up what that interest wants. Lines
        the reader has taken and no step has are not in the state file: a restart
        reads them again."""
        if self.job.ended:
            for line in self.job.resume(lines):
                if line.strip():
                    self.job.step([line])  # (refused: the input was ended; it says so)
            return
        if idle_step_s is None:
            idle_step_s = max(self.job.job.net.idle_ms / 2000, 0.005)
        wait = 1 / saving_at_most - 1
        chunk: list[bytes] = []
        stepped = time.monotonic()
        with _LineReader(lambda: self.job.resume(lines), capacity=4 * every) as reader:
            while True:
                saved = self._saved_at + wait * self._saving
                due = max(saved, stepped + idle_step_s)
                ended = reader.take(chunk, every, timeout=max(0.0, due - time.monotonic()))
                if ended:
                    break
                now = time.monotonic()
                if now >= saved and (len(chunk) >= every or now >= stepped + idle_step_s):
                    self._step(chunk)
                    chunk = []
                    stepped = time.monotonic()
        self._step(chunk)
        self.job.end()
        self._commit()

    def _step(self, lines: list[bytes], timeout: float = 0.0) -> None:
        messages = self._consumer.consume(1000, timeout=timeout)
        link = [(m.offset(), m.key(), m.value()) for m in messages if m.error() is None]
        self.job.step(lines, link, self.clock())
        self._commit()

    def _commit(self) -> None:
        """Save the job (its records not acknowledged yet in it), then send them."""
        started = time.monotonic()
        save_state(self.state, self.job)
        self._saved_at = time.monotonic()
        self._saving = self._saved_at - started
        self._send()

    def _send(self) -> None:
        out = self.job.unacknowledged
        if not (out.links or out.dead_letters):
            return
        deadletter = self.job.site_topics.topics.deadletter
        self._producer.produce_many(
            [(self.job.outbound, k, v) for k, v in out.links]
            + [(deadletter, k, v) for k, v in out.dead_letters]
        )
        self._producer.flush()
        self.job.acknowledged()

    def close(self, wait_s: float = 0.0) -> ProducerCounts:
        """Answer the site's interest for up to `wait_s` (until its end, if sooner);
        hand the rest over and end the link (once: a closed producer only sends
        again what it had not seen acknowledged); the counts."""
        deadline = time.monotonic() + wait_s
        while not self.job.done and time.monotonic() < deadline:
            self._step([], timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        if not self.job.closed:
            self.job.close()
            self._commit()
            save_state(self.state, self.job)  # (acknowledged: run again, it sends nothing)
        return self.job.counts
