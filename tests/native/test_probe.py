"""The in-memory probe engine (ss_probe / _probe.Prober) against brute force.

Runs are built here the obvious way (keys permuted by the layout, stably
sorted with numpy); the oracle is every (value, fingerprint) entry within k of
the query, each value once with its least distance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from simstore.exceptions import InvalidConfigError
from simstore.native import core as _core, probe as _probe
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


def sorted_run(layout: Layout, t: int, fps: np.ndarray, vals: np.ndarray, dbits: int):
    """One table's run of (fps, vals): keys permuted and stably sorted, with its directory."""
    keys = permute(layout, t, fps)
    order = np.argsort(keys, kind="stable")
    keys, v = keys[order], vals[order]
    return (t, keys, v, _probe.build_dir(keys, dbits), dbits)


def scan_run(fps: np.ndarray, vals: np.ndarray):
    return (-1, fps.copy(), vals.copy(), None, 0)


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
            vals, dists = pr(int(q), k, layout.radius_for(k))
            assert vals.dtype == np.uint64 and dists.dtype == np.uint8
            want = expected(entries, int(q), k)
            assert vals.tolist() == list(want), (q, k)
            assert dists.tolist() == list(want.values()), (q, k)


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
    """Levels of every table, a scan run, duplicates and empty runs: the exact neighbour set."""
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
            top = min(lay.header_bits(t), 14)
            dbits = data.draw(st.sampled_from([0, top, _probe.choose_dbits(hi - lo, top)]))
            segs.append(sorted_run(lay, t, fps[lo:hi], vals[lo:hi], dbits))
    pr = prober_for(lay)
    pr.set_segments(segs)
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
            dbits = _probe.choose_dbits(hi - lo, lay.header_bits(t))
            segs.append(sorted_run(lay, t, fps[lo:hi], vals[lo:hi], dbits))
    pr = prober_for(lay)
    pr.set_segments(segs)
    check_all_k(lay, pr, [(fps, vals)], queries)


def test_32_bit_values_give_the_same_answer():
    """Runs whose values are uint32 (the store keeps narrow ids so) answer as uint64 ones."""
    rng = np.random.default_rng(32)
    lay = plan(5, 20_000).layout
    queries = rng.integers(0, MAX_FP, 30, dtype=np.uint64, endpoint=True)
    fps = planted(rng, 20_000, queries, 7)
    vals = rng.choice(2**32, 20_000, replace=False).astype(np.uint64)
    segs = []
    for t in range(len(lay.tables)):
        t_, keys, v, d, dbits = sorted_run(lay, t, fps, vals, _probe.choose_dbits(20_000, 21))
        segs.append((t_, keys, v.astype(np.uint32), d, dbits))
    segs.append((-1, fps[:500].copy(), vals[:500].astype(np.uint32), None, 0))
    pr = prober_for(lay)
    pr.set_segments(segs)
    check_all_k(lay, pr, [(fps, vals)], queries)


def test_exact_buckets_and_one_bucket():
    """dbits equal to the header bits (whole bucket is the range) and dbits 0 (one bucket)."""
    lay = manku_layout(8, 1, 7)  # 8-bit headers, radius 0
    rng = np.random.default_rng(5)
    q = int(rng.integers(0, MAX_FP, dtype=np.uint64, endpoint=True))
    fps = planted(rng, 3_000, np.array([q], dtype=np.uint64), 9)
    vals = np.arange(3_000, dtype=np.uint64)
    for dbits in (0, 8):
        pr = prober_for(lay)
        pr.set_segments([sorted_run(lay, t, fps, vals, dbits) for t in range(8)])
        check_all_k(lay, pr, [(fps, vals)], [q])


def test_same_value_keeps_its_least_distance():
    """A value met at two fingerprints (a level and the scan run) comes out once, nearest."""
    lay = plan(3, 1000).layout
    q = 0x0123_4567_89AB_CDEF
    level_fps = np.array([q ^ 0b111, q ^ 0b1], dtype=np.uint64)
    level_vals = np.array([5, 6], dtype=np.uint64)
    scan_fps = np.array([q ^ 0b1000, q ^ 0b1], dtype=np.uint64)
    scan_vals = np.array([5, 9], dtype=np.uint64)
    pr = prober_for(lay)
    segs = [sorted_run(lay, t, level_fps, level_vals, 4) for t in range(len(lay.tables))]
    pr.set_segments([*segs, scan_run(scan_fps, scan_vals)])
    vals, dists = pr(q, 3, lay.radius_for(3))
    assert vals.tolist() == [5, 6, 9] and dists.tolist() == [1, 1, 1]
    vals, dists = pr(q, 0, lay.radius_for(0))
    assert vals.tolist() == [] and dists.tolist() == []


def test_capacity_grows_for_many_hits():
    """Thousands of hits (each found in every table) overflow both the C and Python buffers."""
    lay = plan(3, 10_000).layout
    q = 42
    fps = np.full(5_000, q, dtype=np.uint64)
    fps[::2] ^= np.uint64(1 << 40)
    vals = np.arange(5_000, dtype=np.uint64)[::-1].copy()
    pr = prober_for(lay)
    pr.set_segments([sorted_run(lay, t, fps, vals, 10) for t in range(len(lay.tables))])
    for _ in range(2):  # the second call runs in the grown buffers
        got, dists = pr(q, 3, lay.radius_for(3))
        assert got.tolist() == list(range(5_000))
        assert dists.tolist() == [1 - (4_999 - v) % 2 for v in range(5_000)]
    small, _ = pr(q, 0, lay.radius_for(0))
    assert small.tolist() == list(range(0, 5_000, 2))


def test_no_segments_and_set_segments_replaces():
    lay = plan(5, 1000).layout
    pr = prober_for(lay)
    vals, dists = pr(1, 5, lay.radius_for(5))
    assert vals.size == 0 and dists.size == 0
    pr.set_segments([scan_run(np.array([1], dtype=np.uint64), np.array([3], dtype=np.uint64))])
    assert pr(1, 5, lay.radius_for(5))[0].tolist() == [3]
    pr.set_segments([])
    assert pr(1, 5, lay.radius_for(5))[0].tolist() == []


def test_results_are_owned_copies():
    """A later call does not change an earlier result."""
    lay = plan(3, 1000).layout
    pr = prober_for(lay)
    pr.set_segments([scan_run(np.array([1, 2], dtype=np.uint64), np.array([10, 20], dtype=np.uint64))])
    first, _ = pr(1, 0, 0)
    pr(2, 0, 0)
    assert first.tolist() == [10]


def test_masks_are_the_hamming_ball():
    lay = manku_layout(4, 2, 6)
    pr = prober_for(lay)
    for r in range(4):
        for t, ms in enumerate(pr.masks(r)):
            h = lay.header_bits(t)
            assert ms == sorted(ms) and len(ms) == len(set(ms)) == probes(h, r)
            assert all(m >> (64 - h) << (64 - h) == m and m.bit_count() <= r for m in ms)


# --- directory --------------------------------------------------------------------


def test_build_dir_known_answers():
    keys = np.array([0, 1 << 62, 1 << 63, (1 << 63) + 5, MAX_FP], dtype=np.uint64)
    assert _probe.build_dir(keys, 2).tolist() == [0, 1, 2, 4, 5]
    assert _probe.build_dir(keys, 1).tolist() == [0, 2, 5]
    assert _probe.build_dir(keys, 0).tolist() == [0, 5]
    assert _probe.build_dir(np.empty(0, dtype=np.uint64), 3).tolist() == [0] * 9
    assert _probe.build_dir(np.array([7, 7, 7], dtype=np.uint64), 0).tolist() == [0, 3]


@given(st.lists(st.integers(0, MAX_FP), max_size=200), st.integers(0, 12))
def test_build_dir_equals_searchsorted(keys, dbits):
    arr = np.array(sorted(keys), dtype=np.uint64)
    top = (arr >> np.uint64(64 - dbits)) if dbits else np.zeros(len(arr), dtype=np.uint64)
    want = np.searchsorted(top, np.arange((1 << dbits) + 1, dtype=np.uint64), side="left")
    assert _probe.build_dir(arr, dbits).tolist() == want.tolist()


def test_choose_dbits():
    assert _probe.choose_dbits(0, 20) == 0
    assert _probe.choose_dbits(1, 20) == 0
    assert _probe.choose_dbits(4, 20) == 1
    assert _probe.choose_dbits(1 << 20, 30) == 19
    assert _probe.choose_dbits(1 << 20, 16) == 16
    assert _probe.choose_dbits(1 << 40, 64) == 24


# --- bad arguments: the project's errors, never a crash --------------------------


@pytest.mark.parametrize(
    ("keys", "dbits"),
    [
        (np.array([2, 1], dtype=np.uint64), 4),  # not ascending
        (np.array([1, 2], dtype=np.uint64), 27),
        (np.array([1, 2], dtype=np.uint64), -1),
        (np.array([1, 2], dtype=np.uint64), True),
        (np.array([1.0, 2.0]), 4),
        (np.array([1, 2], dtype=np.int64), 4),
        ([1, 2], 4),
        (np.zeros((2, 2), dtype=np.uint64), 4),
    ],
)
def test_build_dir_refuses(keys, dbits):
    with pytest.raises(InvalidConfigError):
        _probe.build_dir(keys, dbits)


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
        lambda k, v: (4, k, v, _probe.build_dir(k, 2), 2),  # no table 4
        lambda k, v: (-2, k, v, None, 0),
        lambda k, v: (True, k, v, _probe.build_dir(k, 2), 2),
        lambda k, v: (0, k, v[:2], _probe.build_dir(k, 2), 2),  # lengths differ
        lambda k, v: (0, k.astype(np.int64), v, _probe.build_dir(k, 2), 2),
        lambda k, v: (0, k, v, None, 2),  # a sorted run needs its directory
        lambda k, v: (0, k, v, _probe.build_dir(k, 2), 3),  # directory of other bits
        lambda k, v: (0, k, v, _probe.build_dir(k, 17), 17),  # above the 16 header bits
        lambda k, v: (0, k, v, _probe.build_dir(k[:2], 2), 2),  # directory of other keys
        lambda k, v: (-1, [1], v, None, 0),
    ],
)
def test_set_segments_refuses(make):
    lay, keys, vals = _one_table()
    pr = prober_for(lay)
    with pytest.raises(InvalidConfigError):
        pr.set_segments([make(keys, vals)])


@pytest.mark.parametrize(
    ("q", "k", "radius"),
    [(-1, 3, 0), (1 << 64, 3, 0), (1.5, 3, 0), (1, -1, 0), (1, 65, 0), (1, 1 << 40, 0),
     (1, 3, -1), (1, 3, 65), (1, 3, 1.0), (1, 3, 16)],
)
def test_call_refuses(q, k, radius):
    lay = manku_layout(1, 1, 3)  # one 64-bit header: radius 16 would need ~5e14 probes
    pr = prober_for(lay)
    pr.set_segments([scan_run(np.array([1], dtype=np.uint64), np.array([1], dtype=np.uint64))])
    with pytest.raises(InvalidConfigError):
        pr(q, k, radius)


def test_damaged_directory_does_not_read_out_of_bounds():
    """Directory entries past the run are clamped: a wrong answer at worst, never a crash."""
    lay, keys, vals = _one_table()
    d = _probe.build_dir(keys, 4)
    d[:-1] = np.uint64(1 << 60)
    pr = prober_for(lay)
    pr.set_segments([(t, keys, vals, d, 4) for t in range(4)])
    got, _ = pr(1, 3, lay.radius_for(3))
    assert set(got.tolist()) <= {1, 2, 3}


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


@pytest.mark.parametrize(
    "override",
    [{"ntables": 0}, {"ntables": 65}, {"nblocks": 0}, {"nblocks": 65}, {"tails": "bad-tail"},
     {"nmasks": "negative"}, {"masks": "null"}, {"table": 4}, {"table": -2}, {"dbits": 27},
     {"dbits": 17}, {"dbits": -1}, {"dir": "null"}, {"k": -1}, {"k": 65}],
)
def test_c_probe_refuses_bad_arguments(override):
    """The C entry point checks what the binding would have: -2, no crash."""
    ffi, lib = _core.ffi, _core.lib
    lay, keys, vals = _one_table()
    seg_fields = {"table": 0, "dbits": 4}
    plan_fields = {}
    k = 3
    for key, v in override.items():
        if key in ("table", "dbits"):
            seg_fields[key] = v
        elif key == "k":
            k = v
        elif v == "bad-tail":
            plan_fields["tails"] = ffi.new("uint8_t[]", [64] * 4)
        elif v == "negative":
            plan_fields["nmasks"] = ffi.new("int32_t[]", [1, -1, 1, 1])
        elif v == "null":
            plan_fields[key] = ffi.NULL
        else:
            plan_fields[key] = v
    c_plan, keep = _c_plan(lay, **{k_: v for k_, v in plan_fields.items() if k_ != "dir"})
    d = _probe.build_dir(keys, 4)
    seg = ffi.new("ss_segment[]", 1)
    bufs = [ffi.from_buffer("uint64_t[]", a) for a in (keys, vals, d)]
    seg[0].keys, seg[0].vals, seg[0].n = bufs[0], bufs[1], 3
    seg[0].dir = ffi.NULL if "dir" in plan_fields else bufs[2]
    seg[0].table, seg[0].dbits = seg_fields["table"], seg_fields["dbits"]
    out_v, out_d = ffi.new("uint64_t[]", 8), ffi.new("uint8_t[]", 8)
    assert lib.ss_probe(1, k, c_plan, seg, 1, out_v, out_d, 8) == -2
    del keep


def test_c_probe_reports_the_count_past_capacity():
    """With too small a buffer the C call returns the full count and writes only cap entries."""
    ffi, lib = _core.ffi, _core.lib
    lay = plan(3, 1000).layout
    c_plan, keep = _c_plan(lay)
    keys = np.arange(10, dtype=np.uint64)
    seg = ffi.new("ss_segment[]", 1)
    bufs = [ffi.from_buffer("uint64_t[]", keys)]
    seg[0].keys, seg[0].vals, seg[0].n, seg[0].table, seg[0].dbits = bufs[0], bufs[0], 10, -1, 0
    out_v, out_d = ffi.new("uint64_t[]", 5), ffi.new("uint8_t[]", 5)
    out_v[4] = 12345
    assert lib.ss_probe(0, 64, c_plan, seg, 1, out_v, out_d, 3) == 10
    assert list(out_v[0:3]) == [0, 1, 2] and out_v[4] == 12345
    assert lib.ss_probe(0, 64, c_plan, seg, 1, ffi.NULL, ffi.NULL, 0) == 10
    del keep


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=300), st.lists(st.integers(0, 320), max_size=20),
       st.integers(0, 2**32 - 1), st.booleans())
def test_lookup_equals_brute_force(keys, qs, seed, narrow):
    """Exact lookups over two sorted runs: every value of an equal key, duplicates kept."""
    rng = np.random.default_rng(seed)
    shift = np.uint64(rng.integers(0, 55))  # keys anywhere in the 64 bits
    pr = _probe.Prober([(b"\0", b"\x40", b"\0")], [64])
    segs, entries = [], []
    for part in (keys[: len(keys) // 2], keys[len(keys) // 2 :]):
        k = np.sort(np.array(part, dtype=np.uint64)) << shift
        v = rng.integers(0, 2**32 - 1, len(k), dtype=np.uint64)
        dbits = _probe.choose_dbits(len(k), 64)
        segs.append((0, k, v.astype(np.uint32) if narrow else v, _probe.build_dir(k, dbits), dbits))
        entries.append((k, v))
    pr.set_segments(segs)
    q = np.array(qs, dtype=np.uint64) << shift
    want = [int(v) for k, vs in entries for x in q.tolist()
            for kk, v in zip(k.tolist(), vs.tolist(), strict=True) if kk == x]
    assert pr.lookup(q) == want
