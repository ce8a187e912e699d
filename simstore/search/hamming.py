"""Batch near-duplicate search: all pairs within k of an array of fingerprints.

Pure functions over numpy arrays (no store, no global state), so they run as
well inside a Spark task as in a notebook.

Method: identical fingerprints are grouped (one C radix sort) so that a page
copied 10,000 times is one search item, not 50M pairs to verify; the C search
stops at the first copy it meets, so inputs without copies skip that sort.
The distinct fingerprints are searched by the pigeonhole principle: split
the 64 bits into k+1 blocks; two fingerprints within k agree exactly on at
least one. Pass p (one of k+1, run on a thread pool: the C call releases the
GIL) groups the fingerprints by block p and compares within groups, keeping
a pair only if p is the first block it agrees on, so each pair comes out
once. Crowded groups are split again the same way on the bits that still
vary inside them (see ``csrc/batch.c``), so the work follows the output.
"""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from .._validate import as_fingerprint_array, check_int, check_k
from ..exceptions import SimstoreValueError
from ..native import core as _core
from ..native.core import MAX_K

IDENTICAL_MODES = ("pairs", "groups")
_MAX_N = (1 << 32) - 1


class Pairs(NamedTuple):
    """Pairs i < j (int64) within k and their Hamming distance (uint8), sorted by (i, j)."""

    i: np.ndarray
    j: np.ndarray
    distance: np.ndarray


class _Groups(NamedTuple):
    """Identical fingerprints: distinct values, their members and representatives."""

    uniq: np.ndarray  # distinct fingerprints, ascending
    order: np.ndarray  # original indices sorted by (fingerprint, index)
    starts: np.ndarray  # int64, group u is order[starts[u]:starts[u+1]]
    rep: np.ndarray  # int64, smallest original index of each group


def _check_workers(workers: Any) -> int:
    if workers is None:
        return min(2, os.cpu_count() or 1)
    return check_int(workers, "workers", 1)


def _prepare(fps: Any, k: Any, workers: Any) -> tuple[np.ndarray, int, int]:
    arr = as_fingerprint_array(fps)
    if len(arr) > _MAX_N:
        raise SimstoreValueError(
            f"'fps' holds {len(arr)} fingerprints; the batch search takes at most 2**32-1"
        )
    return arr, check_k(k, maximum=MAX_K), _check_workers(workers)


def _groups(fps: np.ndarray) -> _Groups | None:
    """The groups of identical fingerprints, or None when all are distinct."""
    uniq, order, starts = _core.dedupe(fps)
    if len(uniq) == len(fps):
        return None
    starts64 = starts.astype(np.int64)
    order64 = order.astype(np.int64)
    return _Groups(uniq, order64, starts64, order64[starts64[:-1]])


def _plan(n: int, k: int) -> tuple[int, list[int]]:
    """Blocks B and header combos (bit masks) for the search; B = 0 means all-pairs.

    Rough cost in ns per pass: a scatter of n (plus a small sort when the
    header exceeds the 16-bit scatter key) and the candidates of n * n / 2**bits
    buckets; all-pairs costs n * n / 2. The cheapest wins.
    """
    best_cost, best_b = n * n / 2, 0
    for b in range(k + 1, min(64, k + 8) + 1):
        h = b - k
        passes = math.comb(b, h)
        if passes > 256:
            break
        bits = 64 * h // b
        cost = passes * (n * (8 if bits <= 16 else 14) + n * n / 2 ** (bits + 1))
        if cost < best_cost:
            best_cost, best_b = cost, b
    if best_b == 0:
        return 0, []
    combos = [
        sum(1 << x for x in c) for c in itertools.combinations(range(best_b), best_b - k)
    ]
    return best_b, combos


def _search(fps: np.ndarray, k: int, workers: int) -> _core.PairArrays | None:
    """Unsorted pairs within k (each once) of distinct fingerprints, as i, j, distance.

    None when fps holds identical fingerprints (the C search stops at the first).
    """
    n = len(fps)
    if k == 0 or n < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint8)
    nblocks, combos = _plan(n, k)
    if nblocks:
        # one task per worker: each C call reuses its buffers across its passes
        shares = [combos[w::workers] for w in range(min(workers, len(combos)))]
        tasks = [lambda s=s: _core.batch_pass(fps, k, nblocks, s) for s in shares]
    else:
        parts = 4 * workers
        tasks = [lambda p=p: _core.batch_brute(fps, k, p, parts) for p in range(parts)]
    if workers == 1:
        results = [t() for t in tasks]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda t: t(), tasks))
    done = [r for r in results if r is not None]
    if len(done) != len(results):
        return None
    return (
        np.concatenate([r[0] for r in done]),
        np.concatenate([r[1] for r in done]),
        np.concatenate([r[2] for r in done]),
    )


def _distinct_search(
    fps: np.ndarray, k: int, workers: int
) -> tuple[_Groups | None, np.ndarray, np.ndarray, np.ndarray]:
    """Search fps; if it holds copies (the C search stops at the first), group them
    and search the distinct values. Returns the groups (None: all distinct) and pairs."""
    if k > 0:
        found = _search(fps, k, workers)
        if found is not None:
            return (None, *found)
    g = _groups(fps)
    found = _search(fps if g is None else g.uniq, k, workers)
    if found is None:
        raise AssertionError("identical fingerprints left after grouping")
    return (g, *found)


def _sorted_pairs(i: np.ndarray, j: np.ndarray, d: np.ndarray, n: int) -> Pairs:
    """Pairs ordered by (i, j); i < j holds on input."""
    key = i.astype(np.uint64) * np.uint64(n) + j.astype(np.uint64)
    o = np.argsort(key)
    return Pairs(i[o], j[o], d[o])


def _cross(g: _Groups, ui: np.ndarray, uj: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every member of group ui[p] with every member of group uj[p], for each p."""
    size = np.diff(g.starts)
    su, sv = size[ui], size[uj]
    cnt = su * sv
    rep = np.repeat(np.arange(len(ui)), cnt)
    off = np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    a = g.order[g.starts[ui][rep] + off // sv[rep]]
    b = g.order[g.starts[uj][rep] + off % sv[rep]]
    return np.minimum(a, b), np.maximum(a, b), d[rep]


def _within(g: _Groups) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of members of each group (distance 0), one group size at a time."""
    size = np.diff(g.starts)
    out_i, out_j = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for s in np.unique(size[size > 1]):
        first = g.starts[:-1][size == s]
        members = g.order[first[:, None] + np.arange(s)]  # ascending along each row
        p, q = np.triu_indices(int(s), 1)
        out_i.append(members[:, p].ravel())
        out_j.append(members[:, q].ravel())
    return np.concatenate(out_i), np.concatenate(out_j)


def find_all(
    fps: Any, k: int, *, identical: str = "pairs", workers: int | None = None
) -> Pairs:
    """Every pair i < j of fingerprints within Hamming distance k (0..16), sorted by (i, j).

    identical="pairs" reports identical fingerprints as pairs at distance 0,
    like any other (n copies give n*(n-1)/2 pairs). identical="groups" keeps
    one representative per set of identical fingerprints, its smallest index,
    and reports pairs between representatives only; :func:`duplicate_groups`
    gives the copies. workers: threads (default min(2, cpu count)).
    """
    if identical not in IDENTICAL_MODES:
        raise SimstoreValueError(
            f"'identical' must be one of {', '.join(IDENTICAL_MODES)} (got {identical!r})"
        )
    arr, k, workers = _prepare(fps, k, workers)
    n = len(arr)
    g, ui, uj, d = _distinct_search(arr, k, workers)
    if g is None:
        return _sorted_pairs(ui, uj, d, n)
    if identical == "groups":
        a, b = g.rep[ui], g.rep[uj]
        return _sorted_pairs(np.minimum(a, b), np.maximum(a, b), d, n)
    ci, cj, cd = _cross(g, ui, uj, d)
    wi, wj = _within(g)
    return _sorted_pairs(
        np.concatenate([ci, wi]),
        np.concatenate([cj, wj]),
        np.concatenate([cd, np.zeros(len(wi), np.uint8)]),
        n,
    )


def duplicate_groups(fps: Any) -> np.ndarray:
    """For each fingerprint, the smallest index holding the same value (int64)."""
    arr = as_fingerprint_array(fps)
    if len(arr) > _MAX_N:
        raise SimstoreValueError(f"'fps' holds {len(arr)} fingerprints; at most 2**32-1 allowed")
    g = _groups(arr)
    if g is None:
        return np.arange(len(arr), dtype=np.int64)
    labels = np.empty(len(arr), dtype=np.int64)
    labels[g.order] = np.repeat(g.rep, np.diff(g.starts))
    return labels


def clusters(fps: Any, k: int, *, workers: int | None = None) -> np.ndarray:
    """Connected components of the "within k" graph: each fingerprint's label is the
    smallest index in its component (int64). Identical copies are joined by a chain
    of n-1 links, never by their n*(n-1)/2 pairs."""
    arr, k, workers = _prepare(fps, k, workers)
    g, ui, uj, _ = _distinct_search(arr, k, workers)
    if g is None:
        return _core.components(len(arr), ui, uj)
    # consecutive members of a group: order[r-1], order[r] for r not a group start
    chain = np.ones(len(arr), dtype=bool)
    chain[g.starts[:-1]] = False
    r = np.flatnonzero(chain)
    a = np.concatenate([g.order[r - 1], g.rep[ui]])
    b = np.concatenate([g.order[r], g.rep[uj]])
    return _core.components(len(arr), a, b)
