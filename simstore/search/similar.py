"""Batch similarity search over signatures: pure functions of arrays (Spark runs them).

The rule, the same as a similarity store's: two documents are a pair when they
share the (low 32 bits of the) key of at least one band, and the Jaccard
estimate of their sketches is >= the threshold. Exact with respect to that
rule: every such pair comes out once, nothing else does.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import InvalidConfigError, SimstoreTypeError
from ..native import core as _core
from ..text.minhash import Signatures, band_keys32, jaccard_from_distance

DEFAULT_THRESHOLD = 0.9
_PAIR_CHUNK = 1 << 20


class SimilarPairs(NamedTuple):
    """Pairs i < j (int64 arrays, ordered by i then j) with their estimated Jaccard."""

    i: np.ndarray
    j: np.ndarray
    jaccard: np.ndarray


def check_threshold(threshold: Any) -> float:
    """A Jaccard threshold: a real number in (0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise SimstoreTypeError(
            f"'threshold' must be a number in (0, 1] (got {type(threshold).__name__})"
        )
    t = float(threshold)
    if not 0.0 < t <= 1.0:
        raise InvalidConfigError(f"'threshold' must be in (0, 1] (got {t})")
    return t


def _run_pairs(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (a, b), a < b, of rows with equal values in col."""
    n = len(col)
    order = np.argsort(col, kind="stable")
    sc = col[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    lens = np.diff(np.r_[starts, n])
    # for each sorted position: how many later rows share its run
    run_end = np.repeat(starts + lens, lens)
    later = run_end - np.arange(n)
    later -= 1
    total = int(later.sum())
    if not total:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    first = np.repeat(np.arange(n), later)
    offsets = np.arange(total) - np.repeat(np.cumsum(later) - later, later)
    second = first + 1 + offsets
    a, b = order[first], order[second]
    return np.minimum(a, b), np.maximum(a, b)


def _candidates(keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs (i < j) sharing a key in some band column."""
    n = len(keys32)
    codes = []
    for b in range(keys32.shape[1]):
        a, c = _run_pairs(keys32[:, b])
        codes.append(a.astype(np.uint64) * np.uint64(n) + c.astype(np.uint64))
    if not codes:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    u = np.unique(np.concatenate(codes))
    return (u // np.uint64(n)).astype(np.int64), (u % np.uint64(n)).astype(np.int64)


def _verify(
    sketches: np.ndarray, i: np.ndarray, j: np.ndarray, threshold: float
) -> SimilarPairs:
    """The candidate pairs whose sketch estimate is >= threshold."""
    bits = 64 * sketches.shape[1]
    keep_i, keep_j, keep_s = [], [], []
    for a in range(0, len(i), _PAIR_CHUNK):
        ci, cj = i[a : a + _PAIR_CHUNK], j[a : a + _PAIR_CHUNK]
        d = _core.sketch_distance_pairwise(
            np.ascontiguousarray(sketches[ci]), np.ascontiguousarray(sketches[cj])
        )
        est = jaccard_from_distance(d, bits)
        ok = est >= threshold
        keep_i.append(ci[ok])
        keep_j.append(cj[ok])
        keep_s.append(est[ok])
    if not keep_i:
        return SimilarPairs(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    return SimilarPairs(np.concatenate(keep_i), np.concatenate(keep_j), np.concatenate(keep_s))


def similar_pairs_arrays(
    sketches: np.ndarray, keys: np.ndarray, threshold: float
) -> SimilarPairs:
    """The rule over raw arrays: sketches (n, words) uint64, band keys (n, bands).

    Identical rows (same sketch and keys) are searched once and expanded, so
    many copies of one page cost their output, not a search per copy.
    """
    n = len(sketches)
    if n == 0:
        return SimilarPairs(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    keys32 = band_keys32(keys)
    rows = np.concatenate(
        [np.ascontiguousarray(sketches).view(np.uint8).reshape(n, -1),
         np.ascontiguousarray(keys32).view(np.uint8).reshape(n, -1)], axis=1
    )
    _, first, inverse = np.unique(
        np.ascontiguousarray(rows).view(f"V{rows.shape[1]}").ravel(),
        return_index=True, return_inverse=True,
    )
    found = _verify(sketches[first], *_candidates(keys32[first]), threshold)
    if len(first) == n:
        ui, uj = first[found.i], first[found.j]
        return _ordered(ui, uj, found.jaccard, n)
    # expand groups of identical rows: members of u x members of v, and within each group
    members = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse.ravel(), minlength=len(first))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    out_i, out_j, out_s = [], [], []
    for u, v, s in zip(found.i.tolist(), found.j.tolist(), found.jaccard.tolist(), strict=True):
        mu = members[starts[u] : starts[u] + counts[u]]
        mv = members[starts[v] : starts[v] + counts[v]]
        a, b = np.meshgrid(mu, mv, indexing="ij")
        out_i.append(a.ravel())
        out_j.append(b.ravel())
        out_s.append(np.full(a.size, s))
    self_est = jaccard_from_distance(0, 64 * sketches.shape[1])
    if self_est >= threshold:
        for g in np.flatnonzero(counts > 1).tolist():
            a, b = _run_pairs(np.zeros(int(counts[g]), dtype=np.uint8))
            mg = members[starts[g] : starts[g] + counts[g]]
            out_i.append(mg[a])
            out_j.append(mg[b])
            out_s.append(np.full(len(a), self_est))
    if not out_i:
        return SimilarPairs(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    ai, aj = np.concatenate(out_i), np.concatenate(out_j)
    return _ordered(ai, aj, np.concatenate(out_s), n)


def _ordered(i: np.ndarray, j: np.ndarray, s: np.ndarray, n: int) -> SimilarPairs:
    a, b = np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)
    order = np.lexsort((b, a))
    return SimilarPairs(a[order], b[order], s[order].astype(np.float64))


def _signatures_arg(sigs: Any) -> Signatures:
    if not isinstance(sigs, Signatures):
        raise SimstoreTypeError(
            f"'sigs' must be Signatures (simstore.signatures(texts)) (got {type(sigs).__name__})"
        )
    return sigs


def find_similar(sigs: Signatures, threshold: float = DEFAULT_THRESHOLD) -> SimilarPairs:
    """Every pair i < j of documents sharing a band key with estimated Jaccard >= threshold."""
    s = _signatures_arg(sigs)
    return similar_pairs_arrays(s.sketches, s.bands, check_threshold(threshold))


def similar_clusters(sigs: Signatures, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """Connected components of :func:`find_similar`'s pairs: each doc's smallest member."""
    s = _signatures_arg(sigs)
    found = find_similar(s, threshold)
    return _core.components(len(s), found.i, found.j)
