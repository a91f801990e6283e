"""The command line's contract (CLI.md) where it needs neither a broker nor Spark:
flags every command has, what goes to stdout and what to the log, the settings
file, and what the demo and the benchmarks may write."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tsm_cli.main import build_parser
from tsm_cli.main import main as tsm

ROOT = Path(__file__).resolve().parent.parent


def leaf_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command's parser with its words (`("broker", "start")`), the top one first."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += leaf_parsers(sub, (*path, name))
    return found


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tsm_cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stdout.startswith("tsm ") and done.stdout.split()[1][0].isdigit()


def test_every_command_takes_quiet_and_verbose() -> None:
    parsers = leaf_parsers(build_parser())
    assert len(parsers) > 10
    for words, parser in parsers:
        flags = {s for a in parser._actions for s in a.option_strings}
        assert {"-q", "-v", "--quiet", "--verbose"} <= flags, words


def test_verbosity_before_or_after_the_command() -> None:
    parser = build_parser()
    for argv, level in (
        (["-v", "demo"], 1),
        (["demo", "-v", "-v"], 2),
        (["-q", "demo"], -1),
        (["broker", "status", "-q"], -1),
        (["demo"], 0),
    ):
        args = parser.parse_args(argv)
        assert args.verbose - args.quiet == level, argv


def test_log_lines_go_to_stderr_and_follow_quiet(tmp_path, capsys) -> None:
    gen = ["gen", "uniform", "--subscriptions", "3", "--profiles", "2", "--out-dir"]
    assert tsm([*gen, str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err.splitlines()[-1]
        == f"tsm gen: wrote 3 subscription and 2 profile records to {tmp_path / 'a'}"
    )
    assert tsm(["-q", *gen, str(tmp_path / "b")]) == 0
    assert capsys.readouterr() == ("", "")
    assert tsm(["gen", "uniform", "--subscriptions", "-1", "-q", "--out-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "tsm gen: error: --subscriptions and --profiles must not be negative\n"
    )


def test_broker_status_prints_data_only(tmp_path, capsys) -> None:
    """No broker: nothing on stdout (which carries the address when one runs), exit 1."""
    assert tsm(["broker", "status", "--data-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"tsm broker: not running ({tmp_path})\n"
    assert tsm(["broker", "stop", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr() == ("", "tsm broker: not running\n")


# -- the settings file -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["topics", "create"],
        ["produce", "profiles", "-"],
        ["consume", "matches"],
    ],
)
def test_commands_that_name_topics_read_tsm_toml_from_the_working_directory(
    tmp_path, monkeypatch, capsys, command
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tsm.toml").write_text('[topics]\nmatches = "m"\nprofiles = "m"\n')
    assert tsm(command) == 2
    err = capsys.readouterr().err
    assert "tsm.toml: [topics]: profiles and matches are both 'm'" in err, err
    Path("other.toml").write_text("lateness_ms = -1\n")
    assert tsm([*command, "--config", "other.toml"]) == 2
    assert "other.toml: lateness_ms must be from 0" in capsys.readouterr().err


def test_run_settings_from_the_file_then_the_flags(tmp_path, monkeypatch) -> None:
    from tsm_cli.run import settings

    monkeypatch.chdir(tmp_path)
    Path("tsm.toml").write_text(
        'bootstrap = "broker:9092"\nexactly_once = true\n'
        '[topics]\nmatches = "out"\n[kafka]\nlog_level = 7\n'
    )
    parser = build_parser()
    config = settings(parser.parse_args(["run"]))
    assert config.bootstrap == "broker:9092" and config.exactly_once
    assert config.topics.matches == "out"
    assert config.kafka["log_level"] == "7"  # the user's own setting wins over -q/-v's
    config = settings(parser.parse_args(["run", "--no-exactly-once", "--bootstrap", "b:1"]))
    assert not config.exactly_once and config.bootstrap == "b:1"
    Path("tsm.toml").unlink()
    config = settings(parser.parse_args(["run", "--exactly-once", "--bootstrap", "b:1", "-q"]))
    assert config.exactly_once and config.kafka["log_level"] == "3"


# -- the demo's data directory --------------------------------------------------------------------


def test_demo_refuses_a_data_dir_it_did_not_make(tmp_path, monkeypatch, capsys) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    monkeypatch.chdir(tmp_path)
    for data_dir in (".", str(tmp_path), str(mine)):
        assert tsm(["demo", "--data-dir", data_dir]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tsm demo: error: --data-dir {data_dir}")
    assert mine.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_demo_wipes_only_what_it_made(tmp_path) -> None:
    from tsm_cli.demo_data_dir import MARKER, claim_data_dir, wipe_data_dir

    new = tmp_path / "new" / "demo"
    claim_data_dir(new)  # a new directory: made and marked
    (new / "checkpoint" / "state").mkdir(parents=True)
    (new / "spark.log").write_text("chatter")
    claim_data_dir(new)  # marked: taken again
    wipe_data_dir(new)
    assert [p.name for p in new.iterdir()] == [MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    claim_data_dir(empty)  # an empty one is taken too
    assert (empty / MARKER).is_file()


# -- benchmark results ---------------------------------------------------------------------------


def test_bench_writes_results_outside_the_docs_unless_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    small = ["bench", "matcher", "--quick", "--sizes", "10", "--workloads", "uniform"]
    assert tsm([*small, "--budget", "2"]) == 0
    assert not Path("docs").exists()
    result = json.loads(Path("bench-results/matcher.json").read_text())
    assert result["command"].endswith("--budget 2")
    assert "<!-- matcher -->" in Path("bench-results/README.md").read_text()
    assert tsm([*small, "--budget", "2", "--write-docs"]) == 0
    result = json.loads(Path("docs/bench/matcher.json").read_text())
    assert result["command"].endswith("--budget 2 --write-docs")
    with pytest.raises(SystemExit):
        tsm([*small, "--write-docs", "--json", "x.json"])


def test_bench_mobility_runs_single_rows_into_the_results(tmp_path, monkeypatch) -> None:
    from benchmarks import bench_mobility

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_mobility, "PROFILES", 200)
    assert tsm(["bench", "mobility", "--only", "star-8:1", "--results", "out"]) == 0
    assert tsm(["bench", "mobility", "--only", "line-7:1,star-8:1", "--results", "out"]) == 0
    result = json.loads(Path("out/mobility.json").read_text())
    assert [(r["topology"], r["clients"]) for r in result["rows"]] == [("line-7", 1), ("star-8", 1)]
    assert [run["rows"] for run in result["meta"]["runs"]] == [["line-7:1", "star-8:1"]]
    assert not Path("docs").exists()
    assert tsm(["bench", "routing", "--only", "star-8:1"]) != 0
    with pytest.raises(SystemExit):
        tsm(["bench", "mobility", "--only", "star-9:1"])


def test_bench_routing_runs_parts_of_its_plan_into_the_results(tmp_path, monkeypatch) -> None:
    from benchmarks import bench_routing

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_routing, "QUICK", bench_routing.Plan(("nested",), 20, 20))
    part = ["bench", "routing", "--quick", "--topologies", "line-7", "--placements", "uniform"]
    assert tsm([*part, "--strategies", "simple", "--results", "out"]) == 0
    assert tsm([*part, "--strategies", "covering,simple", "--results", "out"]) == 0
    result = json.loads(Path("out/routing.json").read_text())
    assert [r["strategy"] for r in result["rows"]] == ["simple", "covering"]
    assert len(result["meta"]["runs"]) == 2
    assert "nested on line-7 (10 runs); nested on tree-15;" in result["meta"]["partial"]
    with pytest.raises(SystemExit):
        tsm([*part, "--strategies", "covering,merging"])


def test_bench_results_are_not_committed() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "bench-results/matcher.json"], cwd=ROOT, timeout=30
    )
    assert ignored.returncode == 0


def test_the_jvm_started_in_the_block_writes_to_the_file_for_good(tmp_path, capfd) -> None:
    """What `tsm demo` does with Spark's JVM: its standard streams, and its children's,
    go to the file from its start to its end; this process's are its own again."""
    from tsm_cli.logs import jvm_output_to

    talk = (
        "import sys, time; print('out', flush=True); time.sleep(0.5); print('err', file=sys.stderr)"
    )
    with jvm_output_to(tmp_path / "spark.log"):
        child = subprocess.Popen([sys.executable, "-c", talk])
    print("mine", file=sys.stderr, flush=True)
    assert child.wait(timeout=30) == 0
    assert (tmp_path / "spark.log").read_text() == "out\nerr\n"
    assert capfd.readouterr() == ("", "mine\n")
