"""Pure-Python reference of the fingerprint scheme: the spec the C path must equal.

Slow by design (mmh3 per shingle, a Python loop per bit); used by the tests
as an oracle and by ``python -m tools.bench fingerprint`` as the pure-Python baseline.
"""

from __future__ import annotations

import math
import struct
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


# --- signatures (the scheme of simstore.signature, spelled out) ---

_M64 = (1 << 64) - 1
_SALT_TAGS = {  # ASCII tags, not tuned
    "sketch": 0x6F64642D736B6574,
    "bands": 0x6C73682D62616E64,
    "densify": 0x64656E7365000000,
    "odd": 0x6F64642D666F6C64,
}


def _fmix64(k: int) -> int:
    """murmur3's 64-bit finalizer."""
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    k ^= k >> 33
    return k


def _scaled(x32: int, n: int) -> int:
    """A 32-bit value mapped onto 0..n-1 by multiply-shift."""
    return (x32 * n) >> 32


def reference_bins(hashes: set[int], salt: int, n: int) -> list[int | None]:
    """One-permutation MinHash: n bins, each the least low-32-bit value landing in it."""
    bins: list[int | None] = [None] * n
    for h in hashes:
        g = _fmix64(h ^ salt)
        i, v = _scaled(g >> 32, n), g & 0xFFFFFFFF
        old = bins[i]
        if old is None or v < old:
            bins[i] = v
    return bins


def reference_densify(bins: list[int | None], salt_d: int) -> list[int]:
    """Optimal densification: an empty bin copies the first non-empty bin its hash sequence hits."""
    n, out = len(bins), []
    for i, v in enumerate(bins):
        if v is None:
            j = 0
            for a in range(1, 33):
                j = _scaled(_fmix64(salt_d ^ ((i << 32) | a)) >> 32, n)
                if bins[j] is not None:
                    break
            else:  # 32 misses: probe linearly from the last try
                j = (j + 1) % n
                while bins[j] is None:
                    j = (j + 1) % n
            v = bins[j]
        assert v is not None
        out.append(v)
    return out


def reference_signature_of_hashes(
    hashes: set[int], config: FingerprintConfig
) -> tuple[list[int], list[int]]:
    """Sketch words and band keys of a non-empty set of 64-bit feature hashes."""
    s, b, rows = config.seed, config.sketch_bits, config.rows
    salts = {name: _fmix64(s ^ tag) for name, tag in _SALT_TAGS.items()}
    dense = reference_densify(reference_bins(hashes, salts["sketch"], 2 * b), salts["densify"])
    odd = 0
    for i, v in enumerate(dense):
        odd ^= 1 << _scaled(_fmix64(salts["odd"] ^ ((i << 32) | v)) >> 32, b)
    words = [(odd >> (64 * w)) & _M64 for w in range(b // 64)]
    band_bins = reference_densify(
        reference_bins(hashes, salts["bands"], config.bands * rows), salts["densify"]
    )
    keys = []
    for beta in range(config.bands):
        raw = struct.pack(f"<{rows}I", *band_bins[beta * rows : (beta + 1) * rows])
        keys.append(mmh3.hash64(raw, (s + 1 + beta) % (1 << 32), signed=False)[0])
    return words, keys


def reference_signature(text: str, config: FingerprintConfig) -> tuple[int, list[int], list[int]]:
    """(fingerprint, sketch words, band keys) of one text, computed the slow, obvious way."""
    shingles = features(text, config)
    if shingles:
        hashes = {mmh3.hash64(sh.encode("utf-8"), config.seed, signed=False)[0] for sh in shingles}
    else:
        hashes = {_no_feature_fingerprint(text, config.seed)}
    return (reference_fingerprint(text, config), *reference_signature_of_hashes(hashes, config))


def reference_jaccard(d: int, sketch_bits: int) -> float:
    """The odd-sketch Jaccard estimate from a bit distance d, in scalar math."""
    if 2 * d >= sketch_bits:
        return 0.0
    delta = -(sketch_bits / 2) * math.log(1 - 2 * d / sketch_bits)
    return min(1.0, max(0.0, 1 - delta / (2 * (2 * sketch_bits))))
