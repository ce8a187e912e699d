"""Batch near-duplicate search (simstore.search.hamming) against a brute-force oracle."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import simstore
from simstore.exceptions import InvalidDistanceError, InvalidFingerprintError, SimstoreError
from simstore.native import core as _core
from simstore.search import hamming as batch

from ..oracles import brute_clusters, brute_pairs, popcounts
from ..strategies import MAX_FP, crowded_sets, fingerprint_sets


def _as_lists(p: batch.Pairs) -> tuple[list[int], list[int], list[int]]:
    return p.i.tolist(), p.j.tolist(), p.distance.tolist()


def _forced_plan(k: int, extra: int):
    """Patch the planner to use k + 1 + extra blocks (small inputs would go all-pairs)."""
    b = min(64, k + 1 + extra)
    combos = [sum(1 << x for x in c) for c in itertools.combinations(range(b), b - k)]
    return mock.patch.object(batch, "_plan", lambda n, kk: (b, combos))


ADVERSARIAL = [
    [],
    [7],
    [0, MAX_FP, 0, MAX_FP],
    [0, 0b111, 0b111 << 61, (0b111 << 61) | 1],  # all differing bits packed in one block
    [0xFFFF << 48, (0xFFFF << 48) ^ (0b11 << 48), 0xFFFF, 0xFFFF ^ (0b1111 << 12)],
    [123456789] * 30 + [123456789 ^ 1] * 5,
    [MAX_FP ^ (1 << b) for b in range(64)] + [MAX_FP],
]


@settings(max_examples=150, deadline=None)
@given(fps=fingerprint_sets(), k=st.integers(0, 16), extra=st.integers(-1, 3))
@example(fps=ADVERSARIAL[3], k=3, extra=0)
@example(fps=ADVERSARIAL[4], k=4, extra=0)
@example(fps=ADVERSARIAL[6], k=16, extra=0)
@example(fps=ADVERSARIAL[5], k=0, extra=0)
def test_find_all_equals_brute_force(fps, k, extra):
    """find_all returns exactly the brute-force pairs (no misses, extras or repeats) for
    every block plan, the automatic one (extra=-1) included."""
    if extra < 0:
        got = batch.find_all(fps, k)
    else:
        with _forced_plan(k, extra):
            got = batch.find_all(fps, k)
    assert _as_lists(got) == brute_pairs(fps, k)


@pytest.mark.parametrize("fps", ADVERSARIAL)
@pytest.mark.parametrize("k", [0, 1, 3, 8, 16])
def test_adversarial_inputs(fps, k):
    """Empty, single, extreme, packed-bit and many-copy inputs match brute force at k 0..16."""
    with _forced_plan(k, 0):
        assert _as_lists(batch.find_all(fps, k)) == brute_pairs(fps, k)
    assert _as_lists(batch.find_all(fps, k)) == brute_pairs(fps, k)


@settings(max_examples=40, deadline=None)
@given(fps=crowded_sets(max_size=60), k=st.integers(1, 6))
def test_crowded_prefix_small(fps, k):
    """Fingerprints sharing a long prefix (one header bucket) still give exactly brute force."""
    with _forced_plan(k, 0):
        assert _as_lists(batch.find_all(fps, k)) == brute_pairs(fps, k)


@pytest.mark.parametrize(
    "free_bits,k,extra", [(24, 3, 0), (24, 3, 1), (12, 3, 0), (16, 5, 0), (20, 2, 1), (30, 8, 0)]
)
def test_crowded_groups_are_split_exactly(free_bits, k, extra):
    """Groups far above the all-pairs threshold (shared prefix) are split recursively
    without losing or repeating a pair."""
    rng = np.random.default_rng(free_bits * 100 + k)
    prefix = np.uint64(0xDEADBEEFCAFEF00D) >> np.uint64(free_bits) << np.uint64(free_bits)
    low = rng.integers(0, 1 << free_bits, size=1500, dtype=np.uint64)
    fps = prefix | low
    near = fps[:200] ^ (np.uint64(1) << rng.integers(0, free_bits, 200).astype(np.uint64))
    fps = np.concatenate([fps, near, fps[:50]])
    with _forced_plan(k, extra):
        assert _as_lists(batch.find_all(fps, k)) == brute_pairs(fps, k)


def test_planted_neighbours_all_found():
    """50k random fingerprints + 500 planted at distance 1..3: every planted pair is found
    with its true distance, and every reported pair is truly within k."""
    rng = np.random.default_rng(7)
    n, m, k = 50_000, 500, 3
    fps = rng.integers(0, MAX_FP, size=n, dtype=np.uint64, endpoint=True)
    src = rng.choice(n, m, replace=False)
    planted = fps[src].copy()
    want = []
    for t in range(m):
        bits = rng.choice(64, rng.integers(1, k + 1), replace=False)
        for b in bits:
            planted[t] ^= np.uint64(1) << np.uint64(b)
        want.append((int(src[t]), n + t, len(bits)))
    allf = np.concatenate([fps, planted])
    got = batch.find_all(allf, k)
    found = {(a, b): d for a, b, d in zip(*_as_lists(got), strict=True)}
    assert all(found.get((a, b)) == d for a, b, d in want)
    x = allf[got.i] ^ allf[got.j]
    assert (popcounts(x) == got.distance).all()
    assert (got.distance <= k).all() and (got.i < got.j).all()


def test_result_types_and_order():
    """Pairs are int64/int64/uint8 arrays, sorted by (i, j), i < j."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 1 << 20, size=300, dtype=np.uint64)
    got = batch.find_all(np.concatenate([base, base ^ np.uint64(1)]), 2)
    assert (got.i.dtype, got.j.dtype, got.distance.dtype) == (np.int64, np.int64, np.uint8)
    key = list(zip(got.i.tolist(), got.j.tolist(), strict=True))
    assert key == sorted(set(key)) and all(a < b for a, b in key)


@settings(max_examples=60, deadline=None)
@given(fps=fingerprint_sets(), k=st.integers(0, 8))
def test_identical_groups_mode(fps, k):
    """identical='groups' gives the pairs between representatives (smallest index of each
    value), and with duplicate_groups rebuilds exactly the full pair set."""
    labels = batch.duplicate_groups(fps)
    assert labels.tolist() == [fps.index(f) for f in fps]
    with _forced_plan(k, 0):
        reps = batch.find_all(fps, k, identical="groups")
    rep_set = sorted(set(labels.tolist()))
    sub = [fps[r] for r in rep_set]
    bi, bj, bd = brute_pairs(sub, k)
    assert _as_lists(reps) == ([rep_set[a] for a in bi], [rep_set[b] for b in bj], bd)
    rebuilt = set()
    for a, b in zip(reps.i.tolist(), reps.j.tolist(), strict=True):
        for x in np.flatnonzero(labels == a).tolist():
            for y in np.flatnonzero(labels == b).tolist():
                rebuilt.add((min(x, y), max(x, y)))
    for r in rep_set:
        members = np.flatnonzero(labels == r).tolist()
        rebuilt.update(itertools.combinations(members, 2))
    bi, bj, _ = brute_pairs(fps, k)
    assert rebuilt == set(zip(bi, bj, strict=True))


@settings(max_examples=80, deadline=None)
@given(fps=st.one_of(fingerprint_sets(), crowded_sets()), k=st.integers(0, 10))
def test_clusters_are_components(fps, k):
    """clusters labels every fingerprint with the smallest index of its connected
    component in the within-k graph."""
    want = brute_clusters(fps, k)
    with _forced_plan(k, 0):
        assert batch.clusters(fps, k).tolist() == want
    assert batch.clusters(fps, k).tolist() == want


def test_clusters_never_pair_identical_copies():
    """10,000 copies of a page never come out of the search as pairs: the search that
    succeeds runs on the distinct values, and clusters joins copies by a chain of links."""
    rng = np.random.default_rng(11)
    other = rng.integers(0, MAX_FP, size=100, dtype=np.uint64, endpoint=True)
    near = np.array([0xABCDEF ^ 6], dtype=np.uint64)
    fps = np.concatenate([np.full(10_000, 0xABCDEF, dtype=np.uint64), other, near])
    seen = []
    real = batch._search

    def spy(f, k, workers):
        out = real(f, k, workers)
        if out is not None:  # None: the search met copies and stopped
            seen.append((len(f), len(out[0])))
        return out

    with mock.patch.object(batch, "_search", spy):
        labels = batch.clusters(fps, 2)
    assert seen == [(len(np.unique(fps)), 1)]
    assert (labels[:10_000] == 0).all() and labels[-1] == 0
    assert len(batch.find_all(fps, 2, identical="groups").i) == 1


def test_workers_do_not_change_the_result():
    """One thread and several threads give identical pairs."""
    rng = np.random.default_rng(5)
    base = rng.integers(0, MAX_FP, size=2000, dtype=np.uint64, endpoint=True)
    fps = np.concatenate([base, base[:500] ^ np.uint64(0b101)])
    one = batch.find_all(fps, 3, workers=1)
    many = batch.find_all(fps, 3, workers=3)
    assert _as_lists(one) == _as_lists(many) and len(one.i) >= 500


@pytest.mark.parametrize("k", [-1, 17, 1.5, True, "3", None])
def test_bad_k_is_refused(k):
    """k outside 0..16 or not an int raises InvalidDistanceError naming the range."""
    with pytest.raises(InvalidDistanceError, match="0..16"):
        batch.find_all([1, 2], k)
    with pytest.raises(InvalidDistanceError):
        batch.clusters([1, 2], k)


@pytest.mark.parametrize(
    "fps",
    [
        np.array([1.0, 2.0]),
        np.array([-1, 2], dtype=np.int64),
        np.zeros((2, 2), dtype=np.uint64),
        [1, 1 << 64],
        [1, -5],
        ["a"],
        "abc",
    ],
)
def test_bad_fingerprints_are_refused(fps):
    """Floats, negatives, values above 64 bits, 2-D arrays and strings raise
    InvalidFingerprintError (a ValueError), never crash."""
    for fn in (lambda: batch.find_all(fps, 3), lambda: batch.clusters(fps, 3),
               lambda: batch.duplicate_groups(fps)):
        with pytest.raises(InvalidFingerprintError):
            fn()


def test_bad_options_are_refused():
    """identical and workers are checked and raise simstore errors."""
    with pytest.raises(SimstoreError, match="identical"):
        batch.find_all([1, 2], 3, identical="all")
    with pytest.raises(ValueError, match="workers"):
        batch.find_all([1, 2], 3, workers=0)
    with pytest.raises(TypeError, match="workers"):
        batch.find_all([1, 2], 3, workers=1.5)


def test_c_core_refuses_bad_arguments():
    """The C entry points return an error code (raised as ValueError) for bad block plans
    instead of crashing."""
    fps = np.arange(10, dtype=np.uint64)
    with pytest.raises(ValueError):
        _core.batch_pass(fps, 3, 4, [0b11])  # two header blocks where B - k = 1
    with pytest.raises(ValueError):
        _core.batch_pass(fps, 17, 20, [0b111])
    with pytest.raises(ValueError):
        _core.components(3, np.array([0], np.int64), np.array([5], np.int64))


def test_exported_from_package():
    """The batch API is reachable from the package root."""
    assert simstore.find_all is batch.find_all
    assert simstore.clusters is batch.clusters
    assert simstore.duplicate_groups is batch.duplicate_groups
