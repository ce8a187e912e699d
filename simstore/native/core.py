"""Thin numpy-facing binding over the cffi C core (``simstore.native._native``).

Every function here is one C call over a whole array; callers validate their
inputs first (see ``_validate``), this module only marshals buffers.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import (
    CorruptStoreError,
    InvalidConfigError,
    NativeModuleError,
    SimstoreError,
    StoreError,
)

try:
    from . import _native  # type: ignore[attr-defined]
except ImportError as exc:  # pragma: no cover - exercised only on broken installs
    raise NativeModuleError(
        "simstore's C core (simstore.native._native) is not built. Build it with "
        "'pip install .' (or 'pip install -e .' in a checkout); this needs a C "
        f"compiler and cffi. Original error: {exc}"
    ) from exc

ffi = _native.ffi
lib = _native.lib

U64 = np.dtype(np.uint64)
# The largest k a store layout or the batch search answers by index (csrc/simstore.h
# SS_MAX_K); a larger query radius, up to 64, is answered by a scan.
MAX_K: int = int(lib.SS_MAX_K)

# Every return code of the C core (csrc/simstore.h enum ss_status) -> the exception it
# raises when a caller does not handle it; its words come from ss_strerror.
ERRORS: dict[int, type[Exception]] = {
    lib.SS_IDENTICAL: InvalidConfigError,  # (callers group copies first)
    lib.SS_ENOMEM: MemoryError,
    lib.SS_EINVAL: InvalidConfigError,
    lib.SS_ENEED: InvalidConfigError,  # (the probe binding loads what is needed)
    lib.SS_EMAP: CorruptStoreError,  # (the map's callers ask LMDB instead)
    lib.SS_EROOM: InvalidConfigError,  # (callers grow and call again)
    lib.SS_EBADCODE: CorruptStoreError,
    lib.SS_EOS: StoreError,
}


def _u64_ptr(arr: np.ndarray):  # noqa: ANN202 - cffi pointer
    return ffi.from_buffer("uint64_t[]", arr)


def murmur3_x64_128(data: bytes, seed: int) -> tuple[int, int]:
    """Both 64-bit halves of murmur3_x64_128 (as mmh3.hash64(signed=False))."""
    out = ffi.new("uint64_t[2]")
    lib.ss_murmur3_x64_128(data, len(data), seed, out)
    return int(out[0]), int(out[1])


def murmur3_many(items: list[bytes], seed: int) -> np.ndarray:
    """The low halves of murmur3_x64_128 of many byte strings (uint64, in order)."""
    ends = np.cumsum(np.fromiter(map(len, items), dtype=np.uint64, count=len(items)),
                     dtype=np.uint64)
    return murmur3_packed(b"".join(items), ends, seed)


def murmur3_packed(buf: bytes, ends: np.ndarray, seed: int) -> np.ndarray:
    """murmur3_many of the strings laid end to end in buf (string i ends at ends[i])."""
    ends = np.ascontiguousarray(ends, dtype=np.uint64)
    if len(ends) and int(ends[-1]) > len(buf):
        raise ValueError("murmur3_packed: the strings end past the buffer")
    out = np.empty(len(ends), dtype=np.uint64)
    rc = lib.ss_murmur3_many(buf, _u64_ptr(ends), len(ends), seed, _u64_ptr(out))
    if rc != lib.SS_OK:
        raise_for(rc, "hashing ids (murmur3_packed)")
    return out


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
    if rc != lib.SS_OK:
        raise_for(rc, "hashing the features of texts")
    return hashes, out_off


def fingerprint_texts(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int, weighting: int, unicode: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Fused pipeline: fingerprints and distinct-feature counts per document.

    unicode: blob is UTF-8 text as it is (the C Unicode tokenizer), else text prepared
    for the byte tokenizer.
    """
    ndocs = len(offsets) - 1
    out = np.empty(ndocs, dtype=np.uint64)
    nfeat = np.empty(ndocs, dtype=np.int64)
    fn = lib.ss_fingerprint_utf8 if unicode else lib.ss_fingerprint_texts
    rc = fn(
        blob,
        ffi.from_buffer("int64_t[]", offsets),
        ndocs,
        ngram,
        seed,
        weighting,
        _u64_ptr(out),
        ffi.from_buffer("int64_t[]", nfeat),
    )
    if rc != lib.SS_OK:
        raise_for(rc, "fingerprinting texts")
    return out, nfeat


def unicode_tables_id() -> str:
    """The name of the C core's Unicode tables (Unicode version; digest of the token rules)."""
    return ffi.string(lib.ss_unicode_tables_id()).decode("ascii")


def _unicode_text(fn: Any, data: bytes) -> bytes:
    cap = 2 * len(data) + 64
    while True:
        out = ffi.new("uint8_t[]", cap)
        n = fn(data, len(data), out, cap)
        if n < 0:
            raise_for(n, "tokenizing a text")
        if n <= cap:
            return bytes(ffi.buffer(out, n))
        cap = n


def unicode_nfkc(data: bytes) -> bytes:
    """NFKC of UTF-8 text by the C tables (for tests and inspection)."""
    return _unicode_text(lib.ss_unicode_nfkc, data)


def unicode_tokens(data: bytes) -> bytes:
    """The tokens of UTF-8 text by the C tokenizer, joined by one space (for tests)."""
    return _unicode_text(lib.ss_unicode_tokens, data)


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


def strerror(rc: int) -> str:
    """A C return code in words (ss_strerror)."""
    return ffi.string(lib.ss_strerror(rc)).decode("ascii")


def raise_for(rc: int, what: str) -> None:
    """Raise the package exception of a C return code (:data:`ERRORS`), saying what failed."""
    if rc == lib.SS_ENOMEM:
        raise MemoryError(f"simstore: out of memory while {what}")
    raise ERRORS.get(rc, SimstoreError)(
        f"simstore: the C core answered {strerror(rc)!r} while {what} (rc={rc})")


PairArrays = tuple[np.ndarray, np.ndarray, np.ndarray]


def _take_pairs(rc: int, out, what: str) -> PairArrays | None:  # noqa: ANN001
    """Copy a C ss_pairs result into numpy arrays (the caller frees it).

    None when the search met identical fingerprints (rc 1): group them first.
    """
    if rc == lib.SS_IDENTICAL:
        return None
    if rc != lib.SS_OK:
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
    if rc != lib.SS_OK:
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
    if rc != lib.SS_OK:
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
    if rc != lib.SS_OK:
        raise_for(rc, f"sorting a table of {len(width)} blocks")
    return keys, vals


# --- signatures ---


@functools.lru_cache(maxsize=16)
def densify_table(seed: int, nbins: int) -> np.ndarray:
    """The C core's densify table of nbins bins for seed (read-only uint32), built once.

    Every signature call of a shape passes the tables of its sketch and band bins.
    """
    words = lib.ss_densify_table_words(max(nbins, 0))
    out = np.empty(max(words, 1), dtype=np.uint32)
    rc = (lib.ss_densify_table(seed, nbins, ffi.from_buffer("uint32_t[]", out)) if words
          else lib.SS_EINVAL)
    if rc != lib.SS_OK:
        raise_for(rc, f"building the densify table of {nbins} bins")
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=16)
def _densify_tables(seed: int, sketch_bits: int, bands: int, rows: int) -> tuple[Any, Any]:
    """cffi pointers to the sketch and band densify tables of a signature shape (built once;
    each pointer keeps its read-only table alive)."""
    return (ffi.from_buffer("uint32_t[]", densify_table(seed, 2 * sketch_bits)),
            ffi.from_buffer("uint32_t[]", densify_table(seed, bands * rows)))


def signature_hashes(
    hashes: np.ndarray, offsets: np.ndarray, seed: int, sketch_bits: int, bands: int, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sketches (n, sketch_bits/64) and band keys (n, bands) of hash sets hashes[offsets[d]:...]."""
    ndocs = len(offsets) - 1
    sketches = np.empty((ndocs, sketch_bits // 64), dtype=np.uint64)
    keys = np.empty((ndocs, bands), dtype=np.uint64)
    rc = lib.ss_signature_hashes(
        _u64_ptr(hashes), ffi.from_buffer("int64_t[]", offsets), ndocs, seed,
        sketch_bits, bands, rows, *_densify_tables(seed, sketch_bits, bands, rows),
        _u64_ptr(sketches), _u64_ptr(keys),
    )
    if rc != lib.SS_OK:
        raise_for(rc, "computing signatures of hash sets")
    return sketches, keys


def signature_texts(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int, weighting: int,
    sketch_bits: int, bands: int, rows: int, unicode: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fused pipeline: fingerprints, sketches, band keys and distinct-feature counts.

    unicode: as in :func:`fingerprint_texts`.
    """
    ndocs = len(offsets) - 1
    fps = np.empty(ndocs, dtype=np.uint64)
    sketches = np.empty((ndocs, sketch_bits // 64), dtype=np.uint64)
    keys = np.empty((ndocs, bands), dtype=np.uint64)
    nfeat = np.empty(ndocs, dtype=np.int64)
    fn = lib.ss_signature_utf8 if unicode else lib.ss_signature_texts
    rc = fn(
        blob, ffi.from_buffer("int64_t[]", offsets), ndocs, ngram, seed, weighting,
        sketch_bits, bands, rows, *_densify_tables(seed, sketch_bits, bands, rows),
        _u64_ptr(fps), _u64_ptr(sketches), _u64_ptr(keys), ffi.from_buffer("int64_t[]", nfeat),
    )
    if rc != lib.SS_OK:
        raise_for(rc, "computing signatures of texts")
    return fps, sketches, keys, nfeat


def sketch_distance_one(q: np.ndarray, sketches: np.ndarray) -> np.ndarray:
    """Bit distances (int32) of one sketch (words,) to each row of a C-contiguous (n, words)."""
    out = np.empty(len(sketches), dtype=np.int32)
    rc = lib.ss_sketch_distance_one(
        _u64_ptr(q), _u64_ptr(sketches), len(sketches), len(q), ffi.from_buffer("int32_t[]", out)
    )
    if rc != lib.SS_OK:
        raise_for(rc, "computing sketch distances")
    return out


def sketch_distance_pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise bit distances (int32) of two C-contiguous (n, words) uint64 arrays."""
    out = np.empty(len(a), dtype=np.int32)
    rc = lib.ss_sketch_distance_pairwise(
        _u64_ptr(a), _u64_ptr(b), len(a), a.shape[1], ffi.from_buffer("int32_t[]", out)
    )
    if rc != lib.SS_OK:
        raise_for(rc, "computing sketch distances")
    return out
