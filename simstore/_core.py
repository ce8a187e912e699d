"""Thin numpy-facing binding over the cffi C core (``simstore._native``).

Every function here is one C call over a whole array; callers validate their
inputs first (see ``_validate``), this module only marshals buffers.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .exceptions import InvalidConfigError, NativeModuleError

try:
    from . import _native  # type: ignore[attr-defined]
except ImportError as exc:  # pragma: no cover - exercised only on broken installs
    raise NativeModuleError(
        "simstore's C core (simstore._native) is not built. Build it with "
        "'pip install .' (or 'pip install -e .' in a checkout); this needs a C "
        f"compiler and cffi. Original error: {exc}"
    ) from exc

ffi = _native.ffi
lib = _native.lib

U64 = np.dtype(np.uint64)


def _u64_ptr(arr: np.ndarray):  # noqa: ANN202 - cffi pointer
    return ffi.from_buffer("uint64_t[]", arr)


def murmur3_x64_128(data: bytes, seed: int) -> tuple[int, int]:
    """Both 64-bit halves of murmur3_x64_128 (as mmh3.hash64(signed=False))."""
    out = ffi.new("uint64_t[2]")
    lib.ss_murmur3_x64_128(data, len(data), seed, out)
    return int(out[0]), int(out[1])


def hamming_one(q: int, fps: np.ndarray) -> np.ndarray:
    """Distances (uint8) from q to every fingerprint of a contiguous uint64 array."""
    out = np.empty(len(fps), dtype=np.uint8)
    lib.ss_hamming_one(q, _u64_ptr(fps), len(fps), ffi.from_buffer("uint8_t[]", out))
    return out


def hamming_pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise distances (uint8) of two equal-length uint64 arrays."""
    out = np.empty(len(a), dtype=np.uint8)
    lib.ss_hamming_pairwise(
        _u64_ptr(a), _u64_ptr(b), len(a), ffi.from_buffer("uint8_t[]", out)
    )
    return out


def hamming_within(q: int, fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64) and distances (uint8) of fingerprints within k of q."""
    n = len(fps)
    idx = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.uint8)
    m = lib.ss_hamming_within(
        q,
        _u64_ptr(fps),
        n,
        k,
        ffi.from_buffer("int64_t[]", idx),
        ffi.from_buffer("uint8_t[]", dist),
    )
    return idx[:m], dist[:m]


def simhash_batch(
    hashes: np.ndarray, weights: np.ndarray | None, offsets: np.ndarray
) -> np.ndarray:
    """One fingerprint per document; document d owns hashes[offsets[d]:offsets[d+1]]."""
    ndocs = len(offsets) - 1
    out = np.empty(ndocs, dtype=np.uint64)
    wptr = ffi.NULL if weights is None else ffi.from_buffer("double[]", weights)
    lib.ss_simhash_batch(
        _u64_ptr(hashes), wptr, ffi.from_buffer("int64_t[]", offsets), ndocs, _u64_ptr(out)
    )
    return out


def features(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of every document of a byte blob, and their offsets."""
    ndocs = len(offsets) - 1
    ntok = np.empty(ndocs, dtype=np.int64)
    off_ptr = ffi.from_buffer("int64_t[]", offsets)
    lib.ss_count_tokens(blob, off_ptr, ndocs, ffi.from_buffer("int64_t[]", ntok))
    nfeat = np.where(ntok >= ngram, ntok - ngram + 1, np.minimum(ntok, 1))
    hashes = np.empty(int(nfeat.sum()), dtype=np.uint64)
    out_off = np.empty(ndocs + 1, dtype=np.int64)
    rc = lib.ss_features(
        blob, off_ptr, ndocs, ngram, seed, _u64_ptr(hashes), ffi.from_buffer("int64_t[]", out_off)
    )
    if rc != 0:
        raise MemoryError("simstore: the C core could not allocate scratch memory")
    return hashes, out_off


def fingerprint_texts(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int, weighting: int
) -> tuple[np.ndarray, np.ndarray]:
    """Fused pipeline: fingerprints and distinct-feature counts per document."""
    ndocs = len(offsets) - 1
    out = np.empty(ndocs, dtype=np.uint64)
    nfeat = np.empty(ndocs, dtype=np.int64)
    rc = lib.ss_fingerprint_texts(
        blob,
        ffi.from_buffer("int64_t[]", offsets),
        ndocs,
        ngram,
        seed,
        weighting,
        _u64_ptr(out),
        ffi.from_buffer("int64_t[]", nfeat),
    )
    if rc != 0:
        raise MemoryError("simstore: the C core could not allocate scratch memory")
    return out, nfeat


def permute_blocks(
    fps: np.ndarray, src_shift: bytes, width: bytes, dst_shift: bytes
) -> np.ndarray:
    """Apply one block permutation (given as shift/width byte strings) to an array."""
    out = np.empty(len(fps), dtype=np.uint64)
    lib.ss_permute_blocks(
        _u64_ptr(fps), len(fps), len(width), src_shift, width, dst_shift, _u64_ptr(out)
    )
    return out


def permute_tables(
    q: int, ntables: int, src_shift: bytes, width: bytes, dst_shift: bytes
) -> list[int]:
    """One fingerprint permuted for every table (specs are ntables rows of bytes)."""
    out = ffi.new("uint64_t[]", ntables)
    lib.ss_permute_tables(q, ntables, len(width) // ntables, src_shift, width, dst_shift, out)
    return list(out)


def verify_be_keys(keys: bytes, q: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64) and distances (uint8) of the 8-byte big-endian keys within k of q."""
    n = len(keys) // 8
    idx = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.uint8)
    m = lib.ss_verify_be_keys(
        keys, n, q, k, ffi.from_buffer("int64_t[]", idx), ffi.from_buffer("uint8_t[]", dist)
    )
    return idx[:m], dist[:m]


def raise_for(rc: int, what: str) -> None:
    """The package exception for a nonzero C return code (-1 memory, -2 arguments)."""
    if rc == -1:
        raise MemoryError(f"simstore: out of memory while {what}")
    raise InvalidConfigError(f"simstore: the C core refused its arguments while {what} (rc={rc})")


PairArrays = tuple[np.ndarray, np.ndarray, np.ndarray]


def _take_pairs(rc: int, out, what: str) -> PairArrays | None:  # noqa: ANN001
    """Copy a C ss_pairs result into numpy arrays (the caller frees it).

    None when the search met identical fingerprints (rc 1): group them first.
    """
    if rc == 1:
        return None
    if rc != 0:
        raise_for(rc, f"searching ({what})")
    m = out.n
    if m == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint8)
    return (
        np.frombuffer(ffi.buffer(out.i, m * 8), dtype=np.int64).copy(),
        np.frombuffer(ffi.buffer(out.j, m * 8), dtype=np.int64).copy(),
        np.frombuffer(ffi.buffer(out.d, m), dtype=np.uint8).copy(),
    )


def batch_pass(fps: np.ndarray, k: int, nblocks: int, combos: list[int]) -> PairArrays | None:
    """Passes (header block sets `combos` of nblocks) of the search: i, j, distance.

    None if fps holds identical fingerprints (see ``dedupe``).
    """
    out = ffi.new("ss_pairs *")
    arr = np.array(combos, dtype=np.uint64)
    try:
        rc = lib.ss_batch_pass(_u64_ptr(fps), len(fps), k, nblocks, _u64_ptr(arr), len(arr), out)
        return _take_pairs(rc, out, f"passes n={len(fps)} k={k} blocks={nblocks} {combos}")
    finally:
        lib.ss_pairs_free(out)


def batch_brute(fps: np.ndarray, k: int, part: int, nparts: int) -> PairArrays | None:
    """Pairs within k among rows part, part + nparts, ... and all later rows.

    None if fps holds identical fingerprints (see ``dedupe``).
    """
    out = ffi.new("ss_pairs *")
    try:
        rc = lib.ss_batch_brute(_u64_ptr(fps), len(fps), k, part, nparts, out)
        return _take_pairs(rc, out, f"brute n={len(fps)} k={k} part={part}/{nparts}")
    finally:
        lib.ss_pairs_free(out)


def dedupe(fps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values (ascending), stable sort order (uint32) and group starts (uint32)."""
    n = len(fps)
    uniq = np.empty(n, dtype=np.uint64)
    order = np.empty(n, dtype=np.uint32)
    starts = np.empty(n + 1, dtype=np.uint32)
    nuniq = ffi.new("size_t *")
    rc = lib.ss_dedupe(
        _u64_ptr(fps),
        n,
        _u64_ptr(uniq),
        ffi.from_buffer("uint32_t[]", order),
        ffi.from_buffer("uint32_t[]", starts),
        nuniq,
    )
    if rc != 0:
        raise_for(rc, f"grouping {n} identical fingerprints")
    u = int(nuniq[0])
    return uniq[:u], order, starts[: u + 1]


def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of edges (a, b) over 0..n-1: the smallest node of each's."""
    label = np.empty(n, dtype=np.int64)
    rc = lib.ss_components(
        n,
        ffi.from_buffer("int64_t[]", a),
        ffi.from_buffer("int64_t[]", b),
        len(a),
        ffi.from_buffer("int64_t[]", label),
    )
    if rc != 0:
        raise_for(rc, "labelling components (an edge names a node out of range)")
    return label


def query_ranges_fn(
    src_shift: bytes, width: bytes, dst_shift: bytes, tails: bytes, masks: list[list[int]]
) -> Callable[[int], tuple[Any, ...]]:
    """A function q -> the key ranges a store query probes, for one layout.

    Its result is one flat tuple: each table's permuted q (int), then for each
    table its ranges in ascending order as (lo, hi) pairs of 8-byte big-endian
    keys, hi inclusive. ``masks[t]`` are table t's header XOR masks, shifted
    into place.
    """
    ntables = len(tails)
    nblocks = len(width) // ntables
    flat = [m for ms in masks for m in ms]
    c_masks = ffi.new("uint64_t[]", flat or [0])
    c_nmasks = ffi.new("int32_t[]", [len(ms) for ms in masks])
    size = 8 * ntables + 16 * len(flat)
    unpack = struct.Struct(f">{ntables}Q" + "8s" * (2 * len(flat))).unpack
    new, buffer, run = ffi.new, ffi.buffer, lib.ss_query_ranges
    ctype = f"uint8_t[{size}]"

    def ranges(q: int) -> tuple[tuple[Any, ...], Any]:
        out = new(ctype)
        rc = run(q, ntables, nblocks, src_shift, width, dst_shift, tails, c_masks, c_nmasks, out)
        if rc:
            raise_for(rc, "planning a query")
        return unpack(buffer(out)), out

    return ranges


class CandidateVerifier:
    """The tail check of store queries in C: one call over all candidates of a query.

    Keeps its output buffers between calls (a handle's queries are serialized).
    """

    def __init__(self, ntables: int) -> None:
        self._ntables = ntables
        self._cap = 0
        self._idx: Any = None
        self._dist: Any = None

    def __call__(self, keys: bytes, tables: bytes, qs_be: Any, k: int) -> list[tuple[int, int]]:
        """(candidate index, distance) of the candidates within k.

        keys: 8-byte big-endian keys back to back; tables: the table of each
        key; qs_be: the raw output of a query_ranges_fn call (permuted queries).
        """
        n = len(tables)
        if n > self._cap:
            self._cap = max(n, 2 * self._cap, 64)
            self._idx = ffi.new("int64_t[]", self._cap)
            self._dist = ffi.new("uint8_t[]", self._cap)
        m = lib.ss_verify_candidates(
            keys, tables, n, qs_be, self._ntables, k, self._idx, self._dist
        )
        if not m:
            return []
        return list(zip(ffi.unpack(self._idx, m), ffi.unpack(self._dist, m), strict=True))


def sort_table(
    fps: np.ndarray, iids: np.ndarray, src_shift: bytes, width: bytes, dst_shift: bytes
) -> tuple[np.ndarray, np.ndarray]:
    """A table's rows in key order: permuted keys and their ids (uint64 arrays).

    Equal keys keep the ids' input order (stable).
    """
    n = len(fps)
    keys = np.empty(n, dtype=np.uint64)
    vals = np.empty(n, dtype=np.uint64)
    rc = lib.ss_sort_table(
        _u64_ptr(fps), _u64_ptr(iids), n, len(width), src_shift, width, dst_shift,
        _u64_ptr(keys), _u64_ptr(vals),
    )
    if rc != 0:
        raise_for(rc, f"sorting a table of {len(width)} blocks")
    return keys, vals


# --- signatures ---


def signature_hashes(
    hashes: np.ndarray, offsets: np.ndarray, seed: int, sketch_bits: int, bands: int, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sketches (n, sketch_bits/64) and band keys (n, bands) of hash sets hashes[offsets[d]:...]."""
    ndocs = len(offsets) - 1
    sketches = np.empty((ndocs, sketch_bits // 64), dtype=np.uint64)
    keys = np.empty((ndocs, bands), dtype=np.uint64)
    rc = lib.ss_signature_hashes(
        _u64_ptr(hashes), ffi.from_buffer("int64_t[]", offsets), ndocs, seed,
        sketch_bits, bands, rows, _u64_ptr(sketches), _u64_ptr(keys),
    )
    if rc != 0:
        raise_for(rc, "computing signatures of hash sets")
    return sketches, keys


def signature_texts(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int, weighting: int,
    sketch_bits: int, bands: int, rows: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fused pipeline: fingerprints, sketches, band keys and distinct-feature counts."""
    ndocs = len(offsets) - 1
    fps = np.empty(ndocs, dtype=np.uint64)
    sketches = np.empty((ndocs, sketch_bits // 64), dtype=np.uint64)
    keys = np.empty((ndocs, bands), dtype=np.uint64)
    nfeat = np.empty(ndocs, dtype=np.int64)
    rc = lib.ss_signature_texts(
        blob, ffi.from_buffer("int64_t[]", offsets), ndocs, ngram, seed, weighting,
        sketch_bits, bands, rows, _u64_ptr(fps), _u64_ptr(sketches), _u64_ptr(keys),
        ffi.from_buffer("int64_t[]", nfeat),
    )
    if rc != 0:
        raise_for(rc, "computing signatures of texts")
    return fps, sketches, keys, nfeat


def sketch_distance_one(q: np.ndarray, sketches: np.ndarray) -> np.ndarray:
    """Bit distances (int32) of one sketch (words,) to each row of a C-contiguous (n, words)."""
    out = np.empty(len(sketches), dtype=np.int32)
    rc = lib.ss_sketch_distance_one(
        _u64_ptr(q), _u64_ptr(sketches), len(sketches), len(q), ffi.from_buffer("int32_t[]", out)
    )
    if rc != 0:
        raise_for(rc, "computing sketch distances")
    return out


def sketch_distance_pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise bit distances (int32) of two C-contiguous (n, words) uint64 arrays."""
    out = np.empty(len(a), dtype=np.int32)
    rc = lib.ss_sketch_distance_pairwise(
        _u64_ptr(a), _u64_ptr(b), len(a), a.shape[1], ffi.from_buffer("int32_t[]", out)
    )
    if rc != 0:
        raise_for(rc, "computing sketch distances")
    return out


# --- probe engine over in-memory sorted runs (csrc/probe.c) ---

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
