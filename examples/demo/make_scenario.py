"""Write the `tsm demo` scenario: `python examples/demo/make_scenario.py`.

Deterministic (no randomness), so the committed files are reproducible.
Helsinki, 2026-11-22 08:00–08:05 UTC. Subscriptions: alert zones, speed
watches, `covers` subscriptions ("entirely inside", "surely within limits"),
lifetimes that expire, two subscribers that join at 08:02, an unsubscribe
and a bad `where`. Profiles: buses, trams and ferries reporting every 30 s
of event time; a position is an interval (GPS error plus the ground covered
while the report is valid), a speed is an interval too. Each report
replaces the last one (an upsert of the same id); bus-23 goes silent (its
last report expires), ferry-2 is retracted, and two reports are bad.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPACE = "helsinki"
START = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
REPORT_EVERY_S = 30
VALID_S = 45  # a report stays valid a little longer than the gap to the next one
LAT_ERR, LON_ERR = 0.0008, 0.0015


def at(seconds: int) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def box(lat: tuple[float, float], lon: tuple[float, float]) -> str:
    return f"lat BETWEEN {lat[0]} AND {lat[1]} AND lon BETWEEN {lon[0]} AND {lon[1]}"


CENTRE = box((60.165, 60.175), (24.930, 24.955))
HARBOUR = box((60.150, 60.165), (24.940, 24.975))
KAMPPI = box((60.166, 60.172), (24.925, 24.938))
KALLIO = box((60.180, 60.190), (24.940, 24.960))
TOOLO = box((60.175, 60.190), (24.910, 24.930))
PASILA = box((60.195, 60.205), (24.925, 24.945))
MARKET = box((60.166, 60.169), (24.950, 24.956))
ISLAND = box((60.140, 60.150), (24.975, 24.995))

# (id, subscriber, where, relation, valid_from s, valid_to s or None)
SUBSCRIPTIONS = [
    ("zone-centre", "city-traffic", CENTRE, "overlaps", 0, None),
    ("zone-kamppi-buses", "city-traffic", f"{KAMPPI} AND kind = 'bus'", "overlaps", 0, None),
    ("zone-harbour", "harbour-ops", HARBOUR, "overlaps", 0, None),
    ("zone-island-ferries", "harbour-ops", f"{ISLAND} AND kind = 'ferry'", "overlaps", 0, None),
    ("zone-kallio", "district-north", KALLIO, "overlaps", 0, None),
    ("zone-toolo", "district-west", TOOLO, "overlaps", 0, None),
    ("zone-pasila", "district-north", PASILA, "overlaps", 0, None),
    ("fast-buses", "safety", "kind = 'bus' AND speed > 50", "overlaps", 0, None),
    ("fast-trams", "safety", "kind = 'tram' AND speed > 35", "overlaps", 0, None),
    ("stuck-vehicles", "safety", "speed < 5 AND kind IN ('bus', 'tram')", "overlaps", 0, None),
    ("harbour-speed", "harbour-ops", f"{HARBOUR} AND speed > 12", "overlaps", 0, None),
    ("tram-inside-centre", "city-traffic", f"{CENTRE} AND kind LIKE 'tram%'", "covers", 0, None),
    ("bus-surely-legal", "safety", "kind = 'bus' AND speed BETWEEN 0 AND 50", "covers", 0, None),
    ("ferry-inside-harbour", "harbour-ops", f"{HARBOUR} AND kind = 'ferry'", "covers", 0, None),
    ("line-550", "commuter-ann", "line = '550'", "overlaps", 0, None),
    ("line-4-in-centre", "commuter-ben", f"line = '4' AND {CENTRE}", "overlaps", 0, None),
    ("morning-watch", "night-desk", "kind IN ('bus', 'tram')", "overlaps", 0, 120),
    ("rush-hour-buses", "planning", "kind = 'bus' AND speed < 30", "overlaps", 0, 90),
    ("roadworks-kallio", "roadworks", f"{KALLIO} AND speed > 20", "overlaps", 60, 210),
    ("market-event", "event-security", MARKET, "overlaps", 120, 240),
    ("all-ferries", "night-desk", "kind = 'ferry'", "overlaps", 120, None),
    ("tram-6-tracker", "press", "line = '6'", "overlaps", 120, None),
]
UNSUBSCRIBE = ("zone-toolo", 210)
BAD_SUBSCRIPTION = (
    60,
    '{"op": "subscribe", "id": "typo-zone", "space": "helsinki", "subscriber": "intern", '
    '"where": "lat BETWEEN 60.1 AND AND lon > 24.9", "ts": "2026-11-22T08:01:00Z"}',
)

# (id, kind, line, waypoints (lat, lon) spread evenly over the reports, speeds, reports)
VEHICLES = [
    (
        "bus-550",
        "bus",
        "550",
        [(60.200, 24.935), (60.186, 24.945), (60.170, 24.940)],
        [38, 42, 55, 58, 47, 31, 22, 12, 3, 2],
        10,
    ),
    (
        "bus-23",
        "bus",
        "23",
        [(60.168, 24.926), (60.169, 24.933), (60.183, 24.918)],
        [18, 25, 30, 44, 39, 52],
        6,
    ),
    (
        "bus-18",
        "bus",
        "18",
        [(60.178, 24.915), (60.170, 24.936), (60.168, 24.952)],
        [28, 33, 36, 24, 19, 27, 30, 26, 12, 9],
        10,
    ),
    (
        "tram-4",
        "tram",
        "4",
        [(60.190, 24.925), (60.172, 24.940), (60.160, 24.952)],
        [22, 28, 31, 24, 20, 18, 26, 33, 37, 30],
        10,
    ),
    (
        "tram-6",
        "tram",
        "6",
        [(60.186, 24.950), (60.168, 24.946), (60.162, 24.945)],
        [25, 30, 26, 19, 14, 8, 3, 2, 11, 17],
        10,
    ),
    (
        "tram-7",
        "tram",
        "7",
        [(60.199, 24.940), (60.184, 24.951), (60.171, 24.950)],
        [30, 34, 38, 36, 29, 21, 25, 28, 24, 20],
        10,
    ),
    (
        "ferry-1",
        "ferry",
        "Suomenlinna",
        [(60.166, 24.953), (60.155, 24.965), (60.146, 24.985)],
        [4, 9, 13, 15, 14, 13, 10, 6, 2, 0],
        10,
    ),
    (
        "ferry-2",
        "ferry",
        "Vallisaari",
        [(60.145, 24.990), (60.152, 24.972), (60.161, 24.957)],
        [12, 14, 15, 14, 12, 9, 6, 4],
        8,
    ),
]
RETRACT = ("ferry-2", 255)
BAD_PROFILES = [
    (90, '{"op": "publish", "id": "bus-99", "space": "helsinki", "attrs": {"kind": "bus"'),
    (
        150,
        '{"op": "publish", "id": "tram-9", "space": "helsinki", "attrs": {"kind": "tram", '
        '"speed": [40, 20]}, "ts": "2026-11-22T08:02:30Z"}',
    ),
]


def position(waypoints: list[tuple[float, float]], step: int, steps: int) -> tuple[float, float]:
    """Piecewise-linear along the waypoints, `step` of `steps - 1` of the way."""
    f = step / max(steps - 1, 1) * (len(waypoints) - 1)
    i = min(int(f), len(waypoints) - 2)
    (a_lat, a_lon), (b_lat, b_lon) = waypoints[i], waypoints[i + 1]
    t = f - i
    return a_lat + (b_lat - a_lat) * t, a_lon + (b_lon - a_lon) * t


def subscription_lines() -> list[tuple[int, str]]:
    out = []
    for ident, subscriber, where, relation, start, end in SUBSCRIPTIONS:
        record = {"op": "subscribe", "id": ident, "space": SPACE, "subscriber": subscriber}
        record |= {"where": where, "relation": relation, "valid_from": at(start)}
        record |= {"valid_to": None if end is None else at(end), "ts": at(start)}
        out.append((start, json.dumps(record)))
    ident, when = UNSUBSCRIBE
    out.append(
        (when, json.dumps({"op": "unsubscribe", "id": ident, "space": SPACE, "ts": at(when)}))
    )
    out.append(BAD_SUBSCRIPTION)
    return out


def profile_lines() -> list[tuple[int, str]]:
    out = []
    for ident, kind, line, waypoints, speeds, reports in VEHICLES:
        for step in range(reports):
            when = REPORT_EVERY_S * (step + 1)
            lat, lon = position(waypoints, step, reports)
            v = speeds[step]
            attrs = {
                "kind": kind,
                "line": line,
                "speed": [max(v - 3, 0), v + 3],
                "lat": [round(lat - LAT_ERR, 4), round(lat + LAT_ERR, 4)],
                "lon": [round(lon - LON_ERR, 4), round(lon + LON_ERR, 4)],
            }
            record = {"op": "publish", "id": ident, "space": SPACE, "attrs": attrs}
            record |= {"valid_from": at(when), "valid_to": at(when + VALID_S), "ts": at(when)}
            record["payload"] = {"line": line, "report": step + 1}
            out.append((when, json.dumps(record)))
    ident, when = RETRACT
    out.append((when, json.dumps({"op": "retract", "id": ident, "space": SPACE, "ts": at(when)})))
    out.extend(BAD_PROFILES)
    return out


def write(name: str, lines: list[tuple[int, str]]) -> None:
    ordered = sorted(lines, key=lambda item: item[0])  # stable: file order within a second
    (HERE / name).write_text("".join(line + "\n" for _, line in ordered), encoding="utf-8")


if __name__ == "__main__":
    write("subscriptions.jsonl", subscription_lines())
    write("profiles.jsonl", profile_lines())
