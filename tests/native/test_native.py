"""The C core against numpy / mmh3 oracles."""

from __future__ import annotations

import mmh3
import numpy as np
from hypothesis import given, settings, strategies as st

from simstore.native import core as _core

from ..oracles import brute_neighbours, popcounts
from ..strategies import fingerprints


@settings(max_examples=300)
@given(data=st.binary(max_size=100), seed=st.integers(0, 2**32 - 1))
def test_murmur3_matches_mmh3(data, seed):
    """The C murmur3_x64_128 is bit-identical to mmh3 for any bytes and seed."""
    assert _core.murmur3_x64_128(data, seed) == mmh3.hash64(data, seed, signed=False)


@settings(max_examples=100)
@given(items=st.lists(st.binary(max_size=40), max_size=30), seed=st.integers(0, 2**32 - 1))
def test_murmur3_many_is_each_strings_low_half(items, seed):
    """murmur3_many hashes each of many strings laid end to end (empty ones too) as mmh3
    hashes it alone: the ids' keys of a run-ids store."""
    got = _core.murmur3_many(items, seed)
    assert got.dtype == np.uint64
    assert got.tolist() == [mmh3.hash64(x, seed, signed=False)[0] for x in items]


@given(q=fingerprints, fps=st.lists(fingerprints, max_size=50), k=st.integers(0, 64))
def test_hamming_within_equals_brute_force(q, fps, k):
    """hamming_within returns exactly the indices whose distance is <= k."""
    arr = np.array(fps, dtype=np.uint64)
    idx, dist = _core.hamming_within(q, arr, k)
    expected = brute_neighbours(fps, q, k)
    assert idx.tolist() == [i for i, _ in expected]
    assert dist.tolist() == [d for _, d in expected]


@given(a=st.lists(fingerprints, max_size=40), data=st.data())
def test_pairwise_and_one_to_many(a, data):
    """Pairwise and one-to-many distances equal numpy's bit counts."""
    b = data.draw(st.lists(fingerprints, min_size=len(a), max_size=len(a)))
    x, y = np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)
    assert _core.hamming_pairwise(x, y).tolist() == popcounts(x ^ y).tolist()
    if a:
        q = np.uint64(a[0])
        assert _core.hamming_one(a[0], y).tolist() == popcounts(y ^ q).tolist()


@given(fps=st.lists(fingerprints, max_size=30), cut=st.integers(1, 63))
def test_permute_blocks_swap_and_inverse(fps, cut):
    """Swapping two blocks equals a rotation, and the inverse moves undo it."""
    arr = np.array(fps, dtype=np.uint64)
    lo, hi = cut, 64 - cut
    # block A = low `cut` bits -> top; block B = high bits -> bottom
    fwd = _core.permute_blocks(arr, bytes([0, cut]), bytes([lo, hi]), bytes([hi, 0]))
    rot = [((f << hi) | (f >> cut)) & ((1 << 64) - 1) for f in fps]
    assert fwd.tolist() == rot
    back = _core.permute_blocks(fwd, bytes([hi, 0]), bytes([lo, hi]), bytes([0, cut]))
    assert back.tolist() == fps
