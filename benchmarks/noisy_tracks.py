"""`tsm gen noisy`: tracked objects with GPS noise crossing the edges of zones
(docs/DELIVERY.md), with or without delivery policies on the zones.

Zones are squares on a grid over `x`, `y` in [0, SPAN]; each zone is one
subscription. Objects move in straight lines at a steady speed, bouncing off
the edges of the area, and report once a second a position with Gaussian
noise; each report is valid until the next one is due (plus a second), so an
object that stops reporting expires. Near an edge the noise makes a plain
subscription's pair flap (match, unmatch, match...) at every report that
lands on the other side.

With `policies`, the zones are in groups of `group_size` of every mode in
turn (anycast, manycast k=3, faircast k=2, bestcast k=3 near the zone's
centre), and carry `dwell_ms`, `exit_dwell_ms` and a `margin` drawn from a
few values; `flap_counts` sums what a run's match records say about flapping.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

BASE_TS = 1_700_000_000_000
SPACE = "zones"
SPAN = 1000.0
REPORT_MS = 1000
MODES = (("anycast", 1), ("manycast", 3), ("faircast", 2), ("bestcast", 3))


def generate(
    seed: int = 0,
    n_subscriptions: int = 100,
    n_profiles: int = 1000,
    *,
    policies: bool = True,
    group_size: int = 4,
    noise: float = 3.0,
    dwell_ms: tuple[int, ...] = (0, 2000, 3000),
    exit_dwell_ms: tuple[int, ...] = (0, 2000, 4000),
    margins: tuple[float, ...] = (0.0, 5.0, 10.0),
) -> tuple[list[dict], list[dict]]:
    """(subscription records, profile records), each in event-time order."""
    rng = random.Random(f"noisy:{seed}")
    side = max(1, math.ceil(math.sqrt(n_subscriptions)))
    cell = SPAN / side
    subs = []
    for i in range(n_subscriptions):
        row, col = divmod(i, side)
        lo_x, lo_y = col * cell, row * cell
        rec: dict[str, Any] = {
            "op": "subscribe",
            "id": f"zone-{i}",
            "space": SPACE,
            "subscriber": f"team-{i}",
            "where": f"x BETWEEN {lo_x:.2f} AND {lo_x + cell:.2f} "
            f"AND y BETWEEN {lo_y:.2f} AND {lo_y + cell:.2f}",
            "ts": BASE_TS,
        }
        if policies:
            group = i // group_size
            mode, k = MODES[group % len(MODES)]
            delivery: dict[str, Any] = {"group": f"g{group}", "mode": mode, "k": k}
            if mode == "bestcast":
                delivery["near"] = {"x": round(lo_x + cell / 2, 2), "y": round(lo_y + cell / 2, 2)}
            rec["delivery"] = delivery
            rec["dwell_ms"] = rng.choice(dwell_ms)
            rec["exit_dwell_ms"] = rng.choice(exit_dwell_ms)
            margin = rng.choice(margins)
            if margin:
                rec["margin"] = margin
        subs.append(rec)
    return subs, list(_reports(rng, n_profiles, cell, noise))


def _reports(rng: random.Random, n: int, cell: float, noise: float) -> Iterable[dict]:
    """`n` reports of about n/60 objects, a report a second each, in ts order."""
    objects = max(1, n // 60)
    state = []
    for k in range(objects):
        heading = rng.uniform(0, 2 * math.pi)
        speed = cell / rng.uniform(8, 20)  # a zone crossed in 8 to 20 s
        state.append([rng.uniform(0, SPAN), rng.uniform(0, SPAN), heading, speed, k])
    emitted, second = 0, 0
    while emitted < n:
        second += 1
        for obj in state:
            if emitted == n:
                break
            x, y, heading, speed, k = obj
            x, y = x + speed * math.cos(heading), y + speed * math.sin(heading)
            if not 0 <= x <= SPAN:
                heading, x = math.pi - heading, min(max(x, 0.0), SPAN)
            if not 0 <= y <= SPAN:
                heading, y = -heading, min(max(y, 0.0), SPAN)
            obj[:3] = [x, y, heading]
            ts = BASE_TS + second * REPORT_MS + k  # (one ms apart within a second)
            seen_x, seen_y = rng.gauss(x, noise), rng.gauss(y, noise)
            yield {
                "op": "publish",
                "id": f"obj-{k}",
                "space": SPACE,
                "attrs": {"x": round(seen_x, 2), "y": round(seen_y, 2)},
                "ts": ts,
                "valid_to": ts + 2 * REPORT_MS,
                "payload": {"true": [round(x, 2), round(y, 2)]},
            }
            emitted += 1


def flap_counts(matches: Iterable[dict]) -> dict[str, int]:
    """What match records say: entries (`match`), exits by a move (`unmatch`,
    `changed`), and flaps: entries of a pair that had exited within 5 s before."""
    counts: Counter = Counter()
    exited: dict[tuple[str, str], int] = {}
    for m in matches:
        pair = (m["subscription_id"], m["profile_id"])
        if m["event"] == "match":
            counts["entries"] += 1
            if pair in exited and m["ts"] - exited.pop(pair) <= 5000:
                counts["flaps"] += 1
        elif m["event"] == "unmatch" and m["reason"] == "changed":
            counts["exits"] += 1
            exited[pair] = m["ts"]
    return {name: counts[name] for name in ("entries", "exits", "flaps")}
