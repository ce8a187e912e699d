"""The binding of ``csrc/jaccard.c``: shingle-hash sets, their exact Jaccard, their codes.

One C call over whole arrays each, as in :mod:`simstore.native.core` (whose
buffer helpers it shares); callers validate their inputs first.
"""

from __future__ import annotations

import numpy as np

from .core import _u64_ptr, ffi, lib, raise_for


def shingle_sets(
    blob: bytes, offsets: np.ndarray, ngram: int, seed: int, unicode: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each document's distinct shingle hashes, sorted (uint64), and their offsets (int64).

    unicode: as in :func:`simstore.native.core.fingerprint_texts`.
    """
    ndocs = len(offsets) - 1
    out_off = np.empty(ndocs + 1, dtype=np.int64)
    cap = len(blob) // 2 + ndocs + 1  # enough for the byte tokenizer; NFKC may need more
    while True:
        hashes = np.empty(cap, dtype=np.uint64)
        n = lib.ss_shingle_sets(
            blob, ffi.from_buffer("int64_t[]", offsets), ndocs, ngram, seed, int(unicode),
            _u64_ptr(hashes), cap, ffi.from_buffer("int64_t[]", out_off),
        )
        if n < 0:
            raise_for(int(n), "making shingle sets")
        if n <= cap:
            return hashes[:n], out_off
        cap = int(n)


def jaccard_pairs(
    ha: np.ndarray, offa: np.ndarray, hb: np.ndarray, offb: np.ndarray,
    i: np.ndarray, j: np.ndarray, threshold: float,
) -> np.ndarray:
    """Exact Jaccard (float64) of set i[p] of (ha, offa) with set j[p] of (hb, offb).

    With threshold > 0, pairs proven below it may read -1 instead.
    """
    n = len(i)
    out = np.empty(n, dtype=np.float64)
    rc = lib.ss_jaccard_pairs(
        _u64_ptr(ha), ffi.from_buffer("int64_t[]", offa), len(offa) - 1,
        _u64_ptr(hb), ffi.from_buffer("int64_t[]", offb), len(offb) - 1,
        ffi.from_buffer("int64_t[]", i), ffi.from_buffer("int64_t[]", j), n,
        threshold, ffi.from_buffer("double[]", out),
    )
    if rc != lib.SS_OK:
        raise_for(rc, "measuring exact Jaccard of shingle sets")
    return out


def encode_sets(hashes: np.ndarray, offsets: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The compact codes of sets (ascending uint64, int64 offsets): one bytes and the
    codes' offsets (int64, one more than the sets)."""
    nsets = len(offsets) - 1
    out_off = np.empty(nsets + 1, dtype=np.int64)
    cap = 8 * len(hashes) + 12 * nsets  # enough unless a set is crafted
    while True:
        buf = np.empty(cap, dtype=np.uint8)  # not zeroed: only the pages written are touched
        n = lib.ss_shingles_encode(
            _u64_ptr(hashes), ffi.from_buffer("int64_t[]", offsets), nsets,
            ffi.from_buffer("uint8_t[]", buf), cap, ffi.from_buffer("int64_t[]", out_off),
        )
        if n < 0:
            raise_for(int(n), "encoding shingle sets (each must be strictly ascending)")
        if n <= cap:
            return buf[:n].tobytes(), out_off
        cap = int(n)


def decode_sets(codes: bytes | bytearray, offsets: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """The sets of codes made by :func:`encode_sets`: (hashes, offsets, bad), bad the
    index of the first malformed code (-1 when all are sound; the sets are then empty)."""
    ncodes = len(offsets) - 1
    out_off = np.empty(ncodes + 1, dtype=np.int64)
    bad = ffi.new("int64_t *")
    off = ffi.from_buffer("int64_t[]", offsets)
    hashes = np.empty(0, dtype=np.uint64)
    data = ffi.from_buffer("uint8_t[]", codes)  # bytes or bytearray, read in place
    n = lib.ss_shingles_decode(data, off, ncodes, _u64_ptr(hashes), 0,
                               ffi.from_buffer("int64_t[]", out_off), bad)
    if n > 0:
        hashes = np.empty(int(n), dtype=np.uint64)
        n = lib.ss_shingles_decode(data, off, ncodes, _u64_ptr(hashes), len(hashes),
                                   ffi.from_buffer("int64_t[]", out_off), bad)
    if n == lib.SS_EBADCODE:
        return np.empty(0, dtype=np.uint64), np.zeros(1, dtype=np.int64), int(bad[0])
    if n < 0:
        raise_for(int(n), "decoding shingle sets")
    return hashes, out_off, -1
