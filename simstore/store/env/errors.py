"""LMDB errors as simstore errors: by exception class, each with a hint of what to do."""

from __future__ import annotations

import lmdb

from ...exceptions import (
    CorruptStoreError,
    ReadOnlyError,
    StoreAccessError,
    StoreError,
    StoreInUseError,
)


def translate(exc: lmdb.Error, path: str) -> StoreError:
    """A simstore error, with a hint, for a raw LMDB error (by class, then by text)."""
    text = str(exc)
    if "already open in this process" in text:
        return StoreInUseError(
            f"store {path!r} is already open in this process; LMDB allows one handle "
            "per process, so reuse the open SimStore (or close it first)"
        )
    if "Read-only file system" in text or "Permission denied" in text:
        return StoreAccessError(
            f"store {path!r} cannot be written here ({text}); give a path this process may "
            "write, or open the store with readonly=True"
        )
    if isinstance(exc, lmdb.ReadonlyError):
        return ReadOnlyError(f"store {path!r} is read-only here: {text}")
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
                        lmdb.VersionMismatchError, lmdb.BadDbiError)):
        return CorruptStoreError(
            f"store {path!r} looks damaged or was written by an incompatible LMDB: {text}"
        )
    if isinstance(exc, lmdb.ReadersFullError):
        return StoreError(
            f"store {path!r}: too many concurrent readers ({text}): each process with the "
            "store open keeps a slot of LMDB's reader table; open it with a larger "
            "max_readers in every process (the first to open it while no process has it "
            "open sets the size; default 512), or close idle handles and end stale processes"
        )
    if isinstance(exc, lmdb.MapFullError):
        return StoreError(f"store {path!r}: the map is full ({text}); it could not be grown")
    if "No space left" in text or "Input/output error" in text:
        return StoreError(
            f"store {path!r}: the write failed ({text}); the disk is full or failing: free "
            "space and retry (committed writes are safe, the failed one was not applied)"
        )
    if isinstance(exc, (lmdb.DiskError, lmdb.TlsFullError)):
        return StoreError(f"store {path!r}: LMDB failed ({text}); check free disk space")
    return StoreError(f"store {path!r}: LMDB error: {text}")
