"""Whole-store operations: verify, rebuild, compact, and all-pairs search over a store.

Built on the store's seams (:mod:`simstore.store.env.environment`, :mod:`simstore.store.format`,
:mod:`simstore.store.runs.tables`), never on SimStore itself: the public entry points
are the SimStore methods of the same names, which hand their handles in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import lmdb
import numpy as np

from .._files import TempDir, sweep
from .._validate import check_path
from ..exceptions import CorruptStoreError, StoreAccessError, StoreError
from ..search import hamming
from ..search.layout import Layout, evaluate, plan
from . import format as F, verify as _verify
from .check.pages import check_pinned
from .env import Env, translate
from .schema import Handles, table_engine, write_meta

# stats() advises a rebuild once the cost model puts a query on the store's layout at this
# many times a query on the layout planned for its size (docs/bench/journal.md, "A store
# outgrows its plan")
REPLAN_AT = 2.0
REPLAN_FROM = 100_000  # documents; smaller stores answer fast on any layout


def layout_fit(layout: Layout, count: int) -> tuple[float, float, bool]:
    """The planner's model of a query (µs) on layout with count documents stored, the same
    on the layout planned for count, and whether that gap is worth a rebuild."""
    n = max(count, 1)
    cost = evaluate(layout, layout.max_k, n).cost_us
    # planned for the power of two at or below n: the planner caches it (a plan takes
    # 5-30 ms), and a store of any size between uses the same one
    other = plan(layout.max_k, 1 << (n.bit_length() - 1)).layout
    replanned = evaluate(other, layout.max_k, n).cost_us
    return cost, replanned, count >= REPLAN_FROM and cost >= REPLAN_AT * replanned


Snapshot = Callable[[], tuple[list[Any], np.ndarray]]


def verify(txn: Any, h: Handles, *, timeout: float | None = None) -> list[str]:
    """Every broken invariant of the store, as sentences; [] when all hold.

    The check runs in a child process (:mod:`simstore.store.verify`): a damaged
    file that makes LMDB abort or loop is reported as a problem, never
    kills the caller. The child checks the newest committed snapshot; when
    ``txn`` is this process's open batch (its id is past that snapshot), the
    batch's own writes are then checked here, over pages the child found
    sound. ``timeout``: seconds before the check counts as hung (default:
    :func:`simstore.store.verify.default_timeout`, from the file's size).
    """
    report = _verify.isolated(h.path, timeout=timeout)
    if report.problems or report.txnid is None:
        return report.problems
    if int(txn.id()) > report.txnid:
        return _verify.records(txn, h)
    return []


def rebuild(env: Env, handles: Callable[[], Handles], k: int, expected_size: int | None) -> None:
    """Re-derive the permutation, band and ids tables from the docs records, atomically.

    ``handles()`` gives the store's current handles; they are renewed
    whenever the environment is reopened. A kill at any moment leaves the old
    layout or the new one, complete (LMDB commits atomically). The caller
    holds the store's exclusive lock and reopens the environment afterwards
    (the layout may have changed).
    """

    def attempt() -> None:
        h = handles()
        txn = env.begin(True)
        try:
            cols = h.codec.walk(h.docs_guard.cursor(txn, h.docs).iternext(), with_sketches=True)
            assert cols.encs is not None
            size = max(len(cols.fps), 1) if expected_size is None else expected_size
            layout = plan(k, size).layout
            old_next = h.tables.next_iid(txn)  # internal ids are never reused
            h.tables.drop(txn)
            write_meta(txn, h.meta, layout)
            sig = h.bands is not None
            fresh = table_engine(env.env, txn, layout, h.docs, h.codec, h.config, create=True)
            fresh.init(txn, old_next)
            fresh.fill(txn, cols.fps, cols.iids, bands=cols.bands if sig else None,
                       idh=F.id_hashes(cols.encs))
            txn.commit()
        except BaseException:
            try:
                txn.abort()
            except lmdb.Error:
                pass  # the error being raised says what went wrong; an abort adds nothing
            raise

    def grow() -> None:
        # Handles dropped or opened in the aborted transaction die with it.
        env.reload()
        env.grow()

    env.retrying(attempt, grow)


def compact(env: Env, dest: str | bytes | os.PathLike[str]) -> None:
    """Write a compacted copy (free pages dropped) of the store to a new directory.

    The snapshot copied is checked first, every page read as bytes (a damaged one is
    CorruptStoreError: LMDB's copy would abort on it). The copy is made in a sibling
    temporary directory (a random hidden name, locked while this process lives) and
    renamed into place, so ``dest`` is either absent or a complete store, whatever
    happens; copies left by killed compacts to the same ``dest`` are removed first.
    """
    dest = check_path(dest, "dest")
    target = os.path.abspath(dest)  # "dest/" names the directory dest
    if os.path.lexists(target):
        raise StoreError(f"compact destination {os.fspath(dest)!r} exists; give a new path")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise StoreAccessError(
            f"compact destination {os.fspath(dest)!r}: its parent {parent!r} is not an "
            "existing directory"
        )
    sweep(target)  # copies left by killed compacts to this destination
    try:
        tmp = TempDir(target)
    except OSError as exc:
        raise StoreAccessError(
            f"cannot write the compacted copy next to {os.fspath(dest)!r}: "
            f"{exc.strerror or exc}"
        ) from exc
    try:
        with env.lock:
            _copy_checked(env.live(), env.path, tmp.tmp)
        try:
            tmp.commit()
        except OSError as exc:
            raise StoreAccessError(
                f"cannot move the compacted copy to {os.fspath(dest)!r}: {exc.strerror or exc}"
            ) from exc
    except BaseException:
        tmp.discard()
        raise


def _copy_checked(lenv: Any, path: str, dest: str) -> None:
    """Copy (compacted) a snapshot whose every page checked out as bytes first: LMDB's
    copy walks every tree, and a damaged page would abort it."""
    try:
        pinned = check_pinned(lenv, path)
        if pinned is None:
            raise StoreError(f"store {path!r}: writers kept committing; compact could not "
                             "pin a snapshot to check (try again)")
        txn, damage = pinned
        try:
            if damage:
                raise CorruptStoreError(
                    f"store {path!r} looks damaged: {damage[0]}; restore data.mdb from a "
                    "copy (simstore-cli verify says more); nothing was copied")
            lenv.copy(dest, compact=True, txn=txn)
        finally:
            txn.abort()
    except lmdb.Error as exc:
        raise translate(exc, path) from exc


def pairs(snapshot: Snapshot, k: int) -> Iterator[tuple[Any, Any, int]]:
    """Every pair of stored docs within k, as (doc_id_a, doc_id_b, distance)."""
    ids, fps = snapshot()
    found = hamming.find_all(fps, k)
    for i, j, d in zip(found.i.tolist(), found.j.tolist(), found.distance.tolist(), strict=True):
        yield ids[i], ids[j], d


def clusters(snapshot: Snapshot, k: int) -> list[list[Any]]:
    """Groups (size >= 2) of docs connected by distance <= k, in insertion order."""
    ids, fps = snapshot()
    labels = hamming.clusters(fps, k)
    groups: dict[int, list[Any]] = {}
    for i, label in enumerate(labels.tolist()):
        groups.setdefault(label, []).append(ids[i])
    return [g for g in groups.values() if len(g) > 1]
