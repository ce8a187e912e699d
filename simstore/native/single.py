"""One document at a time (``csrc/single.c``): each call is one C call over one text or
one query's candidates, with no batch objects, so a crawler's or a notebook's single call
pays little beyond its C work. Values equal the batch calls' of :mod:`.core`.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

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
    q: np.ndarray, recs: list[Any], start: int, maxd: int
) -> tuple[list[int], list[int]] | int:
    """Indices and distances of the records whose sketch, at byte start, is within maxd
    bits of q (uint64 words); or the index of the first record too short to hold one."""
    n = len(recs)
    out = ffi.new("int64_t[]", 2 * n + n)  # ends, then the hits' indices, then distances
    out[0:n] = list(accumulate(map(len, recs)))
    idx, dist = out + n, ffi.cast("int32_t *", out + 2 * n)
    m = lib.ss_sketch_hits(_u64_ptr(q), len(q), b"".join(recs), out, n, start, maxd, idx, dist)
    if m <= -3:
        return int(-3 - m)
    if m < 0:
        raise_for(int(m), "checking candidate sketches")
    return ffi.unpack(idx, m), ffi.unpack(dist, m)


def similar_one(
    prober: Any, bands: np.ndarray, recent: Any, tree: tuple[int, int, int, int, int],
    sketch: np.ndarray, tag: int, spans: tuple[int, int, int], since: int | None, maxd: int,
) -> list[int] | int:
    """ss_similar_one: the hits of a signature (bands, sketch) among the prober's band
    entries and those of the recent docs (a :class:`~simstore.native.keytable.KeyTable`,
    or None), read in the LMDB map tree = (address, pages, page
    size, root page, depth); spans: where a docs record's sketch, time of storage and id
    start. The hits as one flat list of (internal id, distance, offset, size, fingerprint)
    in internal id order, or -4 when the map cannot answer (ask LMDB)."""
    base, pages, psize, root, depth = tree
    b, q = _u64_ptr(bands), _u64_ptr(sketch)
    if recent is None:
        rkeys = rvals = ffi.NULL
        rcap = 0
    else:
        rkeys, rvals, rcap = recent.c_keys, recent.c_vals, recent.cap
    start, at_start, id_start = spans
    when = -1 if since is None else since
    out: Any = None

    def call(sets: Any, nsets: int, need: Any, vals: Any, cap: int) -> tuple[int, int]:
        nonlocal out
        cells = prober.scratch(5 * cap + 1)  # the hits, then the candidates' count
        out = ffi.cast("uint64_t *", cells)
        rc = lib.ss_similar_one(
            sets, nsets, need, b, len(bands), rkeys, rvals, rcap, vals, cap, cells + 5 * cap,
            ffi.cast("uint8_t *", base), pages, psize, root, depth, q, len(sketch), tag,
            start, at_start, id_start, when, maxd, out)
        return int(rc), int(cells[5 * cap])

    rc = prober.with_sets(call)
    if rc == -4:
        return rc
    if rc < 0:
        raise_for(rc, "looking a signature up in the map")
    return ffi.unpack(out, 5 * rc) if rc else []
