"""The Kafka topics of one site of a network (ROUTING §2), and where each one lives.

A site's cluster (its `bootstrap`, its topic `prefix`) holds:

- its clients' topics: the four of `Topics` (subscriptions, profiles,
  matches, dead letters), each name after the prefix;
- one inbound link topic per neighbour, `<prefix><neighbour>.tsm.link`: what
  that neighbour sends this site, every plane (interest, adverts, profiles,
  their watermarks) in one partition, in the order it was sent;
- `<prefix>tsm.site`: the control records its own job writes for itself
  (`control`: where its input ends, the clock ticks of an idle site);
- `<prefix>tsm.interest`: compacted, keyed by space and filter: the interest
  that reaches the site (its subscribers' and its neighbours'), as a covering
  root set, for quenching producers (ROUTING §4).

Link records are keyed by their number on the link (`n`, from 0): a record
that a re-run batch writes again has the number it had, and the receiver
applies each number once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from connectors.config import Topics
from matcher.routing.network import Network

LINK_SUFFIX = ".tsm.link"
CONTROL = "tsm.site"
INTEREST = "tsm.interest"
COMPACTED = {"cleanup.policy": "compact", "retention.ms": "-1"}


@dataclass(frozen=True)
class SiteTopics:
    """The topic names of one site, and its neighbours' inbound link topics."""

    site: str
    bootstrap: str
    topics: Topics  # the clients' topics, prefixed
    inbound: dict[str, str]  # neighbour -> the topic here that it writes
    outbound: dict[str, tuple[str, str]]  # neighbour -> (its bootstrap, the topic there)
    control: str
    interest: str

    @property
    def local_inputs(self) -> list[str]:
        """The clients' input topics, subscriptions first (SEMANTICS §5's tie order)."""
        return [self.topics.subscriptions, self.topics.profiles]

    @property
    def link_inputs(self) -> list[str]:
        """The control topic and the inbound link topics."""
        return [self.control, *self.inbound.values()]

    def created_here(self) -> dict[str, int]:
        """The topics this site's cluster must hold, with their partition counts (links
        and control: one, to keep their order)."""
        from connectors.admin import DEFAULT_PARTITIONS

        out = dict.fromkeys(self.topics.all(), DEFAULT_PARTITIONS)
        out |= dict.fromkeys(self.link_inputs, 1)
        return out


def link_topic(prefix: str, sender: str) -> str:
    """The topic on the receiving site's cluster that `sender` writes."""
    return f"{prefix}{sender}{LINK_SUFFIX}"


def site_topics(net: Network, name: str, topics: Topics | None = None) -> SiteTopics:
    """The topics of site `name` (the clients' named as `topics` says, after the site's
    prefix); ValueError if the file gives it or a neighbour no bootstrap."""
    topics = topics or Topics()
    net = net.with_producers()  # (a quenching producer's link topics are on its site)
    sites = {s.name: s for s in net.sites}
    if name not in sites:
        raise ValueError(f"site {name!r} is not in the network file ({', '.join(net.names)})")
    for other in (name, *net.neighbours(name)):
        if not sites[other].bootstrap:
            raise ValueError(
                f'site {other!r} has no bootstrap: give [sites.{other}] bootstrap = "HOST:PORT"'
            )
    here = sites[name]
    p = here.prefix
    prefixed = replace(
        topics,
        subscriptions=p + topics.subscriptions,
        profiles=p + topics.profiles,
        matches=p + topics.matches,
        deadletter=p + topics.deadletter,
    )
    inbound = {n: link_topic(p, n) for n in net.neighbours(name)}
    outbound = {
        n: (sites[n].bootstrap, link_topic(sites[n].prefix, name)) for n in net.neighbours(name)
    }
    return SiteTopics(name, here.bootstrap, prefixed, inbound, outbound, p + CONTROL, p + INTEREST)
