"""Clusters that do not chain: greedy representatives in a priority order (pure, arrays).

Connected components chain: a ~ b ~ c puts a and c together however far apart
they are. The representative rule is what a crawler calling ``add_if_new`` in
the priority order keeps: a document is a *representative* when no earlier
representative is near it (within k, or estimated Jaccard >= t); otherwise it
joins the nearest representative that came before it (ties: the earliest).
Every member is therefore near its own representative, and the
representatives are exactly the documents ``add_if_new`` would have stored.

Identical items (same fingerprint; same sketch and band keys) are searched
once: only the first of a group in the order can be a representative, and its
copies follow it at distance 0, so 10,000 copies of one page cost one search
item, not 50 million pairs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._distinct import distinct
from ..exceptions import InvalidConfigError, SimstoreTypeError, SimstoreValueError
from ..native import core as _core
from ..text.minhash import Signatures, band_keys32, jaccard_from_distance
from .exact import as_sets, exact_head_pairs
from .hamming import duplicate_groups, find_all
from .similar import check_threshold, find_similar


class Representatives(NamedTuple):
    """Each item's representative (its own index for a representative) and how near it is.

    rep: int64 indices; distance: Hamming distance of the two fingerprints
    (uint8); jaccard: estimated Jaccard (float64) in the similarity mode (exact with
    texts), else None.
    """

    rep: np.ndarray
    distance: np.ndarray
    jaccard: np.ndarray | None


def _order_arg(order: Any, n: int) -> np.ndarray:
    if order is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(order)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) != n:
        raise SimstoreValueError(f"'order' must be a permutation of range({n}) (an int array)")
    arr = arr.astype(np.int64)
    seen = np.zeros(n, dtype=bool)
    if n and (arr.min() < 0 or arr.max() >= n):
        raise SimstoreValueError(f"'order' must be a permutation of range({n})")
    seen[arr] = True
    if not seen.all():
        raise SimstoreValueError(f"'order' must be a permutation of range({n}) (repeats found)")
    return arr


def _identical_rows(sigs: Signatures) -> np.ndarray:
    """Each signature's group: the smallest index with the same sketch and band keys.

    Rows are grouped by a 64-bit hash of their words (O(n) memory), then compared
    in full with their group's head; a row that differs (a hash collision) is
    its own group.
    """
    n = len(sigs)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    keys = band_keys32(sigs.bands).astype(np.uint64)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in [*sigs.sketches.T, *keys.T]:
            h = (h ^ col) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    group = first[inverse.ravel()].astype(np.int64)
    same = (sigs.sketches == sigs.sketches[group]).all(axis=1)
    same &= (keys == keys[group]).all(axis=1)
    return np.where(same, group, np.arange(n))


def _fingerprint_distance(fps: np.ndarray, rep: np.ndarray) -> np.ndarray:
    if len(fps) == 0:
        return np.empty(0, dtype=np.uint8)
    return _core.hamming_pairwise(fps, np.ascontiguousarray(fps[rep])).astype(np.uint8)


def representative_clusters(
    items: Any, k: int | None = None, threshold: float | None = None, order: Any = None,
    texts: Any = None,
) -> Representatives:
    """The greedy representative of every item, in ``order`` (default: input order).

    items: uint64 fingerprints with ``k`` (Hamming within k), or
    :class:`Signatures` with ``threshold`` (the :func:`simstore.find_similar`
    rule; with ``texts``, its exact rule: jaccard then holds exact values) or
    with ``k`` (their fingerprints). order: a permutation of the indices,
    highest priority first (e.g. longest documents first).
    """
    if (k is None) == (threshold is None):
        raise InvalidConfigError("give exactly one of 'k' (Hamming) and 'threshold' (Jaccard)")
    if texts is not None and threshold is None:
        raise InvalidConfigError("'texts' needs 'threshold' (exact Jaccard), not 'k'")
    if threshold is not None:
        if not isinstance(items, Signatures):
            raise SimstoreTypeError(
                f"'threshold' needs Signatures (simstore.signatures(texts)) "
                f"(got {type(items).__name__})"
            )
        t = check_threshold(threshold)
        n = len(items)
        if texts is None:
            group = _identical_rows(items)
            heads = np.flatnonzero(group == np.arange(n))
            found = find_similar(items[heads], t)
            gi, gj, jac_pairs = heads[found.i], heads[found.j], found.jaccard
            self_value = float(jaccard_from_distance(0, 64 * items.sketches.shape[1]))
        else:
            group, gi, gj, jac_pairs = exact_head_pairs(items, as_sets(texts, items), t)
            self_value = 1.0
        # key: smaller is nearer (the negated similarity); ties fall to the earlier item
        key = -jac_pairs
        rep, own = _greedy(n, group, gi, gj, key, _order_arg(order, n))
        jac = np.full(n, self_value, dtype=np.float64)
        jac[own >= 0] = -key[own[own >= 0]]
        return Representatives(rep, _fingerprint_distance(items.fingerprints, rep), jac)
    fps = items.fingerprints if isinstance(items, Signatures) else items
    assert k is not None
    found_h = find_all(fps, k, identical="groups")
    arr = np.ascontiguousarray(fps, dtype=np.uint64)
    n = len(arr)
    group = duplicate_groups(arr)
    rep, _ = _greedy(
        n, group, found_h.i, found_h.j, found_h.distance.astype(np.float64),
        _order_arg(order, n),
    )
    return Representatives(rep, _fingerprint_distance(arr, rep), None)


def representatives_from_pairs(
    n: int, i: np.ndarray, j: np.ndarray, key: np.ndarray, order: Any = None,
    group: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The greedy pass over n items given all their near pairs (i, j) and how near each
    pair is (key: smaller is nearer). group: each item's group head, for groups of
    identical items (the pairs then join heads only). Returns each item's
    representative and the pair it joined by (-1 for representatives and copies)."""
    heads = np.arange(n, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    return _greedy(n, heads, np.asarray(i, dtype=np.int64),
                   np.asarray(j, dtype=np.int64), np.asarray(key, dtype=np.float64),
                   _order_arg(order, n))


def _greedy(
    n: int, group: np.ndarray, gi: np.ndarray, gj: np.ndarray, key: np.ndarray,
    order: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The greedy pass over groups of identical items and the pairs between their heads.

    group: each item's head (the smallest index of its group); (gi, gj, key):
    pairs of heads and how near they are (smaller key = nearer). Returns each
    item's representative and, for an item that joined another group's
    representative, the index of that pair (-1 otherwise). Python lists are
    made only for the linked groups, so memory follows the pairs, not n.
    """
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    toprank = np.full(n, n, dtype=np.int64)  # by head: the best rank in the group
    np.minimum.at(toprank, group, rank)
    top = order[np.minimum(toprank, n - 1)] if n else toprank  # by head: its top member
    rep = top[group]  # right for members of representative groups (copies follow the top)
    via = np.full(n, -1, dtype=np.int64)
    if len(gi) == 0:
        return rep, via
    # linked heads, numbered 0..L-1; adjacency as spans of (neighbour, pair id), both ways
    linked = distinct(np.concatenate([gi, gj]).astype(np.int64))
    src = np.searchsorted(linked, np.concatenate([gi, gj]))
    dst = np.searchsorted(linked, np.concatenate([gj, gi]))
    pid = np.concatenate([np.arange(len(gi)), np.arange(len(gi))])
    by = np.argsort(src, kind="stable")
    dst_l, pid_l, key_l = dst[by].tolist(), pid[by].tolist(), key.tolist()
    bounds = np.searchsorted(src[by], np.arange(len(linked) + 1)).tolist()
    trank_l, top_l = toprank[linked].tolist(), top[linked].tolist()
    # a group's top is a representative iff no linked group whose top comes first is one
    is_rep = [True] * len(linked)
    for h in np.argsort(toprank[linked], kind="stable").tolist():
        r = trank_l[h]
        is_rep[h] = not any(is_rep[x] and trank_l[x] < r
                            for x in dst_l[bounds[h] : bounds[h + 1]])

    def nearest(h: int, r: int) -> tuple[int, int]:
        """(top, pair id) of the nearest representative group linked to h, before rank r."""
        best: tuple[float, int, int, int] | None = None
        for x, p in zip(dst_l[bounds[h] : bounds[h + 1]], pid_l[bounds[h] : bounds[h + 1]],
                        strict=True):
            if is_rep[x] and trank_l[x] < r:
                cand = (key_l[p], trank_l[x], top_l[x], p)
                if best is None or cand < best:
                    best = cand
        assert best is not None, "a non-representative has no earlier representative"
        return best[2], best[3]

    losers = np.flatnonzero(~np.array(is_rep, dtype=bool))  # linked groups that joined others
    members = np.flatnonzero(np.isin(group, linked[losers]))
    compact = np.searchsorted(linked, group[members]).tolist()
    for m, h, r in zip(members.tolist(), compact, rank[members].tolist(), strict=True):
        rep[m], via[m] = nearest(h, r)
    return rep, via
