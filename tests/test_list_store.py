"""`ListStore` against a dict of lists, through growth, removal and compaction."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.forest.list_store import ListStore

OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove", "release", "compact"]),
        st.integers(0, 7),
        st.integers(0, 99),
    ),
    max_size=400,
)


@settings(max_examples=60, deadline=None)
@given(OPS, st.booleans())
def test_list_store_matches_a_model(ops, long_runs):
    store = ListStore(with_values=True)
    model: dict[int, list[int]] = {}
    where: dict[int, int] = {}
    for op, lst, elem in ops:
        if long_runs:
            lst %= 2  # few lists with many elements: the region-copy gather
        if op == "add" and elem not in where:
            store.add(lst, elem, 1000 + elem)
            model.setdefault(lst, []).append(elem)
            where[elem] = lst
        elif op == "remove" and elem in where:
            assert store.remove(elem) == where[elem]
            model[where.pop(elem)].remove(elem)
        elif op == "compact":
            store._compact()  # normally when half the array is abandoned regions
        elif op == "release" and lst in model and not model[lst]:
            store.release(lst)
            del model[lst]
    lists = np.array(sorted(model), dtype=np.int64)
    counts, elems = store.gather_counts(lists)
    _, values = store.gather_counts(lists, values=True)
    assert counts.tolist() == [len(model[x]) for x in lists.tolist()]
    assert (values == elems + 1000).all()
    bounds = np.cumsum(counts).tolist()
    for lst, a, b in zip(lists.tolist(), [0, *bounds], bounds, strict=False):
        assert sorted(elems[a:b].tolist()) == sorted(model[lst])
    for elem, lst in where.items():
        assert store.owner_of(elem) == lst
