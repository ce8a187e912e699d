"""simstore: find near-duplicate documents among millions, fast, and keep them on disk."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .exceptions import (
    InvalidConfigError,
    InvalidDistanceError,
    InvalidDocIdError,
    InvalidFingerprintError,
    NativeModuleError,
    SimstoreError,
    SimstoreTypeError,
    SimstoreValueError,
)
from .fingerprinting import (
    DEFAULT_CONFIG,
    EMPTY_FINGERPRINT,
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

try:
    __version__ = version("simstore")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_CONFIG",
    "EMPTY_FINGERPRINT",
    "FingerprintConfig",
    "IdfTable",
    "InvalidConfigError",
    "InvalidDistanceError",
    "InvalidDocIdError",
    "InvalidFingerprintError",
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
]
