"""Thin binding of the probe engine (``csrc/probe.c``): queries over sorted runs in place.

A :class:`Prober` holds a layout's probe plans and the run sets it points at,
and answers a query (every probe of every table and level) or exact key
lookups in one C call each. A run's arrays may view memory the caller does not
own (a store's runs are numpy views of LMDB's map): the caller keeps that
memory valid while it calls the prober. Callers validate the layout; this
module checks the arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import InvalidConfigError
from .core import U64, ffi, lib, raise_for

MAX_PROBES = 1 << 22  # probes a query may plan (a larger radius is a layout mistake)
NEED_CAP = 1024  # runs not loaded a call reports at most (the rest on the next call)
NEEDS_RUNS = -3  # what ss_probe and ss_lookup return when a run they need is not loaded


MAX_RUN_DIR_BITS = 24


class Run(NamedTuple):
    """One sorted run: keys (uint64, or uint32 low halves under ``high``) and values.

    A run of uint64 keys may carry its directory (``run_dir``): probes then
    read one bucket instead of searching the run.
    """

    keys: np.ndarray
    vals: np.ndarray
    high: int = 0  # the keys' high 32 bits (<< 32) when keys are uint32 low halves
    dir: np.ndarray | None = None  # uint32, 2**dbits + 1 entries
    shift: int = 0


class Placed(NamedTuple):
    """One sorted run as it lies in a buffer (a store's run record, read in place):
    its arrays at byte offsets of buf, so loading it makes no array object.

    keep: the set holds buf while it points into it (a private copy); False
    when the caller vouches for the memory (LMDB's map, see
    :mod:`simstore.store.runs`), so a loaded run costs the set no Python object.
    """

    buf: Any
    n: int
    kw: int  # 8, or 4: low halves under high
    vw: int
    koff: int
    voff: int
    doff: int  # the directory's offset, when dbits
    dbits: int
    shift: int
    high: int
    keep: bool


def run_dir(keys: np.ndarray, dbits: int, min_shift: int = 0) -> tuple[np.ndarray, int]:
    """The directory of a run's ascending uint64 keys (at least one) and its shift.

    dir[b] is the first index whose key k has ``(k >> shift) - (keys[0] >> shift) >= b``.
    shift is the least at or above min_shift whose buckets fit in dbits bits, and the
    directory is no larger than those buckets need. A table's tail bits as min_shift
    make a bucket never finer than a probe's range, so a probe starts at its bucket.
    """
    keys = _u64_array(keys, "run keys")
    if not _is_int(dbits) or not 1 <= dbits <= MAX_RUN_DIR_BITS or not len(keys) or \
            not _is_int(min_shift) or not 0 <= min_shift <= 63:
        raise InvalidConfigError(
            f"simstore: a run directory needs keys, dbits in 1..{MAX_RUN_DIR_BITS} and a "
            f"shift in 0..63 (got {len(keys)} keys, dbits {dbits!r}, shift {min_shift!r})")
    first, last = int(keys[0]), int(keys[-1])
    shift = min_shift
    while (last >> shift) - (first >> shift) >= 1 << dbits:
        shift += 1
    dbits = max(1, min(dbits, ((last >> shift) - (first >> shift)).bit_length()))
    out = np.empty((1 << dbits) + 1, dtype=np.uint32)
    rc = lib.ss_run_dir(ffi.from_buffer("uint64_t[]", keys), len(keys), dbits, shift,
                        ffi.from_buffer("uint32_t[]", out))
    if rc != 0:
        raise_for(rc, "building a run directory (the keys must be ascending)")
    return out, shift


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _u64_array(a: Any, what: str) -> np.ndarray:
    """a itself when a contiguous 1-D uint64 array, a contiguous copy if strided; else refused."""
    if not isinstance(a, np.ndarray) or a.dtype != U64 or a.ndim != 1:
        got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise InvalidConfigError(f"simstore: {what} must be a 1-D uint64 numpy array (got {got})")
    return np.ascontiguousarray(a)


def _width(a: Any, what: str) -> int:
    """4 or 8: the width of a 1-D contiguous uint32/uint64 array; else refused."""
    if isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype in (np.uint32, U64) \
            and a.flags.c_contiguous:
        return int(a.dtype.itemsize)
    got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
    raise InvalidConfigError(
        f"simstore: {what} must be a contiguous 1-D uint32 or uint64 array (got {got})")


Fetch = Callable[[Sequence[int]], Sequence["Run | Placed"]]


class RunSet:
    """A level of one table as the C engine reads it: sorted disjoint runs, or scan runs.

    table >= 0: runs ascending and disjoint, ``firsts[i]`` the first key of
    run i (given, e.g. from the store's record keys, so building a set reads
    no key); table -1: runs of unpermuted fingerprints to scan (uint64 keys).
    A sorted set's run may be None, not loaded yet: ``fetch`` gives runs by
    index when a probe first needs them (their keys kw bytes wide; :class:`Run`
    arrays or :class:`Placed` records) and :meth:`load` points the set at
    them; with ``whole_at`` > 0, once that share (1 / whole_at) of the runs is
    loaded the rest are fetched at once (a process that keeps querying pays the
    whole set once, in order, rather than run by run over its next queries).
    Holds the C structs and a reference to every buffer they point into that
    the set owns; a run placed in memory the caller vouches for costs no
    Python object.
    """

    def __init__(self, table: int, runs: Sequence[Run | None],
                 firsts: Sequence[int] | np.ndarray | None = None, *, kw: int = 8,
                 fetch: Fetch | None = None, whole_at: int = 0) -> None:
        if not _is_int(table) or table < -1:
            raise InvalidConfigError(f"simstore: a run set's table must be >= -1 (got {table!r})")
        self.table = table
        lazy = any(r is None for r in runs)
        runs = [r for r in runs if r is None or len(r.keys)]
        if (lazy and (firsts is None or table < 0)) or kw not in (4, 8):
            raise InvalidConfigError(
                "simstore: a run set's runs not loaded need first keys, a sorted table and "
                "a key width of 4 or 8")
        if firsts is None:
            firsts = [int(r.high) | int(r.keys[0]) for r in runs if r is not None]
        elif len(firsts) != len(runs):
            raise InvalidConfigError("simstore: a run set needs one first key per run")
        self.firsts = np.array(firsts, dtype=np.uint64)
        if len(self.firsts) > 1 and bool((self.firsts[1:] < self.firsts[:-1]).any()):
            raise InvalidConfigError("simstore: a run set's first keys must ascend")
        self.fetch = fetch
        self.whole_at = whole_at
        self.loaded = 0  # runs with their keys
        arr = ffi.new("ss_run[]", len(runs))
        self._keep: dict[int, Any] = {}  # run index -> what its pointers point into
        self._stamps = np.zeros(len(runs), dtype=np.int64)  # when each run was loaded
        for i, run in enumerate(runs):
            if run is None:
                arr[i].kw, arr[i].vw = kw, 4  # vw: any width once loaded
            else:
                self._c_run(arr[i], run)
                self._loaded(i, run)
        self._runs = arr
        self._firsts_c = ffi.from_buffer("uint64_t[]", self.firsts)
        self._top, self._tbits = _top_index(self.firsts) if table >= 0 else (None, 0)
        self._top_c = ffi.NULL if self._top is None else ffi.from_buffer("uint32_t[]", self._top)
        probe = ffi.new("ss_runset *")
        self.fill(probe, check=False)
        if lib.ss_runset_check(probe) != 0:
            raise InvalidConfigError("simstore: a run set's runs are malformed")
        self._checked = probe.checked

    def _loaded(self, i: int, keep: Any) -> None:
        """Count run i loaded, holding keep (None: nothing to hold) while the set lives."""
        global _STAMP
        _STAMP += 1
        self._stamps[i] = _STAMP
        if keep is not None:
            self._keep[i] = keep
        self.loaded += 1

    @staticmethod
    def _c_run(c: Any, run: Run) -> None:
        """Fill the C struct c of one run (its arrays checked; the caller holds run)."""
        keys, vals, high, dir_, shift = run
        kw, vw = _width(keys, "run keys"), _width(vals, "run values")
        if len(keys) != len(vals) or (kw == 8 and high) or not 0 <= high < 1 << 64:
            raise InvalidConfigError(
                "simstore: a run needs as many values as keys, and a high half only "
                "over 32-bit keys")
        c.keys = ffi.from_buffer(keys)
        c.vals = ffi.from_buffer(vals)
        c.high, c.n, c.kw, c.vw = high, len(keys), kw, vw
        c.dir, c.dbits, c.shift = ffi.NULL, 0, 0
        if dir_ is not None:
            c.dir, c.dbits, c.shift = _run_dir_ok(dir_, shift, kw, len(keys))

    @staticmethod
    def _c_placed(c: Any, p: Placed) -> Any:
        """Fill the C struct c of one placed run; what to hold (None: the caller vouches).

        Its offsets and extents are checked against the buffer here, its key
        width, first key and directory end by ss_runset_load. A buffer whose
        address is not 8-aligned is copied (and then held).
        """
        buf = ffi.from_buffer("uint8_t[]", p.buf)
        dlen = 4 * ((1 << p.dbits) + 1) if _is_int(p.dbits) and p.dbits > 0 else 0
        if not (all(_is_int(x) for x in p[1:10]) and p.n >= 1 and p.kw in (4, 8)
                and p.vw in (4, 8) and 0 <= p.koff and p.koff + p.n * p.kw <= len(buf)
                and 0 <= p.voff and p.voff + p.n * p.vw <= len(buf)
                and 0 <= p.dbits <= MAX_RUN_DIR_BITS and 0 <= p.shift <= 63
                and (not p.dbits or 0 <= p.doff and p.doff + dlen <= len(buf))
                and (p.kw == 4 or not p.high) and 0 <= p.high < 1 << 64):
            raise InvalidConfigError("simstore: a placed run does not fit its buffer")
        if p.koff % p.kw or p.voff % p.vw or (p.dbits and p.doff % 4):
            raise InvalidConfigError("simstore: a placed run's arrays must be aligned "
                                     "to their widths within its buffer")
        keep = p.buf if p.keep else None
        if int(ffi.cast("uintptr_t", buf)) % 8:
            keep = np.frombuffer(p.buf, dtype=np.uint8).copy()  # numpy aligns its data
            buf = ffi.from_buffer("uint8_t[]", keep)
        c.keys, c.vals = buf + p.koff, buf + p.voff
        c.dir = ffi.cast("uint32_t *", buf + p.doff) if p.dbits else ffi.NULL
        c.high, c.n, c.kw, c.vw, c.dbits, c.shift = p.high, p.n, p.kw, p.vw, p.dbits, p.shift
        return keep

    @property
    def nruns(self) -> int:
        """How many runs the set has, loaded or not."""
        return len(self.firsts)

    def load(self, idxs: Sequence[int]) -> int:
        """Fetch the runs not loaded yet among idxs and point the set at them; how many."""
        if self.fetch is None:
            raise InvalidConfigError("simstore: a run set with runs not loaded needs fetch")
        idxs = [i for i in idxs if 0 <= i < self.nruns and self._runs[i].n == 0]
        if not idxs:
            return 0
        if self.whole_at and (self.loaded + len(idxs)) * self.whole_at >= self.nruns:
            idxs = [i for i in range(self.nruns) if self._runs[i].n == 0]
        got = self.fetch(idxs)
        probe = ffi.new("ss_runset *")
        self.fill(probe)
        one = ffi.new("ss_run *")
        for i, run in zip(idxs, got, strict=True):
            if isinstance(run, Placed):
                keep = self._c_placed(one, run)
            else:
                self._c_run(one, run)
                keep = run
            if lib.ss_runset_load(probe, i, one) != 0:
                raise InvalidConfigError(
                    f"simstore: run {i} does not fit its place in the set (key width, "
                    "first key or directory)")
            self._loaded(i, keep)
        return len(idxs)

    def adopt(self, old: RunSet) -> int:
        """Point this set's runs not loaded at those of old with the same first key that
        old has loaded (the same record: the caller vouches); how many.

        A level a merge moved on within its lineage keeps the runs a process
        has fetched (see :func:`simstore.store.runfile.next_gen`).
        """
        have = np.flatnonzero(old._stamps)
        if not len(have) or not self.nruns:
            return 0
        at = np.searchsorted(self.firsts, old.firsts[have])
        ok = at < self.nruns
        ok[ok] = self.firsts[at[ok]] == old.firsts[have[ok]]
        probe = ffi.new("ss_runset *")
        self.fill(probe)
        n = 0
        for i, j in zip(have[ok].tolist(), at[ok].tolist(), strict=True):
            if self._runs[j].n or lib.ss_runset_load(probe, j, old._runs + i) != 0:
                continue
            self._stamps[j] = old._stamps[i]
            if i in old._keep:
                self._keep[j] = old._keep[i]
            self.loaded += 1
            n += 1
        return n

    def held(self) -> dict[int, int]:
        """The runs loaded so far: first key -> when it was loaded (a run another set
        adopted keeps its stamp; one fetched again gets a new one)."""
        have = np.flatnonzero(self._stamps)
        return dict(zip(self.firsts[have].tolist(), self._stamps[have].tolist(), strict=True))

    def fill(self, c: Any, check: bool = True) -> None:
        """Point a C ss_runset at this set (checked when built)."""
        c.runs, c.firsts, c.nruns, c.table = self._runs, self._firsts_c, len(self.firsts), \
            self.table
        c.top, c.tbits = self._top_c, self._tbits
        c.checked = self._checked if check else 0


_STAMP = 0  # loads so far in this process (RunSet.held)


TOP_MIN_RUNS = 8  # fewer runs: a binary search of the first keys is as quick


def _top_index(firsts: np.ndarray) -> tuple[np.ndarray | None, int]:
    """The top index of sorted first keys (see ss_runset in simstore.h): about four
    slots a run, so a key's run is found in a step or two."""
    n = len(firsts)
    if n < TOP_MIN_RUNS:
        return None, 0
    tbits = min(MAX_RUN_DIR_BITS, (n - 1).bit_length() + 2)
    bounds = np.arange(1 << tbits, dtype=np.uint64) << np.uint64(64 - tbits)
    top = np.searchsorted(firsts, bounds, side="left").astype(np.int64) - 1
    return np.maximum(top, 0).astype(np.uint32), tbits


def _ball(bits: int, radius: int) -> int:
    """Values within Hamming distance radius of one bits-bit value."""
    return sum(math.comb(bits, r) for r in range(min(radius, bits) + 1))


def probe_masks(header_bits: int, radius: int, tail: int) -> list[int]:
    """The XOR masks of weight <= radius over header_bits bits, shifted left by tail, ascending."""
    out = []
    for r in range(min(radius, header_bits) + 1):
        for bits in itertools.combinations(range(header_bits), r):
            out.append(sum(1 << (b + tail) for b in bits))
    return sorted(out)


def _run_dir_ok(dir_: Any, shift: Any, kw: int, n: int) -> tuple[Any, int, int]:
    """(C pointer, dbits, shift) of a run's directory, checked for its shape."""
    size = len(dir_) - 1 if isinstance(dir_, np.ndarray) else 0
    dbits = size.bit_length() - 1
    if not (isinstance(dir_, np.ndarray) and dir_.dtype == np.uint32 and dir_.ndim == 1
            and dir_.flags.c_contiguous and size == 1 << dbits and 1 <= dbits
            <= MAX_RUN_DIR_BITS and kw == 8 and _is_int(shift) and 0 <= shift <= 63
            and int(dir_[-1]) == n):
        raise InvalidConfigError(
            "simstore: a run directory must be run_dir(keys, dbits) of the run's 64-bit keys")
    return ffi.from_buffer("uint32_t[]", dir_), dbits, shift


class Prober:
    """A query's probes over sorted runs, all in one C call (ss_probe).

    Built once per layout from each table's permutation spec (as
    Layout.shifts) and header bits. ``set_sets`` points it at the current
    run sets, keeping a reference to each; :meth:`hits` answers a query.
    Probe plans are built per radius on first use. The output buffers are
    kept and grown between calls, so calls must not overlap (one prober per
    thread); set_sets may run while a call is under way (the call finishes on
    the runs it started with).
    """

    def __init__(
        self, specs: Sequence[tuple[bytes, bytes, bytes]], header_bits: Sequence[int]
    ) -> None:
        self._ntables, self._nblocks = _check_specs(specs, header_bits)
        self._header_bits = tuple(header_bits)
        self._tails = [64 - h for h in header_bits]
        # the plans' byte arrays: ffi-owned, since struct fields keep nothing alive
        self._spec_arrays = [
            ffi.new("uint8_t[]", b"".join(s[i] for s in specs)) for i in range(3)
        ] + [ffi.new("uint8_t[]", bytes(self._tails))]
        self._plans: dict[int, Any] = {}
        self._plan_refs: list[Any] = []
        # (C set array, count, the RunSets it points into): swapped whole, so a
        # call holds the runs it started with even if set_sets runs meanwhile
        self._sets: tuple[Any, int, list[RunSet]] = (ffi.new("ss_runset[]", 0), 0, [])
        self._grow(64)
        # the runs a call found not loaded (ss_need), loaded before it is made again
        self._need = np.empty(NEED_CAP, dtype=np.uint64)
        self._c_need = ffi.new("ss_need *", {"a": ffi.from_buffer("uint64_t[]", self._need),
                                            "cap": NEED_CAP, "n": 0})

    def masks(self, radius: int) -> list[list[int]]:
        """Each table's probe masks at one radius (ascending, shifted into the header)."""
        return [probe_masks(h, radius, 64 - h) for h in self._header_bits]

    def _plan(self, radius: int) -> Any:
        """The C plan (ss_probe_plan *) of one radius, built on first use."""
        if not _is_int(radius) or not 0 <= radius <= 64:
            raise InvalidConfigError(f"simstore: radius must be an int in 0..64 (got {radius!r})")
        count = sum(_ball(h, radius) for h in self._header_bits)
        if count > MAX_PROBES:
            raise InvalidConfigError(
                f"simstore: radius {radius} needs {count} probes a query (at most {MAX_PROBES})"
            )
        masks = self.masks(radius)
        c_masks = ffi.new("uint64_t[]", [m for ms in masks for m in ms])
        c_nmasks = ffi.new("int32_t[]", [len(ms) for ms in masks])
        src, width, dst, tails = self._spec_arrays
        plan = ffi.new(
            "ss_probe_plan *",
            {"ntables": self._ntables, "nblocks": self._nblocks, "src_shift": src,
             "width": width, "dst_shift": dst, "tails": tails, "masks": c_masks,
             "nmasks": c_nmasks},
        )
        self._plan_refs += [c_masks, c_nmasks]
        self._plans[radius] = plan
        return plan

    def set_sets(self, sets: Sequence[RunSet]) -> None:
        """Probe these run sets from now on (their tables within this prober's)."""
        for rs in sets:
            if rs.table >= self._ntables:
                raise InvalidConfigError(
                    f"simstore: a run set's table must be -1..{self._ntables - 1} "
                    f"(got {rs.table})")
        arr = ffi.new("ss_runset[]", len(sets))
        for i, rs in enumerate(sets):
            rs.fill(arr[i])
        self._sets = (arr, len(sets), list(sets))

    def _grow(self, cap: int) -> None:
        """Output buffers with room for cap hits."""
        self._cap = cap
        self._vals = np.empty(cap, dtype=np.uint64)
        self._dist = np.empty(cap, dtype=np.uint8)
        self._c_vals = ffi.from_buffer("uint64_t[]", self._vals)
        self._c_dist = ffi.from_buffer("uint8_t[]", self._dist)

    def _load_needed(self, keep: list[RunSet]) -> None:
        """Load the runs the last call found not loaded (ss_need), set by set."""
        n = min(int(self._c_need.n), NEED_CAP)
        by_set: dict[int, list[int]] = {}
        for x in set(self._need[:n].tolist()):
            by_set.setdefault(x >> 32, []).append(x & 0xFFFFFFFF)
        if not sum(keep[si].load(sorted(idxs)) for si, idxs in by_set.items()):
            raise InvalidConfigError("simstore: the C core needs runs no set can load")

    def _run(self, q: int, k: int, plan: Any) -> int:
        """ss_probe calls into the output buffers until no run is missing: the hit count."""
        sets, nsets, keep = self._sets  # keep: alive until the call returns
        while True:
            try:
                m: int = lib.ss_probe(q, k, plan, sets, nsets, self._c_vals, self._c_dist,
                                      self._cap, self._c_need)
            except (OverflowError, TypeError) as exc:
                raise InvalidConfigError(
                    f"simstore: a probe needs q in 0..2**64-1 and k in 0..64 (got {q!r}, {k!r})"
                ) from exc
            if m == NEEDS_RUNS:
                self._load_needed(keep)
            elif m < 0:
                raise_for(m, f"probing {nsets} run sets (k={k})")
            elif m > self._cap:
                self._grow(max(m, 2 * self._cap))
            else:
                return m

    def lookup(self, qs: np.ndarray) -> list[int]:
        """Values of every key of the sorted runs equal to one of qs (uint64), duplicates kept."""
        qs = _u64_array(qs, "lookup keys")
        sets, nsets, keep = self._sets  # keep: alive until the call returns
        cq = ffi.from_buffer("uint64_t[]", qs)
        while True:
            m = int(lib.ss_lookup(sets, nsets, cq, len(qs), self._c_vals, self._cap,
                                  self._c_need))
            if m == NEEDS_RUNS:
                self._load_needed(keep)
            elif m < 0:
                raise_for(m, f"looking up {len(qs)} keys in {nsets} run sets")
            elif m <= self._cap:
                return ffi.unpack(self._c_vals, m) if m else []
            else:
                self._grow(max(m, 2 * self._cap))

    def hits(self, q: int, k: int, radius: int) -> list[tuple[int, int]]:
        """(value, distance) of every value within k of q, distinct, by distance then value.

        radius is the header radius that answers k on this layout
        (Layout.radius_for(k)).
        """
        plan = self._plans.get(radius)
        if plan is None:
            plan = self._plan(radius)
        m = self._run(q, k, plan)
        if not m:
            return []
        return list(zip(ffi.unpack(self._c_vals, m), ffi.unpack(self._c_dist, m), strict=True))


def _check_specs(
    specs: Sequence[tuple[bytes, bytes, bytes]], header_bits: Sequence[int]
) -> tuple[int, int]:
    """(ntables, nblocks) of per-table permutation specs, checked for ss_probe."""
    ntables = len(specs)
    if not 1 <= ntables <= 64 or len(header_bits) != ntables:
        raise InvalidConfigError(
            f"simstore: a prober needs 1..64 tables and one header size each"
            f" (got {ntables} specs, {len(header_bits)} header sizes)"
        )
    nblocks = len(specs[0][1])
    for spec in specs:
        if not _spec_ok(spec, nblocks):
            raise InvalidConfigError(
                f"simstore: each table spec must be 3 byte strings of {nblocks} bytes"
                f" whose blocks fit in 64 bits (got {spec!r})"
            )
    if not 1 <= nblocks <= 64 or not all(_is_int(h) and 1 <= h <= 64 for h in header_bits):
        raise InvalidConfigError(
            f"simstore: a prober needs 1..64 blocks and header sizes in 1..64"
            f" (got {nblocks} blocks, headers {list(header_bits)})"
        )
    return ntables, nblocks


def _spec_ok(spec: Any, nblocks: int) -> bool:
    """Whether spec is (src_shift, width, dst_shift) of nblocks blocks inside 64 bits."""
    if len(spec) != 3 or not all(isinstance(b, bytes) and len(b) == nblocks for b in spec):
        return False
    src, width, dst = spec
    blocks = zip(src, width, dst, strict=True)
    return all(1 <= w <= 64 and s + w <= 64 and d + w <= 64 for s, w, d in blocks)
