"""Seeded workloads for `tsm gen` and `tsm bench`: topic records per SEMANTICS §6.

Each generator first builds plain specs (atoms as `(attr, op, value)` tuples,
profile attributes as points or `(lo, hi)`), then renders them as records with
`where` text. The benchmark consumes the specs directly, so a million filters
need no parsing, while `tsm gen` and the tests see the very same filters as text.
Everything derives from one `random.Random(seed)`: a seed gives the same files.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("uniform", "nested", "siena", "tracking")
# String workloads of the pattern tests (`tsm bench matcher` times them apart: the
# box baselines cannot run them).
PATTERN_KINDS = ("topics", "regex", "xpath")
BASE_TS = 1_700_000_000_000  # epoch ms: 2023-11-14T22:13:20Z
DIMS = ("x", "y", "z", "w")
SPAN = 1000.0
PROGRESS_EVERY = 10_000  # records written between two calls of `write`'s progress
VEHICLE_KINDS = ("bus", "tram", "car", "truck", "bike", "taxi", "van", "train", "ferry", "metro")

Atom = tuple[str, str, Any]  # (attr, op, value); `between` takes (lo, hi)
Value = float | int | str | tuple[float, float] | list[str]


@dataclass(slots=True)
class SubSpec:
    """A subscribe (or, with `dnf=None`, an unsubscribe) before rendering."""

    id: str
    ts: int
    dnf: list[list[Atom]] | None
    relation: str = "overlaps"
    valid_to: int | None = None
    subscriber: str = ""


@dataclass(slots=True)
class ProfileSpec:
    """A publish (or, with `attrs=None`, a retract) before rendering."""

    id: str
    ts: int
    attrs: dict[str, Value] | None
    valid_to: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Workload:
    """Both streams of one workload, each in event-time order."""

    kind: str
    space: str
    subscriptions: list[SubSpec]
    profiles: list[ProfileSpec]


def generate(
    kind: str, seed: int = 0, n_subscriptions: int = 1000, n_profiles: int = 1000
) -> tuple[list[dict], list[dict]]:
    """The records of one workload: (subscription records, profile records)."""
    w = build(kind, seed, n_subscriptions, n_profiles)
    return (
        [subscription_record(w.space, s) for s in w.subscriptions],
        [profile_record(w.space, p) for p in w.profiles],
    )


def build(kind: str, seed: int, n_subscriptions: int, n_profiles: int) -> Workload:
    """The specs of one workload (what `generate` renders)."""
    if kind not in KINDS + PATTERN_KINDS:
        kinds = ", ".join(KINDS + PATTERN_KINDS)
        raise ValueError(f"unknown workload {kind!r}: choose one of {kinds}")
    if n_subscriptions < 0 or n_profiles < 0:
        raise ValueError("sizes must not be negative")
    rng = random.Random(f"{kind}:{seed}")
    return _GENERATORS[kind](rng, n_subscriptions, n_profiles)


def write(
    out_dir: Path,
    subscriptions: Iterable[dict],
    profiles: Iterable[dict],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Write `subscriptions.jsonl` and `profiles.jsonl` (one compact record a line);
    `progress(n)` is told of every `PROGRESS_EVERY` records written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, records in (("subscriptions", subscriptions), ("profiles", profiles)):
        with open(out_dir / f"{name}.jsonl", "w", encoding="utf-8") as f:
            written = 0
            for r in records:
                f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
                written += 1
                if progress is not None and written == PROGRESS_EVERY:
                    progress(written)
                    written = 0
            if progress is not None and written:
                progress(written)


# ---------------------------------------------------------------- rendering


def subscription_record(space: str, s: SubSpec) -> dict:
    if s.dnf is None:
        return {"op": "unsubscribe", "id": s.id, "space": space, "ts": s.ts}
    return {
        "op": "subscribe",
        "id": s.id,
        "space": space,
        "subscriber": s.subscriber,
        "where": where_text(s.dnf),
        "relation": s.relation,
        "valid_from": s.ts,
        "valid_to": s.valid_to,
        "ts": s.ts,
    }


def profile_record(space: str, p: ProfileSpec) -> dict:
    if p.attrs is None:
        return {"op": "retract", "id": p.id, "space": space, "ts": p.ts}
    attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in p.attrs.items()}
    return {
        "op": "publish",
        "id": p.id,
        "space": space,
        "attrs": attrs,
        "valid_from": p.ts,
        "valid_to": p.valid_to,
        "ts": p.ts,
        "payload": p.payload,
    }


def where_text(dnf: list[list[Atom]]) -> str:
    """The `where` form of a disjunction of conjunctions."""
    if not dnf or not all(dnf):
        return "TRUE"
    parts = [" AND ".join(_atom_text(a) for a in conj) for conj in dnf]
    return parts[0] if len(parts) == 1 else " OR ".join(f"({p})" for p in parts)


def _atom_text(atom: Atom) -> str:
    attr, op, value = atom
    if op == "between":
        return f"{attr} BETWEEN {_literal(value[0])} AND {_literal(value[1])}"
    if op in ("matches", "topic", "has", "xpath"):
        return f"{attr} {op.upper()} {_literal(value)}"
    return f"{attr} {op} {_literal(value)}"


def _literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


# ---------------------------------------------------------------- helpers


def _times(rng: random.Random, start: int, n: int, mean_gap_ms: float) -> list[int]:
    """`n` non-decreasing event times with exponential gaps (a Poisson stream)."""
    out, t = [], float(start)
    for _ in range(n):
        t += rng.expovariate(1.0 / mean_gap_ms)
        out.append(int(t))
    return out


def _zipf_picker(rng: random.Random, n: int, s: float = 1.1):
    """A sampler of indices 0..n-1 with Zipf frequencies over a random ranking."""
    ranking = list(range(n))
    rng.shuffle(ranking)
    cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(n)))
    total = cum[-1]
    return lambda: ranking[min(bisect.bisect(cum, rng.random() * total), n - 1)]


def _r2(v: float) -> float:
    return round(v, 2)


def _box(rng: random.Random, lo: float, hi: float, min_w: float, max_w: float) -> tuple:
    """A random interval of width in [min_w, max_w] inside [lo, hi]."""
    w = min(rng.uniform(min_w, max_w), hi - lo)
    a = rng.uniform(lo, hi - w)
    return (_r2(a), _r2(a + w))


def _box_atoms(box: dict[str, tuple[float, float]]) -> list[Atom]:
    return [(d, "between", box[d]) for d in box]


def _small_profile_box(rng: random.Random, inside: dict | None, max_w: float) -> dict:
    """A small box (sometimes a point) inside `inside` or anywhere in the space."""
    out: dict[str, Value] = {}
    for d in DIMS:
        lo, hi = inside[d] if inside else (0.0, SPAN)
        if rng.random() < 0.2:
            out[d] = _r2(rng.uniform(lo, hi))
        else:
            out[d] = _box(rng, lo, hi, 0.0, max_w)
    return out


def _profile_stream(
    rng: random.Random, start: int, n: int, make: Any, mean_gap_ms: float = 2.0
) -> list[ProfileSpec]:
    return [
        ProfileSpec(f"p{i}", ts, make(i), ts + 60_000, {"seq": i})
        for i, ts in enumerate(_times(rng, start, n, mean_gap_ms))
    ]


def _after(subs: list[SubSpec]) -> int:
    return (subs[-1].ts if subs else BASE_TS) + 1000


# ---------------------------------------------------------------- uniform


def _uniform(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """Random boxes over x, y, z, w in [0, 1000), with `kind = …` on most of them."""
    subs = []
    for i, ts in enumerate(_times(rng, BASE_TS, n_subs, 5.0)):
        conj = _box_atoms({d: _box(rng, 0.0, SPAN, 10.0, 300.0) for d in DIMS})
        if rng.random() < 0.7:
            conj.append(("kind", "=", rng.choice(VEHICLE_KINDS)))
        subs.append(SubSpec(f"s{i}", ts, [conj], subscriber=f"u{i % 97}"))

    def make(_: int) -> dict:
        attrs = _small_profile_box(rng, None, 10.0)
        attrs["kind"] = rng.choice(VEHICLE_KINDS)
        return attrs

    return Workload(
        "uniform", "uniform", subs, _profile_stream(rng, _after(subs), n_profiles, make)
    )


# ---------------------------------------------------------------- nested


def _regions(rng: random.Random, depth: int = 4, fanout: int = 8) -> list[dict]:
    """A hierarchy of boxes: each region lies inside its parent (covering chains)."""
    top = {d: (0.0, SPAN) for d in DIMS}
    levels, out = [[top]], []
    for _ in range(depth):
        nxt = []
        for parent in levels[-1]:
            for _ in range(fanout):
                child = {}
                for d in DIMS:
                    lo, hi = parent[d]
                    child[d] = _box(rng, lo, hi, 0.3 * (hi - lo), 0.6 * (hi - lo))
                nxt.append(child)
        levels.append(nxt)
        out.extend(nxt)
    return out


def _nested(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """Regions inside regions, popular ones subscribed over and over (Zipf).

    60% of the subscriptions are a region as is (so many share one filter), 25%
    a region with `kind = …` (covered by the bare region), 15% a random box
    inside a region (covered by it): covering is common and chains are deep.
    """
    regions = _regions(rng)
    pick = _zipf_picker(rng, len(regions))
    subs = []
    for i, ts in enumerate(_times(rng, BASE_TS, n_subs, 5.0)):
        region = regions[pick()]
        r = rng.random()
        if r < 0.6:
            conj = _box_atoms(region)
        elif r < 0.85:
            conj = _box_atoms(region) + [("kind", "=", rng.choice(VEHICLE_KINDS[:3]))]
        else:
            inner = {
                d: _box(
                    rng,
                    *region[d],
                    0.1 * (region[d][1] - region[d][0]),
                    0.5 * (region[d][1] - region[d][0]),
                )
                for d in DIMS
            }
            conj = _box_atoms(inner)
        subs.append(SubSpec(f"s{i}", ts, [conj], subscriber=f"u{i % 97}"))

    def make(_: int) -> dict:
        inside = regions[pick()] if rng.random() < 0.8 else None
        attrs = _small_profile_box(rng, inside, 5.0)
        attrs["kind"] = rng.choice(VEHICLE_KINDS[:3])
        return attrs

    return Workload("nested", "nested", subs, _profile_stream(rng, _after(subs), n_profiles, make))


# ---------------------------------------------------------------- siena

SIENA_NUMBERS = ("price", "volume", "change", "temp", "speed", "level")
SIENA_STRINGS = ("symbol", "exchange", "sector", "currency")
SIENA_VOCAB = {a: tuple(f"{a[:3]}{k}" for k in range(20)) for a in SIENA_STRINGS}


def _siena_constraints(rng: random.Random, attr: str, k: int) -> list[Atom]:
    """`k` consistent constraints on one attribute, with operators <, >, =.

    A string attribute gets one `=`; a number with several constraints gets a
    range (`>` and `<`) plus redundant looser bounds, as random Siena filters do.
    """
    if attr in SIENA_VOCAB:
        return [(attr, "=", rng.choice(SIENA_VOCAB[attr]))]
    if k == 1:
        op = rng.choice("<>=")
        v = {"<": rng.randint(0, 400), ">": rng.randint(600, 999), "=": rng.randint(0, 999)}[op]
        return [(attr, op, v)]
    lo = rng.randint(0, 900)
    hi = lo + rng.randint(10, 300)
    out: list[Atom] = [(attr, ">", lo), (attr, "<", hi)]
    for _ in range(k - 2):
        if rng.random() < 0.5:
            out.append((attr, ">", lo - rng.randint(1, 50)))
        else:
            out.append((attr, "<", hi + rng.randint(1, 50)))
    return out


def _siena_filter(rng: random.Random) -> list[Atom]:
    """1–5 attributes and 1–5 constraints (at least one per attribute)."""
    attrs = rng.sample(SIENA_NUMBERS + SIENA_STRINGS, rng.randint(1, 5))
    counts = dict.fromkeys(attrs, 1)
    numbers = [a for a in attrs if a not in SIENA_VOCAB]
    for _ in range(max(0, rng.randint(1, 5) - len(attrs))):
        if numbers:
            counts[rng.choice(numbers)] += 1
    return [atom for a in attrs for atom in _siena_constraints(rng, a, counts[a])]


def _siena(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """Siena's random predicates: 1–5 filters a predicate, points as notifications."""
    subs = [
        SubSpec(
            f"s{i}",
            ts,
            [_siena_filter(rng) for _ in range(rng.randint(1, 5))],
            subscriber=f"u{i % 97}",
        )
        for i, ts in enumerate(_times(rng, BASE_TS, n_subs, 5.0))
    ]

    def make(_: int) -> dict:
        attrs: dict[str, Value] = {}
        for a in rng.sample(SIENA_NUMBERS + SIENA_STRINGS, rng.randint(3, 7)):
            attrs[a] = rng.choice(SIENA_VOCAB[a]) if a in SIENA_VOCAB else rng.randint(0, 999)
        return attrs

    return Workload("siena", "siena", subs, _profile_stream(rng, _after(subs), n_profiles, make))


# ---------------------------------------------------------------- tracking

TRACK_SECONDS = 300  # event time covered by the profile stream
TRACK_REPORTS = 30  # mean publishes per tracked object


def _tracking(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """Moving objects republished under their id, areas watched for a while.

    Subscriptions arrive in the first 10 s; most live 1–15 minutes (about a
    fifth expire during the 5-minute run), some are open-ended, and 5% are
    unsubscribed mid-run. Objects report an uncertain position (intervals on
    x and y) every few seconds, each report valid until a bit after the next
    (an upsert: `update` or `unmatch` as they move); a tenth end with a retract.
    """
    start = BASE_TS + 10_000
    subs: list[SubSpec] = []
    for i in range(n_subs):
        ts = BASE_TS + rng.randrange(10_000)
        conj = [("x", "between", _box(rng, 0.0, SPAN, 20.0, 200.0))]
        conj.append(("y", "between", _box(rng, 0.0, SPAN, 20.0, 200.0)))
        if rng.random() < 0.3:
            conj.append(("kind", "=", rng.choice(VEHICLE_KINDS[:5])))
        relation = "covers" if rng.random() < 0.2 else "overlaps"
        valid_to = None if rng.random() < 0.3 else ts + rng.randint(60_000, 900_000)
        subs.append(SubSpec(f"a{i}", ts, [conj], relation, valid_to, f"u{i % 97}"))
        if rng.random() < 0.05:
            subs.append(SubSpec(f"a{i}", start + rng.randrange(TRACK_SECONDS * 1000), None))
    subs.sort(key=lambda s: s.ts)
    profiles = [
        p
        for k, count in enumerate(_report_counts(n_profiles))
        for p in _track(rng, k, count, start)
    ]
    profiles.sort(key=lambda p: p.ts)
    return Workload("tracking", "tracking", subs, profiles)


def _report_counts(n_profiles: int) -> list[int]:
    n_objects = max(1, round(n_profiles / TRACK_REPORTS)) if n_profiles else 0
    return [n_profiles // n_objects + (k < n_profiles % n_objects) for k in range(n_objects)]


def _track(rng: random.Random, k: int, count: int, start: int) -> Iterator[ProfileSpec]:
    """`count` reports of object `k` bouncing around the square at constant speed."""
    period = TRACK_SECONDS * 1000 / count
    x0, y0 = rng.uniform(0, SPAN), rng.uniform(0, SPAN)
    vx, vy = rng.uniform(-5, 5), rng.uniform(-5, 5)  # units per second
    radius, kind = rng.uniform(1, 8), rng.choice(VEHICLE_KINDS[:5])
    retracts = count > 1 and rng.random() < 0.1
    t = start + rng.uniform(0, period)
    for j in range(count):
        ts = max(start, int(t + rng.uniform(-0.1, 0.1) * period))
        if retracts and j == count - 1:
            yield ProfileSpec(f"o{k}", ts, None)
            return
        secs = (ts - start) / 1000
        x, y = _bounce(x0 + vx * secs), _bounce(y0 + vy * secs)
        attrs = {
            "x": (_r2(max(0.0, x - radius)), _r2(min(SPAN, x + radius))),
            "y": (_r2(max(0.0, y - radius)), _r2(min(SPAN, y + radius))),
            "speed": _r2((vx * vx + vy * vy) ** 0.5),
            "kind": kind,
        }
        yield ProfileSpec(f"o{k}", ts, attrs, ts + int(1.5 * period), {"seq": j})
        t += period


def _bounce(v: float) -> float:
    """Reflect a coordinate into [0, SPAN] (an object bouncing off the walls)."""
    v %= 2 * SPAN
    return 2 * SPAN - v if v > SPAN else v


# ---------------------------------------------------------------- topics


TOPIC_TREE = (("site", 20), ("building", 10), ("floor", 8), ("device", 50))
TOPIC_METRICS = ("temp", "humidity", "co2", "power", "door", "light", "motion", "noise")


def _topic(rng: random.Random, popular: Callable[[], int]) -> list[str]:
    """A device's topic, `site3/building7/floor2/device41/temp`: sites by Zipf."""
    levels = [f"site{popular()}"]
    levels += [f"{name}{rng.randrange(n)}" for name, n in TOPIC_TREE[1:]]
    return levels + [rng.choice(TOPIC_METRICS)]


def _topics(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """MQTT-like topic trees: filters of a site with `+` levels (each level
    below the site with probability 0.15) and a `#` tail (0.3, after two to
    four levels), and profiles that publish a device's reading on its topic."""
    popular = _zipf_picker(rng, TOPIC_TREE[0][1])

    def topic_filter() -> str:
        site, *below = _topic(rng, popular)
        levels = [site] + [lvl if rng.random() >= 0.15 else "+" for lvl in below]
        if rng.random() < 0.3:
            levels = levels[: rng.randint(2, 4)] + ["#"]
        return "/".join(levels)

    subs = [
        SubSpec(f"s{i}", ts, [[("topic", "topic", topic_filter())]], subscriber=f"u{i % 97}")
        for i, ts in enumerate(_times(rng, BASE_TS, n_subs, 5.0))
    ]

    def make(_: int) -> dict:
        return {"topic": "/".join(_topic(rng, popular)), "value": _r2(rng.uniform(0, 100))}

    return Workload("topics", "topics", subs, _profile_stream(rng, _after(subs), n_profiles, make))


# ---------------------------------------------------------------- regex


def _words(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return sorted(
        {"".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(n)}
    )


def _regex(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """After NaradaBrokering's regular-expression engine: patterns of five words
    whose first letters match either case (`[Tt]he [Qq]uick [Bb]rown [Ff]ox
    [Jj]umps`), and sentences of twelve words, half of which hold some
    subscription's five (a popular one more often)."""
    words = _words(rng, 2000)
    phrases = [rng.sample(words, 5) for _ in range(max(1, n_subs))]
    subs = [
        SubSpec(
            f"s{i}",
            ts,
            [[("text", "matches", " ".join(f"[{w[0].upper()}{w[0]}]{w[1:]}" for w in phrase))]],
            subscriber=f"u{i % 97}",
        )
        for i, (ts, phrase) in enumerate(
            zip(_times(rng, BASE_TS, n_subs, 5.0), phrases, strict=False)
        )
    ]
    popular = _zipf_picker(rng, len(phrases))

    def make(_: int) -> dict:
        sentence = rng.sample(words, 12)
        if rng.random() < 0.5:
            at = rng.randint(0, 7)
            sentence[at : at + 5] = phrases[popular()]
        sentence[0] = sentence[0].capitalize()
        return {"text": " ".join(sentence)}

    return Workload("regex", "regex", subs, _profile_stream(rng, _after(subs), n_profiles, make))


# ---------------------------------------------------------------- xpath

XPATH_SECTIONS = 200  # catalogue sections: an XPath's group
XPATH_SKUS = 50  # items a section


def _xpath(rng: random.Random, n_subs: int, n_profiles: int) -> Workload:
    """After NaradaBrokering's XPath engine (`/menu/Saftdrinks[price>1.80]`):
    catalogue documents of one or two sections of a few priced items, and
    XPaths that select an item of a section by its sku or its price; sections
    drawn uniformly (how much grouping saves depends on how the subscriptions
    spread over their leading paths)."""

    def section() -> int:
        return rng.randrange(XPATH_SECTIONS)

    def xpath() -> str:
        at = f"/catalog/section{section()}/item"
        if rng.random() < 0.5:
            return f'{at}[@sku="k{rng.randrange(XPATH_SKUS)}"]'
        return f"{at}[price > {rng.randint(1, 99)}]"

    subs = [
        SubSpec(f"s{i}", ts, [[("doc", "xpath", xpath())]], subscriber=f"u{i % 97}")
        for i, ts in enumerate(_times(rng, BASE_TS, n_subs, 5.0))
    ]

    def make(_: int) -> dict:
        parts = []
        for k in sorted({section() for _ in range(rng.randint(1, 2))}):
            items = "".join(
                f'<item sku="k{rng.randrange(XPATH_SKUS)}">'
                f"<price>{rng.randint(1, 99)}</price></item>"
                for _ in range(rng.randint(1, 5))
            )
            parts.append(f"<section{k}>{items}</section{k}>")
        return {"doc": f"<catalog>{''.join(parts)}</catalog>"}

    return Workload("xpath", "xpath", subs, _profile_stream(rng, _after(subs), n_profiles, make))


_GENERATORS = {
    "uniform": _uniform,
    "nested": _nested,
    "siena": _siena,
    "tracking": _tracking,
    "topics": _topics,
    "regex": _regex,
    "xpath": _xpath,
}
