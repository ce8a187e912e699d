"""Run sets: the sorted runs a probe reads, as the C engine sees them (``ss_runset``).

A :class:`RunSet` is one level of one table (or the scan runs of recent docs): its
runs' first keys, a top index over them, and a C struct per run pointing at the
run's keys, values and directory wherever they lie (a store's runs are read where
LMDB maps them, :class:`Placed`; tests and private copies give numpy arrays,
:class:`Run`). Runs not loaded yet are fetched when a probe first lands in them.
:mod:`simstore.native.probe` runs the queries over these sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import InvalidConfigError
from .core import U64, ffi, lib, raise_for

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
    :mod:`simstore.store.runs.tables`), so a loaded run costs the set no Python object.
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
    keys = u64_array(keys, "run keys")
    if not is_int(dbits) or not 1 <= dbits <= MAX_RUN_DIR_BITS or not len(keys) or \
            not is_int(min_shift) or not 0 <= min_shift <= 63:
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
    if rc != lib.SS_OK:
        raise_for(rc, "building a run directory (the keys must be ascending)")
    return out, shift


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def u64_array(a: Any, what: str) -> np.ndarray:
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
        if not is_int(table) or table < -1:
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
        # low header bits every probe of the set spans at least (0..63): set by a prober
        # from the set's size (a small level: fewer, wider probes; ss_probe)
        self.span = 0
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
        self._top, self._tbits, self._tshift = _top_index(self.firsts) if table >= 0 else \
            (None, 0, 0)
        self._top_c = ffi.NULL if self._top is None else ffi.from_buffer("uint32_t[]", self._top)
        probe = ffi.new("ss_runset *")
        self.fill(probe, check=False)
        if lib.ss_runset_check(probe) != lib.SS_OK:
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
        dlen = 4 * ((1 << p.dbits) + 1) if is_int(p.dbits) and p.dbits > 0 else 0
        if not (all(is_int(x) for x in p[1:10]) and p.n >= 1 and p.kw in (4, 8)
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
            if lib.ss_runset_load(probe, i, one) != lib.SS_OK:
                raise InvalidConfigError(
                    f"simstore: run {i} does not fit its place in the set (key width, "
                    "first key or directory)")
            self._loaded(i, keep)
        return len(idxs)

    def adopt(self, old: RunSet) -> int:
        """Point this set's runs not loaded at those of old with the same first key that
        old has loaded (the same record: the caller vouches); how many.

        A level a merge moved on within its lineage keeps the runs a process
        has fetched (see :func:`simstore.store.runs.format.next_gen`).
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
            if self._runs[j].n or lib.ss_runset_load(probe, j, old._runs + i) != lib.SS_OK:
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
        c.top, c.tbits, c.tshift = self._top_c, self._tbits, self._tshift
        c.span = self.span
        c.checked = self._checked if check else 0


_STAMP = 0  # loads so far in this process (RunSet.held)


TOP_MIN_RUNS = 8  # fewer runs: a binary search of the first keys is as quick


def _top_index(firsts: np.ndarray) -> tuple[np.ndarray | None, int, int]:
    """The top index of sorted first keys (see ss_runset in simstore.h), its bits and
    shift: about four slots a run over the bits the keys span, so a key's run is found
    in a step or two. (Over all 64 bits, band keys' 36 fell in its first slot and a
    lookup walked the first keys from run 0: 1,675 runs at 1M.)"""
    n = len(firsts)
    if n < TOP_MIN_RUNS:
        return None, 0, 0
    tbits = min(MAX_RUN_DIR_BITS, (n - 1).bit_length() + 2)
    tshift = max(int(firsts[-1]).bit_length(), tbits) - tbits
    bounds = np.arange(1 << tbits, dtype=np.uint64) << np.uint64(tshift)
    top = np.searchsorted(firsts, bounds, side="left").astype(np.int64) - 1
    return np.maximum(top, 0).astype(np.uint32), tbits, tshift


def _run_dir_ok(dir_: Any, shift: Any, kw: int, n: int) -> tuple[Any, int, int]:
    """(C pointer, dbits, shift) of a run's directory, checked for its shape."""
    size = len(dir_) - 1 if isinstance(dir_, np.ndarray) else 0
    dbits = size.bit_length() - 1
    if not (isinstance(dir_, np.ndarray) and dir_.dtype == np.uint32 and dir_.ndim == 1
            and dir_.flags.c_contiguous and size == 1 << dbits and 1 <= dbits
            <= MAX_RUN_DIR_BITS and kw == 8 and is_int(shift) and 0 <= shift <= 63
            and int(dir_[-1]) == n):
        raise InvalidConfigError(
            "simstore: a run directory must be run_dir(keys, dbits) of the run's 64-bit keys")
    return ffi.from_buffer("uint32_t[]", dir_), dbits, shift
