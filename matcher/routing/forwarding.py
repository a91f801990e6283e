"""Which profiles go over one link, per space (ROUTING §3, §4).

A site keeps, for each neighbour and space:

- the neighbour's interest: the filters it sent (counted: `simple` sends a
  filter once per subscription) in a `cover_set.CoverSet`, their boxes
  grouped by the attributes they constrain, so that a run of profiles is
  tested against all of them in a few vector operations. (A forest prunes
  better, but inserting a filter in one cost more than all the matching: a
  link's interest changes about as often as profiles cross it, and each
  filter reaches every link toward its site.);
- the profiles this site holds from every other side (its own publishers and
  its other neighbours), with their boxes (`_Profiles`): when the
  neighbour's interest grows, those the new filter overlaps and that it does
  not hold are sent at once (*catch-up*), keyed just before the interest that
  asked for them, as held before that interest's ts (ROUTING §4);
- what the neighbour holds: the last version of each id sent to it, until it
  is retracted or expires (`valid_to` below the ts at hand). A version there
  that this site has since replaced without sending the new one is *stale*
  (kept in another `_Profiles`); invariant: the neighbour's interest overlaps no
  stale version, so none makes a pair there.

A publish goes over the link if the neighbour's interest overlaps it. If it
does not, it still goes when the neighbour holds the id in a version its
interest overlaps: that version's pairs there must end, `changed`, as at one
matcher; otherwise the neighbour's version becomes stale. When the interest
grows, a stale version it overlaps is replaced by the current one, or, where
this site holds none any more (it expired here first), retracted: the
subscription that asked must not meet it. A publish sent to a neighbour that
holds no version of its id, while this site holds one it replaces, is preceded
by that one (it makes no pair there, or it would have gone over when it
came): the pairs are then `changed`, not `new-profile`, as at one matcher; one
sent to a neighbour that holds a stale version, while this site holds none
valid (it expired here), is preceded by a retract of that one, for the same
reason. A retract goes over if the neighbour holds the id. Nothing is sent back to the
side it came from (the caller gives only other sides' profiles). With
`flooding`, everything goes.

Costs: a run of profiles, one vector test against the interest plus O(1) a
profile (one test more for a profile that leaves the interest); an interest
add, two vector tests over the profiles held (current and stale) the first
time its filter is seen.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from matcher.constraints import Conjunction
from matcher.records import Publish, Retract, to_state
from matcher.routing.cover_set import Boxes, CoverSet
from matcher.routing.order import CATCH_UP, Key

MISSING = (math.inf, -math.inf)  # a profile's box where it lacks the column (`boxes`)
Sent = tuple[Publish | Retract, Key]


class _Profiles:
    """Profiles by id with their boxes (`cover_set.Boxes`' columns), for "which does
    this filter overlap"; each entry stamped so that an expiry entry tells its
    version.

    `put` and `drop` cost O(attributes); `overlapped_by` O(profiles × columns the
    filter constrains) in one vector test, plus `Conjunction.overlaps` for each
    candidate where the filter's box does not say everything (a link holds a few
    hundred live profiles: one vector test is several times faster than a forest
    query). Invariant: `boxes` has an entry for exactly the ids in `by_id`."""

    def __init__(self, boxes: Boxes) -> None:
        self.dims = boxes.dims
        self.filters = boxes
        self.by_id: dict[str, tuple[Publish, int]] = {}  # id -> (record, stamp)
        self.boxes: dict[str, dict[int, tuple[float, float]]] = {}
        self._expiry: list[tuple[float, str, int]] = []
        self._stamp = 0

    def get(self, ident: str, now: float) -> Publish | None:
        """The version held for `ident`, if it is valid at `now`."""
        held = self.by_id.get(ident)
        return held[0] if held is not None and held[0].valid_to >= now else None

    def put(self, pub: Publish) -> None:
        self._stamp += 1
        self.by_id[pub.id] = (pub, self._stamp)
        self.boxes[pub.id] = self.dims.profile_box(pub.profile)
        heapq.heappush(self._expiry, (pub.valid_to, pub.id, self._stamp))

    def drop(self, ident: str) -> None:
        if self.by_id.pop(ident, None) is not None:
            del self.boxes[ident]

    def overlapped_by(self, conj: Conjunction) -> list[str]:
        if not self.by_id:
            return []
        bounds, inexact = self.filters.of(conj)
        ids = list(self.boxes)
        if bounds:
            columns = list(bounds)
            ends = [[box.get(col, MISSING) for col in columns] for box in self.boxes.values()]
            points = np.array(ends).reshape(len(ids), len(columns), 2)
            lo = np.array([bounds[col][0] for col in columns])
            hi = np.array([bounds[col][1] for col in columns])
            meet = ((points[:, :, 0] <= hi) & (points[:, :, 1] >= lo)).all(axis=1)
            ids = [ids[i] for i in np.flatnonzero(meet).tolist()]
        if inexact:
            ids = [i for i in ids if conj.overlaps(self.by_id[i][0].profile)]
        return ids

    def expire(self, now: float) -> None:
        """Forget the versions that expired before `now`."""
        while self._expiry and self._expiry[0][0] < now:
            _, ident, stamp = heapq.heappop(self._expiry)
            held = self.by_id.get(ident)
            if held is not None and held[1] == stamp:
                self.drop(ident)


class Forwarder:
    """One neighbour's side of one space at one site (see the module docstring)."""

    def __init__(self, *, flooding: bool = False, boxes: Boxes | None = None) -> None:
        self.flooding = flooding
        self.table = CoverSet(boxes)  # the neighbour's interest, counted
        boxes = self.table.boxes  # (one set of columns: a filter's box is made once)
        self.held = _Profiles(boxes)  # this site's current versions, from the other sides
        self.theirs: dict[str, Publish] = {}  # the version the neighbour holds, by id
        self.stale = _Profiles(boxes)  # the neighbour's versions that `held` has replaced

    @property
    def entries(self) -> int:
        return self.table.total()

    # -- the neighbour's interest ---------------------------------------------

    def interest(self, op: str, conj: Conjunction, key: Key) -> list[Sent]:
        """Apply one interest change; what it makes this site send (catch-up)."""
        if op == "remove":
            self.table.discard(conj)
            return []
        if not self.table.add(conj):
            return []
        now = key.ts
        self._expire(now)
        at = key._replace(seq=CATCH_UP)
        out: list[Sent] = []
        for ident in sorted(set(self.held.overlapped_by(conj) + self.stale.overlapped_by(conj))):
            current, theirs = self.held.get(ident, now), self._theirs(ident, now)
            if current is not None and theirs is not current:
                self._sent(current)
                out.append((current, at))
            elif current is None and theirs is not None:
                self._forget(ident)
                out.append((Retract(theirs.space, ident, now), at))
        return out

    # -- profiles from the other sides ----------------------------------------

    def profiles(self, run: list[tuple[Key, Publish | Retract]]) -> list[Sent]:
        """A run of profile records (no interest change among them), in key order:
        those to send on."""
        if self.flooding:
            return [(rec, key) for key, rec in run]
        pubs = [i for i, (_, rec) in enumerate(run) if isinstance(rec, Publish)]
        wanted: set[int] = set()
        if pubs and len(self.table):
            hits = self.table.overlapping([run[i][1].profile for i in pubs])
            wanted = {pubs[q] for q in np.flatnonzero(hits).tolist()}
        out: list[Sent] = []
        for i, (key, rec) in enumerate(run):
            now = key.ts
            self._expire(now)
            theirs = self._theirs(rec.id, now)
            if isinstance(rec, Retract):
                self.held.drop(rec.id)
                if theirs is not None:
                    self._forget(rec.id)
                    out.append((rec, key))
                continue
            before = self.held.get(rec.id, now)
            self.held.put(rec)
            if i in wanted:
                if theirs is None and before is not None:
                    self._sent(before)
                    out.append((before, key._replace(seq=CATCH_UP)))
                elif theirs is not None and before is None:
                    # (a stale version that outlived the current one here: it ends there
                    # first, or the publish would be `changed`, not `new-profile`)
                    self._forget(rec.id)
                    out.append((Retract(rec.space, rec.id, now), key._replace(seq=CATCH_UP)))
                self._sent(rec)
                out.append((rec, key))
            elif theirs is not None:
                if theirs is before and self._overlaps(theirs):
                    self._sent(rec)
                    out.append((rec, key))
                elif theirs is before:
                    self.stale.put(theirs)
        return out

    # -- a profile that moved (ROUTING §5, `moves`) ----------------------------

    def moved(self, pub: Publish, toward: str) -> None:
        """A profile moved between two sites at this version; `toward` says which end
        lies behind the link alone. Toward the new site ("new"), its versions now
        come from the neighbour's side: forget it. Toward the old one ("old"), it
        comes from this side, and the neighbour holds it (every site on the way
        takes it). Otherwise it comes from this side as before, and a version the
        neighbour holds that this one replaces is stale there (this site had not
        heard of the versions in between, or it would hold one of them). O(log n)."""
        if self.flooding:
            return
        if toward == "new":
            self.held.drop(pub.id)
            self._forget(pub.id)
            return
        current = self.held.by_id.get(pub.id)
        if current is not None and to_state(current[0]) == to_state(pub):
            pub = current[0]  # (the object `theirs` may hold: versions are told by it)
        else:
            self.held.put(pub)
            theirs = self.theirs.get(pub.id)
            if toward == "" and theirs is not None and to_state(theirs) != to_state(pub):
                # (a version this site had not heard was replaced: stale there, so that
                # interest that overlaps it later gets the current one)
                self.stale.put(theirs)
        if toward == "old":
            self._sent(pub)

    def _overlaps(self, pub: Publish) -> bool:
        return bool(self.table.overlapping([pub.profile])[0])

    def _theirs(self, ident: str, now: float) -> Publish | None:
        theirs = self.theirs.get(ident)
        if theirs is not None and theirs.valid_to < now:
            self._forget(ident)
            return None
        return theirs

    def _sent(self, pub: Publish) -> None:
        self.theirs[pub.id] = pub
        self.stale.drop(pub.id)

    def _forget(self, ident: str) -> None:
        self.theirs.pop(ident, None)
        self.stale.drop(ident)

    def _expire(self, now: float) -> None:
        self.held.expire(now)
        self.stale.expire(now)
