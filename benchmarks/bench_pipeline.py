"""`tsm bench pipeline`: the job against the platform's ceiling and Spark's own join.

On one embedded broker and one local Spark session, for each size of live
subscriptions, the contenders read the same topics and write to Kafka the same
way (`connectors.outlet`: the operator's contenders from the operator, as
the job does in its default at-least-once mode, the native join through the
foreachBatch sink):

- `product`: the job (`streaming.job.matched_stream`);
- `no-op`: the job's source, decode stage and `transformWithStateInPandas` shape,
  with a processor that forwards each profile and keeps no state: the
  ceiling of this platform;
- `output-only`: the no-op's pipeline, whose processor writes for each profile
  the records the product wrote for it (read back from the product's output
  topic, run before it), matching nothing: the ceiling of this platform for
  the product's output, tens of records per profile here;
- `native-join`: Spark's stream-stream inner join of subscriptions and
  profiles (watermarks on both sides) on `overlaps` written as range
  conditions, `sub.lo <= prof.hi AND prof.lo <= sub.hi` per attribute, plus
  the validity intersection; decoding in Spark SQL.

The workload is the uniform box workload without its `kind` attribute
(purely numeric, 4 dimensions), every subscription long-lived. Each
contender first loads the subscriptions (Trigger.AvailableNow, not timed),
then processes a fixed backlog of profiles from its checkpoint (AvailableNow
again, in micro-batches of `Plan.batch` profiles), then, in the full run, a
trickle of profiles with the query running, for produce → match latency
(Kafka CreateTime of the profile vs of its first output record).

Throughput is rows / time in batches over the backlog's batches after the
first: the first batch of a started query also pays the query's start
(planning, loading the state store, cold Python workers and caches), which
is a restart cost, not a rate; it is reported apart (`first batch s`). The
native join is too slow for the backlog at large sizes: it gets batches of
about `NATIVE_PAIRS` subscription × profile pairs (so that its per-batch
fixed cost is as small a share as the others'), and a time budget; its rate
is over the batches it finished in the budget. The `match` pairs of the
product and of the native join are compared on the profiles both processed:
they must be the same set. Each contender's output is read and its topic
emptied after its backlog: the embedded broker rewrites all it holds after
writes, and the product writes tens of records per profile, which would tax
the contenders after it. A phase over its time budget is stopped between
batches and reported as partial, never hidden.
"""

from __future__ import annotations

import json
import logging
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

from benchmarks.report import DOCS_DIR, RESULTS_DIR
from connectors.config import Topics

log = logging.getLogger(__name__)

DEFAULT_JSON = RESULTS_DIR / "pipeline.json"
DOCS_JSON = DOCS_DIR / "pipeline.json"
SEED = 0
CONTENDERS = ("product", "output-only", "no-op", "native-join")


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    profiles: int  # the backlog for throughput
    batch: int  # profiles per micro-batch of the backlog (the native join: fewer, see below)
    trickle_per_s: float  # latency phase: profiles per second (0: no latency phase)
    trickle_s: float
    budget_s: float  # per phase and contender (loading: LOAD_BUDGETS times this)
    steady: int = 0  # the product's steady phase: profiles after all the others (≤ profiles)


QUICK = Plan((1_000,), 300, 100, 0.0, 0.0, 240.0, steady=200)
FULL = Plan((10_000, 100_000), 20_000, 5_000, 10.0, 15.0, 600.0, steady=20_000)
LOAD_BUDGETS = 3
# The native join's cost is about linear in subscriptions × profiles of a batch:
# its batches hold about this many pairs (a minute or so here), at most `Plan.batch`.
NATIVE_PAIRS = 4_000_000


# The workload is one unsharded space: the product runs with the job's setting for
# that (streaming/config.py), one state partition, which keeps the space's batches
# on one Python worker and its cached matcher (with 2 they move between two workers,
# and a worker's first batch of the space rebuilds the matcher from its snapshot);
# the no-op and the output-only have the same operator shape, the native join Spark's
# 2 (its join runs on both cores).
SHUFFLE_PARTITIONS = {"product": 1, "output-only": 1, "no-op": 1, "native-join": 2}


def batch_rows(plan: Plan, name: str, n: int) -> int:
    """Profiles per backlog micro-batch of contender `name` at `n` subscriptions."""
    if name == "native-join":
        return max(10, min(plan.batch, NATIVE_PAIRS // max(n, 1)))
    return plan.batch


_STARTED = time.monotonic()
STOP_MARK = "tsm bench: stopped (budget or enough rows) before batch"


def _log(message: str) -> None:
    """A progress line, with the seconds since the benchmark started."""
    log.info("[%7.1fs] %s", time.monotonic() - _STARTED, message)


# -- workload -------------------------------------------------------------------------------


def workload(n_subs: int, n_profiles: int) -> tuple[list[bytes], list[bytes]]:
    """The uniform workload's boxes without `kind`; subscriptions never expire."""
    from benchmarks.workloads import build, profile_record, subscription_record

    w = build("uniform", SEED, n_subs, n_profiles)
    for s in w.subscriptions:
        s.dnf = [[a for a in conj if a[0] != "kind"] for conj in s.dnf or []]
    for p in w.profiles:
        if p.attrs is not None:
            p.attrs.pop("kind", None)
    subs = [json.dumps(subscription_record(w.space, s)).encode() for s in w.subscriptions]
    profiles = [json.dumps(profile_record(w.space, p)).encode() for p in w.profiles]
    return subs, profiles


def later(
    profiles: list[bytes], n: int, prefix: str, start: int, gap_ms: int | None = None
) -> list[bytes]:
    """`n` more profiles: copies of the first ones with new ids, the first at `start`,
    `gap_ms` apart (or as far apart as the originals), each valid as long as its original."""
    first = json.loads(profiles[0])["ts"]
    out = []
    for i in range(n):
        record = json.loads(profiles[i % len(profiles)])
        ts = start + i * gap_ms if gap_ms is not None else start + record["ts"] - first
        shift = ts - record["ts"]
        record |= {"id": f"{prefix}{i}", "ts": ts, "valid_from": ts}
        record["valid_to"] += shift
        out.append(json.dumps(record).encode())
    return out


def trickle(profiles: list[bytes], n: int, prefix: str) -> list[bytes]:
    """`n` more profiles for the latency phase, 1 ms apart after the backlog in time."""
    return later(profiles, n, prefix, json.loads(profiles[-1])["ts"] + 1000, gap_ms=1)


# -- contenders -----------------------------------------------------------------------------


class ForwardProcessor(StatefulProcessor):
    """The no-op: forwards each profile row unchanged, keeps no state; its output
    goes where the job's does (`connectors.outlet.pack`, `direct`: see
    `streaming.job.direct_output`)."""

    def __init__(self, out_topic: str, direct: dict[str, object] | None) -> None:
        self.out_topic, self.direct = out_topic, direct

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        from connectors.outlet import pack

        frames = [frame[frame["kord"] == 1] for frame in rows]
        values = [v for f in frames for v in f["value"].tolist()]
        return pack(self.out_topic, [(None, v) for v in values], self.direct)

    def close(self) -> None:
        pass


class OutputOnlyProcessor(StatefulProcessor):
    """The output-only: writes for each profile the records the product wrote for it
    (`save_output`), as the product does (`outlet`, while it works), and keeps no
    state. A profile's records are one pickle in a file read through `mmap`, found
    by the profile's Kafka partition and offset in `index` (-> file offset, length):
    a profile is not even decoded."""

    def __init__(
        self,
        out_topic: str,
        path: str,
        index: dict[tuple[int, int], tuple[int, int]],
        direct: dict[str, object] | None,
    ) -> None:
        self.out_topic, self.path, self.index, self.direct = out_topic, path, index, direct

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        import mmap
        import pickle

        from connectors.outlet import outlet

        packer = outlet(self.out_topic, self.direct)
        frames = list(rows)  # (read whole, as the other processors read theirs)
        if self.index:
            with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                for frame in frames:
                    profiles = frame[frame["kord"] == 1]
                    parts, offsets = profiles["part"].tolist(), profiles["off"].tolist()
                    for place in zip(parts, offsets, strict=True):
                        at = self.index.get(place)
                        if at is not None:
                            yield from packer.add(pickle.loads(m[at[0] : at[0] + at[1]]))
        yield from packer.flush()

    def close(self) -> None:
        pass


def save_output(
    records: dict[str, list[tuple[bytes, bytes]]],
    places: dict[str, tuple[int, int]],
    path: Path,
) -> None:
    """The product's records per profile id, for the output-only: one pickle per
    profile in `path`, and their index in `path.index`, by the profile's place
    (Kafka partition, offset: `places`) -> file offset, length."""
    import pickle

    index = {}
    with path.open("wb") as f:
        for pid, pairs in records.items():
            blob = pickle.dumps(pairs, protocol=pickle.HIGHEST_PROTOCOL)
            index[places[pid]] = (f.tell(), len(blob))
            f.write(blob)
    _index_path(path).write_bytes(pickle.dumps(index))


def _index_path(path: Path) -> Path:
    return path.with_name(path.name + ".index")


def output_path(config: Any) -> Path:
    """Where the output-only's records are (next to its checkpoint)."""
    return Path(config.checkpoint + ".records")


def _operator_stream(spark: SparkSession, config: Any, processor: StatefulProcessor) -> DataFrame:
    """The job's source, decode stage, watermark and operator shape, around `processor`."""
    from connectors.kafka_source import read_stream
    from streaming.config import build_sharding
    from streaming.decode_stage import DECODED_DDL, INPUT_COLUMNS, WATERMARK_COLUMN, DecodeStage
    from streaming.processor import OUTPUT_DDL

    topics = config.topics
    raw = read_stream(
        spark,
        config.bootstrap,
        [topics.subscriptions, topics.profiles],
        max_records_per_trigger=config.max_records_per_trigger,
        idle_ms=config.idle_ms,
    )
    decoded = raw.select(*INPUT_COLUMNS, WATERMARK_COLUMN).mapInArrow(
        DecodeStage(topics, build_sharding({})), DECODED_DDL
    )
    keyed = decoded.withWatermark("ets", "0 milliseconds").drop("ets")
    return keyed.groupBy("skey").transformWithStateInPandas(
        processor, OUTPUT_DDL, outputMode="Append", timeMode="EventTime"
    )


def noop_stream(spark: SparkSession, config: Any, metrics: Any) -> DataFrame:
    """The no-op's pipeline: `ForwardProcessor` in the job's operator shape."""
    from streaming.job import direct_output

    return _operator_stream(
        spark, config, ForwardProcessor(config.topics.matches, direct_output(config))
    )


def output_only_stream(spark: SparkSession, config: Any, metrics: Any) -> DataFrame:
    """The no-op's pipeline around `OutputOnlyProcessor`, with the product's records
    once `save_output` has written them (before, it writes nothing)."""
    import pickle

    path = output_path(config)
    index_path = _index_path(path)
    index = pickle.loads(index_path.read_bytes()) if index_path.exists() else {}
    from streaming.job import direct_output

    processor = OutputOnlyProcessor(config.topics.matches, str(path), index, direct_output(config))
    return _operator_stream(spark, config, processor)


DIMS = ("x", "y", "z", "w")


def join_stream(spark: SparkSession, config: Any, metrics: Any) -> DataFrame:
    """Spark's stream-stream join on the `overlaps` range conditions (see the module doc)."""
    from pyspark.sql import functions as F

    from connectors.kafka_source import read_stream

    def side(topic: str) -> DataFrame:
        raw = read_stream(
            spark, config.bootstrap, [topic], max_records_per_trigger=config.max_records_per_trigger
        )
        return raw.select(F.col("value").cast("string").alias("v"))

    def field(path: str) -> Any:
        return F.get_json_object("v", path)

    def millis(path: str) -> Any:
        return field(path).cast("long")

    subs = side(config.topics.subscriptions).select(
        field("$.id").alias("sid"),
        field("$.space").alias("sspace"),
        field("$.subscriber").alias("subscriber"),
        F.timestamp_millis(millis("$.ts")).alias("sets"),
        millis("$.valid_from").alias("sfrom"),
        F.coalesce(millis("$.valid_to"), F.lit(2**62)).alias("sto"),
        *[
            F.regexp_extract(field("$.where"), rf"\b{d} BETWEEN (\S+) AND (\S+)", g)
            .cast("double")
            .alias(f"s{d}{g}")
            for d in DIMS
            for g in (1, 2)
        ],
    )

    def bound(d: str, i: int) -> Any:  # an interval's end, or the point itself
        return F.coalesce(field(f"$.attrs.{d}[{i}]"), field(f"$.attrs.{d}")).cast("double")

    profiles = side(config.topics.profiles).select(
        field("$.id").alias("pid"),
        field("$.space").alias("pspace"),
        F.timestamp_millis(millis("$.ts")).alias("pets"),
        millis("$.valid_from").alias("pfrom"),
        millis("$.valid_to").alias("pto"),
        *[bound(d, i).alias(f"p{d}{i + 1}") for d in DIMS for i in (0, 1)],
    )
    subs = subs.withWatermark("sets", "10 seconds")
    profiles = profiles.withWatermark("pets", "10 seconds")
    condition = (F.col("sspace") == F.col("pspace")) & (F.col("sfrom") <= F.col("pto"))
    condition &= F.col("pfrom") <= F.col("sto")
    for d in DIMS:
        condition &= (F.col(f"s{d}1") <= F.col(f"p{d}2")) & (F.col(f"p{d}1") <= F.col(f"s{d}2"))
    pairs = subs.join(profiles, condition, "inner")
    value = F.to_json(
        F.struct(F.col("sid").alias("subscription_id"), F.col("pid").alias("profile_id"))
    )
    return pairs.select(
        F.lit(config.topics.matches).alias("topic"),
        F.col("subscriber").cast("binary").alias("key"),
        value.cast("binary").alias("value"),
    )


def product_stream(spark: SparkSession, config: Any, metrics: Any) -> DataFrame:
    from streaming import job

    return job.matched_stream(spark, config, metrics)


STREAMS = {
    "product": product_stream,
    "output-only": output_only_stream,
    "no-op": noop_stream,
    "native-join": join_stream,
}


# -- running a phase ------------------------------------------------------------------------


@dataclass
class Phase:
    """What one run of a contender's query read, and how long its batches took."""

    rows: int = 0
    batches: int = 0
    batch_s: float = 0.0
    wall_s: float = 0.0
    complete: bool = True
    batch_rows: list[int] = field(default_factory=list)  # per batch with input, in order
    batch_secs: list[float] = field(default_factory=list)
    # the product's cached matcher per batch with input: hit, catch-up or miss (rebuilt)
    batch_caches: list[str] = field(default_factory=list)
    end_offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # source: after it

    def add(self, progress: dict) -> None:
        seconds = progress["durationMs"]["triggerExecution"] / 1000
        self.rows += progress["numInputRows"]
        self.batches += 1
        self.batch_s += seconds
        self.batch_rows.append(progress["numInputRows"])
        self.batch_secs.append(seconds)
        from connectors.offsets import positions

        for source in progress["sources"]:
            end = source.get("endOffset")
            end = json.loads(end) if isinstance(end, str) else end or {}
            self.end_offsets.update(positions(end))

    def rate(self) -> tuple[float | None, int]:
        """Rows per second over the batches after the first (over all if there is only
        one), and how many batches that is."""
        rows, secs = self.batch_rows[1:], self.batch_secs[1:]
        if not rows:
            rows, secs = self.batch_rows, self.batch_secs
        return (round(sum(rows) / sum(secs), 1) if sum(secs) else None), len(rows)


def run_phase(
    spark: SparkSession,
    name: str,
    config: Any,
    *,
    available_now: bool,
    until_rows: int,
    budget_s: float,
    on_start: Callable[[], None] | None = None,
) -> Phase:
    """Run the contender from its checkpoint until it has read `until_rows` rows (with
    AvailableNow: until it ends), or its budget is spent; the query is stopped between
    batches. `on_start` is called once the query runs."""
    from pyspark.errors import StreamingQueryException

    from streaming import job
    from streaming.listener import Counters

    # Back-to-back batches leave no idle moment to stop in: once told to stop, the
    # next batch's write fails before any of its tasks ran (as `tsm run` stops).
    stopping, sink = threading.Event(), job.kafka_writer(config)
    metrics = spark.sparkContext.accumulator({}, Counters())
    caches: dict[int, str] = {}  # batch id -> the product's cache outcome

    def write(df: DataFrame, batch_id: int) -> None:
        if stopping.is_set():
            raise RuntimeError(f"{STOP_MARK} {batch_id}")
        before = dict(metrics.value)
        sink(df, batch_id)  # (runs the batch's tasks: their counts are in after it)
        caches[batch_id] = _cache_outcome(before, metrics.value)

    # (the partition count of a query's state is fixed by its first run's setting)
    spark.conf.set("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
    stream = STREAMS[name](spark, config, metrics)
    trigger = {"availableNow": True} if available_now else {"processingTime": "0 seconds"}
    started = time.monotonic()
    query = (
        stream.writeStream.queryName(config.query_name)
        .foreachBatch(write)
        .option("checkpointLocation", config.checkpoint)
        .trigger(**trigger)
        .start()
    )
    if on_start is not None:
        on_start()
    phase, seen = Phase(), set()

    def collect() -> None:
        for p in query.recentProgress:
            if p["batchId"] not in seen and p["numInputRows"]:
                seen.add(p["batchId"])
                phase.add(p)
                cache = caches.get(p["batchId"], "")
                if cache:
                    phase.batch_caches.append(cache)
                _log(
                    f"  {name}: batch {p['batchId']}: {p['numInputRows']:,} rows "
                    f"in {phase.batch_secs[-1]:.1f}s" + (f" (cache {cache})" if cache else "")
                )

    while query.isActive and (available_now or phase.rows < until_rows):
        if time.monotonic() - started > budget_s:
            phase.complete = False
            break
        try:
            query.awaitTermination(0.2)
        except StreamingQueryException as exc:
            raise RuntimeError(f"{name}: the query failed: {exc}") from None
        collect()
    stopping.set()
    while query.isActive and query.status["isTriggerActive"]:
        time.sleep(0.05)
    collect()  # the batch that was running when the budget ran out counts too
    query.stop()
    failure = query.exception()
    if failure is not None and STOP_MARK not in str(failure):
        raise RuntimeError(f"{name}: the query failed: {failure}")
    phase.wall_s = round(time.monotonic() - started, 2)
    phase.complete = phase.complete and phase.rows >= until_rows
    return phase


def _cache_outcome(before: dict[str, int], after: dict[str, int]) -> str:
    """What the product's processor did with its cached matcher in one batch (from
    its counters' change; empty for the other contenders, which count nothing)."""
    done = {n: after.get(f"cache_{n}", 0) - before.get(f"cache_{n}", 0) for n in _CACHE}
    return ", ".join(_CACHE[n] + (f" x{c}" if c > 1 else "") for n, c in done.items() if c)


_CACHE = {"hits": "hit", "catch_ups": "catch-up", "misses": "miss"}


# -- one size -------------------------------------------------------------------------------


@dataclass
class Result:
    size: int
    contender: str
    load: Phase
    backlog: Phase | None = None
    profiles_per_s: float | None = None
    rate_batches: int = 0  # the backlog batches profiles_per_s is over
    first_batch_s: float | None = None  # the backlog's first batch (it starts the query)
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_samples: int = 0
    pairs: int | None = None
    steady: Phase | None = None  # the product only: its steady phase
    steady_profiles_per_s: float | None = None
    steady_batches: int = 0


@dataclass
class Size:
    """The topics of one size and the contenders' settings."""

    n: int
    inputs: dict[str, str]
    configs: dict[str, Any]

    def topics(self) -> list[str]:
        outputs = [(c.topics.matches, c.topics.deadletter) for c in self.configs.values()]
        return [*self.inputs.values(), *(t for pair in outputs for t in pair)]


def prepare(bootstrap: str, work: Path, n: int, plan: Plan) -> Size:
    from connectors.admin import create_topics
    from streaming.config import JobConfig

    inputs = {"subscriptions": f"bench.subs.{n}", "profiles": f"bench.profiles.{n}"}
    create_topics(bootstrap, dict.fromkeys(inputs.values(), 2))
    configs = {}
    for name in CONTENDERS:
        out = {"matches": f"bench.out.{name}.{n}", "deadletter": f"bench.dead.{name}.{n}"}
        create_topics(bootstrap, {out["matches"]: 2, out["deadletter"]: 1})
        configs[name] = JobConfig(
            bootstrap=bootstrap,
            max_records_per_trigger=batch_rows(plan, name, n),
            checkpoint=str(work / f"{name}-{n}"),
            query_name=f"bench-{name}-{n}",
            topics=Topics(**inputs, **out),
            shuffle_partitions=SHUFFLE_PARTITIONS[name],
        )
    return Size(n, inputs, configs)


def run_size(spark: SparkSession, bootstrap: str, work: Path, plan: Plan, n: int) -> dict:
    """Load, backlog and (full run) latency phases of every contender at `n` subscriptions."""
    from connectors.admin import create_topics, delete_topics
    from connectors.produce import produce_lines

    _log(f"{n:,} subscriptions: generating the workload")
    subs, profiles = workload(n, plan.profiles)
    size = prepare(bootstrap, work, n, plan)
    produce_lines(bootstrap, size.inputs["subscriptions"], subs)
    results = {}
    for name in CONTENDERS:
        _log(f"{n:,}: {name}: loading the subscriptions")
        # One batch for all the subscriptions (the job's default limit is 100k).
        load = run_phase(
            spark,
            name,
            replace(size.configs[name], max_records_per_trigger=max(n, 100_000)),
            available_now=True,
            until_rows=n,
            budget_s=plan.budget_s * LOAD_BUDGETS,
        )
        results[name] = Result(n, name, load)
        _log(
            f"{n:,}: {name}: loaded in {load.wall_s:.1f}s"
            + ("" if load.complete else " (over budget)")
        )
    produce_lines(bootstrap, size.inputs["profiles"], profiles)
    pairs: dict[str, tuple[set[tuple[str, str]], dict[str, int]]] = {}
    for name, r in results.items():
        if not r.load.complete:
            continue
        batch = size.configs[name].max_records_per_trigger
        _log(f"{n:,}: {name}: {plan.profiles:,} profiles (AvailableNow, {batch:,} a batch)")
        r.backlog = run_phase(
            spark,
            name,
            size.configs[name],
            available_now=True,
            until_rows=plan.profiles,
            budget_s=plan.budget_s,
        )
        r.profiles_per_s, r.rate_batches = r.backlog.rate()
        r.first_batch_s = r.backlog.batch_secs[0] if r.backlog.batch_secs else None
        _log(
            f"{n:,}: {name}: {r.profiles_per_s} profiles/s over {r.rate_batches} batches "
            f"({r.backlog.rows:,} rows read)"
        )
        # Read its output and empty the topic: the broker rewrites all it holds after
        # writes, and a contender must not pay for what the ones before it wrote.
        keep: dict[str, list[tuple[bytes, bytes]]] | None = {} if name == "product" else None
        pairs[name] = output_pairs(bootstrap, size, since={}, names=(name,), keep=keep)[name]
        if keep is not None:  # the output-only writes the product's records
            topic = size.inputs["profiles"]
            places = profile_places(bootstrap, topic, r.backlog.end_offsets.get(topic, {}))
            save_output(keep, places, output_path(size.configs["output-only"]))
        # (A new name for its later phases: a topic deleted and made again under the
        # name would fail the idempotent producer the job keeps, `DirectWriter`.)
        config = size.configs[name]
        delete_topics(bootstrap, [config.topics.matches])
        later = replace(config.topics, matches=config.topics.matches + ".later")
        create_topics(bootstrap, {later.matches: 2})
        size.configs[name] = replace(config, topics=later)
    both = processed_ids(bootstrap, size, [results[c] for c in ("product", "native-join")])
    for name in ("product", "output-only", "native-join"):
        results[name].pairs = len(pairs[name][0]) if name in pairs else None
    check = agreement(results, {k: v[0] for k, v in pairs.items()}, both)
    _log(f"{n:,}: agreement product vs native join: {check or 'same pairs'}")
    if plan.trickle_per_s:
        latency(spark, bootstrap, size, profiles, results, plan)
    if plan.steady:
        steady(spark, bootstrap, size, profiles, results["product"], plan)
    # The broker rewrites all it holds after writes: what this size wrote must not
    # tax the next one's contenders.
    delete_topics(bootstrap, size.topics())
    return {
        "size": n,
        "agreement": check or "same pairs",
        "rows": [_row(r) for r in results.values()],
    }


PRODUCT_OUTPUT = ("product", "output-only")  # contenders that write the product's records


def output_pairs(
    bootstrap: str,
    size: Size,
    since: dict,
    names: tuple[str, ...] = CONTENDERS,
    keep: dict[str, list[tuple[bytes, bytes]]] | None = None,
) -> dict[str, tuple[set[tuple[str, str]], dict[str, int]]]:
    """Per contender of `names`: the (subscription, profile) pairs of its output, and the
    first arrival time (Kafka ms) of an output for each profile. `keep` gets the
    product's records per profile id, `(key, value)` (the key is the subscriber)."""
    from streaming.demo import OutputReader

    topics = {size.configs[name].topics.matches: name for name in names}
    reader = OutputReader(bootstrap, list(topics))
    reader.next.update(since)
    try:
        records = reader.poll()
        since.update(reader.next)
    finally:
        reader.close()
    out: dict[str, tuple[set, dict]] = {name: (set(), {}) for name in names}
    for topic, value, stamp in records:
        name = topics[topic]
        r = json.loads(value)
        if keep is not None and name == "product":
            keep.setdefault(r["profile_id"], []).append((r["subscriber"].encode(), value))
        if name in PRODUCT_OUTPUT and r["event"] != "match":
            continue
        pid = r["id"] if name == "no-op" else r["profile_id"]
        if name != "no-op":
            out[name][0].add((r["subscription_id"], pid))
        first = out[name][1]
        first[pid] = min(first.get(pid, stamp), stamp)
    return out


def processed_ids(bootstrap: str, size: Size, results: list[Result]) -> set[str] | None:
    """The ids of the backlog profiles that every one of `results` read (by the source's
    end offsets), or None when all of them read the whole backlog."""
    if all(r.backlog and r.backlog.complete for r in results):
        return None
    topic = size.inputs["profiles"]
    ends: dict[str, int] = {}
    for r in results:
        read = r.backlog.end_offsets.get(topic, {}) if r.backlog else {}
        for part in set(ends) | set(read):
            ends[part] = min(ends.get(part, 2**62), read.get(part, 0))
    return set(profile_places(bootstrap, topic, ends))


def profile_places(bootstrap: str, topic: str, ends: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Profile id -> (partition, offset) of the profiles in `topic` before `ends`
    (partition -> offset, as a source's end offsets)."""
    from connectors.config import confluent_config
    from connectors.kafka_source import OffsetRange, read_range

    config = confluent_config(
        bootstrap, required={"group.id": "tsm-bench", "enable.auto.commit": False}
    )
    places = {}
    for part, end in ends.items():
        if end > 0:
            for batch in read_range(
                config, OffsetRange(topic, int(part), 0, end), poll_timeout=30.0
            ):
                values, offsets = batch.column("value").to_pylist(), batch.column("offset")
                for v, off in zip(values, offsets.to_pylist(), strict=True):
                    places[json.loads(v)["id"]] = (int(part), off)
    return places


def agreement(
    results: dict[str, Result], pairs: dict[str, set], profiles: set[str] | None = None
) -> str | None:
    """None when the product and the native join found the same pairs (on `profiles`,
    the ones both read, when given), else what differs."""
    if not all(results[n].backlog for n in ("product", "native-join")):
        return "not compared: a contender did not run the backlog"
    product, native = pairs["product"], pairs["native-join"]
    if profiles is not None:
        product = {p for p in product if p[1] in profiles}
        native = {p for p in native if p[1] in profiles}
    if not product:
        return "no pairs at all"
    where = "" if profiles is None else f" (on the {len(profiles):,} profiles both read)"
    if product == native:
        return None if profiles is None else f"same pairs{where}"
    return (
        f"DIFFERENT{where}: {len(product - native)} pairs only in the product, "
        f"{len(native - product)} only in the native join"
    )


def latency(
    spark: SparkSession,
    bootstrap: str,
    size: Size,
    profiles: list[bytes],
    results: dict,
    plan: Plan,
) -> None:
    """Each running contender gets a trickle of profiles; latency = first output − produce time."""
    from connectors.produce import produce_lines

    count = int(plan.trickle_per_s * plan.trickle_s)
    since: dict = {}
    output_pairs(bootstrap, size, since)  # skip what the backlog wrote
    for name, r in results.items():
        # (the output-only has no records for the trickle's profiles: nothing to time)
        if not (r.backlog and r.backlog.complete) or name == "output-only":
            continue
        # Catch up first with what the others' latency phases added to the topic.
        config = size.configs[name]
        run_phase(spark, name, config, available_now=True, until_rows=0, budget_s=plan.budget_s)
        output_pairs(bootstrap, size, since)
        lines = trickle(profiles, count, prefix=f"{name}-t")
        _log(f"{size.n:,}: {name}: latency, {count} profiles at {plan.trickle_per_s:g}/s")
        produced: dict[str, int] = {}

        def feed(lines: list[bytes] = lines, produced: dict[str, int] = produced) -> None:
            for line in lines:
                produced[json.loads(line)["id"]] = int(time.time() * 1000)
                produce_lines(bootstrap, size.inputs["profiles"], [line])
                time.sleep(1 / plan.trickle_per_s)

        feeder = threading.Thread(target=feed)
        run_phase(
            spark,
            name,
            config,
            available_now=False,
            until_rows=count,
            budget_s=plan.trickle_s + plan.budget_s,
            on_start=feeder.start,
        )
        feeder.join()
        arrivals = output_pairs(bootstrap, size, since)[name][1]
        waits = sorted(arrivals[p] - produced[p] for p in produced if p in arrivals)
        if waits:
            r.latency_p50_ms = statistics.median(waits)
            r.latency_p95_ms = waits[min(len(waits) - 1, int(0.95 * len(waits)))]
        r.latency_samples = len(waits)
        _log(f"{size.n:,}: {name}: latency p50 {r.latency_p50_ms} ms, p95 {r.latency_p95_ms} ms")


def steady(
    spark: SparkSession, bootstrap: str, size: Size, profiles: list[bytes], r: Result, plan: Plan
) -> None:
    """The product over `plan.steady` more profiles, as far apart as the backlog's, the
    first when the backlog's first expires (and after the latency phase's): each evicts
    one of the backlog's (an `unmatch` record per pair) and the change log is compacted
    now and then, as in a long-running stream of profiles valid for a while. The no-op
    keeps no state: its backlog rate is its rate here too."""
    from connectors.produce import produce_lines

    if not (r.backlog and r.backlog.complete):
        return
    first, last = json.loads(profiles[0]), json.loads(profiles[-1])
    start = max(first["valid_to"], last["ts"] + 2000 + int(plan.trickle_per_s * plan.trickle_s))
    lines = later(profiles, min(plan.steady, len(profiles)), "steady-", start)
    produce_lines(bootstrap, size.inputs["profiles"], lines)
    _log(f"{size.n:,}: product: steady, {len(lines):,} profiles that evict the backlog's")
    config = size.configs["product"]
    r.steady = run_phase(
        spark, "product", config, available_now=True, until_rows=len(lines), budget_s=plan.budget_s
    )
    r.steady_profiles_per_s, r.steady_batches = r.steady.rate()
    _log(f"{size.n:,}: product: steady {r.steady_profiles_per_s} profiles/s")


def _row(r: Result) -> dict:
    row = asdict(r)
    row["complete"] = r.load.complete and bool(r.backlog and r.backlog.complete)
    return row


# -- the run --------------------------------------------------------------------------------


def session() -> SparkSession:
    """A local[2] session with the job's settings, no UI."""
    from streaming import job
    from streaming.config import JobConfig

    return job.session(JobConfig(), "local[2]", "tsm bench pipeline", ui=False, log_level="ERROR")


def main(
    quick: bool = False, json_path: Path | None = None, sizes: tuple[int, ...] | None = None
) -> int:
    from connectors.broker import EmbeddedBroker

    plan = QUICK if quick else FULL
    if sizes:
        plan = replace(plan, sizes=sizes)
    json_path = json_path or DEFAULT_JSON
    started = time.monotonic()
    _log(f"plan: {plan}")
    sizes = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tsm-bench-") as work:
        _log(f"broker at {broker.bootstrap}; starting Spark")
        spark = session()
        try:
            for n in plan.sizes:
                sizes.append(run_size(spark, broker.bootstrap, Path(work), plan, n))
        finally:
            spark.stop()
    command = "tsm bench pipeline" + (" --quick" if quick else "")
    if json_path == DOCS_JSON:
        command += " --write-docs"
    elif json_path != DEFAULT_JSON:
        command += f" --json {json_path}"
    result = {
        "command": command,
        "plan": asdict(plan),
        "seed": SEED,
        "seconds": round(time.monotonic() - started, 1),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "sizes": sizes,
        "ratios": ratios(sizes),
    }
    print(table(result))
    write(result, json_path)
    _log(f"wrote {json_path}")
    return 1 if any(s["agreement"].startswith("DIFFERENT") for s in sizes) else 0


def ratios(sizes: list[dict]) -> list[dict]:
    """Product throughput over the no-op's and the native join's, per size, with the targets."""
    out = []
    for s in sizes:
        # A backlog cut by the budget still has a rate, over the batches it finished.
        rate = {r["contender"]: r["profiles_per_s"] for r in s["rows"] if r["load"]["complete"]}
        product = rate.get("product")
        row: dict[str, Any] = {"size": s["size"]}
        steady = next((r["steady_profiles_per_s"] for r in s["rows"] if r["steady"]), None)
        for name, value, target in (
            ("product/no-op", _ratio(product, rate.get("no-op")), 0.6),
            ("product/native-join", _ratio(product, rate.get("native-join")), 5.0),
            ("product/output-only", _ratio(product, rate.get("output-only")), None),
            ("output-only/no-op", _ratio(rate.get("output-only"), rate.get("no-op")), None),
            ("product steady/no-op", _ratio(steady, rate.get("no-op")), None),
        ):
            row[name] = None if value is None else round(value, 3)
            if target is not None:
                row[f"target {name}"] = target
                row[f"met {name}"] = None if value is None else value >= target
        out.append(row)
    return out


def _ratio(rate: float | None, other: float | None) -> float | None:
    return rate / other if rate and other else None


def _num(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.4g}{unit}"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def table(result: dict) -> str:
    lines = [
        "| subscriptions | contender | load s | first batch s | profiles/s (batches) "
        "| steady profiles/s (batches) | latency p50 / p95 ms | pairs | note |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in result["sizes"]:
        for r in s["rows"]:
            note = ""
            if not r["load"]["complete"]:
                note = "loading over budget"
            elif not r["complete"]:
                read = r["backlog"]["rows"] if r["backlog"] else 0
                note = f"budget: read {read:,} of {result['plan']['profiles']:,} profiles"
            lines.append(
                f"| {s['size']:,} | {r['contender']} | {r['load']['wall_s']:.1f} "
                f"| {_secs(r['first_batch_s'])} "
                f"| {_num(r['profiles_per_s'])} ({r['rate_batches']}) "
                + (
                    f"| {_num(r['steady_profiles_per_s'])} ({r['steady_batches']}) "
                    if r.get("steady")
                    else "| - "
                )
                + f"| {_num(r['latency_p50_ms'])} / {_num(r['latency_p95_ms'])} "
                f"| {_num(r['pairs'])} | {note} |"
            )
    lines += [
        "",
        "| subscriptions | product / no-op (target ≥ 0.6) "
        "| product / native join (target ≥ 5) | product / output-only | output-only / no-op "
        "| product steady / no-op | agreement |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s, q in zip(result["sizes"], result["ratios"], strict=True):
        cells = []
        for other in ("no-op", "native-join"):
            v, met = q[f"product/{other}"], q[f"met product/{other}"]
            cells.append("-" if v is None else f"{v:.2f} ({'met' if met else 'not met'})")
        more = [_num(q.get(k)) for k in ("product/output-only", "output-only/no-op")]
        steady = _num(q.get("product steady/no-op"))
        lines.append(
            f"| {s['size']:,} | {cells[0]} | {cells[1]} | {more[0]} | {more[1]} | {steady} "
            f"| {s['agreement']} |"
        )
    return "\n".join(lines)


def write(result: dict, json_path: Path) -> None:
    """JSON, a plot next to it, and this benchmark's section of README.md there."""
    out_dir = json_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    plot = plot_results(result, out_dir / f"{json_path.stem}.png")
    from benchmarks.report import update_section

    update_section(out_dir / "README.md", "pipeline", _section(result, json_path, plot))


def plot_results(result: dict, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in CONTENDERS:
        rows = [
            (s["size"], r) for s in result["sizes"] for r in s["rows"] if r["contender"] == name
        ]
        for ax, metric in zip(axes, ("profiles_per_s", "latency_p50_ms"), strict=True):
            pts = [(n, r[metric]) for n, r in rows if r[metric]]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name)
    for ax, title in zip(
        axes, ("throughput (profiles/s)", "produce → match latency p50 (ms)"), strict=True
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("live subscriptions")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("tsm bench pipeline (embedded broker, local[2])")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _section(result: dict, json_path: Path, plot: str) -> str:
    plan = result["plan"]
    return "\n".join(
        [
            "# Pipeline benchmark",
            "",
            "The job (`product`) against a no-op pipeline with the same source, decode stage,",
            "`transformWithStateInPandas` shape and Kafka output (the ceiling of this platform;",
            "the operator produces its records itself, as the job does at least once), and",
            "against Spark's stream-stream join of the same `overlaps` relation as range",
            "conditions (`native-join`), on the uniform workload without `kind` (4 numeric",
            "dimensions, long-lived subscriptions). profiles/s: a backlog of",
            f"{plan['profiles']:,} profiles with Trigger.AvailableNow in micro-batches of "
            f"{plan['batch']:,},",
            "rows / time in batches over the batches after the first (their count in",
            "parentheses); the first batch of the started query also pays its start (planning,",
            "state store load, cold workers and caches) and is shown apart (first batch s).",
            "The product, the output-only and the no-op run with one state partition, the job's",
            "setting for one unsharded space (`streaming/config.py`: it keeps the space's",
            "batches on one Python worker and its cached matcher), the native join with",
            "Spark's 2. What the product's",
            "processor did with its cached matcher in each batch (hit, catch-up from the change",
            "log, miss: rebuilt from the snapshot) is in the JSON (`batch_caches`).",
            "The native join gets batches of about "
            f"{NATIVE_PAIRS:,} subscription × profile pairs and a",
            f"budget of {plan['budget_s']:g} s: its rate is over the batches it finished.",
            "load s: wall time of loading the subscriptions (one batch, start-up included).",
            (
                "latency: Kafka CreateTime of a profile to its first output record, with the "
                f"query running and profiles arriving at {plan['trickle_per_s']:g}/s "
                "(not measured for a contender whose backlog was cut by the budget, nor for the "
                "output-only, which has no records for those profiles)."
                if plan["trickle_per_s"]
                else "latency: not measured by `--quick`."
            ),
            "The output-only runs the no-op's pipeline with a processor that writes, for each",
            "profile, the records the product wrote for it (read from the product's output",
            "topic after its backlog), and matches nothing: the ceiling of this platform for",
            "the product's output. The workload's profiles each match tens of subscriptions at",
            "100k (pairs / profiles), and each pair is a Kafka record of about 290 bytes,",
            "produced from the operator's Python worker (a `produce()` call each) to the broker;",
            "the no-op writes one record per profile. product / output-only is",
            "what matching costs on top of writing its result; output-only / no-op is what",
            "writing these records leaves of the no-op's rate (both within this machine's noise).",
            "The product's `match` pairs and the native join's pairs are compared in the same",
            "run, on the profiles both read; each contender's output topic is read and emptied",
            "after its backlog (the embedded broker rewrites all it holds after writes, so one",
            "contender's output would slow the next). Producers write zstd batches. Embedded",
            "broker, `local[2]`, on a shared machine: the load of other jobs changes every",
            "number here by a large factor.",
            "",
            "The backlog is new profiles only: each is valid for 60 s of event time, longer",
            "than the backlog spans, so none expires within it, and the processor's change log",
            "is not compacted into a new snapshot within it. A long-running stream of such",
            "profiles also evicts one profile for each new one (an `unmatch` record per pair:",
            "twice the output) and writes a snapshot every few batches. steady profiles/s is",
            f"that: the product over {plan.get('steady', 0):,} more profiles, as far apart as the",
            "backlog's, the first when the backlog's first expires, so that each evicts one of",
            "the backlog's (rate over the batches after the first, as above); product steady /",
            "no-op divides it by the no-op's backlog rate (the no-op keeps no state).",
            "",
            "Reproduce (from the repository root):",
            "",
            f"    {result['command']}",
            "",
            f"{result['seconds']} s, Python {result['machine']['python']} on "
            f"{result['machine']['platform']}. Raw numbers: `{json_path.name}`.",
            "",
            table(result),
            "",
            f"![{plot}]({plot})",
            "",
        ]
    )
