"""The exception tree: everything simstore raises derives from SimstoreError.

Bad input also subclasses the matching builtin (ValueError / TypeError), so
``except ValueError`` keeps working for callers that do not know simstore.
"""

from __future__ import annotations


class SimstoreError(Exception):
    """Base of every simstore error; never raised directly."""


class SimstoreTypeError(SimstoreError, TypeError):
    """An argument has the wrong type; the message names it."""


class SimstoreValueError(SimstoreError, ValueError):
    """An argument has an allowed type but a value outside what is allowed."""


class InvalidFingerprintError(SimstoreValueError):
    """A fingerprint is not an integer in 0 .. 2**64-1 (or not a uint64 array)."""


class InvalidConfigError(SimstoreValueError):
    """A fingerprinting option is not one of the allowed values."""


class InvalidSignatureError(SimstoreValueError):
    """A similarity signature or sketch array does not fit its config (size, bands, dtype),
    or signatures of different configs were mixed."""


class InvalidDocIdError(SimstoreValueError):
    """A document id is empty, too long or of a type a store cannot keep."""


class InvalidDistanceError(SimstoreValueError):
    """A Hamming radius k is not an integer in the allowed range."""


class NativeModuleError(SimstoreError, ImportError):
    """The compiled C core is missing or was built for another interpreter."""


class StoreError(SimstoreError):
    """A persistent store cannot do what was asked; the message says why and what to do."""


class NotAStoreError(StoreError):
    """The path is a file, or a non-empty directory that holds no simstore store."""


class FormatVersionError(StoreError):
    """The store was written in an on-disk format this simstore does not read."""


class LayoutMismatchError(StoreError, ValueError):
    """A reopened store was given a k (table layout) other than the one it was built with."""


class ConfigMismatchError(StoreError, ValueError):
    """A reopened store was given a fingerprint config other than the one it records."""


class ReadOnlyError(StoreError):
    """A write was attempted on a store opened with readonly=True."""


class StoreClosedError(StoreError):
    """The store handle was closed; open a new SimStore to keep using the store."""


class StoreInUseError(StoreError):
    """The store is in use in a way that forbids what was asked: an operation that needs it
    alone (rebuild, upgrade) while another handle has it open, a writable open while this
    process has it open read-only, or a handle that came through fork() mid-call."""


class StoreAccessError(StoreError):
    """The store's directory or files cannot be created, read or written here (permissions,
    read-only file system); the message says which path and what to do."""


class CorruptStoreError(StoreError):
    """The store's files or records are damaged or were not written by simstore."""


class NotSimilarityStoreError(StoreError):
    """A similarity call on a store that keeps fingerprints only (index it again with
    signatures)."""


class NotExactStoreError(StoreError):
    """An exact-Jaccard call on a store that keeps no shingle sets (one created without
    ``exact=True``): use a new store created with it, or the sketch estimate."""


class OutputPathError(SimstoreValueError):
    """An output path cannot be written (a directory, a missing or unwritable folder, an
    input); raised before any input is read."""


class VerifyTimeoutError(StoreError, TimeoutError):
    """verify() ran past its time limit and was stopped; the store was not found damaged
    (give a longer timeout)."""
