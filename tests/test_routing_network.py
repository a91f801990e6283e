"""The network file (ROUTING §1, §7): what it accepts, and each fault refused in one line."""

from __future__ import annotations

import pytest

from matcher.routing.network import NetworkError, parse_network

SITES = "[sites.harbour]\n[sites.centre]\n[sites.airport]\n"


def refused(text: str) -> str:
    with pytest.raises(NetworkError) as info:
        parse_network(text, "net.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("net.toml: ")
    return message


def test_the_spec_example_is_accepted_with_its_defaults():
    net = parse_network(
        """
        routing = "covering"
        merge = "imperfect"
        merge_budget = 0.05
        advertisements = false
        idle_ms = 5000
        links = [["harbour", "centre"], ["centre", "airport"]]

        [sites.harbour]
        bootstrap = "localhost:9092"
        prefix = ""

        [sites.centre]
        bootstrap = "localhost:9093"

        [sites.airport]
        bootstrap = "localhost:9094"
        """
    )
    assert net.names == ("harbour", "centre", "airport") and net.first == "harbour"
    assert net.neighbours("centre") == ("airport", "harbour")
    assert net.behind("harbour", "centre") == {"centre", "airport"}
    assert net.behind("centre", "harbour") == {"harbour"}
    assert net.sites[1].bootstrap == "localhost:9093" and net.sites[0].prefix == ""
    assert parse_network("[sites.only]\n").routing == "covering"  # one site, no links


@pytest.mark.parametrize(
    ("links", "words"),
    [
        ('[["harbour", "centre"], ["centre", "airport"], ["airport", "harbour"]]', "cycle"),
        (
            '[["harbour", "centre"], ["centre", "airport"], ["airport", "harbour"]]',
            "airport – centre – harbour – airport",
        ),
        ('[["harbour", "centre"], ["centre", "moon"]]', "'moon'"),
        ('[["harbour", "centre"]]', "'airport' is not connected"),
        ("[]", "a link is missing"),
        ('[["harbour", "centre"], ["centre", "harbour"], ["centre", "airport"]]', "given twice"),
        ('[["harbour", "harbour"], ["centre", "airport"]]', "to itself"),
        ('[["harbour"]]', "pair of site names"),
    ],
)
def test_a_network_that_is_not_a_tree_is_refused_naming_the_fault(links, words):
    assert words in refused(f"links = {links}\n{SITES}")


def test_a_site_named_twice_is_refused():
    assert "twice" in refused(
        'links = [["harbour", "centre"]]\n[sites.harbour]\n[sites.centre]\n[sites.harbour]\n'
    )


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ('routing = "gossip"', "routing 'gossip' is unknown"),
        ('merge = "sometimes"', "merge 'sometimes'"),
        ("merge_budget = -0.1", "merge_budget"),
        ("merge_budget = nan", "merge_budget"),
        ('advertisements = "yes"', "advertisements must be true or false"),
        ("idle_ms = -1", "idle_ms"),
        ("idle_ms = 1.5", "idle_ms"),
        ("rooting = 'simple'", "unknown setting 'rooting'"),
    ],
)
def test_bad_settings_are_refused(setting, words):
    assert words in refused(
        f'{setting}\nlinks = [["harbour", "centre"], ["centre", "airport"]]\n{SITES}'
    )


def test_bad_sites_are_refused():
    assert "no sites" in refused('routing = "simple"\n')
    assert "unknown setting 'bootstrp'" in refused('[sites.a]\nbootstrp = "x:1"\n')
    assert "must be a string" in refused("[sites.a]\nbootstrap = 9092\n")
    assert "site name" in refused('[sites."a b"]\n')
    assert "not valid TOML" in refused("links = [[\n")
