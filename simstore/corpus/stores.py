"""The store a corpus run decides through, opened and let go in one place.

:func:`open_store` is the one door for ``dedup_corpus``, ``simstore.hf.dedup`` and the
datatrove filter: the caller's :class:`SimStore` (left open), a path (created if new, the
kind the rule needs; closed after, and removed again if the run failed before storing
anything), or nothing: a private scratch store in TMPDIR, discarded after. A store that
cannot answer the rule (a threshold on a fingerprint-only store, ``exact`` on a store
without shingle sets, a k above the store's) is refused before any work.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .._files import TempDir, sweep
from ..exceptions import NotExactStoreError, SimstoreError, SimstoreValueError
from ..store import DEFAULT_K, SimStore
from ..text.fingerprinting import SIGNATURE_CONFIG

__all__ = ["OpenStore", "drop_if_new_and_empty", "open_store", "scratch_dir"]


@dataclass(frozen=True)
class OpenStore:
    """An opened run store: the handle, and whether it outlives the run (the caller's store
    or a path) rather than being a private scratch one."""

    store: SimStore
    persistent: bool


def scratch_dir() -> TempDir:
    """A new directory for private scratch files in TMPDIR, flock-held while the run lives:
    the scratch directories of runs killed with ``kill -9`` are removed first."""
    base = os.path.join(tempfile.gettempdir(), "simstore-dedup")
    sweep(base)
    return TempDir(base)


def drop_if_new_and_empty(path: str) -> None:
    """Remove the store a failed run created at path, if it holds nothing (no empty store
    directory stays behind a failure). The caller knows path did not exist before."""
    try:
        with SimStore(path, readonly=True) as s:
            empty = len(s) == 0
    except SimstoreError:
        return
    if empty:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def open_store(store: SimStore | str | os.PathLike[str] | None = None, *, k: int | None = None,
               threshold: float | None = None, exact: bool = False) -> Iterator[OpenStore]:
    """The run's store for the rule ``k`` (Hamming) or ``threshold`` (Jaccard; ``exact``: by
    the shingle sets, which the store must keep); see the module docstring."""
    if store is None:
        with _scratch_store(k, threshold) as handle:
            yield OpenStore(handle, False)
        return
    if isinstance(store, SimStore):
        _check(store, k, threshold, exact)
        yield OpenStore(store, True)
        return
    path = os.fspath(store)
    new = not os.path.exists(path)
    ok = False
    try:
        with _path_store(path, new, k, threshold, exact) as handle:
            _check(handle, k, threshold, exact)
            yield OpenStore(handle, True)
            ok = True
    finally:
        if new and not ok:
            drop_if_new_and_empty(path)


@contextmanager
def _scratch_store(k: int | None, threshold: float | None) -> Iterator[SimStore]:
    """A private store in a scratch directory (commits not durable), discarded after."""
    scratch = scratch_dir()
    try:
        cfg = SIGNATURE_CONFIG if threshold is not None else None
        kk = max(k, DEFAULT_K) if k is not None else None
        with SimStore(os.path.join(scratch.tmp, "s"), config=cfg, k=kk, durable=False) as handle:
            yield handle
    finally:
        scratch.discard()


def _path_store(path: str, new: bool, k: int | None, threshold: float | None,
                exact: bool) -> SimStore:
    """The store at ``path``; a new one is made for the rule (a similarity store for a
    threshold, shingle sets for ``exact``, at least the default k)."""
    cfg = SIGNATURE_CONFIG if threshold is not None else None
    return SimStore(path, config=cfg if new else None,
                    k=max(k, DEFAULT_K) if (new and k is not None) else None,
                    exact=True if (new and exact) else None)


def _check(handle: SimStore, k: int | None, threshold: float | None, exact: bool) -> None:
    """Refuse a store that cannot answer the rule."""
    if threshold is not None and not handle.config.has_signature:
        raise SimstoreValueError(
            f"store {handle.path!r} keeps fingerprints only: a threshold needs a similarity "
            "store (give k for Hamming, or a new store path)")
    if exact and not handle.exact:
        raise NotExactStoreError(
            f"store {handle.path!r} keeps no shingle sets, so it cannot decide by exact "
            "Jaccard: give a new store path (created with exact=True), a store created with "
            "SimStore(path, exact=True), or leave out --exact")
    if k is not None and k > handle.k:
        raise SimstoreValueError(
            f"store {handle.path!r} serves k <= {handle.k}; k = {k} would scan every stored "
            f"fingerprint per document: rebuild it first (simstore-cli rebuild PATH --k {k})")
