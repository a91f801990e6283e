"""Client settings: defaults, the user's `kafka.*` options and required settings, in order."""

from connectors.config import confluent_config, producer_config


def test_producers_compress_unless_the_user_says_otherwise() -> None:
    assert producer_config(confluent_config("b:1"))["compression.type"] == "zstd"
    assert producer_config(confluent_config("b:1"))["compression.level"] == 1
    mine = producer_config(confluent_config("b:1", {"kafka.compression.type": "lz4"}))
    assert mine["compression.type"] == "lz4"
    assert "compression.type" not in confluent_config("b:1")  # consumers get no producer key


def test_producers_keep_user_options_but_not_over_what_they_require() -> None:
    config = producer_config(
        confluent_config("b:1", {"kafka.compression.type": "none", "kafka.acks": "1"})
    )
    assert config["compression.type"] == "none"
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["partitioner"] == "murmur2_random"


def test_the_operator_writes_at_least_once_and_the_sink_exactly_once() -> None:
    """The job's operator gets a client configuration (with the user's options) unless
    the run is exactly once, whose transactions only the sink can key."""
    from connectors.outlet import DirectWriter, outlet
    from connectors.sink_rows import Packer
    from streaming.config import JobConfig
    from streaming.job import direct_output

    config = JobConfig(bootstrap="b:1", kafka={"security.protocol": "SSL"})
    direct = direct_output(config)
    assert direct == confluent_config("b:1", {"kafka.security.protocol": "SSL"})
    assert isinstance(outlet("t", direct), DirectWriter)
    assert direct_output(JobConfig(bootstrap="b:1", exactly_once=True)) is None
    assert isinstance(outlet("t", None), Packer)
