"""The exact rule: candidates by band keys, widened near t, decided by exact Jaccard.

Given the texts (their :class:`~simstore.text.jaccard.ShingleSets`), a pair is
similar when the exact Jaccard similarity of its shingle sets is >= t: precision
is 1 by construction, and recall is the share of such pairs that become
candidates at all. Candidates are the pairs sharing a band key of the
signatures, as in the sketch rule, but no sketch estimate filters them (so the
estimate's error near t costs nothing); the exact merge in C settles each one,
and stops early on pairs that cannot reach t.

Widening. A pair at Jaccard J shares one of b bands of r rows with probability
about 1 - (1 - J**r)**b. When the signature's bands miss a pair at J = t more
often than :data:`TARGET_MISS` (16 x 8 at t = 0.8: about 5 %), the sets get
:data:`EXTRA_BANDS` more bands of fewer rows, the most rows that meet the
target at t, from a one-permutation MinHash of the sets under another seed
(computed here, never stored). Identical sets are searched once and expanded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import SimstoreValueError
from ..native import core as _core
from ..text.fingerprinting import FingerprintConfig
from ..text.jaccard import ShingleSets, exact_jaccard, shingle_sets
from ..text.minhash import Signatures, band_keys32
from .bandpairs import band_candidates

TARGET_MISS = 1e-4
"""The largest modelled chance that a pair at J = t is not a candidate."""
EXTRA_BANDS = 32
_MAX_EXTRA_ROWS = 16
_EXTRA_SEED = 0x9E3779B9  # the extra bands' seed is the config's XOR this (any fixed odd value)
_EXTRA_SKETCH_BITS = 64  # the smallest sketch the C core makes; only band keys are used
_PAIR_CHUNK = 1 << 20
_MIX = np.uint64(0x9E3779B97F4A7C15)


def miss_probability(j: float, bands: int, rows: int) -> float:
    """Modelled chance that a pair at Jaccard j shares none of bands x rows band keys."""
    return float((1.0 - j**rows) ** bands)


def extra_rows(threshold: float, bands: int = EXTRA_BANDS, target: float = TARGET_MISS) -> int:
    """The most rows (1..16) whose ``bands`` bands miss a pair at J = threshold <= target
    (1 when none does: at thresholds below about 0.25 the target is not met)."""
    best = 1
    for r in range(1, _MAX_EXTRA_ROWS + 1):
        if miss_probability(threshold, bands, r) <= target:
            best = r
    return best


def as_sets(texts: Any, sigs: Signatures) -> ShingleSets:
    """The texts' shingle sets under the signatures' config (ShingleSets are taken as given)."""
    sets = texts if isinstance(texts, ShingleSets) else shingle_sets(texts, sigs.config)
    if len(sets) != len(sigs):
        raise SimstoreValueError(
            f"'texts' must give one text per signature ({len(sets)} texts, {len(sigs)} signatures)"
        )
    if len(sets) and (sets.sizes == 0).any():
        raise SimstoreValueError("every shingle set must hold at least one hash")
    return sets


_DIGEST_STEP = 1 << 16  # hashes mixed at a time by set_digests


def set_digests(sets: ShingleSets) -> np.ndarray:
    """A 64-bit digest (uint64) of each set: equal sets, equal digests (order-free sum),
    summed :data:`_DIGEST_STEP` hashes at a time (a long text's set is not copied)."""
    sizes, offsets = sets.sizes, sets.offsets
    with np.errstate(over="ignore"):
        digest = sizes.astype(np.uint64) * _MIX
        for a in range(0, len(sets.hashes), _DIGEST_STEP):
            b = min(len(sets.hashes), a + _DIGEST_STEP)
            mixed = sets.hashes[a:b] * _MIX
            mixed ^= mixed >> np.uint64(31)
            # the sets with hashes in [a, b), and where each starts there
            first = int(np.searchsorted(offsets, a, side="right")) - 1
            last = int(np.searchsorted(offsets, b, side="left"))
            which = np.arange(first, last)
            which = which[sizes[which] > 0]
            starts = np.maximum(offsets[which], a) - a
            digest[which] += np.add.reduceat(mixed, starts)
    return digest


def set_groups(sets: ShingleSets, digests: np.ndarray | None = None) -> np.ndarray:
    """Each set's group: the smallest index with an identical set (equal digests, then
    verified; a set whose digest collides with a different set is its own group)."""
    n = len(sets)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    digest = set_digests(sets) if digests is None else digests
    _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
    group = first[inverse.ravel()].astype(np.int64)
    moved = np.flatnonzero(group != np.arange(n))
    if len(moved):
        same = exact_jaccard(sets, moved, group[moved]) == 1.0
        group[moved[~same]] = moved[~same]
    return group


def widened_keys(sigs: Signatures, sets: ShingleSets, threshold: float) -> np.ndarray:
    """32-bit band keys (n, bands [+ EXTRA_BANDS]): the signatures', plus extra bands of
    the sets when the signatures' miss a pair at J = threshold more often than TARGET_MISS."""
    return _with_extra(band_keys32(sigs.bands), sigs.config, sets, threshold)


def keys_of_sets(sets: ShingleSets, config: FingerprintConfig, threshold: float) -> np.ndarray:
    """:func:`widened_keys` from the sets alone (the signature's band keys are a function
    of the set: the same keys, without a sketch or a second pass over the text)."""
    if not len(sets):
        extra = 0 if _enough(threshold, config) else EXTRA_BANDS
        return np.empty((0, config.bands + extra), dtype=np.uint32)
    _, bands = _core.signature_hashes(
        sets.hashes, sets.offsets, config.seed, _EXTRA_SKETCH_BITS, config.bands, config.rows
    )
    return _with_extra(band_keys32(bands), config, sets, threshold)


def _enough(threshold: float, cfg: FingerprintConfig) -> bool:
    """Whether the config's own bands meet TARGET_MISS at J = threshold."""
    return miss_probability(threshold, cfg.bands, cfg.rows) <= TARGET_MISS


def _with_extra(
    base: np.ndarray, cfg: FingerprintConfig, sets: ShingleSets, threshold: float
) -> np.ndarray:
    if _enough(threshold, cfg):
        return base
    _, extra = _core.signature_hashes(
        sets.hashes, sets.offsets, cfg.seed ^ _EXTRA_SEED, _EXTRA_SKETCH_BITS,
        EXTRA_BANDS, extra_rows(threshold),
    )
    return np.ascontiguousarray(np.hstack([base, band_keys32(extra)]))


def candidate_pairs(
    sigs: Signatures, sets: ShingleSets, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs (i < j) sharing a widened band key: what the exact rule measures."""
    return band_candidates(widened_keys(sigs, sets, threshold))


def exact_head_pairs(
    sigs: Signatures, sets: ShingleSets, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(group, i, j, jaccard): each doc's identical-set group head, and the pairs of heads
    (global indices, i < j) whose exact Jaccard is >= threshold, with that value."""
    return head_pairs_of_keys(widened_keys(sigs, sets, threshold), set_digests(sets), sets,
                              threshold)


def head_pairs_of_keys(
    keys32: np.ndarray, digests: np.ndarray, sets: ShingleSets, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exact_head_pairs` from the widened keys and set digests, made earlier (e.g.
    chunk by chunk); sets are read only where a pair is measured, so they may be a
    memory map of a file."""
    group = set_groups(sets, digests)
    heads = np.flatnonzero(group == np.arange(len(group)))
    ci, cj = band_candidates(keys32[heads])
    keep_i, keep_j, keep_s = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0)]
    for a in range(0, len(ci), _PAIR_CHUNK):
        pi, pj = heads[ci[a : a + _PAIR_CHUNK]], heads[cj[a : a + _PAIR_CHUNK]]
        jac = exact_jaccard(sets, pi, pj, threshold=threshold)
        ok = jac >= threshold
        keep_i.append(pi[ok])
        keep_j.append(pj[ok])
        keep_s.append(jac[ok])
    return group, np.concatenate(keep_i), np.concatenate(keep_j), np.concatenate(keep_s)
