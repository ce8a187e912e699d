"""Thin binding of the probe engine (``csrc/probe.c``): queries over in-memory sorted runs.

A :class:`Prober` holds a layout's probe plans and the runs it points at, and
answers a query (every probe of every table and level) or exact key lookups in
one C call each. Callers validate the layout; this module checks the arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exceptions import InvalidConfigError
from .core import U64, _u64_ptr, ffi, lib, raise_for

MAX_DIR_BITS = 26
MAX_PROBES = 1 << 22  # probes a query may plan (a larger radius is a layout mistake)
# (table, keys, values, directory, directory bits); table -1 (directory None) for a scan run.
Segment = tuple[int, np.ndarray, np.ndarray, "np.ndarray | None", int]


def choose_dbits(n: int, header_bits: int) -> int:
    """Directory bits for a run of n keys: about two keys a bucket.

    Never above the header bits (a probe then falls in one bucket) nor 24
    (a directory of at most 128 MiB).
    """
    return max(0, min(header_bits, 24, int(n).bit_length() - 2))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _u64_array(a: Any, what: str) -> np.ndarray:
    """a itself when a contiguous 1-D uint64 array, a contiguous copy if strided; else refused."""
    if not isinstance(a, np.ndarray) or a.dtype != U64 or a.ndim != 1:
        got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise InvalidConfigError(f"simstore: {what} must be a 1-D uint64 numpy array (got {got})")
    return np.ascontiguousarray(a)


def build_dir(keys: np.ndarray, dbits: int) -> np.ndarray:
    """The directory of a run's ascending keys: 2**dbits + 1 uint64 (see ss_build_dir).

    dir[p] is the first index whose key's top dbits are >= p, so the keys of
    bucket p are keys[dir[p]:dir[p + 1]].
    """
    keys = _u64_array(keys, "keys")
    if not _is_int(dbits) or not 0 <= dbits <= MAX_DIR_BITS:
        raise InvalidConfigError(
            f"simstore: dbits must be an int in 0..{MAX_DIR_BITS} (got {dbits!r})"
        )
    out = np.empty((1 << dbits) + 1, dtype=np.uint64)
    rc = lib.ss_build_dir(_u64_ptr(keys), len(keys), dbits, _u64_ptr(out))
    if rc != 0:
        raise_for(rc, f"building a {dbits}-bit directory (the keys must be ascending)")
    return out


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


class Prober:
    """A query's probes over in-memory sorted runs, all in one C call (ss_probe).

    Built once per layout from each table's permutation spec (as
    Layout.shifts) and header bits. ``set_segments`` points it at the current
    runs, keeping a reference to every array the C side reads; calling it
    answers a query. Probe plans are built per radius on first use. The output
    buffers are kept and grown between calls, so calls must not overlap (one
    prober per thread); set_segments may run while a call is under way (the
    call finishes on the runs it started with).
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
        # (C segment array, count, buffers it points into): swapped whole, so a
        # call holds the runs it started with even if set_segments runs meanwhile
        self._segments: tuple[Any, int, list[Any]] = (ffi.new("ss_segment[]", 0), 0, [])
        self._no_hits = (
            _read_only(np.empty(0, dtype=np.uint64)), _read_only(np.empty(0, dtype=np.uint8))
        )
        self._grow(64)

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

    def set_segments(self, segments: Sequence[Segment]) -> None:
        """Probe these runs from now on: (table, keys, values, dir, dbits) each.

        A sorted run (table >= 0) has ascending permuted keys and the
        directory build_dir(keys, dbits) made, dbits <= the table's header
        bits; a scan run (table -1, dir None) has unpermuted fingerprints.
        """
        arr = ffi.new("ss_segment[]", len(segments))
        refs: list[Any] = []
        for i, seg in enumerate(segments):
            refs += self._fill_segment(arr[i], seg)
        self._segments = (arr, len(segments), refs)

    def _fill_segment(self, c: Any, seg: Segment) -> list[Any]:
        """Check one run and point a C ss_segment at it; the buffers to keep alive."""
        table, keys, vals, dir_, dbits = seg
        if not _is_int(table) or not -1 <= table < self._ntables:
            raise InvalidConfigError(
                f"simstore: a segment's table must be -1..{self._ntables - 1} (got {table!r})"
            )
        keys = _u64_array(keys, "segment keys")
        narrow = isinstance(vals, np.ndarray) and vals.dtype == np.uint32 and vals.ndim == 1
        vals = np.ascontiguousarray(vals) if narrow else _u64_array(vals, "segment values")
        if len(keys) != len(vals):
            raise InvalidConfigError(
                f"simstore: segment keys and values differ in length ({len(keys)} != {len(vals)})"
            )
        bufs = [ffi.from_buffer("uint64_t[]", keys),
                ffi.from_buffer("uint32_t[]" if narrow else "uint64_t[]", vals)]
        c.keys, c.n, c.table, c.dbits = bufs[0], len(keys), table, 0
        if narrow:
            c.vals, c.vals32 = ffi.NULL, bufs[1]
        else:
            c.vals, c.vals32 = bufs[1], ffi.NULL
        if table >= 0:
            d = self._check_dir(dir_, dbits, table, len(keys))
            bufs.append(ffi.from_buffer("uint64_t[]", d))
            c.dir, c.dbits = bufs[2], dbits
        return bufs

    def _check_dir(self, dir_: Any, dbits: Any, table: int, n: int) -> np.ndarray:
        """A sorted run's directory, checked against its dbits, header and length."""
        top = min(MAX_DIR_BITS, self._header_bits[table])
        if not _is_int(dbits) or not 0 <= dbits <= top:
            raise InvalidConfigError(
                f"simstore: table {table}'s dbits must be an int in 0..{top} (got {dbits!r})"
            )
        d = _u64_array(dir_, "segment directory")
        if len(d) != (1 << dbits) + 1 or int(d[-1]) != n:
            raise InvalidConfigError(
                f"simstore: a segment directory must be build_dir(keys, {dbits})"
                f" ({(1 << dbits) + 1} entries ending in {n})"
            )
        return d

    def _grow(self, cap: int) -> None:
        """Output buffers with room for cap hits."""
        self._cap = cap
        self._vals = np.empty(cap, dtype=np.uint64)
        self._dist = np.empty(cap, dtype=np.uint8)
        self._c_vals = ffi.from_buffer("uint64_t[]", self._vals)
        self._c_dist = ffi.from_buffer("uint8_t[]", self._dist)

    def _run(self, q: int, k: int, plan: Any) -> int:
        """One ss_probe call into the output buffers: the hit count (maybe > cap)."""
        segs, nsegs, _bufs = self._segments  # _bufs: alive until the call returns
        try:
            m: int = lib.ss_probe(q, k, plan, segs, nsegs, self._c_vals, self._c_dist, self._cap)
        except (OverflowError, TypeError) as exc:
            raise InvalidConfigError(
                f"simstore: a probe needs q in 0..2**64-1 and k in 0..64 (got {q!r}, {k!r})"
            ) from exc
        if m < 0:
            raise_for(m, f"probing {nsegs} segments (k={k})")
        if m > self._cap:
            self._grow(max(m, 2 * self._cap))
            return self._run(q, k, plan)
        return m

    def __call__(self, q: int, k: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
        """Values (uint64, ascending, distinct) within k of q, and their distances (uint8).

        radius is the header radius that answers k on this layout
        (Layout.radius_for(k)). No hit gives two empty read-only arrays.
        """
        plan = self._plans.get(radius)
        if plan is None:
            plan = self._plan(radius)
        m = self._run(q, k, plan)
        if not m:
            return self._no_hits
        return self._vals[:m].copy(), self._dist[:m].copy()

    def lookup(self, qs: np.ndarray) -> list[int]:
        """Values of every key of the sorted runs equal to one of qs (uint64), duplicates kept."""
        qs = _u64_array(qs, "lookup keys")
        segs, nsegs, _bufs = self._segments  # _bufs: alive until the call returns
        cq = ffi.from_buffer("uint64_t[]", qs)
        while True:
            m = int(lib.ss_lookup(segs, nsegs, cq, len(qs), self._c_vals, self._cap))
            if m < 0:
                raise_for(m, f"looking up {len(qs)} keys in {nsegs} segments")
            if m <= self._cap:
                return ffi.unpack(self._c_vals, m) if m else []
            self._grow(max(m, 2 * self._cap))

    def hits(self, q: int, k: int, radius: int) -> list[tuple[int, int]]:
        """The same answer as a list of (value, distance) (the store's query path)."""
        plan = self._plans.get(radius)
        if plan is None:
            plan = self._plan(radius)
        m = self._run(q, k, plan)
        if not m:
            return []
        return list(zip(ffi.unpack(self._c_vals, m), ffi.unpack(self._c_dist, m), strict=True))


def _read_only(a: np.ndarray) -> np.ndarray:
    """a, made read-only (safe to hand out many times)."""
    a.flags.writeable = False
    return a


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
