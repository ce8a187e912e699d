"""Exact Jaccard similarity of texts: their sorted shingle-hash sets, compared in C.

A text's set is its distinct feature hashes under a :class:`FingerprintConfig`
(the word n-gram shingles of the fingerprint pipeline, murmur3 64-bit, the
config's ngram and seed; the weighting plays no part), the very sets a
signature's sketch estimates the Jaccard similarity of. A text without a token
has one feature, the hash of its whole normalized text (as its fingerprint),
so it is similar only to texts identical to it after normalization. Two
shingles count as one only on a 64-bit hash collision.

The sets are kept sorted and back to back (:class:`ShingleSets`: one uint64
array and offsets), 8 bytes per distinct shingle, so that a pair is measured by
one linear merge and many pairs by one C call (:func:`exact_jaccard`).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _mapped
from ..exceptions import InvalidConfigError, SimstoreTypeError, SimstoreValueError
from ..native import core as _core, jaccard as _jaccard, single as _single
from . import longtext, parallel
from .fingerprinting import (
    _ENCODE,
    UNICODE_IN_C,
    FingerprintConfig,
    _checked_texts,
    _config,
    _no_feature_fingerprint,
    encoder,
    long_set,
)
from .minhash import Signatures, _signature_config, signatures


@dataclass(frozen=True)
class ShingleSets:
    """n sorted sets of uint64 shingle hashes: set d is hashes[offsets[d]:offsets[d + 1]].

    hashes: uint64 (C-contiguous); offsets: int64, n + 1 entries, from 0, ascending.
    """

    hashes: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        h, off = self.hashes, self.offsets
        if not isinstance(h, np.ndarray) or h.dtype != np.uint64 or h.ndim != 1:
            raise SimstoreTypeError("'hashes' must be a 1-D uint64 numpy array")
        if not isinstance(off, np.ndarray) or off.dtype != np.int64 or off.ndim != 1:
            raise SimstoreTypeError("'offsets' must be a 1-D int64 numpy array")
        if len(off) == 0 or off[0] != 0 or off[-1] != len(h) or (np.diff(off) < 0).any():
            raise SimstoreValueError(
                "'offsets' must run from 0 to len(hashes), never decreasing"
            )
        object.__setattr__(self, "hashes", np.ascontiguousarray(h))
        object.__setattr__(self, "offsets", np.ascontiguousarray(off))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, d: int) -> np.ndarray:
        """Set d, a view."""
        return self.hashes[self.offsets[d] : self.offsets[d + 1]]

    @property
    def sizes(self) -> np.ndarray:
        """Each set's number of distinct shingles (int64)."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes held: 8 per shingle and per set."""
        return int(self.hashes.nbytes + self.offsets.nbytes)

    def take(self, rows: Any) -> ShingleSets:
        """The sets at ``rows`` (int indices), copied into a new compact ShingleSets."""
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        lo, hi = self.offsets[idx], self.offsets[idx + 1]
        sizes = hi - lo
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        src = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(lo - offsets[:-1], sizes)
        return ShingleSets(self.hashes[src], offsets)

    @classmethod
    def concat(cls, parts: Iterable[ShingleSets]) -> ShingleSets:
        """One ShingleSets of several, in order."""
        items = list(parts)
        if not items:
            return cls(np.empty(0, dtype=np.uint64), np.zeros(1, dtype=np.int64))
        sizes = np.concatenate([p.sizes for p in items])
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(np.concatenate([p.hashes for p in items]), offsets)


def shingle_sets(
    texts: Iterable[str], config: FingerprintConfig | None = None, *, threads: int | None = None
) -> ShingleSets:
    """The sorted distinct shingle hashes of many texts (C, one pass per chunk of text).

    config gives ngram and seed (DEFAULT_CONFIG by default; a signature config
    gives the sets its sketches estimate). threads: as in ``fingerprints``.
    """
    cfg = _config(config, {})
    items = _checked_texts(texts)
    if len(items) == 1:
        return _one_set(items[0], cfg)
    longs = [i for i, t in enumerate(items) if len(t) > longtext.LONG_TEXT_CHARS]
    if longs:  # each apart, in blocks (one pass's scratch: ~13x an English text)
        pieces, start = [], 0
        for i in [*longs, len(items)]:
            if start < i:
                pieces.append(shingle_sets(items[start:i], cfg, threads=threads))
            if i < len(items):
                pieces.append(_one_set(items[i], cfg))
            start = i + 1
        return _moved(pieces)
    parts: dict[int, ShingleSets] = {}

    def work(start: int, blob: bytes, offsets: np.ndarray) -> None:
        hashes, off = _jaccard.shingle_sets(blob, offsets, cfg.ngram, cfg.seed, UNICODE_IN_C)
        empty = np.flatnonzero(off[1:] == off[:-1])
        if len(empty):
            # no token: the one feature is the hash of the whole normalized text
            extra = np.array(
                [_no_feature_fingerprint(items[start + j], cfg.seed) for j in empty],
                dtype=np.uint64,
            )
            hashes = np.insert(hashes, off[empty], extra)
            off = off + np.searchsorted(empty, np.arange(len(off)), side="left")
        parts[start] = ShingleSets(hashes, off)

    parallel.run(items, encoder(UNICODE_IN_C), work, parallel.thread_count(threads))
    return ShingleSets.concat(parts[k] for k in sorted(parts))


_MOVE_STEP = 1 << 16  # hashes copied at a time by _moved


def _moved(parts: list[ShingleSets]) -> ShingleSets:
    """ShingleSets.concat of sets made here and never read again: each part's pages are
    handed back as they are copied (a long text's set, made in a mapping of its own, is
    never held twice)."""
    sizes = np.concatenate([p.sizes for p in parts])
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = _mapped.empty(int(offsets[-1]), np.uint64)
    at = 0
    for p in parts:
        h = p.hashes
        for a in range(0, len(h), _MOVE_STEP):
            b = min(len(h), a + _MOVE_STEP)
            out[at + a : at + b] = h[a:b]
            _mapped.release(h, a, b)
        at += len(h)
    return ShingleSets(out, offsets)


def _one_set(text: str, cfg: FingerprintConfig) -> ShingleSets:
    """shingle_sets of one text: one C call, no batch (a long text: in blocks)."""
    long = long_set(text, cfg)
    if long is not None:
        return ShingleSets(long, np.array([0, len(long)], dtype=np.int64))
    hashes = _single.shingle_set_one(_ENCODE(text), cfg.ngram, cfg.seed, UNICODE_IN_C)
    if not len(hashes):  # no token: as in shingle_sets
        hashes = np.array([_no_feature_fingerprint(text, cfg.seed)], dtype=np.uint64)
    return ShingleSets(hashes, np.array([0, len(hashes)], dtype=np.int64))


def _index_array(x: Any, name: str, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1 or (arr.dtype.kind not in "iu" and len(arr)):
        raise SimstoreTypeError(f"{name!r} must be a 1-D array of int indices")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if len(arr) and (arr.min() < 0 or arr.max() >= n):
        raise SimstoreValueError(f"{name!r} holds an index outside 0..{n - 1}")
    return arr


def exact_jaccard(
    a: ShingleSets, i: Any, j: Any, b: ShingleSets | None = None, threshold: float = 0.0
) -> np.ndarray:
    """Exact Jaccard (float64) of the pairs (a[i[p]], b[j[p]]) (b defaults to a), in one C call.

    threshold t > 0 lets the C core skip work on pairs that provably have
    J < t: those read -1. Every pair with J >= t gets its exact value.
    """
    other = a if b is None else b
    for name, s in (("a", a), ("b", other)):
        if not isinstance(s, ShingleSets):
            raise SimstoreTypeError(f"{name!r} must be ShingleSets (got {type(s).__name__})")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise SimstoreTypeError("'threshold' must be a number in 0..1")
    if not 0.0 <= float(threshold) <= 1.0:
        raise InvalidConfigError(f"'threshold' must be in 0..1 (got {threshold})")
    ii = _index_array(i, "i", len(a))
    jj = _index_array(j, "j", len(other))
    if len(ii) != len(jj):
        raise SimstoreValueError(f"'i' and 'j' differ in length ({len(ii)} vs {len(jj)})")
    return _jaccard.jaccard_pairs(
        a.hashes, a.offsets, other.hashes, other.offsets, ii, jj, float(threshold)
    )


def signatures_and_sets(
    texts: Iterable[str], config: FingerprintConfig | None = None
) -> tuple[Signatures, ShingleSets]:
    """``signatures(texts, config)`` and ``shingle_sets(texts, config)`` in one pass over
    the text: the signatures are made from the sets (SIGNATURE_CONFIG by default).

    The same values as the two calls. With uniform weighting (the default) the
    fingerprint is the simhash of the set; tf and logtf weightings count repeats,
    which a set has lost, so those configs take the two passes.
    """
    cfg = _signature_config(config)
    items = _checked_texts(texts)
    if cfg.weighting != "uniform":
        return signatures(items, cfg), shingle_sets(items, cfg)
    sets = shingle_sets(items, cfg)
    sketches, bands = _core.signature_hashes(
        sets.hashes, sets.offsets, cfg.seed, cfg.sketch_bits, cfg.bands, cfg.rows
    ) if len(sets) else (
        np.empty((0, cfg.sketch_bits // 64), dtype=np.uint64),
        np.empty((0, cfg.bands), dtype=np.uint64),
    )
    fps = _core.simhash_batch(sets.hashes, None, sets.offsets)
    return Signatures(cfg, fps, sketches, bands), sets
