"""Candidate pairs by exact key equality: rows that share a (band) key, and group expansion.

Shared by the sketch rule (:mod:`simstore.search.similar`) and the exact rule
(:mod:`simstore.search.exact`): both find their candidates as pairs of rows
equal in some band column, and both search one row per group of identical
items and expand the groups afterwards.
"""

from __future__ import annotations

import numpy as np

from .._distinct import distinct


def run_pairs(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def band_candidates(keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs (i < j) sharing a key in some band column."""
    n = len(keys32)
    codes = []
    for b in range(keys32.shape[1]):
        a, c = run_pairs(keys32[:, b])
        codes.append(a.astype(np.uint64) * np.uint64(n) + c.astype(np.uint64))
    if not codes:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    u = distinct(np.concatenate(codes))
    return (u // np.uint64(n)).astype(np.int64), (u % np.uint64(n)).astype(np.int64)


def expand_groups(
    inverse: np.ndarray, i: np.ndarray, j: np.ndarray, s: np.ndarray, self_value: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of groups (i, j, value s) as pairs of their members, plus the pairs within
    each group (value self_value; none when it is None). inverse: each row's group."""
    members = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse, minlength=int(inverse.max()) + 1 if len(inverse) else 0)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    out_i, out_j, out_s = [], [], []
    for u, v, x in zip(i.tolist(), j.tolist(), s.tolist(), strict=True):
        mu = members[starts[u] : starts[u] + counts[u]]
        mv = members[starts[v] : starts[v] + counts[v]]
        a, b = np.meshgrid(mu, mv, indexing="ij")
        out_i.append(a.ravel())
        out_j.append(b.ravel())
        out_s.append(np.full(a.size, x))
    if self_value is not None:
        for g in np.flatnonzero(counts > 1).tolist():
            a, b = run_pairs(np.zeros(int(counts[g]), dtype=np.uint8))
            mg = members[starts[g] : starts[g] + counts[g]]
            out_i.append(mg[a])
            out_j.append(mg[b])
            out_s.append(np.full(len(a), self_value))
    if not out_i:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)
