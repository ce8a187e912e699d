"""Text to numbers: tokens, features, 64-bit simhash fingerprints and MinHash signatures.

Pure functions of a text and a :class:`FingerprintConfig`; nothing here knows of stores.
``fingerprinting`` holds the schemes and the C pipeline, ``minhash`` the similarity
signatures (fingerprint + odd sketch + band keys), ``jaccard`` the exact shingle-hash sets
and their exact Jaccard (C), ``reference`` the same in slow Python:
the oracle the C must equal.
"""

from __future__ import annotations

from .fingerprinting import (
    DEFAULT_CONFIG,
    EMPTY_FINGERPRINT,
    SIGNATURE_CONFIG,
    FingerprintConfig,
    IdfTable,
    features,
    fingerprint,
    fingerprints,
    hamming,
    normalize,
    simhash,
    tokens,
)
from .jaccard import ShingleSets, exact_jaccard, shingle_sets, signatures_and_sets
from .minhash import (
    Signature,
    Signatures,
    jaccard_from_distance,
    signature,
    signatures,
    sketch_jaccard,
)

__all__ = [
    "DEFAULT_CONFIG",
    "EMPTY_FINGERPRINT",
    "SIGNATURE_CONFIG",
    "FingerprintConfig",
    "IdfTable",
    "ShingleSets",
    "Signature",
    "Signatures",
    "exact_jaccard",
    "features",
    "fingerprint",
    "fingerprints",
    "hamming",
    "jaccard_from_distance",
    "normalize",
    "signature",
    "shingle_sets",
    "signatures",
    "signatures_and_sets",
    "simhash",
    "sketch_jaccard",
    "tokens",
]
