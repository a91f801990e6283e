"""docker-compose.yml parses, and its `network` profile hangs together (no Docker here).

Its network file must parse (ROUTING §7), every site's bootstrap must be a
Kafka service of the profile, every site must have a job service running it,
and the image must carry the file.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from matcher.routing.network import parse_network

ROOT = Path(__file__).resolve().parents[1]


def test_the_network_profile_runs_every_site_of_its_file():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
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
