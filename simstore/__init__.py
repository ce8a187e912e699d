"""simstore: find near-duplicate documents among millions, fast, and keep them on disk."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .batch import Pairs, clusters, duplicate_groups, find_all
from .exceptions import (
    ConfigMismatchError,
    CorruptStoreError,
    FormatVersionError,
    InvalidConfigError,
    InvalidDistanceError,
    InvalidDocIdError,
    InvalidFingerprintError,
    InvalidSignatureError,
    LayoutMismatchError,
    NativeModuleError,
    NotAStoreError,
    NotSimilarityStoreError,
    ReadOnlyError,
    SimstoreError,
    SimstoreTypeError,
    SimstoreValueError,
    StoreAccessError,
    StoreClosedError,
    StoreError,
    StoreInUseError,
)
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
from .layout import Layout, Plan, plan
from .signature import Signature, Signatures, signature, signatures, sketch_jaccard
from .similar import SimilarPairs, find_similar, similar_clusters
from .store import Match, SimilarMatch, SimStore

try:
    __version__ = version("simstore")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"

__all__ = [
    "ConfigMismatchError",
    "CorruptStoreError",
    "FormatVersionError",
    "Layout",
    "LayoutMismatchError",
    "Match",
    "NotAStoreError",
    "Plan",
    "ReadOnlyError",
    "SimStore",
    "StoreAccessError",
    "StoreClosedError",
    "StoreError",
    "StoreInUseError",
    "plan",
    "Pairs",
    "clusters",
    "duplicate_groups",
    "find_all",
    "DEFAULT_CONFIG",
    "EMPTY_FINGERPRINT",
    "FingerprintConfig",
    "IdfTable",
    "InvalidConfigError",
    "InvalidDistanceError",
    "InvalidDocIdError",
    "InvalidFingerprintError",
    "InvalidSignatureError",
    "NativeModuleError",
    "SimstoreError",
    "SimstoreTypeError",
    "SimstoreValueError",
    "__version__",
    "features",
    "fingerprint",
    "fingerprints",
    "hamming",
    "normalize",
    "simhash",
    "tokens",
    "SIGNATURE_CONFIG",
    "Signature",
    "Signatures",
    "signature",
    "signatures",
    "sketch_jaccard",
    "NotSimilarityStoreError",
    "SimilarMatch",
    "SimilarPairs",
    "find_similar",
    "similar_clusters",
]
