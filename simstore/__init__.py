"""simstore: find near-duplicate documents among millions, fast, and keep them on disk.

The public API, declared once. The layers below, each a subpackage with one job:
``text`` (text to fingerprints and signatures), ``search`` (pure searches over arrays),
``store`` (the persistent :class:`SimStore`), ``corpus`` (files in, kept documents out),
``spark`` (the same over DataFrames), ``cli`` (``simstore-cli``) and ``native`` (the
cffi binding of ``csrc/``). Lower layers never import higher ones.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

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
    OutputPathError,
    ReadOnlyError,
    SimstoreError,
    SimstoreTypeError,
    SimstoreValueError,
    StoreAccessError,
    StoreClosedError,
    StoreError,
    StoreInUseError,
    VerifyTimeoutError,
)
from .search import (
    Layout,
    Pairs,
    Plan,
    SimilarPairs,
    clusters,
    duplicate_groups,
    find_all,
    find_similar,
    plan,
    similar_clusters,
)
from .store import Match, SimilarMatch, SimStore
from .text import (
    DEFAULT_CONFIG,
    EMPTY_FINGERPRINT,
    SIGNATURE_CONFIG,
    FingerprintConfig,
    IdfTable,
    Signature,
    Signatures,
    features,
    fingerprint,
    fingerprints,
    hamming,
    normalize,
    signature,
    signatures,
    simhash,
    sketch_jaccard,
    tokens,
)

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
    "VerifyTimeoutError",
    "OutputPathError",
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
