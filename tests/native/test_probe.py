"""The probe engine (ss_probe / ss_lookup through _probe.Prober) against brute force.

Run sets are built here the obvious way (keys permuted by the layout, stably
sorted with numpy, cut into runs at random places, equal keys across a cut
included); the oracle is every (value, fingerprint) entry within k of the
query, each value once with its least distance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from simstore.exceptions import InvalidConfigError
from simstore.native import core as _core, probe as _probe, runsets
from simstore.search.layout import Layout, manku_layout, permute, plan, probes

from ..oracles import popcounts

MAX_FP = (1 << 64) - 1
MAX_TEST_PROBES = 3000  # per query, over all tables: keeps the suite fast


# --- building runs and the oracle ------------------------------------------------


def prober_for(layout: Layout) -> _probe.Prober:
    n = len(layout.tables)
    return _probe.Prober(
        [layout.shifts(t) for t in range(n)], [layout.header_bits(t) for t in range(n)]
    )


def cut(keys: np.ndarray, vals: np.ndarray, starts: list[int], narrow: bool = False,
        dbits: int = 0, min_shift: int = 0):
    """The runs of sorted (keys, vals) that start at the given offsets (0 first); with
    dbits > 0 each run carries its directory of at most that many bits, never finer than
    min_shift."""
    bounds = sorted({0, *(x for x in starts if 0 < x < len(keys))}) + [len(keys)]
    v = vals.astype(np.uint32) if narrow else vals
    runs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b > a:
            k = keys[a:b].copy()
            d, shift = _probe.run_dir(k, dbits, min_shift) if dbits else (None, 0)
            runs.append(_probe.Run(k, v[a:b].copy(), 0, d, shift))
    return runs


def lazy_set(table: int, runs: list[_probe.Run], loaded: set[int] | None = None,
             fetched: list[int] | None = None, kw: int = 8) -> _probe.RunSet:
    """A sorted set of these runs with only those in loaded given (none by default); the
    rest fetched when a probe needs them, their indices appended to fetched."""
    def fetch(idxs):
        if fetched is not None:
            fetched.extend(idxs)
        return [runs[i] for i in idxs]

    firsts = [int(r.high) | int(r.keys[0]) for r in runs]
    return _probe.RunSet(table, [r if i in (loaded or ()) else None for i, r in enumerate(runs)],
                         firsts, kw=kw, fetch=fetch)


def sorted_run(layout: Layout, t: int, fps: np.ndarray, vals: np.ndarray, run_len: int = 0,
               starts: list[int] | None = None, narrow: bool = False,
               dbits: int = 0, exact: bool = False, lazy: bool = False) -> _probe.RunSet:
    """One table's level of (fps, vals): keys permuted, stably sorted, cut into runs (with
    directories of up to dbits bits when dbits > 0; with exact, buckets never finer than
    the table's header, as a store writes them, so probes start at their bucket; with
    lazy, every run fetched when first needed)."""
    keys = permute(layout, t, fps)
    order = np.argsort(keys, kind="stable")
    keys, v = keys[order], vals[order]
    if starts is None:
        starts = list(range(0, len(keys), run_len)) if run_len else [0]
    tail = 64 - layout.header_bits(t) if exact else 0
    runs = cut(keys, v, starts, narrow, dbits, tail)
    return lazy_set(t, runs) if lazy else _probe.RunSet(t, runs)


def scan_run(fps: np.ndarray, vals: np.ndarray) -> _probe.RunSet:
    return _probe.RunSet(-1, [_probe.Run(fps.copy(), vals.copy())])


def expected(entries: list[tuple[np.ndarray, np.ndarray]], q: int, k: int) -> dict[int, int]:
    """value -> least distance over every (fps, vals) entry within k of q."""
    out: dict[int, int] = {}
    for fps, vals in entries:
        d = popcounts(fps ^ np.uint64(q))
        for v, dist in zip(vals[d <= k].tolist(), d[d <= k].tolist(), strict=True):
            out[v] = min(dist, out.get(v, 99))
    return dict(sorted(out.items()))


def check_all_k(layout: Layout, pr: _probe.Prober, entries, queries) -> None:
    """Every k the layout answers, at its radius: the probe equals brute force."""
    for q in queries:
        for k in range(layout.max_k + 1):
            got = pr.hits(int(q), k, layout.radius_for(k))
            want = expected(entries, int(q), k)
            assert got == sorted(want.items(), key=lambda vd: (vd[1], vd[0])), (q, k)


def planted(rng: np.random.Generator, n: int, queries: np.ndarray, max_flip: int) -> np.ndarray:
    """n fingerprints: a third random, the rest a few bits (scattered or in one run) off a query."""
    out = rng.integers(0, MAX_FP, n, dtype=np.uint64, endpoint=True)
    for i in range(n // 3, n):
        f = int(queries[rng.integers(len(queries))])
        nflip = int(rng.integers(0, max_flip + 1))
        if rng.random() < 0.5:
            bits = rng.choice(64, nflip, replace=False).tolist()
        else:
            start = int(rng.integers(0, 64 - nflip + 1))
            bits = list(range(start, start + nflip))
        for b in bits:
            f ^= 1 << b
        out[i] = f
    return out


def small_enough(layout: Layout) -> bool:
    return sum(probes(layout.header_bits(t), layout.radius) for t in range(len(layout.tables))) <= MAX_TEST_PROBES


@st.composite
def layouts(draw) -> Layout:
    """A planner layout, or any Manku layout whose probes stay few."""
    if draw(st.booleans()):
        lay = plan(draw(st.integers(0, 8)), draw(st.sampled_from([100, 10**4, 10**6, 10**9]))).layout
    else:
        nblocks = draw(st.integers(1, 10))
        lay = manku_layout(nblocks, draw(st.integers(1, nblocks)), draw(st.integers(0, 8)))
    assume(len(lay.tables) <= 20 and small_enough(lay))
    return lay


# --- the oracle tests ------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(lay=layouts(), seed=st.integers(0, 2**32 - 1), nlevels=st.integers(0, 3), data=st.data())
def test_probe_equals_brute_force(lay, seed, nlevels, data):
    """Levels of every table, a scan run, duplicates and empty runs, runs given or fetched
    when first needed: the exact neighbour set."""
    rng = np.random.default_rng(seed)
    queries = rng.integers(0, MAX_FP, 3, dtype=np.uint64, endpoint=True)
    queries[0] = 0 if seed % 3 == 0 else queries[0]  # an extreme query now and then
    n = data.draw(st.integers(0, 300))
    fps = planted(rng, n, queries, lay.max_k + 2)
    if n > 4:
        fps[: n // 6] = fps[n - n // 6 :]  # duplicate keys under other values
    vals = rng.permutation(n).astype(np.uint64) * np.uint64(7) + np.uint64(data.draw(st.integers(0, 2**40)))
    nscan = data.draw(st.integers(0, n))
    cuts = sorted(data.draw(st.lists(st.integers(nscan, n), min_size=nlevels, max_size=nlevels)))
    bounds = [nscan, *cuts, n]
    segs, entries = [scan_run(fps[:nscan], vals[:nscan])], [(fps[:nscan], vals[:nscan])]
    for lo, hi in zip(bounds, bounds[1:], strict=False):  # levels, some of them empty
        entries.append((fps[lo:hi], vals[lo:hi]))
        for t in range(len(lay.tables)):
            starts = data.draw(st.lists(st.integers(0, max(hi - lo, 1)), max_size=8))
            segs.append(sorted_run(lay, t, fps[lo:hi], vals[lo:hi], starts=starts,
                                   narrow=data.draw(st.booleans()) and bool((vals < 2**32).all()),
                                   dbits=data.draw(st.sampled_from([0, 1, 3, 9])),
                                   exact=data.draw(st.booleans()), lazy=data.draw(st.booleans())))
    pr = prober_for(lay)
    # each set's own size (its probes' least span): unknown, as given, or tiny (wide spans)
    counts = [data.draw(st.sampled_from([None, n, 10**12, 3, 0])) for _ in segs]
    pr.set_sets(segs, counts)
    # the size the probes' spans are planned for: none, a store's, or one that spans most
    pr.set_size(data.draw(st.sampled_from([10**12, n, 0])))
    check_all_k(lay, pr, entries, queries)


@pytest.mark.parametrize("k", [3, 5, 8])
def test_probe_planned_layouts_at_scale(k):
    """plan(k, n) layouts over 30k fingerprints in three levels plus a scan run."""
    rng = np.random.default_rng(k)
    lay = plan(k, 30_000).layout
    queries = rng.integers(0, MAX_FP, 40, dtype=np.uint64, endpoint=True)
    fps = planted(rng, 30_000, queries, k + 2)
    vals = np.arange(30_000, dtype=np.uint64)
    bounds = [0, 1_000, 5_000, 15_000, 30_000]
    segs = [scan_run(fps[:1_000], vals[:1_000])]
    for lo, hi in zip(bounds[1:], bounds[2:], strict=False):
        for t in range(len(lay.tables)):
            segs.append(sorted_run(lay, t, fps[lo:hi], vals[lo:hi], run_len=997,
                                   dbits=0 if t % 2 else 7, exact=t % 4 == 0))
    pr = prober_for(lay)
    pr.set_sets(segs)
    check_all_k(lay, pr, [(fps, vals)], queries)
    pr.set_size(30_000 >> 6)  # spans as if a header value held 1/64th as many keys
    assert any(pr._span)
    check_all_k(lay, pr, [(fps, vals)], queries)
    # each level's probes spanning for its own size (the smaller, the wider)
    pr.set_sets(segs, [None] + [hi - lo for lo, hi in zip(bounds[1:], bounds[2:], strict=False)
                                for _ in lay.tables])
    assert [rs.span for rs in segs[1:]] == [
        _probe.span_bits(lay.header_bits(t), hi - lo)
        for lo, hi in zip(bounds[1:], bounds[2:], strict=False) for t in range(len(lay.tables))]
    check_all_k(lay, pr, [(fps, vals)], queries)


@pytest.mark.parametrize(("header_bits", "keys", "bits"), [
    (22, 10**7, 2), (21, 10**7, 1), (16, 10**6, 0), (32, 10**7, 12), (32, 10**8, 9),
    (8, 0, 7), (1, 0, 0), (20, 16 << 20, 0), (20, (16 << 20) - 1, 0), (20, 8 << 20, 1),
])
def test_span_bits_known_answers(header_bits, keys, bits):
    """The most low header bits whose values hold SPAN_KEYS (16) keys or fewer, below the
    header's width."""
    assert _probe.SPAN_KEYS == 16
    assert _probe.span_bits(header_bits, keys) == bits


@settings(max_examples=200, deadline=None)
@given(header_bits=st.integers(1, 12), radius=st.integers(0, 3), data=st.data())
def test_span_masks_cover_the_ball_with_fewer_probes(header_bits, radius, data):
    """Every header value a mask probes lies in one of the spanned ranges, each spanned
    range stands for two masks or more, and the masks stay ascending (an oracle over all
    header values)."""
    span = data.draw(st.integers(0, header_bits - 1))
    tail = 64 - header_bits
    q = data.draw(st.integers(0, (1 << header_bits) - 1))
    masks = _probe.probe_masks(header_bits, radius, tail)
    got, spans = _probe.span_masks(masks, tail, span)
    assert got == sorted(got) and len(got) == len(spans) <= len(masks)
    covered: dict[int, int] = {}
    for m, sp in zip(got, spans, strict=True):
        lo = (q ^ (m >> tail)) >> sp << sp
        for h in range(lo, lo + (1 << sp)):
            assert h not in covered  # the ranges are disjoint
            covered[h] = sp
    wanted = {q ^ (m >> tail) for m in masks}
    assert wanted <= set(covered)
    for h, sp in covered.items():  # a spanned range holds two wanted values or more
        if sp:
            lo = h >> sp << sp
            assert len(wanted & set(range(lo, lo + (1 << sp)))) >= 2


def test_32_bit_values_give_the_same_answer():
    """Runs whose values are uint32 (the store keeps narrow ids so) answer as uint64 ones."""
    rng = np.random.default_rng(32)
    lay = plan(5, 20_000).layout
    queries = rng.integers(0, MAX_FP, 30, dtype=np.uint64, endpoint=True)
    fps = planted(rng, 20_000, queries, 7)
    vals = rng.choice(2**32, 20_000, replace=False).astype(np.uint64)
    segs = [sorted_run(lay, t, fps, vals, run_len=4096, narrow=True)
            for t in range(len(lay.tables))]
    segs.append(_probe.RunSet(-1, [_probe.Run(fps[:500].copy(), vals[:500].astype(np.uint32))]))
    pr = prober_for(lay)
    pr.set_sets(segs)
    check_all_k(lay, pr, [(fps, vals)], queries)


def test_one_key_per_run_and_one_run():
    """Runs of a single key each (every probe crosses runs) and one run holding everything."""
    lay = manku_layout(8, 1, 7)  # 8-bit headers, radius 0
    rng = np.random.default_rng(5)
    q = int(rng.integers(0, MAX_FP, dtype=np.uint64, endpoint=True))
    fps = planted(rng, 3_000, np.array([q], dtype=np.uint64), 9)
    vals = np.arange(3_000, dtype=np.uint64)
    for run_len in (1, 0):
        for dbits in (0, 1, 12):
            pr = prober_for(lay)
            for exact in (False, True):
                pr.set_sets([sorted_run(lay, t, fps, vals, run_len, dbits=dbits, exact=exact)
                             for t in range(8)])
                check_all_k(lay, pr, [(fps, vals)], [q])


@given(st.lists(st.integers(0, MAX_FP), min_size=1, max_size=200), st.integers(1, 12),
       st.integers(0, 63))
def test_run_dir_equals_searchsorted(keys, dbits, min_shift):
    """A run's directory: dir[b] is the first index of bucket >= b, a key's bucket
    (k >> shift) - (first >> shift), shift the least >= min_shift that fits dbits bits,
    the directory no larger than the buckets need."""
    arr = np.array(sorted(keys), dtype=np.uint64)
    d, shift = _probe.run_dir(arr, dbits, min_shift)
    first, last = int(arr[0]), int(arr[-1])

    def buckets(s: int) -> int:
        return (last >> s) - (first >> s)

    assert shift >= min_shift and buckets(shift) < 1 << dbits
    assert shift == min_shift or buckets(shift - 1) >= 1 << dbits
    nb = len(d) - 1
    assert nb == 1 << (nb.bit_length() - 1) and buckets(shift) < nb <= max(2, 2 * buckets(shift))
    rel = (arr >> np.uint64(shift)) - np.uint64(first >> shift)
    want = np.searchsorted(rel, np.arange(nb + 1, dtype=np.uint64), side="left")
    assert d.tolist() == want.tolist()


@pytest.mark.parametrize(("keys", "dbits"), [
    (np.array([2, 1], dtype=np.uint64), 4),  # not ascending
    (np.array([], dtype=np.uint64), 4),
    (np.array([1, 2], dtype=np.uint64), 0),
    (np.array([1, 2], dtype=np.uint64), 25),
    (np.array([1, 2], dtype=np.int64), 4),
])
def test_run_dir_refuses(keys, dbits):
    """Keys that are not an ascending uint64 run, or bits outside 1..24: the project's error."""
    with pytest.raises(InvalidConfigError):
        _probe.run_dir(keys, dbits)


def test_same_value_keeps_its_least_distance():
    """A value met at two fingerprints (a level and the scan run) comes out once, nearest."""
    lay = plan(3, 1000).layout
    q = 0x0123_4567_89AB_CDEF
    level_fps = np.array([q ^ 0b111, q ^ 0b1], dtype=np.uint64)
    level_vals = np.array([5, 6], dtype=np.uint64)
    scan_fps = np.array([q ^ 0b1000, q ^ 0b1], dtype=np.uint64)
    scan_vals = np.array([5, 9], dtype=np.uint64)
    pr = prober_for(lay)
    segs = [sorted_run(lay, t, level_fps, level_vals, 1) for t in range(len(lay.tables))]
    pr.set_sets([*segs, scan_run(scan_fps, scan_vals)])
    assert pr.hits(q, 3, lay.radius_for(3)) == [(5, 1), (6, 1), (9, 1)]
    assert pr.hits(q, 0, lay.radius_for(0)) == []


def test_capacity_grows_for_many_hits():
    """Thousands of hits (each found in every table) overflow both the C and Python buffers."""
    lay = plan(3, 10_000).layout
    q = 42
    fps = np.full(5_000, q, dtype=np.uint64)
    fps[::2] ^= np.uint64(1 << 40)
    vals = np.arange(5_000, dtype=np.uint64)[::-1].copy()
    pr = prober_for(lay)
    pr.set_sets([sorted_run(lay, t, fps, vals, 700) for t in range(len(lay.tables))])
    for _ in range(2):  # the second call runs in the grown buffers
        got = pr.hits(q, 3, lay.radius_for(3))  # by distance, then value
        want = sorted(((v, 1 - (4_999 - v) % 2) for v in range(5_000)), key=lambda vd: vd[::-1])
        assert got == want
    small = pr.hits(q, 0, lay.radius_for(0))
    assert [v for v, _ in small] == list(range(0, 5_000, 2))


def test_no_sets_and_set_sets_replaces():
    """A prober without run sets answers nothing; set_sets swaps what it reads."""
    lay = plan(5, 1000).layout
    pr = prober_for(lay)
    assert pr.hits(1, 5, lay.radius_for(5)) == []
    pr.set_sets([scan_run(np.array([1], dtype=np.uint64), np.array([3], dtype=np.uint64))])
    assert pr.hits(1, 5, lay.radius_for(5)) == [(3, 0)]
    pr.set_sets([])
    assert pr.hits(1, 5, lay.radius_for(5)) == []


def test_masks_are_the_hamming_ball():
    lay = manku_layout(4, 2, 6)
    pr = prober_for(lay)
    for r in range(4):
        for t, ms in enumerate(pr.masks(r)):
            h = lay.header_bits(t)
            assert ms == sorted(ms) and len(ms) == len(set(ms)) == probes(h, r)
            assert all(m >> (64 - h) << (64 - h) == m and m.bit_count() <= r for m in ms)


# --- bad arguments: the project's errors, never a crash --------------------------


@pytest.mark.parametrize(
    ("specs", "hbits"),
    [
        ([], []),
        ([(b"\x00", b"\x40", b"\x00")], []),
        ([(b"\x00", b"\x40", b"\x00")], [0]),
        ([(b"\x00", b"\x40", b"\x00")], [65]),
        ([(b"\x00", b"\x40", b"")], [10]),
        ([(b"\x00", b"\x40", b"\x00"), (b"\x00\x00", b"\x20\x20", b"\x00\x20")], [10, 10]),
        ([(b"", b"", b"")], [10]),
        ([(b"\x01", b"\x40", b"\x00")], [10]),  # a block past bit 63
        ([(b"\x00", b"\x00", b"\x00")], [10]),  # an empty block
    ],
)
def test_prober_refuses_bad_specs(specs, hbits):
    with pytest.raises(InvalidConfigError):
        _probe.Prober(specs, hbits)


def _one_table():
    lay = manku_layout(4, 1, 3)  # 16-bit headers, 4 tables
    keys = np.array([1, 2, 3], dtype=np.uint64)
    vals = np.array([1, 2, 3], dtype=np.uint64)
    return lay, keys, vals


@pytest.mark.parametrize(
    "make",
    [
        lambda k, v: _probe.RunSet(4, [_probe.Run(k, v)]),  # no table 4
        lambda k, v: _probe.RunSet(-2, [_probe.Run(k, v)]),
        lambda k, v: _probe.RunSet(True, [_probe.Run(k, v)]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v[:2])]),  # lengths differ
        lambda k, v: _probe.RunSet(0, [_probe.Run(k.astype(np.int64), v)]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v.astype(np.int32))]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k[::2], v[::2])]),  # not contiguous
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v, 1 << 32)]),  # a high half, 64-bit keys
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v), _probe.Run(k, v)], [5, 1]),  # firsts
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v)], [1, 2]),  # a first per run
        lambda k, v: _probe.RunSet(-1, [_probe.Run([1], v)]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v, 0, np.zeros(5, np.uint32), 0)]),  # end
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v, 0, np.array([0, 3], np.uint64), 0)]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v, 0, np.array([0, 1, 2, 3], np.uint32), 0)]),
        lambda k, v: _probe.RunSet(0, [_probe.Run(k, v, 0, np.array([0, 3], np.uint32), 64)]),
    ],
)
def test_run_sets_refuse(make):
    """Malformed runs and sets are refused with the project's error before C sees them."""
    lay, keys, vals = _one_table()
    pr = prober_for(lay)
    with pytest.raises(InvalidConfigError):
        pr.set_sets([make(keys, vals)])


@pytest.mark.parametrize(
    ("q", "k", "radius"),
    [(-1, 3, 0), (1 << 64, 3, 0), (1.5, 3, 0), (1, -1, 0), (1, 65, 0), (1, 1 << 40, 0),
     (1, 3, -1), (1, 3, 65), (1, 3, 1.0), (1, 3, 16)],
)
def test_call_refuses(q, k, radius):
    lay = manku_layout(1, 1, 3)  # one 64-bit header: radius 16 would need ~5e14 probes
    pr = prober_for(lay)
    pr.set_sets([scan_run(np.array([1], dtype=np.uint64), np.array([1], dtype=np.uint64))])
    with pytest.raises(InvalidConfigError):
        pr.hits(q, k, radius)


def test_keys_out_of_order_do_not_read_out_of_bounds():
    """Runs whose keys or first keys lie (damage): a wrong answer at worst, never a crash."""
    lay, keys, vals = _one_table()
    rng = np.random.default_rng(3)
    bad = rng.integers(0, MAX_FP, 500, dtype=np.uint64, endpoint=True)  # unsorted
    runs = [_probe.Run(bad[:250].copy(), vals.repeat(250)[:250].copy()),
            _probe.Run(bad[250:].copy(), vals.repeat(250)[:250].copy())]
    pr = prober_for(lay)
    pr.set_sets([_probe.RunSet(t, runs, [0, int(MAX_FP)]) for t in range(4)])
    for q in bad[:20].tolist():
        assert {v for v, _ in pr.hits(q, 3, lay.radius_for(3))} <= {1, 2, 3}


def _c_plan(lay: Layout, **override):
    """A raw ss_probe_plan (radius 0) and the buffers it points into."""
    n = len(lay.tables)
    src = _core.ffi.new("uint8_t[]", b"".join(lay.shifts(t)[0] for t in range(n)))
    width = _core.ffi.new("uint8_t[]", b"".join(lay.shifts(t)[1] for t in range(n)))
    dst = _core.ffi.new("uint8_t[]", b"".join(lay.shifts(t)[2] for t in range(n)))
    tails = _core.ffi.new("uint8_t[]", bytes(64 - lay.header_bits(t) for t in range(n)))
    masks = _core.ffi.new("uint64_t[]", [0] * n)
    nmasks = _core.ffi.new("int32_t[]", [1] * n)
    fields = {"ntables": n, "nblocks": len(lay.blocks), "src_shift": src, "width": width,
              "dst_shift": dst, "tails": tails, "masks": masks, "nmasks": nmasks}
    fields.update(override)
    keep = [src, width, dst, tails, masks, nmasks]
    return _core.ffi.new("ss_probe_plan *", fields), keep


@pytest.mark.parametrize("own", [0, 1])
def test_a_wider_probe_that_starts_where_the_last_one_did_is_made(own):
    """A plan's masks [0, 1] with spans [0, 2] on a 64-bit header: the second probe starts
    where the first did (q's low two bits are 0) but spans four values; the set's own
    span skips only a probe whose whole range is the last one's. q + 2 (distance 1) lies
    only in the wider range."""
    ffi, lib = _core.ffi, _core.lib
    lay = manku_layout(1, 1, 0)  # one table, the whole fingerprint its header
    q = 0x1234_5678_9ABC_DEF0
    keys = np.array([q, q + 2], dtype=np.uint64)
    rs = _probe.RunSet(0, [_probe.Run(keys, np.array([7, 9], dtype=np.uint64))])
    rs.span = own
    masks, nmasks = ffi.new("uint64_t[]", [0, 1]), ffi.new("int32_t[]", [2])
    spans = ffi.new("uint8_t[]", [0, 2])
    c_plan, keep = _c_plan(lay, masks=masks, nmasks=nmasks, spans=spans)
    sets = ffi.new("ss_runset[]", 1)
    rs.fill(sets[0])
    out_v, out_d = ffi.new("uint64_t[]", 8), ffi.new("uint8_t[]", 8)
    got = lib.ss_probe(q, 1, c_plan, sets, 1, out_v, out_d, 8, ffi.NULL)
    assert got == 2 and list(out_v[0:2]) == [7, 9] and list(out_d[0:2]) == [0, 1]
    del keep


@pytest.mark.parametrize(
    "override",
    [{"ntables": 0}, {"ntables": 65}, {"nblocks": 0}, {"nblocks": 65}, {"tails": "bad-tail"},
     {"nmasks": "negative"}, {"masks": "null"}, {"spans": "bad-span"}, {"span": 64},
     {"span": -1}, {"table": 4}, {"table": -2}, {"kw": 4},
     {"kw": 2}, {"vw": 16}, {"firsts": "null"}, {"keys": "null"}, {"n": 0}, {"k": -1},
     {"k": 65}],
)
def test_c_probe_refuses_bad_arguments(override):
    """The C entry point checks what the binding would have: -2, no crash."""
    ffi, lib = _core.ffi, _core.lib
    lay, keys, vals = _one_table()
    seg_fields = {"table": 0, "kw": 8, "vw": 8, "n": 3}
    plan_fields = {}
    k = 3
    for key, v in override.items():
        if key in ("table", "kw", "vw", "n", "span"):
            seg_fields[key] = v
        elif key == "k":
            k = v
        elif v == "bad-tail":
            plan_fields["tails"] = ffi.new("uint8_t[]", [64] * 4)
        elif v == "bad-span":  # a span past the fingerprint's 64 bits
            plan_fields["spans"] = ffi.new("uint8_t[]", [64] * 8)
        elif v == "negative":
            plan_fields["nmasks"] = ffi.new("int32_t[]", [1, -1, 1, 1])
        elif v == "null":
            plan_fields[key] = ffi.NULL
        else:
            plan_fields[key] = v
    c_plan, keep = _c_plan(lay, **{k_: v for k_, v in plan_fields.items()
                                    if k_ not in ("firsts", "keys")})
    firsts = ffi.new("uint64_t[]", [1])
    run = ffi.new("ss_run[]", 1)
    bufs = [ffi.from_buffer("uint64_t[]", a) for a in (keys, vals)]
    run[0].keys = ffi.NULL if "keys" in plan_fields else bufs[0]
    run[0].vals, run[0].high = bufs[1], 0
    run[0].n, run[0].kw, run[0].vw = seg_fields["n"], seg_fields["kw"], seg_fields["vw"]
    sets = ffi.new("ss_runset[]", 1)
    sets[0].runs, sets[0].nruns, sets[0].table = run, 1, seg_fields["table"]
    sets[0].span = seg_fields.get("span", 0)  # a set's own span: 0..63
    sets[0].firsts = ffi.NULL if "firsts" in plan_fields else firsts
    out_v, out_d = ffi.new("uint64_t[]", 8), ffi.new("uint8_t[]", 8)
    assert lib.ss_probe(1, k, c_plan, sets, 1, out_v, out_d, 8, ffi.NULL) == -2  # never checked
    bad_set = any(key in ("table", "kw", "vw", "n", "firsts", "keys") for key in override)
    # a set with a bad run fails its check; one that passes it is refused as its plan,
    # k, table (beyond the plan's tables) or 32-bit keys (band sets, never probed) are
    fine_set = override.get("table") == 4 or override.get("kw") == 4
    assert (lib.ss_runset_check(sets) == -2) == (bad_set and not fine_set)
    assert lib.ss_probe(1, k, c_plan, sets, 1, out_v, out_d, 8, ffi.NULL) == -2
    del keep


def test_c_runset_check_refuses_a_bad_top_index():
    """A top index naming a run past the set's, of bad width or shift (tbits + tshift past
    64 bits), fails ss_runset_check."""
    ffi, lib = _core.ffi, _core.lib
    keys = np.arange(10, dtype=np.uint64)
    run = ffi.new("ss_run[]", 1)
    buf = ffi.from_buffer("uint64_t[]", keys)
    run[0].keys, run[0].vals, run[0].n, run[0].kw, run[0].vw = buf, buf, 10, 8, 8
    firsts = ffi.new("uint64_t[]", [0])
    for top, tbits, tshift, ok in (([0, 0], 1, 63, True), ([0, 0], 1, 0, True),
                                   ([0, 1], 1, 63, False), ([0, 0], 0, 63, False),
                                   ([0, 0], 25, 39, False), ([0, 0], 1, 64, False),
                                   ([0, 0], 2, 63, False), ([0, 0], 1, -1, False)):
        s = ffi.new("ss_runset *")
        s.runs, s.nruns, s.table, s.firsts = run, 1, 0, firsts
        arr = ffi.new("uint32_t[]", top + [0] * ((1 << min(tbits, 4)) - len(top)))
        s.top, s.tbits, s.tshift = arr, tbits, tshift
        assert (lib.ss_runset_check(s) == 0) == ok, (top, tbits, tshift)
        assert s.checked == (2 if ok else 0)


def test_c_probe_reports_the_count_past_capacity():
    """With too small a buffer the C call returns the full count and writes nothing; with
    room it writes them all by distance, then value."""
    ffi, lib = _core.ffi, _core.lib
    lay = plan(3, 1000).layout
    c_plan, keep = _c_plan(lay)
    keys = np.arange(10, dtype=np.uint64)
    run = ffi.new("ss_run[]", 1)
    bufs = [ffi.from_buffer("uint64_t[]", keys)]
    run[0].keys, run[0].vals, run[0].n, run[0].kw, run[0].vw = bufs[0], bufs[0], 10, 8, 8
    seg = ffi.new("ss_runset[]", 1)
    seg[0].runs, seg[0].nruns, seg[0].table, seg[0].firsts = run, 1, -1, ffi.NULL
    assert lib.ss_runset_check(seg) == 0
    out_v, out_d = ffi.new("uint64_t[]", 5), ffi.new("uint8_t[]", 5)
    out_v[0] = out_v[4] = 12345
    assert lib.ss_probe(0, 64, c_plan, seg, 1, out_v, out_d, 3, ffi.NULL) == 10
    assert out_v[0] == 12345 and out_v[4] == 12345
    big_v, big_d = ffi.new("uint64_t[]", 10), ffi.new("uint8_t[]", 10)
    assert lib.ss_probe(0, 64, c_plan, seg, 1, big_v, big_d, 10, ffi.NULL) == 10
    want = sorted(range(10), key=lambda v: (v.bit_count(), v))
    assert list(big_v) == want and list(big_d) == [v.bit_count() for v in want]
    assert lib.ss_probe(0, 64, c_plan, seg, 1, ffi.NULL, ffi.NULL, 0, ffi.NULL) == 10
    del keep


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=300), st.lists(st.integers(0, 320), max_size=20),
       st.integers(0, 2**32 - 1), st.booleans(), st.booleans(), st.data())
def test_lookup_equals_brute_force(keys, qs, seed, narrow, halves, data):
    """Exact lookups over two sets of runs (64-bit keys, or 32-bit halves under a high half
    per run as the band entries keep them; equal keys across runs; with and without the
    top index): every value of an equal key, duplicates kept."""
    rng = np.random.default_rng(seed)
    shift = np.uint64(0 if halves else rng.integers(0, 55))  # keys anywhere in the 64 bits
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    sets, entries = [], []
    for part in (keys[: len(keys) // 2], keys[len(keys) // 2 :]):
        k = np.sort(np.array(part, dtype=np.uint64)) << shift
        if halves:  # band b holds keys 3b..3b+2 (low halves) under high half b << 32
            k = np.sort((k // np.uint64(3) << np.uint64(32)) | (k % np.uint64(3)))
        v = rng.integers(0, 2**32 - 1, len(k), dtype=np.uint64)
        vv = v.astype(np.uint32) if narrow else v
        # up to 24 cuts: sets of 8 runs or more take the top index (TOP_MIN_RUNS)
        starts = data.draw(st.lists(st.integers(0, max(len(k), 1)), max_size=24))
        if halves:  # runs end where the high half changes
            starts += (np.flatnonzero(np.diff(k >> np.uint64(32))) + 1).tolist()
        bounds = sorted({0, *(x for x in starts if 0 < x < len(k))}) + [len(k)]
        runs = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            if b <= a:
                continue
            if halves:
                high = int(k[a]) >> 32 << 32
                runs.append(_probe.Run((k[a:b] & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                                       vv[a:b].copy(), high))
            else:
                runs.append(_probe.Run(k[a:b].copy(), vv[a:b].copy()))
        if runs and data.draw(st.booleans()):  # fetched when first needed, some given
            given_ = set(data.draw(st.lists(st.integers(0, len(runs) - 1), max_size=4)))
            sets.append(lazy_set(0, runs, given_, kw=4 if halves else 8))
        else:
            sets.append(_probe.RunSet(0, runs))
        entries.append((k, v))
    pr.set_sets(sets)
    q = np.array(qs, dtype=np.uint64) << shift
    if halves:
        q = (q // np.uint64(3) << np.uint64(32)) | (q % np.uint64(3))
    want = [int(v) for k, vs in entries for x in q.tolist()
            for kk, v in zip(k.tolist(), vs.tolist(), strict=True) if kk == x]
    assert pr.lookup(q) == want


def test_runs_are_fetched_once_and_only_where_probes_land():
    """A query fetches the runs its probes land in (and those its ranges cross into), each
    once; a query elsewhere fetches others; the answers are brute force's throughout."""
    lay = plan(3, 10**6).layout
    rng = np.random.default_rng(7)
    fps = rng.integers(0, MAX_FP, 4000, dtype=np.uint64, endpoint=True)
    vals = np.arange(len(fps), dtype=np.uint64)
    fetched: list[list[int]] = []
    sets = []
    for t in range(len(lay.tables)):
        keys = permute(lay, t, fps)
        order = np.argsort(keys, kind="stable")
        runs = cut(keys[order], vals[order], list(range(0, len(fps), 40)))  # 100 runs a table
        fetched.append([])
        sets.append(lazy_set(t, runs, fetched=fetched[t]))
    pr = prober_for(lay)
    pr.set_sets(sets)
    check_all_k(lay, pr, [(fps, vals)], fps[:1])
    first = [sorted(f) for f in fetched]
    assert all(len(set(f)) == len(f) for f in first), "a run fetched twice"
    assert 0 < sum(map(len, first)) < len(lay.tables) * 100 // 4  # a few runs, not the tables
    assert sum(rs.loaded for rs in sets) == sum(map(len, first))
    check_all_k(lay, pr, [(fps, vals)], fps[:1])  # the same query again: nothing fetched
    assert [sorted(f) for f in fetched] == first
    check_all_k(lay, pr, [(fps, vals)], fps[1000:1010])  # others: more runs, each once
    assert all(len(set(f)) == len(f) for f in fetched) and sum(map(len, fetched)) > sum(
        map(len, first))


def test_a_set_fetches_the_rest_once_its_share_is_loaded():
    """whole_at 4: runs fetched one by one until the fetch that would load a quarter of
    them, which fetches all the rest; the answers are the keys' values throughout."""
    keys = np.arange(0, 4000, 10, dtype=np.uint64) << np.uint64(40)
    runs = cut(keys, np.arange(len(keys), dtype=np.uint64), list(range(0, len(keys), 25)))
    calls: list[list[int]] = []

    def fetch(idxs):
        calls.append(list(idxs))
        return [runs[i] for i in idxs]

    lazy = _probe.RunSet(0, [None] * len(runs), [int(r.keys[0]) for r in runs],
                         fetch=fetch, whole_at=4)
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    pr.set_sets([lazy])
    for i, q in enumerate(keys[::25][:4].tolist()):  # one new run each: 16 runs in all
        assert pr.lookup(np.array([q], dtype=np.uint64)) == [25 * i]
    assert calls == [[0], [1], [2], list(range(3, 16))] and lazy.loaded == 16


def test_c_runset_load_refuses_a_run_that_does_not_fit():
    """ss_runset_load takes a run only into an unloaded place of a checked sorted set, with
    the placeholder's key width and the set's first key; a bad one changes nothing."""
    ffi, lib = _core.ffi, _core.lib
    keys = np.array([5, 6, 7], dtype=np.uint64)
    narrow = keys.astype(np.uint32)
    run = ffi.new("ss_run[]", 1)
    run[0].kw, run[0].vw = 8, 4  # not loaded
    firsts = ffi.new("uint64_t[]", [5])
    s = ffi.new("ss_runset *")
    s.runs, s.nruns, s.table, s.firsts = run, 1, 0, firsts
    assert lib.ss_runset_check(s) == 0 and s.checked == 2
    out_v, out_d = ffi.new("uint64_t[]", 8), ffi.new("uint8_t[]", 8)
    need_a = ffi.new("uint64_t[]", 4)
    need = ffi.new("ss_need *", {"a": need_a, "cap": 4, "n": 0})
    c_plan, keep = _c_plan(manku_layout(1, 1, 0))  # one table: the keys unpermuted
    assert lib.ss_probe(5, 0, c_plan, s, 1, out_v, out_d, 8, ffi.NULL) == -2  # no ss_need
    assert lib.ss_probe(5, 0, c_plan, s, 1, out_v, out_d, 8, need) == -3
    assert need.n >= 1 and need_a[0] == 0  # set 0, run 0
    good = ffi.new("ss_run *")
    kb, nb = ffi.from_buffer("uint64_t[]", keys), ffi.from_buffer("uint32_t[]", narrow)
    for fields in ({"kw": 4, "keys": nb}, {"n": 0}, {"vw": 2}, {"keys": ffi.NULL}):
        bad = ffi.new("ss_run *", {"keys": kb, "vals": kb, "n": 3, "kw": 8, "vw": 8, **fields})
        assert lib.ss_runset_load(s, 0, bad) == -2, fields
        assert run[0].n == 0
    off = np.array([6, 7, 8], dtype=np.uint64)  # its first key is not the set's
    ob = ffi.from_buffer("uint64_t[]", off)
    bad = ffi.new("ss_run *", {"keys": ob, "vals": ob, "n": 3, "kw": 8, "vw": 8})
    assert lib.ss_runset_load(s, 0, bad) == -2
    good.keys, good.vals, good.n, good.kw, good.vw = kb, kb, 3, 8, 8
    assert lib.ss_runset_load(s, 1, good) == -2  # no such run
    assert lib.ss_runset_load(s, 0, good) == 0 and run[0].n == 3
    assert lib.ss_runset_load(s, 0, good) == -2  # loaded already
    assert lib.ss_probe(5, 0, c_plan, s, 1, out_v, out_d, 8, need) == 1 and out_v[0] == 5
    del keep


# --- runs placed in a buffer (a store's records, read in place) --------------------


def placed(run: _probe.Run, pad: int = 8, keep: bool = False) -> _probe.Placed:
    """run's arrays laid out in one buffer as a run record lays them (pad bytes first,
    then keys, values and the directory)."""
    kw, vw = run.keys.itemsize, run.vals.itemsize
    parts = [bytes(pad), run.keys.tobytes(), run.vals.tobytes()]
    if run.dir is not None:
        parts.append(run.dir.tobytes())
    n = len(run.keys)
    return _probe.Placed(b"".join(parts), n, kw, vw, pad, pad + kw * n, pad + (kw + vw) * n,
                         0 if run.dir is None else (len(run.dir) - 1).bit_length() - 1,
                         run.shift, run.high, keep)


@pytest.mark.parametrize("keep", [False, True])
def test_placed_runs_answer_as_their_arrays(keep):
    """Runs fetched as Placed records (directories, 32-bit values) answer every k as brute
    force; the set holds their buffers only when told to (else the caller does)."""
    lay = plan(3, 10**6).layout
    rng = np.random.default_rng(11)
    fps = rng.integers(0, MAX_FP, 3000, dtype=np.uint64, endpoint=True)
    vals = np.arange(len(fps), dtype=np.uint64)
    ours, sets = [], []  # ours: the buffers this test keeps alive when the sets do not
    for t in range(len(lay.tables)):
        keys = permute(lay, t, fps)
        order = np.argsort(keys, kind="stable")
        runs = cut(keys[order], vals[order], list(range(0, len(fps), 300)), narrow=t % 2 == 1,
                   dbits=6, min_shift=64 - lay.header_bits(t))
        recs = [placed(r, keep=keep) for r in runs]
        ours += [p.buf for p in recs] if not keep else []
        sets.append(_probe.RunSet(t, [None] * len(runs), [int(r.keys[0]) for r in runs],
                                  fetch=lambda idxs, recs=recs: [recs[i] for i in idxs]))
        del runs, recs
    pr = prober_for(lay)
    pr.set_sets(sets)
    check_all_k(lay, pr, [(fps, vals)], fps[:40])
    assert all(rs.loaded for rs in sets)
    assert all(len(rs._keep) == (rs.loaded if keep else 0) for rs in sets)


def test_placed_run_not_aligned_in_memory_is_copied_and_held():
    """A buffer whose address is not 8-aligned (a view 4 bytes into bytes) is copied into
    aligned memory the set holds; the answer is the run's."""
    keys = np.arange(100, 400, 3, dtype=np.uint64) << np.uint64(30)
    run = _probe.Run(keys, np.arange(len(keys), dtype=np.uint64))
    p = placed(run)
    raw = b"\0" * 4 + p.buf
    p = p._replace(buf=memoryview(raw)[4:])
    rs = _probe.RunSet(0, [None], [int(keys[0])], fetch=lambda idxs: [p])
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    pr.set_sets([rs])
    assert pr.lookup(keys[[0, 50, 99]]) == [0, 50, 99]
    assert len(rs._keep) == 1 and isinstance(rs._keep[0], np.ndarray)


@pytest.mark.parametrize("change", [
    {"n": 0}, {"kw": 2}, {"vw": 16}, {"koff": -8}, {"voff": 10**6},  # fields, extents
    {"koff": 12}, {"voff": 12},  # arrays not aligned to their widths in the buffer
    {"dbits": 25}, {"dbits": 9}, {"shift": 64}, {"high": 1 << 32},  # dir past the end; high
    {"n": True}, {"kw": 8.0},  # not ints
])
def test_placed_runs_that_do_not_fit_are_refused(change):
    """A Placed record that names anything outside its buffer, misaligned arrays or bad
    fields is refused before the C struct takes it; the set stays unloaded."""
    keys = np.arange(1, 600, dtype=np.uint64) << np.uint64(20)
    d, shift = _probe.run_dir(keys, 8)
    p = placed(_probe.Run(keys, keys.copy(), 0, d, shift))._replace(**change)
    rs = _probe.RunSet(0, [None], [int(keys[0])], fetch=lambda idxs: [p])
    with pytest.raises(InvalidConfigError):
        rs.load([0])
    assert rs.loaded == 0 and not rs.held()


def test_a_placed_run_whose_first_key_or_directory_differs_is_refused():
    """ss_runset_load checks what the offsets cannot: the first key against the set's and
    the directory's last entry against n."""
    keys = np.arange(1, 600, dtype=np.uint64) << np.uint64(20)
    d, shift = _probe.run_dir(keys, 8)
    good = placed(_probe.Run(keys, keys.copy(), 0, d, shift))
    bad_dir = bytearray(good.buf)
    bad_dir[-4:] = (598).to_bytes(4, "little")
    for p, first in ((good, int(keys[1])), (good._replace(buf=bytes(bad_dir)), int(keys[0]))):
        rs = _probe.RunSet(0, [None], [first], fetch=lambda idxs, p=p: [p])
        with pytest.raises(InvalidConfigError):
            rs.load([0])
        assert rs.loaded == 0


def test_adopt_takes_the_loaded_runs_of_the_same_first_keys():
    """A set built over some of another's runs (a merge moved the level on) takes the runs
    the old set had loaded where first keys match, with their load stamps, and fetches
    the rest; answers are the keys' values."""
    keys = np.arange(0, 4000, 10, dtype=np.uint64) << np.uint64(40)
    runs = cut(keys, np.arange(len(keys), dtype=np.uint64), list(range(0, len(keys), 25)))
    firsts = [int(r.keys[0]) for r in runs]
    fetched: list[int] = []

    def fetch(idxs):
        fetched.extend(idxs)
        return [placed(runs[i], keep=True) for i in idxs]

    old = _probe.RunSet(0, [None] * 16, firsts, fetch=fetch)
    old.load([2, 3, 9])
    new = _probe.RunSet(0, [None] * 13, firsts[3:], fetch=lambda idxs: fetch([i + 3 for i in idxs]))
    assert new.adopt(old) == 2 and new.loaded == 2  # runs 3 and 9: run 2 is gone
    assert new.held() == {f: s for f, s in old.held().items() if f in firsts[3:]}
    assert new.adopt(old) == 0  # loaded already
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    pr.set_sets([new])
    fetched.clear()
    assert pr.lookup(keys[[75, 160, 230]]) == [75, 160, 230]
    assert fetched == [6]  # runs 3 and 9 came from old; run 6 (new index 3) is fetched


@pytest.mark.parametrize("bits", [64, 36, 20])
def test_the_top_index_spreads_over_the_bits_its_keys_span(bits):
    """First keys of 2,000 runs over `bits` bits (band keys span 36): the top index's slots
    cover that span, so no slot holds more than a few runs; over all 64 bits, 36-bit keys
    fell in its first slot and every lookup walked the first keys from run 0."""
    rng = np.random.default_rng(bits)
    firsts = np.unique(rng.integers(0, 2**bits - 1, 2000, dtype=np.uint64, endpoint=True))
    top, tbits, tshift = runsets._top_index(firsts)
    assert top is not None and 1 <= tbits and tbits + tshift <= 64
    # a key's slot (the last one past the index's span) names a run at or before the
    # last one starting below the key, and at most a few runs before it
    keys = rng.integers(0, 2**bits - 1, 5000, dtype=np.uint64, endpoint=True)
    want = np.maximum(np.searchsorted(firsts, keys, side="left") - 1, 0)
    slot = np.minimum(keys >> np.uint64(tshift), np.uint64((1 << tbits) - 1))
    got = top[slot.astype(np.int64)].astype(np.int64)
    assert (got <= want).all() and (want - got).max() <= 16, (want - got).max()


@pytest.mark.parametrize("halves", [False, True])
def test_many_lookups_at_once_find_every_key(halves):
    """Lookups go in batches (their first reads in flight together): 1,000 queries at
    once, every stored key and as many absent ones in a shuffled order, over two sets of
    runs of random band-like keys (36 bits; 32-bit halves under a high half per run, as
    the band entries keep them): each query's values in query order, none lost at a
    batch's edge."""
    rng = np.random.default_rng(11)
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    sets, table = [], {}
    for part in range(2):
        keys = np.unique(rng.integers(0, 2**36, 250, dtype=np.uint64))
        vals = np.arange(len(keys), dtype=np.uint64) + 1000 * part
        runs = []
        for a in range(0, len(keys), 9):  # runs of 9 keys, each within one band
            k, v = keys[a : a + 9], vals[a : a + 9]
            same = k >> np.uint64(32) == k[0] >> np.uint64(32)
            k, v = k[same], v[same]
            if halves:
                runs.append(_probe.Run((k & np.uint64(0xFFFFFFFF)).astype(np.uint32), v.copy(),
                                       int(k[0]) >> 32 << 32))
            else:
                runs.append(_probe.Run(k.copy(), v.copy()))
            for kk, vv in zip(k.tolist(), v.tolist(), strict=True):
                table.setdefault(kk, []).append(vv)
        sets.append(_probe.RunSet(0, runs) if part else lazy_set(0, runs, kw=4 if halves else 8))
    pr.set_sets(sets)
    present = np.array(sorted(table), dtype=np.uint64)
    qs = np.concatenate([present, present + np.uint64(1)])  # + 1: absent (keys are sparse)
    qs = qs[rng.permutation(len(qs))]
    got = pr.lookup(qs)
    # set order, then query order: the lazy set's values first, then the other's
    want = [v for part in range(2) for q in qs.tolist() for v in table.get(q, [])
            if (v >= 1000) == bool(part)]
    assert got == want
