"""Brute-force Hamming oracles, written once: every search test compares against these.

Each compares every fingerprint (or every pair) the obvious way and shares no code
with simstore: Python's ``int.bit_count`` for single distances, a byte table for
numpy arrays and for a query against many (not ``np.bitwise_count``). Results are plain
lists in a fixed order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import simstore
from simstore import Match

_BYTE_BITS = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)


def hamming(a: int, b: int) -> int:
    """Bits that differ between two 64-bit fingerprints (ints or numpy integers)."""
    return (int(a) ^ int(b)).bit_count()


def popcounts(x: np.ndarray) -> np.ndarray:
    """Bits set in each uint64 of x (any shape), as int64 of the same shape."""
    a = np.ascontiguousarray(x, dtype=np.uint64)
    return _BYTE_BITS[a.view(np.uint8).reshape(*a.shape, 8)].sum(axis=-1, dtype=np.int64)


def brute_neighbours(fps: Iterable[int], q: int, k: int) -> list[tuple[int, int]]:
    """(index, distance) of every fingerprint within k of q, in index order (every
    distance counted, on the byte table)."""
    dist = popcounts(np.array(list(fps), dtype=np.uint64) ^ np.uint64(q))
    near = np.flatnonzero(dist <= k)
    return list(zip(near.tolist(), dist[near].tolist(), strict=True))


def brute_matches(stored: Mapping[Any, int], q: int, k: int) -> list[Match]:
    """Every stored doc_id -> fingerprint within k of q: by distance, then insertion order
    (every distance counted, on the byte table: a store of 20k docs in ~1 ms)."""
    items = list(stored.items())
    dist = popcounts(np.array([fp for _, fp in items], dtype=np.uint64) ^ np.uint64(q))
    near = np.flatnonzero(dist <= k)
    near = near[np.argsort(dist[near], kind="stable")]  # stable: insertion order in a tie
    return [Match(*items[n], int(dist[n])) for n in near.tolist()]


def brute_pairs(fps: Sequence[int] | np.ndarray, k: int) -> tuple[list[int], list[int], list[int]]:
    """Every pair i < j within k as columns (i, j, distance), sorted by i, then j."""
    f = np.array(fps, dtype=np.uint64).reshape(-1)
    d = popcounts(f[:, None] ^ f[None, :])
    i, j = np.nonzero(np.triu(d <= k, 1))
    return i.tolist(), j.tolist(), d[i, j].tolist()


def brute_clusters(fps: Sequence[int] | np.ndarray, k: int) -> list[int]:
    """For each fingerprint, the smallest index of its component in the within-k graph."""
    parent = list(range(len(fps)))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    i, j, _ = brute_pairs(fps, k)
    for a, b in zip(i, j, strict=True):
        ra, rb = root(a), root(b)
        parent[max(ra, rb)] = min(ra, rb)
    return [root(x) for x in range(len(fps))]


def sketch_estimate(a: Sequence[int], b: Sequence[int]) -> float:
    """The odd-sketch Jaccard estimate of two sketches (uint64 words), the formula spelled out."""
    bits = 64 * len(a)
    d = sum((int(x) ^ int(y)).bit_count() for x, y in zip(a, b, strict=True))
    if 2 * d >= bits:
        return 0.0
    delta = -(bits / 2) * math.log(1 - 2 * d / bits)
    return min(1.0, max(0.0, 1 - delta / (4 * bits)))


def shares_band(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two docs' band keys agree (in their stored low 32 bits) in some band."""
    return any((int(x) & 0xFFFFFFFF) == (int(y) & 0xFFFFFFFF) for x, y in zip(a, b, strict=True))


def brute_similar_pairs(
    sketches: np.ndarray, bands: np.ndarray, threshold: float
) -> list[tuple[int, int, float]]:
    """Every pair i < j sharing a band with estimate >= threshold: the rule, pair by pair."""
    out = []
    n = len(sketches)
    for i in range(n):
        for j in range(i + 1, n):
            if shares_band(bands[i], bands[j]):
                est = sketch_estimate(sketches[i], sketches[j])
                if est >= threshold:
                    out.append((i, j, est))
    return out


def brute_clusters_of_pairs(n: int, pairs: Iterable[tuple[int, int, Any]]) -> list[int]:
    """Each of n nodes labelled with the smallest node connected to it by the pairs."""
    label = list(range(n))
    changed = True
    edges = [(i, j) for i, j, _ in pairs]
    while changed:
        changed = False
        for i, j in edges:
            low = min(label[i], label[j])
            if label[i] != low or label[j] != low:
                label[i] = label[j] = low
                changed = True
    return label


def shingle_set(text: str, ngram: int = 3) -> frozenset[str]:
    """A text's distinct word shingles as strings (Python's regex tokens, not the C path);
    a text without a token: its whole normalized text, marked, as its one shingle."""
    found = simstore.features(text, ngram=ngram)
    if found:
        return frozenset(found)
    return frozenset({"\0" + " ".join(simstore.normalize(text).split())})


def brute_jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b| of two sets of shingle strings."""
    return len(a & b) / len(a | b)


def brute_exact_pairs(
    texts: Sequence[str], threshold: float, ngram: int = 3
) -> list[tuple[int, int, float]]:
    """Every pair i < j of texts whose exact shingle-set Jaccard is >= threshold."""
    sets = [shingle_set(t, ngram) for t in texts]
    out = []
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            if (jac := brute_jaccard(sets[i], sets[j])) >= threshold:
                out.append((i, j, jac))
    return out


def brute_representatives_exact(
    texts: Sequence[str], threshold: float, order: Sequence[int], ngram: int = 3,
    candidate: Callable[[int, int], bool] | None = None,
) -> tuple[list[int], list[float]]:
    """The crawler's greedy rule by exact Jaccard: in order, each text joins the most similar
    earlier representative with J >= threshold (ties: the earliest), else it is one.
    candidate(m, r): whether the pair is looked at at all (default: every pair)."""
    sets = [shingle_set(t, ngram) for t in texts]
    rank = {m: r for r, m in enumerate(order)}
    reps: list[int] = []
    rep, jac = list(range(len(texts))), [1.0] * len(texts)
    for m in order:
        near = [(-j, rank[r], r) for r in reps
                if (candidate is None or candidate(m, r))
                and (j := brute_jaccard(sets[m], sets[r])) >= threshold]
        if near:
            j, _, r = min(near)
            rep[m], jac[m] = r, -j
        else:
            reps.append(m)
    return rep, jac
