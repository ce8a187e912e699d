"""The key table of csrc/keytable.c (a multimap read by C) against a dict of lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simstore.exceptions import InvalidConfigError
from simstore.native.keytable import EMPTY, KeyTable

keys = st.integers(0, 2**64 - 2)  # every key but the empty slot's


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("bands"), st.lists(st.integers(0, 3) | st.integers(0, 2**32 - 1),
                                                 max_size=20),
                      st.integers(0, 2**64 - 1)),
            st.tuples(st.just("many"), st.lists(st.integers(0, 40) | keys, max_size=60),
                      st.integers(1, 5)),
        ),
        max_size=40,
    ),
    queries=st.lists(st.integers(0, 40) | keys, max_size=30),
)
def test_the_table_holds_what_a_dict_of_lists_holds(ops, queries):
    """add_bands (a doc's band keys as its record's bytes) and add (values shared by `per`
    keys), through every growth: find gives each query's values, repeats kept, as a dict
    of lists does."""
    table, model = KeyTable(), {}
    asked = list(queries)
    for kind, ks, arg in ops:
        if kind == "bands":
            table.add_bands(np.array(ks, dtype=">u4").tobytes(), arg)
            for band, k32 in enumerate(ks):
                model.setdefault(band << 32 | k32, []).append(arg)
                asked.append(band << 32 | k32)
        else:
            per = arg
            vals = np.arange(100, 100 + -(-len(ks) // per), dtype=np.uint64)
            table.add(np.array(ks, dtype=np.uint64), vals, per=per)
            for i, k in enumerate(ks):
                model.setdefault(k, []).append(100 + i // per)
    assert len(table) == sum(map(len, model.values()))
    assert {k: sorted(v) for k, v in table.as_dict().items()} == \
        {k: sorted(v) for k, v in model.items()}
    got = table.find(np.array(asked, dtype=np.uint64))
    assert sorted(got) == sorted(v for q in asked for v in model.get(q, []))
    assert table.cap >= 2 * len(table)


def test_the_empty_key_is_refused():
    """A key that marks an empty slot is refused, and nothing of its call is added."""
    table = KeyTable()
    with pytest.raises(InvalidConfigError):
        table.add(np.array([5, EMPTY], dtype=np.uint64), np.array([1], dtype=np.uint64), per=2)
    assert len(table) == 0 and table.find(np.array([5, EMPTY], dtype=np.uint64)) == []
