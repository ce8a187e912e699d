"""Batch similarity search over signatures: pure functions of arrays (Spark runs them).

The rule, the same as a similarity store's: two documents are a pair when they
share the (low 32 bits of the) key of at least one band, and the Jaccard
estimate of their sketches is >= the threshold. Exact with respect to that
rule: every such pair comes out once, nothing else does. Given the texts, the
exact rule instead (:mod:`simstore.search.exact`): exact Jaccard >= threshold.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._validate import check_threshold
from ..exceptions import SimstoreTypeError
from ..native import core as _core
from ..text.minhash import Signatures, band_keys32, jaccard_from_distance
from .bandpairs import band_candidates, expand_groups
from .exact import as_sets, exact_head_pairs

DEFAULT_THRESHOLD = 0.9
_PAIR_CHUNK = 1 << 20


class SimilarPairs(NamedTuple):
    """Pairs i < j (int64 arrays, ordered by i then j) with their estimated Jaccard."""

    i: np.ndarray
    j: np.ndarray
    jaccard: np.ndarray


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
    found = _verify(sketches[first], *band_candidates(keys32[first]), threshold)
    if len(first) == n:
        ui, uj = first[found.i], first[found.j]
        return _ordered(ui, uj, found.jaccard, n)
    # expand groups of identical rows: members of u x members of v, and within each group
    self_est = jaccard_from_distance(0, 64 * sketches.shape[1])
    ai, aj, s = expand_groups(
        inverse.ravel(), found.i, found.j, found.jaccard,
        float(self_est) if self_est >= threshold else None,
    )
    if not len(ai):
        return SimilarPairs(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    return _ordered(ai, aj, s, n)


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


def find_similar(
    sigs: Signatures, threshold: float = DEFAULT_THRESHOLD, texts: Any = None
) -> SimilarPairs:
    """Every pair i < j of documents sharing a band key with estimated Jaccard >= threshold.

    With ``texts`` (the documents' texts, one per signature, or their
    :func:`~simstore.text.jaccard.shingle_sets` under the signatures' config):
    every candidate pair whose *exact* Jaccard is >= threshold, with that value
    (candidates widened near the threshold; see :mod:`simstore.search.exact`).
    """
    s = _signatures_arg(sigs)
    t = check_threshold(threshold)
    if texts is None:
        return similar_pairs_arrays(s.sketches, s.bands, t)
    group, i, j, jac = exact_head_pairs(s, as_sets(texts, s), t)
    n = len(s)
    if (group == np.arange(n)).all():
        return _ordered(i, j, jac, n)
    _, inverse = np.unique(group, return_inverse=True)
    heads_i, heads_j = inverse.ravel()[i], inverse.ravel()[j]
    ai, aj, js = expand_groups(inverse.ravel(), heads_i, heads_j, jac, 1.0)
    return _ordered(ai, aj, js, n)


def similar_clusters(
    sigs: Signatures, threshold: float = DEFAULT_THRESHOLD, texts: Any = None
) -> np.ndarray:
    """Connected components of :func:`find_similar`'s pairs: each doc's smallest member."""
    s = _signatures_arg(sigs)
    found = find_similar(s, threshold, texts)
    return _core.components(len(s), found.i, found.j)
