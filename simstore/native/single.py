"""One document at a time (``csrc/single.c``): each call is one C call over one text or
one query's candidates, with no batch objects, so a crawler's or a notebook's single call
pays little beyond its C work. Values equal the batch calls' of :mod:`.core`.
"""

from __future__ import annotations

import numpy as np

from .core import _densify_tables, _u64_ptr, ffi, lib, raise_for


def fingerprint_one(
    data: bytes, ngram: int, seed: int, weighting: int, unicode: bool
) -> tuple[int, int]:
    """:func:`fingerprint_texts` of one encoded text: its fingerprint and distinct-feature count."""
    out = ffi.new("uint64_t[2]")
    if lib.ss_fingerprint_one(data, len(data), ngram, seed, weighting, unicode, out):
        raise MemoryError("simstore: the C core could not allocate scratch memory")
    return out[0], out[1]


def signature_one(
    data: bytes, ngram: int, seed: int, weighting: int, unicode: bool,
    sketch_bits: int, bands: int, rows: int,
) -> np.ndarray:
    """:func:`signature_texts` of one encoded text, packed in one uint64 array: the
    fingerprint, the sketch_bits / 64 sketch words, the band keys, the distinct-feature
    count."""
    out = np.empty(2 + sketch_bits // 64 + bands, dtype=np.uint64)
    rc = lib.ss_signature_one(
        data, len(data), ngram, seed, weighting, unicode, sketch_bits, bands, rows,
        *_densify_tables(seed, sketch_bits, bands, rows), _u64_ptr(out),
    )
    if rc != 0:
        raise_for(rc, "computing the signature of a text")
    return out


def shingle_set_one(data: bytes, ngram: int, seed: int, unicode: bool) -> np.ndarray:
    """The distinct shingle hashes of one encoded text, sorted (uint64; empty: no token)."""
    cap = len(data) // 2 + 8  # enough for the byte tokenizer; NFKC may need more
    while True:
        out = np.empty(cap, dtype=np.uint64)
        n = lib.ss_shingle_set_one(data, len(data), ngram, seed, unicode, _u64_ptr(out), cap)
        if n < 0:
            raise_for(int(n), "making a shingle set")
        if n <= cap:
            return out[:n]
        cap = int(n)


def sketch_hits(
    q: np.ndarray, recs: bytes, ends: list[int], start: int, maxd: int
) -> tuple[list[int], list[int]] | int:
    """Indices and distances of the records (laid end to end in recs, record i ending at
    ends[i]) whose sketch, at byte start, is within maxd bits of q (uint64 words); or
    the index of the first record too short to hold a sketch."""
    n = len(ends)
    idx = ffi.new("int64_t[]", n)
    dist = ffi.new("int32_t[]", n)
    m = lib.ss_sketch_hits(
        _u64_ptr(q), len(q), recs, ffi.new("int64_t[]", ends), n, start, maxd, idx, dist
    )
    if m <= -3:
        return int(-3 - m)
    if m < 0:
        raise_for(int(m), "checking candidate sketches")
    return ffi.unpack(idx, m), ffi.unpack(dist, m)
