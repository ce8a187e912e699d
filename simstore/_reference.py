"""Pure-Python reference of the fingerprint scheme: the spec the C path must equal.

Slow by design (mmh3 per shingle, a Python loop per bit); used by the tests
as an oracle and by ``tools/bench.py`` as the pure-Python baseline.
"""

from __future__ import annotations

import math
from collections import Counter

import mmh3

from .fingerprinting import FingerprintConfig, _no_feature_fingerprint, features


def reference_simhash(hashes: list[int], weights: list[float]) -> int:
    """Charikar simhash: bit b is 1 iff the signed weighted vote is > 0."""
    fp = 0
    for b in range(64):
        vote = sum(w if (h >> b) & 1 else -w for h, w in zip(hashes, weights, strict=True))
        if vote > 0:
            fp |= 1 << b
    return fp


def reference_fingerprint(text: str, config: FingerprintConfig | None = None) -> int:
    """The fingerprint of one text, computed the slow, obvious way."""
    cfg = config or FingerprintConfig()
    shingles = features(text, cfg)
    if not shingles:
        return _no_feature_fingerprint(text, cfg.seed)
    counts = Counter(
        mmh3.hash64(s.encode("utf-8"), cfg.seed, signed=False)[0] for s in shingles
    )
    hashes = list(counts)
    if cfg.weighting == "uniform":
        weights = [1.0] * len(hashes)
    elif cfg.weighting == "tf":
        weights = [float(counts[h]) for h in hashes]
    else:
        weights = [1.0 + math.log(counts[h]) for h in hashes]
    return reference_simhash(hashes, weights)
