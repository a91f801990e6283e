"""`tsm.toml`: what a good file gives, and a clear error naming the setting for
every bad one, before Spark starts (a bad cut or a topic loop would not fail,
it would match wrongly or never end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.config import Topics
from matcher.sharding import ShardSpec
from streaming.config import ConfigError, JobConfig, load_config

GOOD = """
bootstrap = "kafka:9092"
lateness_ms = 5000
trigger_interval = "10 seconds"
exactly_once = true

[topics]
matches = "alerts"

[sharding.vehicles]
attribute = "lat"
cuts = [-30, 0.0, 30.5]

[sharding.rooms]
attribute = "floor"
width = 2
cells = 3
origin = -1

[kafka]
security.protocol = "SASL_SSL"
sasl.mechanism = "PLAIN"
"ssl.ca.location" = "/etc/ca.pem"
"enable.ssl.certificate.verification" = false
"socket.timeout.ms" = 30000
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tsm.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert (config.bootstrap, config.lateness_ms, config.exactly_once) == ("kafka:9092", 5000, True)
    assert config.topics == Topics(matches="alerts")
    assert config.sharding["rooms"] == {"attribute": "floor", "width": 2, "cells": 3, "origin": -1}
    # dotted keys as librdkafka spells them, whether TOML read them as tables or not
    assert config.kafka_options == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.ssl.ca.location": "/etc/ca.pem",
        "kafka.enable.ssl.certificate.verification": "false",
        "kafka.socket.timeout.ms": "30000",
    }
    assert load_config(None) == JobConfig()


def test_flags_win_and_are_checked(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.with_overrides(lateness_ms=0, checkpoint=None).lateness_ms == 0
    with pytest.raises(ConfigError, match="lateness_ms must be from 0"):
        config.with_overrides(lateness_ms=-1)
    with pytest.raises(ConfigError, match="checkpoint must not be empty"):
        config.with_overrides(checkpoint="")


BAD = [
    ('colour = "red"', r"unknown setting\(s\): colour"),
    ("lateness_ms = true", "lateness_ms must be a whole number, got True"),
    ("exactly_once = 1", "exactly_once must be true or false, got 1"),
    ("bootstrap = 9092", "bootstrap must be a string, got 9092"),
    ("lateness_ms = 9223372036854775807", "lateness_ms must be from 0 to 315537897599999"),
    ('checkpoint = ""', "checkpoint must not be empty"),
    ('query_name = ""', "query_name must not be empty"),
    ("shuffle_partitions = 0", "shuffle_partitions must be positive"),
    ('source = "jvm"', "source must be one of python, native"),
    ("[topics]\nmatches = 5", r"\[topics\]: matches: 5 is not a Kafka topic name"),
    ('[topics]\nprofiles = "a b"', "profiles: 'a b' is not a Kafka topic name"),
    ('[topics]\nprofiles = ""', "profiles: '' is not a Kafka topic name"),
    ('[topics]\nreplies = "r"', "unknown topic role"),
    # a dead letter read back as a bad subscription makes another, without end
    ('[topics]\ndeadletter = "tsm.subscriptions"', "subscriptions and deadletter are both"),
    ('[topics]\nmatches = "tsm.deadletter"', "matches and deadletter are both"),
    ('[topics]\nprofiles = "tsm.subscriptions"', "subscriptions and profiles are both"),
    ("[kafka]\nbrokers = [1, 2]", r"\[kafka\] brokers must be a string, number or boolean"),
    ('[sharding.v]\nattribute = "x"\ncuts = [3, 1]', r"\[sharding.v\]: cuts must ascend"),
    ('[sharding.v]\nattribute = "x"\ncuts = [1, 1]', "cuts must ascend"),
    ('[sharding.v]\nattribute = "x"\ncuts = [nan]', "cuts must be finite numbers, got nan"),
    ('[sharding.v]\nattribute = "x"\ncuts = [inf]', "cuts must be finite numbers, got inf"),
    ('[sharding.v]\nattribute = "x"\ncuts = ["a"]', "cuts must be finite numbers, got 'a'"),
    ('[sharding.v]\nattribute = "x"\ncuts = [true]', "cuts must be finite numbers, got True"),
    ('[sharding.v]\nattribute = ""\ncuts = [1]', "attribute must be an attribute's name"),
    ("[sharding.v]\nattribute = 5\ncuts = [1]", "attribute must be an attribute's name"),
    ('[sharding.v]\nattribute = "x"', "needs attribute and cuts"),
    ('[sharding.v]\nattribute = "x"\nwidth = 0\ncells = 3', "width must be a positive number"),
    ('[sharding.v]\nattribute = "x"\nwidth = -1\ncells = 3', "width must be a positive number"),
    ('[sharding.v]\nattribute = "x"\nwidth = "1"\ncells = 3', "width must be a positive number"),
    ('[sharding.v]\nattribute = "x"\nwidth = 1\ncells = 3\norigin = nan', "origin a number"),
    ('[sharding.v]\nattribute = "x"\nwidth = 1\ncells = 0', "cells must be a whole number"),
    ('[sharding.v]\nattribute = "x"\nwidth = 1\ncells = 2.5', "cells must be a whole number"),
    ('[sharding.v]\nattribute = "x"\nwidth = 1\ncells = 100000000', "from 1 to 1024"),
    ("[sharding]\nv = 1", r"\[sharding.v\] must be a table"),
    ("bootstrap = ", "tsm.toml: "),  # TOML syntax, with its line
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_file_names_the_setting(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(write(tmp_path, text))
    assert str(caught.value).startswith(str(tmp_path / "tsm.toml"))


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read .*nope.toml"):
        load_config(tmp_path / "nope.toml")


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "tsm.toml"
    path.write_bytes(b'query_name = "caf\xe9"\n')  # Latin-1
    with pytest.raises(ConfigError, match=r"tsm.toml: not UTF-8 \(byte 18\)"):
        load_config(path)


def test_shard_specs_refuse_what_would_match_wrongly() -> None:
    assert ShardSpec("x", ()).cells == 1
    assert ShardSpec.grid("x", 0.5, 3, origin=-1).cuts == (-0.5, 0.0)
    with pytest.raises(ValueError, match="at most 1024 cells"):
        ShardSpec("x", tuple(range(1024)))
    with pytest.raises(ValueError, match="cuts must ascend"):
        ShardSpec.grid("x", 1e-300, 3, origin=1e10)  # (the cuts round to one)
