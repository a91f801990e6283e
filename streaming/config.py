"""Settings of the streaming job: `tsm.toml`, then command-line flags on top.

One flat table of job settings plus `[topics]` (topic names, CLI.md
defaults; four different ones), `[sharding.<space>]` (SEMANTICS §8 grid of
a hot space, ascending cuts, at most 1,024 cells) and `[kafka]` (client
options passed to every Kafka client as `kafka.<key>`):

    bootstrap = "localhost:9092"        # no default: --bootstrap or here
    checkpoint = "checkpoints/tsm"      # the query's checkpoint directory
    lateness_ms = 0                     # allowed lateness of event time (SEMANTICS §3)
    idle_ms = 10000                     # a drained partition stops holding the watermark
    trigger_interval = "0 seconds"      # Spark interval string; 0 = back to back
    max_records_per_trigger = 100000    # admission control per micro-batch
    exactly_once = false                # transactional sink (read_committed readers)
    source = "python"                   # "python" (Data Source API) or "native"
    shuffle_partitions = 2              # state store partitions; fixed by the checkpoint
    snapshot_every = 2000               # at least this many change-log entries per snapshot
    query_name = "tsm"
    tenant_topic = ""                   # e.g. "tenant.{tenant}.matches": a topic a tenant
    tenant_separator = ""               # tenant = subscriber, or its part before this

    [topics]
    subscriptions = "tsm.subscriptions"

    [sharding.vehicles]
    attribute = "lat"
    cuts = [-30.0, 0.0, 30.0]           # or width, cells (and origin): an even grid

    [kafka]
    security.protocol = "SASL_SSL"      # librdkafka's names; true/false, numbers as such

    [preload]                           # preloaded cells per space (`matcher.preload`)
    enabled = true
    budget_mib = 512                    # memory the cells of one space (or shard) hold at most
    attributes = ["lat", "lon"]         # the grid's attributes; default: chosen from the
                                        # live subscriptions

The watermark is the smallest, over the input partitions (every partition of
both topics), of the largest ts read from each, less `lateness_ms`; a batch
under `max_records_per_trigger` takes from each partition its records up to a
common time, so reading a backlog, or a partition that lags, makes no on-time
record late. A partition with nothing to read holds the watermark back for
`idle_ms` more (a producer between two records), then no longer (an idle one
would stall the watermark, and so the expiry of spaces that get no records);
its records from then on are late if they are behind the others by more than
the lateness. One that has never had a record holds nothing back; under
`--available-now` one that reached the run's end no longer waits. (With
`source = "native"`, Spark's Kafka connector, the watermark is Spark's own:
the largest ts seen in any partition, less the lateness.)

A sharded space's cells run on different shuffle partitions, so up to
`shuffle_partitions` of them at once: give it at least the number of cells
(and of cores) when the checkpoint is new; see DESIGN.md on shard cells.
Each partition's task takes whichever Python worker has been idle longest,
so with 2 partitions a key's batches move between two workers, each with
its own cached matcher: brought up to date from the change log when it is
behind, rebuilt from the snapshot and the log since the first time a worker
meets the key (at 100k subscriptions, 2-3 s to load the snapshot and up to
about as long again to replay the log: see `streaming.state.store`). A job with
one unsharded space loses nothing with `shuffle_partitions = 1`, which keeps
its key on one worker (pipeline benchmark workload at 100k: every batch a
cache hit).
With `tenant_topic`, each match record goes to its tenant's topic instead of
`matches` (`connectors.tenants`: the tenant is the record's subscriber, or its
part before the first `tenant_separator`; the template holds `{tenant}` once,
then a `.`, so that Kafka's prefixed ACLs keep tenants apart; README, "Tenants").
Dead letters stay in `deadletter`.

The cuts are fixed by the checkpoint too: `tsm run` refuses to start a
checkpoint that holds state under other `[sharding]` tables
(`streaming.checkpoint_guard`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from connectors.config import Topics
from matcher.preload import settings as preload_settings
from matcher.sharding import Sharding, ShardSpec
from matcher.times import MAX_LATENESS_MS
from streaming.placement import cell_names

SOURCES = ("python", "native")


class ConfigError(ValueError):
    """A `tsm.toml` that cannot be used; the message names the file and the setting."""


@dataclass(frozen=True)
class JobConfig:
    bootstrap: str | None = None
    checkpoint: str = "checkpoints/tsm"
    lateness_ms: int = 0
    idle_ms: int = 10_000
    trigger_interval: str = "0 seconds"
    max_records_per_trigger: int = 100_000
    exactly_once: bool = False
    source: str = "python"
    shuffle_partitions: int = 2
    snapshot_every: int = 2000
    query_name: str = "tsm"
    tenant_topic: str = ""
    tenant_separator: str = ""
    topics: Topics = field(default_factory=Topics)
    sharding: dict[str, dict[str, Any]] = field(default_factory=dict)
    kafka: dict[str, str] = field(default_factory=dict)
    preload: dict[str, Any] = field(default_factory=dict)  # `preload_settings.from_table`'s

    def with_overrides(self, **values: Any) -> JobConfig:
        """A copy with every non-None value of `values` set (command-line flags win)."""
        return self.validated(replace(self, **{k: v for k, v in values.items() if v is not None}))

    @property
    def kafka_options(self) -> dict[str, str]:
        """The `[kafka]` table in the `kafka.<key>` form the connectors take."""
        return {f"kafka.{key}": str(value) for key, value in self.kafka.items()}

    @staticmethod
    def validated(config: JobConfig, where: str = "settings") -> JobConfig:
        if config.source not in SOURCES:
            raise ConfigError(f"{where}: source must be one of {', '.join(SOURCES)}")
        for name in ("max_records_per_trigger", "shuffle_partitions", "snapshot_every"):
            if getattr(config, name) <= 0:
                raise ConfigError(f"{where}: {name} must be positive")
        # (an empty checkpoint would be the working directory itself)
        for name in ("bootstrap", "checkpoint", "query_name", "trigger_interval"):
            if getattr(config, name) == "":
                raise ConfigError(f"{where}: {name} must not be empty")
        if config.tenant_topic:
            _check_tenant_topic(config, where)
        if config.idle_ms < 0:
            raise ConfigError(f"{where}: idle_ms must be 0 or more")
        if not 0 <= config.lateness_ms <= MAX_LATENESS_MS:
            raise ConfigError(
                f"{where}: lateness_ms must be from 0 to {MAX_LATENESS_MS} (the years 1 to 9999)"
            )
        return config


def _check_tenant_topic(config: JobConfig, where: str) -> None:
    """A template that keeps tenants apart and can name none of the job's own topics
    (a tenant `tsm` of `{tenant}.profiles` would feed matches back into the input)."""
    from connectors.config import SINK_COMMITS_TOPIC
    from connectors.tenants import TenantTopics, tenant_pattern

    try:
        TenantTopics(config.tenant_topic, config.tenant_separator)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    pattern = tenant_pattern(config.tenant_topic)
    for name in (*config.topics.all(), SINK_COMMITS_TOPIC):
        if pattern.fullmatch(name):
            raise ConfigError(
                f"{where}: tenant_topic {config.tenant_topic!r} would name the topic {name!r} "
                "for some tenant; make it differ (e.g. tenant.{tenant}.matches)"
            )


_TABLES = ("topics", "sharding", "kafka", "preload")
_KINDS = {str: "a string", int: "a whole number", bool: "true or false"}


def load_config(path: str | Path | None) -> JobConfig:
    """Read `path` (or return the defaults when None); unknown keys are errors, not ignored."""
    if path is None:
        return JobConfig()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start + 1}), as TOML must be") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    known = {f.name for f in fields(JobConfig)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name in _TABLES:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [{name}] must be a table")
        else:
            expected = str if name == "bootstrap" else type(getattr(JobConfig(), name))
            if type(value) is not expected:
                raise ConfigError(f"{path}: {name} must be {_KINDS[expected]}, got {value!r}")
        values[name] = value
    if "kafka" in values:
        values["kafka"] = _client_options(values["kafka"], path)
    try:
        values["topics"] = Topics.from_mapping(values.get("topics"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: [topics]: {exc}") from None
    try:
        values["preload"] = preload_settings.from_table(values.get("preload", {}))
    except ValueError as exc:
        raise ConfigError(f"{path}: [preload]: {exc}") from None
    for space, spec in values.get("sharding", {}).items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: [sharding.{space}] must be a table")
    try:
        build_sharding(values.get("sharding", {}))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return JobConfig.validated(JobConfig(**values), str(path))


def build_sharding(
    tables: Mapping[str, Mapping[str, Any]], partitions: int = 1, held: Collection[str] = ()
) -> Sharding:
    """`[sharding.<space>]` tables → `Sharding` (`ShardSpec.from_table`). Cells are
    named to run on different ones of `partitions` shuffle partitions, except
    those already `held` in the checkpoint's state (`streaming.placement`).
    Raises ValueError naming the table."""
    specs = {}
    for space, table in tables.items():
        try:
            specs[space] = ShardSpec.from_table(table)
        except ValueError as exc:
            raise ValueError(f"[sharding.{space}]: {exc}") from None
    return Sharding(specs, cell_names(specs, partitions, held))


def _client_options(table: dict[str, Any], path: Path, prefix: str = "") -> dict[str, str]:
    """The `[kafka]` table as librdkafka settings: TOML reads `sasl.mechanism = ...`
    as a table `sasl` holding `mechanism`, so tables are flattened to dotted keys;
    values are text, booleans as librdkafka and Java write them."""
    options = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            options.update(_client_options(value, path, f"{name}."))
        elif isinstance(value, bool):
            options[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            options[name] = str(value)
        else:
            raise ConfigError(f"{path}: [kafka] {name} must be a string, number or boolean")
    return options
