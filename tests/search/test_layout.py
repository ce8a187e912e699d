"""The layout planner: every plan finds every pair within k (exhaustive + hypothesis)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simstore.exceptions import InvalidConfigError, InvalidDistanceError
from simstore.search import layout as L

from ..strategies import fingerprints

SIZES = (1_000, 100_000, 1_000_000, 10_000_000)


@pytest.mark.parametrize("k", range(0, 9))
@pytest.mark.parametrize("n", SIZES)
def test_every_plan_guarantees_k_exhaustively(k: int, n: int) -> None:
    """Every planned layout meets every spread of k differing bits on some table."""
    p = L.plan(k, n)
    assert p.layout.max_k == k
    assert p.tables <= L.MAX_TABLES
    assert L.guarantees(p.layout, k)
    assert all(L.guarantees(p.layout, j) for j in range(k))


@pytest.mark.parametrize("nblocks", range(1, 9))
@pytest.mark.parametrize("k", range(0, 9))
def test_radius_bound_is_exact(nblocks: int, k: int) -> None:
    """radius_bound is enough, and one less is not: the integer bound is tight."""
    for s in range(1, nblocks + 1):
        lay = L.manku_layout(nblocks, s, k)
        assert lay.radius <= (s * k) // nblocks
        assert L.guarantees(lay, k)
        if lay.radius > 0:
            tighter = L.Layout(lay.blocks, lay.tables, lay.radius - 1, k)
            assert not L.guarantees(tighter, k)


def test_k3_at_1m_is_two_tables_of_32_bits_at_radius_1() -> None:
    """k=3 at 1M: two 32-bit halves probed at radius 1 (66 probes in C), < 1 candidate.

    With probes in C a table costs more than a probe: the planner takes the
    fewest tables whose probes stay cheap (multi-index hashing, r > 0).
    """
    p = L.plan(3, 1_000_000)
    assert (len(p.layout.blocks), p.tables, p.radius) == (2, 2, 1)
    assert p.header_bits == (32, 32) and p.probes_per_query == 66
    assert p.candidates_per_query < 1


def test_k8_layouts_keep_lower_k_cheap() -> None:
    """k=8: at 10M three ~21-bit headers at radius 2 (faiss MultiHash's 3 x 21, 2 bits
    flipped); at 1M four 16-bit ones at radius 2, on which k=6 needs radius 1 (on three
    blocks it would need radius 2, as k=8 does: 2.5x a store planned for k=6)."""
    p = L.plan(8, 10_000_000)
    assert (p.tables, p.radius, p.header_bits) == (3, 2, (22, 21, 21))
    p = L.plan(8, 1_000_000)
    assert (p.tables, p.radius, p.header_bits) == (4, 2, (16, 16, 16, 16))
    assert p.layout.radius_for(6) == 1


@pytest.mark.parametrize("n", SIZES)
def test_lower_k_on_a_planned_store_stays_within_the_slack(n: int) -> None:
    """By the cost model, every k' < k on plan(k) is within LOWER_K_SLACK of plan(k')."""
    for k in range(9):
        lay = L.plan(k, n).layout
        hs = tuple(lay.header_bits(t) for t in range(len(lay.tables)))
        for j in range(k):
            own = L.plan(j, n).layout
            own_hs = tuple(own.header_bits(t) for t in range(len(own.tables)))
            assert L._latency(hs, lay.radius_for(j), n) <= L.LOWER_K_SLACK * L._latency(
                own_hs, own.radius, n), (n, k, j)


def test_guarantees_rejects_a_layout_that_misses_pairs() -> None:
    """The exhaustive oracle says no for a layout with too few tables."""
    lay = L.Layout(L.even_blocks(4), ((0,), (1,)), 0, 3)
    assert not L.guarantees(lay, 3)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 8), fingerprints, st.data())
def test_near_pairs_share_a_header_within_radius(k: int, a: int, data: st.DataObject) -> None:
    """For random pairs within k, some table's permuted headers differ by <= r bits."""
    lay = L.plan(k, 1_000_000).layout
    bits = data.draw(st.sets(st.integers(0, 63), max_size=k))
    b = a
    for bit in bits:
        b ^= 1 << bit
    ok = False
    for t in range(len(lay.tables)):
        pa, pb = (int(x) for x in L.permute(lay, t, [a, b]))
        tail = 64 - lay.header_bits(t)
        if ((pa ^ pb) >> tail).bit_count() <= lay.radius:
            ok = True
    assert ok


@settings(max_examples=100, deadline=None)
@given(st.lists(fingerprints, max_size=20), st.integers(1, 12), st.data())
def test_permute_roundtrips_and_keeps_distances(fps: list[int], nblocks: int, data: st.DataObject) -> None:
    """unpermute(permute(x)) == x and permuting keeps Hamming distances."""
    s = data.draw(st.integers(1, nblocks))
    lay = L.manku_layout(nblocks, s, 3)
    arr = np.array(fps, dtype=np.uint64)
    for t in range(len(lay.tables)):
        p = L.permute(lay, t, arr)
        assert np.array_equal(L.unpermute(lay, t, p), arr)
        for x, y in itertools.combinations(range(len(fps)), 2):
            assert int(p[x] ^ p[y]).bit_count() == (fps[x] ^ fps[y]).bit_count()


def test_permute_puts_header_blocks_first() -> None:
    """A table's key starts with its header blocks' bits, in header order."""
    lay = L.Layout(L.even_blocks(4), ((2, 0),), 0, 1)
    fp = 0x1111_2222_3333_4444
    assert int(L.permute(lay, 0, [fp])[0]) == 0x3333_1111_2222_4444


def test_layout_dict_roundtrip_and_validation() -> None:
    """to_dict/from_dict round-trips; blocks that do not tile 64 bits are refused."""
    lay = L.plan(6, 1_000_000).layout
    assert L.Layout.from_dict(lay.to_dict()) == lay
    with pytest.raises(InvalidConfigError):
        L.Layout(((0, 32), (32, 16)), ((0,),), 0, 1)
    with pytest.raises(InvalidConfigError):
        L.Layout.from_dict({**lay.to_dict(), "version": 99})


def test_plan_refuses_bad_arguments() -> None:
    """plan() says what is allowed for k, expected_size and max_tables."""
    with pytest.raises(InvalidDistanceError):
        L.plan(17, 10)
    with pytest.raises(InvalidDistanceError):
        L.plan(True, 10)
    with pytest.raises(InvalidConfigError):
        L.plan(3, -1)
    with pytest.raises(InvalidConfigError):
        L.plan(3, 10, max_tables=0)


@pytest.mark.parametrize("k", range(0, 11))
def test_radius_for_a_smaller_k_still_guarantees_it(k):
    """A planned layout queried at any k' <= k with radius_for(k') finds every pair within k'."""
    from dataclasses import replace

    layout = L.plan(k, 1_000_000).layout
    for kq in range(k + 1):
        r = layout.radius_for(kq)
        assert r <= layout.radius
        assert L.guarantees(replace(layout, radius=r), kq)
        if r > 0:  # and it is tight: one less would miss some pair
            assert not L.guarantees(replace(layout, radius=r - 1), kq)
