"""The binding of ``csrc/jaccard.c``: shingle-hash sets, their exact Jaccard, their codes.

One C call over whole arrays each, as in :mod:`simstore.native.core` (whose
buffer helpers it shares); callers validate their inputs first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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


_HEAD = 12  # bytes of a code's header at most: version, size (varint), Rice parameter


def encode_one(hashes: np.ndarray, done: Callable[[int], None] | None = None,
               step: int = 1 << 16) -> np.ndarray:
    """The code of one set (ascending uint64) as a uint8 array, the bytes of
    :func:`encode_sets`, made ``step`` values at a time: after each step ``done(i)``
    hears that hashes[:i] are read for the last time (the caller may hand their
    memory back)."""
    n = len(hashes)
    w = ffi.new("ss_setcode_writer *")
    head = np.empty(_HEAD, dtype=np.uint8)
    size = lib.ss_setcode_begin(_u64_ptr(hashes), n, w, ffi.from_buffer("uint8_t[]", head))
    if size < 0:
        raise_for(int(size), "encoding a shingle set (it must be strictly ascending)")
    out = np.empty(size, dtype=np.uint8)  # not zeroed: its pages are touched as written
    out[: w.pos] = head[: w.pos]
    buf = ffi.from_buffer("uint8_t[]", out)
    for a in range(0, n, step):
        b = min(n, a + step)
        lib.ss_setcode_put(w, _u64_ptr(hashes[a:b]), b - a, buf, int(b == n))
        if done is not None:
            done(b)
    assert w.pos == size
    return out


def code_size(code: Any) -> int:
    """The size of the set a code holds (read from its header; the code is trusted)."""
    r = ffi.new("ss_setcode_reader *")
    if lib.ss_setcode_open(r, ffi.from_buffer("uint8_t[]", code), len(code)) < 0:
        raise_for(lib.SS_EBADCODE, "reading a shingle set's code")
    return int(r.n)


def jaccard_of_codes(a: Any, parts: Iterator[Any], threshold: float) -> float | None:
    """Exact Jaccard of the set of code ``a`` (whole: a buffer made by :func:`encode_one`,
    trusted) with the set of a code given in parts (buffers, in order), read a part at a
    time and never gathered: the value :func:`jaccard_pairs` gives the pair, or -1 when
    the sizes alone put it below ``threshold`` (the rest of the parts then unread).
    None when b's code is malformed (truncated, trailing bytes, not ascending)."""
    ra, rb = ffi.new("ss_setcode_reader *"), ffi.new("ss_setcode_reader *")
    abuf = ffi.from_buffer("uint8_t[]", a)
    apos = ffi.new("size_t *", lib.ss_setcode_open(ra, abuf, len(a)))
    data = b""
    for part in parts:
        data += bytes(part)
        if len(data) >= _HEAD:
            break
    opened = lib.ss_setcode_open(rb, data, len(data))
    if opened < 0:
        return None
    na, nb = int(ra.n), int(rb.n)
    small, big = min(na, nb), max(na, nb)
    if small < threshold * big * (1.0 - 1e-12):  # as ss_jaccard_pairs: J <= small / big
        return -1.0
    bpos, common = ffi.new("size_t *", opened), ffi.new("uint64_t *")
    merging = True
    while True:
        dbuf = ffi.from_buffer("uint8_t[]", data)
        if merging:
            rc = lib.ss_setcode_common(ra, abuf, len(a), apos, rb, dbuf, len(data), bpos,
                                       common)
        else:
            rc = lib.ss_setcode_skip(rb, dbuf, len(data), bpos)
        if rc == 0 and merging:  # a set is read: the rest of b only checked
            merging = False
            continue
        if rc == 0:
            break
        if rc < 0 or (merging and rc == 1):  # (a is whole: never short of bytes)
            return None
        part = next(parts, None)
        if part is None:
            return None  # b's code ends inside a value: truncated
        data = data[bpos[0] :] + bytes(part)
        bpos[0] = 0
    left = len(data) - bpos[0] + sum(len(p) for p in parts)
    if lib.ss_setcode_done(rb, left) != lib.SS_OK:
        return None
    c = int(common[0])
    return c / (na + nb - c) if na + nb else 1.0
