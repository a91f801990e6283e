"""`tsm run --network` and `tsm net`: what they refuse and report without a broker or Spark."""

from __future__ import annotations

import json

import pytest

from tsm_cli.main import main as tsm
from tsm_cli.net import latest_reports, status_text

NET = """routing = "covering"
links = [["a", "b"]]
[sites.a]
bootstrap = "localhost:19092"
[sites.b]
bootstrap = "{b}"
"""


@pytest.fixture
def net(tmp_path):
    path = tmp_path / "net.toml"
    path.write_text(NET.format(b="localhost:19093"))
    return path


def error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_run_flags_that_do_not_go_together(net, capsys):
    assert tsm(["run", "--site", "a"]) == 2
    assert "--site needs --network" in error(capsys)
    assert tsm(["run", "--network", str(net), "--bootstrap", "localhost:1"]) == 2
    assert "the file names each cluster" in error(capsys)
    assert tsm(["run", "--network", str(net), "--site", "c"]) == 2
    assert "site 'c' is not in" in error(capsys)


def test_a_network_file_with_a_cycle_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "net.toml"
    path.write_text('links = [["a", "b"], ["b", "a"]]\n[sites.a]\n[sites.b]\n')
    assert tsm(["run", "--network", str(path)]) == 2
    assert "is given twice" in error(capsys)


def test_net_up_runs_brokers_only_here(tmp_path, capsys):
    path = tmp_path / "net.toml"
    path.write_text(NET.format(b="kafka.example.com:9092"))
    assert tsm(["net", "up", str(path), "--data-dir", str(tmp_path / "d")]) == 2
    assert "site 'b': bootstrap 'kafka.example.com:9092' is not on this machine" in error(capsys)


def test_net_status_of_a_network_not_up(net, tmp_path, capsys):
    assert tsm(["net", "status", str(net), "--data-dir", str(tmp_path / "d"), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["sites"]["a"] == {
        "broker": None,
        "job": False,
        "batch": None,
        "local_watermark": None,
        "matcher_watermark": None,
        "done": False,
        "members": {},
    }
    assert status["links"] == {}


def test_status_shows_the_last_report_of_each_site():
    counts = {"interest_messages": 3, "profiles_forwarded": 5, "bytes": 900}
    log = "\n".join(
        [
            "tsm run: site a: query started",
            json.dumps({"batch": 0, "site": "a", "links": {"a->b": {"bytes": 1}}}),
            json.dumps(
                {
                    "batch": 4,
                    "site": "a",
                    "links": {"a->b": counts},
                    "inbound_watermarks": {"b->a": {"interest": 7, "profile": "end"}},
                    "local_watermark": "end",
                    "matcher_watermark": 7,
                    "done": False,
                }
            ),
        ]
    )
    reports = latest_reports(log)
    assert reports["a"]["batch"] == 4
    status = {
        "sites": {
            "a": {
                "broker": "localhost:1",
                "job": True,
                "batch": 4,
                "local_watermark": "end",
                "matcher_watermark": 7,
                "done": False,
            }
        },
        "links": reports["a"]["links"],
        "watermarks": reports["a"]["inbound_watermarks"],
    }
    text = status_text(status)
    assert "running" in text and "900" in text
    assert text.splitlines()[-1].split()[:4] == ["a->b", "3", "0", "5"]


def test_run_refuses_a_site_checkpoint_started_with_other_producers(net, tmp_path, capsys):
    """Before any broker is asked: the site's checkpoint keeps its network's producers."""
    from matcher.routing.network import parse_network
    from streaming.checkpoint_guard import check_producers

    checkpoint = tmp_path / "cp"
    check_producers(str(checkpoint / "a"), parse_network(net.read_text()), "a")
    (checkpoint / "a" / "commits").mkdir(parents=True)
    (checkpoint / "a" / "commits" / "0").write_text("v1\n")
    net.write_text(net.read_text() + '[producers.buses]\nsite = "a"\n')
    assert tsm(["run", "--network", str(net), "--checkpoint", str(checkpoint)]) == 2
    assert "site 'a': producers changed: 'buses' added (at site 'a')" in error(capsys)
