"""`tsm demo --network`: the city as three sites (harbour – centre – airport), on this machine.

Starts an embedded broker per site of `examples/network/net.toml` (on free
ports), sends each site's subscribers and vehicles to its own topics, runs
the three sites' jobs in one local Spark until the network is done
(`tsm run --network --available-now`), then prints the match records of
each site, each link's traffic against flooding's (the offline network, same
records, `routing = "flooding"`), and whether the union of the sites' records
is what one matcher makes of all of them (`tsm replay`). The data dir is
wiped at each start, as `tsm demo`'s.

With `--moves` it runs `examples/network/moves` instead (four sites: the
ferry's publisher moves from the harbour to the island, a commuter's
subscriptions follow her, one bad move; ROUTING §5): each site's records,
its `moved` markers included, are checked against the offline network's
(`tsm replay --network`), since with moves a record's site is part of what is
promised.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from tsm_cli.args import verbosity
from tsm_cli.demo_data_dir import claim_data_dir, wipe_data_dir
from tsm_cli.network_replay import load_network

log = logging.getLogger(__name__)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "network"
DATA_DIR = Path(".tsm/demo-network")


def run(args: argparse.Namespace) -> int:
    from connectors.admin import create_topics
    from connectors.broker import EmbeddedBroker
    from connectors.produce import produce_lines
    from streaming.config import JobConfig

    home = args.data_dir if args.data_dir != Path(".tsm/demo") else DATA_DIR
    claim_data_dir(home)
    wipe_data_dir(home)
    folder = EXAMPLE / "moves" if args.moves else EXAMPLE
    example = load_network(str(folder / "net.toml"))
    records = {kind: _records(folder / f"{kind}.jsonl") for kind in ("subscriptions", "profiles")}
    brokers = {s.name: EmbeddedBroker(data_dir=home / f"broker-{s.name}") for s in example.sites}
    started = time.monotonic()
    try:
        for name, broker in brokers.items():
            broker.start()
            log.info("site %s: broker at %s", name, broker.bootstrap)
        net = replace(
            example,
            sites=tuple(replace(s, bootstrap=brokers[s.name].bootstrap) for s in example.sites),
        )
        topics = JobConfig().topics
        for name, broker in brokers.items():
            create_topics(broker.bootstrap, dict.fromkeys(topics.all(), 1))
            for kind, recs in records.items():
                mine = [_line(r) for r in recs if r.get("site", net.first) == name]
                produce_lines(broker.bootstrap, getattr(topics, kind), mine)
                print(f"── {name}: {len(mine)} {kind}", flush=True)
        status, reports = _run_sites(args, net, home)
        if status != 0:
            return status
        got = _show_matches(net, brokers, topics.matches)
        letters = _show_dead_letters(net, brokers, topics.deadletter)
    finally:
        for broker in brokers.values():
            broker.stop()
    print(_traffic(net, reports, records))
    if args.moves:
        same = _same_as_the_offline_network(net, got, letters, records)
        verdict = f"the sites' {len(got)} match records {'equal' if same else 'DIFFER from'}"
        verdict += " the offline network's (tsm replay --network), site by site"
    else:
        same = _same_as_one_matcher(got, records)
        verdict = f"the union of the sites' {len(got)} match records "
        verdict += f"{'equals' if same else 'DIFFERS from'} one matcher's (tsm replay)"
    print(f"── {verdict}; {time.monotonic() - started:.0f} s", flush=True)
    return 0 if same else 1


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in record.items() if k != "site"}).encode()


def _run_sites(args: argparse.Namespace, net, home: Path) -> tuple[int, dict]:
    from streaming.config import JobConfig
    from tsm_cli.logs import with_client_log_level
    from tsm_cli.network_run import run_sites

    options = with_client_log_level({}, verbosity(args))
    return run_sites(
        net,
        list(net.names),
        JobConfig(),
        options,
        home / "checkpoints",
        master=args.master,
        available_now=True,
        spark_log=None if verbosity(args) > 0 else home / "spark.log",
        verbosity=verbosity(args),
        app="tsm demo --network",
    )


def _show_matches(net, brokers, topic: str) -> list[dict[str, Any]]:
    """Print each site's match records (and `moved` markers) by time; returns them,
    each with its `site`."""
    from connectors.consume import consume_values
    from streaming.demo import clock

    got = []
    for name in net.names:
        values = consume_values(brokers[name].bootstrap, topic, from_beginning=True, timeout=2)
        records = sorted((json.loads(v) for v in values), key=lambda r: r["ts"])
        print(f"── matches at {name}: {len(records)}", flush=True)
        for r in records:
            if r["event"] == "moved":
                print(f"{clock(r['ts'])}  moved    {r['subscriber']} → {r['to']}", flush=True)
            else:
                print(
                    f"{clock(r['ts'])}  {r['event']:<8} {r['reason']:<17} "
                    f"{r['profile_id']} → {r['subscription_id']} ({r['subscriber']})",
                    flush=True,
                )
            got.append(r | {"site": name})
    return got


def _show_dead_letters(net, brokers, topic: str) -> list[dict[str, Any]]:
    """Print each site's dead letters, if any; returns them, each with its `site`."""
    from connectors.consume import consume_values

    letters = []
    for name in net.names:
        values = consume_values(brokers[name].bootstrap, topic, from_beginning=True, timeout=1)
        for letter in (json.loads(v) for v in values):
            print(f"── dead letter at {name}: {letter['reason']}", flush=True)
            letters.append(letter | {"site": name})
    return letters


def _traffic(net, reports: dict, records: dict[str, list[dict]]) -> str:
    """Per link: what the streaming network sent, and what flooding would have."""
    from matcher.routing.replay import replay_network

    flooding = replace(net, routing="flooding", advertisements=False)
    offline = replay_network(flooding, _inputs(records, with_site=True))
    flood = offline.stats()["links"]
    rows = [("link", "interest", "profiles", "bytes", "flooding: profiles", "bytes")]
    for report in reports.values():
        for link, c in sorted(report.get("links", {}).items()):
            f = flood.get(link, {})
            rows.append(
                (
                    link,
                    str(c["interest_messages"]),
                    str(c["profiles_forwarded"]),
                    str(c["bytes"]),
                    str(f.get("profiles_forwarded", "")),
                    str(f.get("bytes", "")),
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"── link traffic, routing {net.routing} against flooding"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _inputs(records: dict[str, list[dict]], *, with_site: bool) -> list[Any]:
    """Both files' records as engine inputs, subscriptions first; `with_site` keeps
    each record's `site` (the offline network reads it), else it is dropped."""
    from matcher.engine import Input
    from matcher.records import Source

    out = []
    for kind, role in (("subscription", "subscriptions"), ("profile", "profiles")):
        for i, r in enumerate(records[role], start=1):
            raw = json.dumps(r) if with_site else _line(r)
            out.append(Input(kind, raw, Source(file=role, line=i)))
    return out


def _same_records(got: list[dict], expected: list[dict]) -> bool:
    """`got`, a record written twice counted once, is `expected`."""
    unique = {json.dumps(r, sort_keys=True) for r in got}
    return sorted(unique) == sorted(json.dumps(r, sort_keys=True) for r in expected)


def _same_as_the_offline_network(
    net, got: list[dict], letters: list[dict], records: dict[str, list[dict]]
) -> bool:
    """The sites' records (each with its site, `moved` markers included) are the
    offline network's, and so many dead letters at each site."""
    from matcher.routing.replay import replay_network

    offline = replay_network(net, _inputs(records, with_site=True))
    if not _same_records(got, offline.matches):
        return False
    return Counter(d["site"] for d in letters) == Counter(d["site"] for d in offline.dead_letters)


def _same_as_one_matcher(got: list[dict], records: dict[str, list[dict]]) -> bool:
    from matcher.engine import Engine

    items = _inputs(records, with_site=False)
    expected = [o.value for o in Engine().process_batch(items) if o.topic == "matches"]
    return _same_records([{k: v for k, v in r.items() if k != "site"} for r in got], expected)
