"""simstore._distinct.distinct against np.unique (its oracle)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from simstore._distinct import distinct


@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(1, 40))
def test_distinct_is_np_unique_for_uint64(values: list[int], spread: int) -> None:
    """Sorted distinct values, duplicates (values folded into fewer by spread) included."""
    a = np.array([v % (2**64 // spread) for v in values], dtype=np.uint64)
    got = distinct(a)
    assert got.dtype == np.uint64
    assert np.array_equal(got, np.unique(a))


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300))
def test_distinct_is_np_unique_for_int64(values: list[int]) -> None:
    a = np.array(values + values[: len(values) // 2], dtype=np.int64)
    assert np.array_equal(distinct(a), np.unique(a))


def test_distinct_of_nothing_and_of_one() -> None:
    assert distinct(np.empty(0, dtype=np.uint64)).tolist() == []
    assert distinct(np.array([7], dtype=np.int64)).tolist() == [7]
    assert distinct(np.array([3, 3, 3], dtype=np.uint64)).tolist() == [3]
