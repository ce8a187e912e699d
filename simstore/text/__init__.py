"""Text to numbers: tokens, features, 64-bit simhash fingerprints and MinHash signatures.

Pure functions of a text and a :class:`FingerprintConfig`; nothing here knows of stores.
``fingerprinting`` holds the schemes and the C pipeline, ``minhash`` the similarity
signatures (fingerprint + odd sketch + band keys), ``reference`` the same in slow Python:
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
    "Signature",
    "Signatures",
    "features",
    "fingerprint",
    "fingerprints",
    "hamming",
    "jaccard_from_distance",
    "normalize",
    "signature",
    "signatures",
    "simhash",
    "sketch_jaccard",
    "tokens",
]
