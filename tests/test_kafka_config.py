"""Client settings: defaults, the user's `kafka.*` options and required settings, in order."""

from connectors.config import PRODUCER_DEFAULTS, confluent_config
from connectors.kafka_sink import _producer_config


def test_producers_compress_unless_the_user_says_otherwise() -> None:
    assert confluent_config("b:1", defaults=PRODUCER_DEFAULTS)["compression.type"] == "zstd"
    mine = confluent_config("b:1", {"kafka.compression.type": "lz4"}, defaults=PRODUCER_DEFAULTS)
    assert mine["compression.type"] == "lz4"
    assert "compression.type" not in confluent_config("b:1")  # consumers get no producer key


def test_the_sink_keeps_user_options_but_not_over_what_it_requires() -> None:
    config = _producer_config(
        confluent_config("b:1", {"kafka.compression.type": "none", "kafka.acks": "1"})
    )
    assert config["compression.type"] == "none"
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert _producer_config(confluent_config("b:1"))["compression.type"] == "zstd"
