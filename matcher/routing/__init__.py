"""Content-based routing between sites (ROUTING.md): pure, no I/O.

Modules, from the bottom up:

| module | job |
|---|---|
| `network` | the network file: sites, links (a tree), routing settings; its refusals |
| `order` | the event-time key every input of a site is merged by |
| `wire` | what crosses a link, as plain JSON records (interest, adverts, profiles, watermarks) |
| `cover_set` | distinct filters asked the covering questions (which cover F, which F covers) |
| `merging` | root-set merging, perfect and imperfect, re-derived when a part leaves |
| `interest` | the strategies: what a site tells a neighbour it wants; `Eligible` (adverts) |
| `adverts` | advertisements: records, a site's own, which profiles they admit |
| `forwarding` | which profiles go over a link: interest, catch-up, what the neighbour holds |
| `moves` | a client's `move` (§5): its record, asks, handovers; a site's own input stage |
| `members` | delivery subscriptions held at their space's selecting site (DELIVERY.md §9) |
| `local` | a site's own records as the keyed items its parts take; what a move hands over |
| `site` | a site: its matcher and, per neighbour, the advert, interest and profile ports |
| `offline` | every site in one process, with seeded link delays (`tsm replay --network`) |
| `replay` | raw records in, every site's match records out in one matcher's order; §6 counts |
"""
