"""docker-compose.yml, checked as far as a machine without a Docker engine allows: the
file parses, every command its services run exists (Spark's launchers and classes
in the Spark of the images, the `tsm` commands and their flags, the files they
name), and what the job passes to Spark's own Kafka connector (`--source native`)
is what that connector takes. What stays unchecked: the images themselves, the
Kafka image's `kafka-topics.sh`, and the network between the containers."""

from __future__ import annotations

import re
import shlex
import zipfile
from pathlib import Path

import pytest
import yaml

from connectors.config import java_client_options
from matcher.routing.network import parse_network
from tsm_cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()

# What Spark's Kafka source takes (Structured Streaming + Kafka Integration Guide,
# Spark 4): its own options, and `kafka.<consumer setting>` for the Java consumer.
SPARK_KAFKA_OPTIONS = {
    "assign",
    "subscribe",
    "subscribePattern",
    "kafka.bootstrap.servers",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "groupIdPrefix",
    "includeHeaders",
    "startingOffsetsByTimestampStrategy",
}
# Java consumer settings Spark refuses (it sets them itself), and some other
# consumer settings a user may pass (security, timeouts).
SPARK_REFUSES = {"auto.offset.reset", "enable.auto.commit", "interceptor.classes"}
SPARK_REFUSES |= {"key.deserializer", "value.deserializer"}
JAVA_CONSUMER_SETTINGS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.dns.lookup",
    "request.timeout.ms",
    "session.timeout.ms",
}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def spark_classes() -> set[str]:
    names: set[str] = set()
    for jar in (spark_home() / "jars").glob("spark-core_*.jar"):
        names |= {n[:-6].replace("/", ".") for n in zipfile.ZipFile(jar).namelist()}
    return names


def command(service: str) -> list[str]:
    spec = SERVICES[service]["command"]
    return shlex.split(spec) if isinstance(spec, str) else list(spec)


def tsm_args(words: list[str]):
    """The namespace `tsm` parses from `words` (argparse exits on what it refuses)."""
    return build_parser().parse_args(words)


def test_the_file_parses_and_names_its_services():
    single_site = {n for n, s in SERVICES.items() if not s.get("profiles")}
    assert single_site == {"kafka", "spark-master", "spark-worker", "topics-init", "tsm"}
    assert SERVICES["spark-worker"]["build"]["dockerfile"] == "docker/Dockerfile"
    assert (ROOT / SERVICES["tsm"]["build"]["dockerfile"]).is_file()
    for service in SERVICES.values():
        for dependency in service.get("depends_on", ()):
            assert dependency in SERVICES


def test_the_spark_of_the_images_is_the_installed_one():
    version = spark_version()
    assert SERVICES["spark-master"]["image"].startswith(f"apache/spark:{version}-")
    assert f"ARG SPARK_VERSION={version}" in DOCKERFILE
    packages = command("tsm")[command("tsm").index("--packages") + 1]
    assert packages == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"


@pytest.mark.parametrize(
    ("service", "cls"),
    [
        ("spark-master", "org.apache.spark.deploy.master.Master"),
        ("spark-worker", "org.apache.spark.deploy.worker.Worker"),
    ],
)
def test_the_spark_daemons_are_spark_s_own_launcher_and_classes(service, cls):
    words = command(service)
    assert Path(words[0]).name == "spark-class"
    assert (spark_home() / "bin" / "spark-class").is_file()
    assert words[1] == cls and cls in spark_classes()
    if service == "spark-worker":
        assert words[2] == "spark://spark-master:7077"


def test_topics_init_runs_tsm_commands_that_exist_on_files_that_exist():
    words = command("topics-init")
    assert words[:2] == ["sh", "-c"]
    steps = [shlex.split(step) for step in words[2].split("&&")]
    assert [step[:2] for step in steps] == [
        ["tsm", "topics"],
        ["tsm", "produce"],
        ["tsm", "produce"],
    ]
    for step in steps:
        args = tsm_args(step[1:])
        assert args.bootstrap == "kafka:9092"
        if step[1] == "produce":
            assert (ROOT / args.file).is_file(), args.file


def test_the_job_is_submitted_with_spark_submit_s_options_and_tsm_run_s_flags():
    words = command("tsm")
    assert words[0] == "spark-submit" and (spark_home() / "bin" / "spark-submit").is_file()
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    options = words[1:script]
    flags = [w for w in options if w.startswith("--")]
    assert set(flags) <= {"--master", "--packages", "--conf", "--py-files"}
    assert options[options.index("--master") + 1] == "spark://spark-master:7077"
    assert (ROOT / words[script]).is_file()
    args = tsm_args(words[script + 1 :])
    assert args.command == "run" and args.master == "spark://spark-master:7077"
    assert args.source == "native" and args.bootstrap == "kafka:9092"
    for source in re.findall(r"^COPY (?!--from)(\S+)", DOCKERFILE, re.MULTILINE):
        assert (ROOT / source).exists(), source


class Captured(Exception):
    """Raised by the fake reader's `load()`: the options are complete by then."""


class RecordingReader:
    """`spark.readStream` as far as `read_stream` uses it: records the format and options."""

    def __init__(self) -> None:
        self.source: str | None = None
        self.captured: dict[str, str] = {}

    def format(self, name: str) -> RecordingReader:
        self.source = name
        return self

    def option(self, key: str, value: str) -> RecordingReader:
        self.captured[key] = str(value)
        return self

    def options(self, **values: str) -> RecordingReader:
        self.captured.update({k: str(v) for k, v in values.items()})
        return self

    def load(self):
        raise Captured


class RecordingSpark:
    def __init__(self) -> None:
        self.readStream = RecordingReader()
        self.conf = self

    def set(self, key: str, value: str) -> None:
        pass


def native_options(argv: list[str]) -> tuple[str | None, dict[str, str]]:
    """What `tsm run ARGV` gives Spark's Kafka connector, up to `load()`."""
    from streaming import job
    from tsm_cli.run import settings

    config = settings(tsm_args(argv))
    spark = RecordingSpark()
    with pytest.raises(Captured):
        job.matched_stream(spark, config, metrics=None)
    return spark.readStream.source, spark.readStream.captured


def test_the_options_the_job_gives_spark_s_kafka_connector_are_all_its_own(tmp_path):
    words = command("tsm")
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    argv = [*words[script + 1 :], "--checkpoint", str(tmp_path / "ck")]
    source, options = native_options(argv)
    assert source == "kafka"
    assert options["kafka.bootstrap.servers"] == "kafka:9092"
    assert options["subscribe"] == "tsm.subscriptions,tsm.profiles"
    assert options["startingOffsets"] == "earliest"
    assert options["includeHeaders"] == "true"
    assert options["maxOffsetsPerTrigger"] == "100000"
    for key in options:
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            assert key.removeprefix("kafka.") in JAVA_CONSUMER_SETTINGS, key
        else:
            assert key in SPARK_KAFKA_OPTIONS, key


def test_sasl_ssl_settings_reach_the_java_connector_in_its_own_names(tmp_path):
    """A tsm.toml `[kafka]` table in librdkafka's names serves the native source too."""
    settings = tmp_path / "tsm.toml"
    settings.write_text(
        '[kafka]\nsecurity.protocol = "SASL_SSL"\nsasl.mechanism = "SCRAM-SHA-512"\n'
        'sasl.username = "tsm-job"\nsasl.password = "s3cr\\"et"\n'
        'ssl.ca.location = "/etc/kafka/ca.pem"\n'
    )
    argv = ["run", "--bootstrap", "kafka:9093", "--source", "native", "--config", str(settings)]
    _, options = native_options([*argv, "--checkpoint", str(tmp_path / "ck")])
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="tsm-job" password="s3cr\\"et";'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/etc/kafka/ca.pem"
    kafka = {k.removeprefix("kafka.") for k in options if k.startswith("kafka.")}
    assert kafka - {"bootstrap.servers"} <= JAVA_CONSUMER_SETTINGS
    assert not kafka & SPARK_REFUSES


def test_java_client_options_leave_out_librdkafka_s_own_and_keep_a_jaas_config():
    given = {"kafka.log_level": "4", "kafka.sasl.jaas.config": "x required;"}
    given |= {"kafka.sasl.username": "u", "kafka.sasl.password": "p"}
    assert java_client_options(given) == {"kafka.sasl.jaas.config": "x required;"}
    with pytest.raises(ValueError, match="give kafka.sasl.jaas.config"):
        java_client_options({"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.username": "u"})


def test_the_network_profile_runs_every_site_of_its_file():
    """Profile `network`: its network file parses (ROUTING §7), every site's bootstrap
    is a Kafka service of the profile, every site has a job service running it, and
    the image carries the file."""
    services = SERVICES
    network = {n: s for n, s in services.items() if "network" in s.get("profiles", [])}
    jobs = {}
    for name, service in network.items():
        command = service.get("command")
        if isinstance(command, list) and "--network" in command:
            path = command[command.index("--network") + 1]
            jobs[command[command.index("--site") + 1]] = (name, path)
    assert jobs, "no service runs a site"
    (path,) = {p for _, p in jobs.values()}
    net = parse_network((ROOT / path).read_text(), path)
    assert set(jobs) == set(net.names)
    for site in net.sites:
        host = site.bootstrap.rsplit(":", 1)[0]
        assert host in network and network[host]["image"].startswith("apache/kafka")
        advertised = network[host]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
        assert f"//{site.bootstrap}" in advertised
    assert f"COPY {path} {path}" in (ROOT / "docker" / "Dockerfile").read_text()
    init = network["net-init"]
    assert set(init["depends_on"]) == {s.bootstrap.rsplit(":", 1)[0] for s in net.sites}
    # the services without the profile are the single-site stack, as before
    assert {"kafka", "tsm"} <= set(services) - set(network)
