"""One document at a time (``csrc/single.c``): each call is one C call over one text or
one query's candidates, with no batch objects, so a crawler's or a notebook's single call
pays little beyond its C work. Values equal the batch calls' of :mod:`.core`.
"""

from __future__ import annotations

import functools
from itertools import accumulate
from typing import Any

import numpy as np

from .core import _densify_tables, _u64_ptr, ffi, lib, raise_for


def fingerprint_one(
    data: bytes, ngram: int, seed: int, weighting: int, unicode: bool
) -> tuple[int, int]:
    """:func:`fingerprint_texts` of one encoded text: its fingerprint and distinct-feature count."""
    out = ffi.new("uint64_t[2]")
    rc = lib.ss_fingerprint_one(data, len(data), ngram, seed, weighting, unicode, out)
    if rc != lib.SS_OK:
        raise_for(rc, "fingerprinting a text")
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
    if rc != lib.SS_OK:
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


@functools.lru_cache(maxsize=16)
def docs_layout(codec: Any) -> Any:
    """The C view (ss_docs_layout *) of a store's docs records, from its record codec
    (simstore/store/format.py RecordCodec: where they are laid out, once), made once."""
    return ffi.new("ss_docs_layout *", {
        "fp_start": codec.fp_start, "sketch_start": codec.sketch_start,
        "at_start": codec.at_start, "id_start": codec.id_start, "tag": codec.version,
        "words": codec.sketch_words})


def sketch_hits(
    q: np.ndarray, recs: list[Any], layout: Any, maxd: int
) -> tuple[list[int], list[int]] | int:
    """Indices and distances of the records whose sketch (where layout, a
    :func:`docs_layout`, puts it) is within maxd bits of q (uint64 words); or the index
    of the first record too short to hold one."""
    n = len(recs)
    out = ffi.new("int64_t[]", 2 * n + n + 1)  # ends, the hits' indices, distances, bad
    out[0:n] = list(accumulate(map(len, recs)))
    idx, dist, bad = out + n, ffi.cast("int32_t *", out + 2 * n), out + 3 * n
    m = lib.ss_sketch_hits(_u64_ptr(q), layout, b"".join(recs), out, n, maxd, idx, dist, bad)
    if m == lib.SS_EBADCODE:
        return int(bad[0])
    if m < 0:
        raise_for(int(m), "checking candidate sketches")
    return ffi.unpack(idx, m), ffi.unpack(dist, m)


class SimilarQuery:
    """ss_similar_one's arguments for the lookups of one store binding: its docs layout
    (a :func:`docs_layout`) and the C structs each call refills (calls are serialized as
    its prober's are)."""

    def __init__(self, layout: Any) -> None:
        self.layout = layout
        self.query = ffi.new("ss_similar_query *")
        self.recent = ffi.new("ss_keytable_view *")
        self.room = ffi.new("ss_similar_room *")

    def run(self, prober: Any, tree: Any, bands: np.ndarray, sketch: np.ndarray,
            recent: Any, since: int | None, maxd: int) -> list[int] | int:
        """The hits of a signature (bands, sketch) among the prober's band entries and
        those of the recent docs (a :class:`~simstore.native.keytable.KeyTable`, or
        None), read in the LMDB map's tree (an ss_map_tree *, see
        :func:`simstore.native.lmdbmap.tree`). The hits as one flat list of (internal id, distance,
        offset, size, fingerprint) in internal id order, or SS_EMAP when the map cannot
        answer (ask LMDB)."""
        b, q = _u64_ptr(bands), _u64_ptr(sketch)  # (alive until this call returns)
        query, view, room = self.query, self.recent, self.room
        query.bands, query.sketch, query.nbands = b, q, len(bands)
        query.since = -1 if since is None else since
        query.maxd = maxd
        if recent is None:
            view.cap = 0
        else:
            view.keys, view.vals, view.cap = recent.c_keys, recent.c_vals, recent.cap
        layout = self.layout

        def call(sets: Any, nsets: int, need: Any, cands: Any, cap: int) -> tuple[int, int]:
            room.cands, room.cap = cands, cap
            room.hits = ffi.cast("uint64_t *", prober.scratch(5 * cap))
            rc = lib.ss_similar_one(sets, nsets, need, view, tree, layout, query, room)
            return int(rc), int(room.ncands)

        rc = prober.until_answered(call)  # (raises on any error but SS_EMAP)
        if rc == lib.SS_EMAP:
            return rc
        return ffi.unpack(room.hits, 5 * rc) if rc else []
