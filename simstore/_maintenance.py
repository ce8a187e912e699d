"""Whole-store operations: verify, rebuild, compact, and all-pairs search over a store.

Kept apart from the hot read/write paths of :mod:`simstore.store`; the
public entry points are the SimStore methods of the same names.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import lmdb
import numpy as np

from . import _core
from ._validate import check_k
from .exceptions import InvalidConfigError, StoreError
from .layout import PLAN_MAX_K, plan

if TYPE_CHECKING:
    from .store import DocId, SimStore

_MAX_LISTED = 20


def _read_docs(store: SimStore, txn: Any, problems: list[str] | None = None) -> tuple[
    list[bytes], np.ndarray, np.ndarray, list[bytes]
]:
    """(raw internal ids, ids as uint64, fingerprints, encoded doc ids) of every doc."""
    from .store import RECORD_VERSION

    keys: list[bytes] = []
    fpb: list[bytes] = []
    encs: list[bytes] = []
    for key, val in txn.cursor(store._docs).iternext():
        if len(key) != 8 or len(val) < 10 or val[0] != RECORD_VERSION:
            if problems is not None:
                problems.append(
                    f"docs record {bytes(key)!r} is malformed (key {len(key)} bytes, "
                    f"value {len(val)} bytes, format byte {val[:1]!r})"
                )
            continue
        keys.append(bytes(key))
        fpb.append(val[1:9])
        encs.append(bytes(val[9:]))
    iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
    fps = np.frombuffer(b"".join(fpb), dtype=">u8").astype(np.uint64)
    return keys, iids, fps, encs


def verify(store: SimStore) -> list[str]:
    """Every broken invariant of the store, as sentences; [] when all hold."""
    from .store import _decode_id, _id_key

    problems: list[str] = []
    with store._reading() as txn:
        keys, iids, fps, encs = _read_docs(store, txn, problems)
        n = len(keys)
        bad_ids = 0
        for key, enc in zip(keys, encs, strict=True):
            got = txn.get(_id_key(enc), db=store._ids)
            if got is None or bytes(got) != key:
                bad_ids += 1
                if bad_ids <= _MAX_LISTED:
                    problems.append(
                        f"doc {_safe_id(_decode_id, enc)!r}: the ids table "
                        + ("lacks it" if got is None else "points to another record")
                    )
        n_ids = int(txn.stat(store._ids)["entries"])
        if n_ids != n:
            problems.append(f"the ids table has {n_ids} entries for {n} docs (orphans or gaps)")
        for t, db in enumerate(store._tables):
            problems.extend(_verify_table(store, txn, t, db, iids, fps))
        extra = _extra_tables(store, txn)
        if extra:
            problems.append(f"tables left over from another layout: {', '.join(extra)}")
    if bad_ids > _MAX_LISTED:
        problems.append(f"... and {bad_ids - _MAX_LISTED} more docs with bad ids entries")
    return problems


def _safe_id(decode: Any, enc: bytes) -> Any:
    try:
        return decode(enc)
    except Exception:  # noqa: BLE001 - a damaged id must not stop the report
        return enc


def _verify_table(
    store: SimStore, txn: Any, t: int, db: Any, iids: np.ndarray, fps: np.ndarray
) -> list[str]:
    """Table t holds exactly (permuted fp, internal id) of every doc, nothing else."""
    name = f"t{t:02d}"
    src, width, dst = store._layout.shifts(t)
    perm = _core.permute_blocks(fps, src, width, dst)
    order = np.lexsort((iids, perm))
    want_k, want_v = perm[order], iids[order]
    kb: list[bytes] = []
    vb: list[bytes] = []
    for key, val in txn.cursor(db).iternext():
        if len(key) != 8 or len(val) != 8:
            return [f"table {name} holds an entry that is not 8+8 bytes"]
        kb.append(key)
        vb.append(val)
    got_k = np.frombuffer(b"".join(kb), dtype=">u8").astype(np.uint64)
    got_v = np.frombuffer(b"".join(vb), dtype=">u8").astype(np.uint64)
    if len(got_k) == len(want_k) and np.array_equal(got_k, want_k) and np.array_equal(
        got_v, want_v
    ):
        return []
    want = set(zip(want_k.tolist(), want_v.tolist(), strict=True))
    got = set(zip(got_k.tolist(), got_v.tolist(), strict=True))
    missing, orphans = len(want - got), len(got - want)
    return [
        f"table {name}: {len(got_k)} entries for {len(want_k)} docs; "
        f"{missing} docs missing, {orphans} orphan entries"
    ]


def _extra_tables(store: SimStore, txn: Any) -> list[str]:
    names = []
    for key in txn.cursor().iternext(keys=True, values=False):
        k = bytes(key)
        if len(k) == 3 and k[:1] == b"t" and k[1:].isdigit() and int(k[1:]) >= len(store._tables):
            names.append(k.decode())
    return names


def rebuild(
    store: SimStore, k: int | None = None, expected_size: int | None = None
) -> dict[str, Any]:
    """Re-derive every permutation table and the ids table from docs, atomically.

    A kill at any moment leaves the old layout or the new one, complete
    (LMDB commits atomically). Refused (StoreInUseError) while any other
    handle has the store open: their cached layout would go stale.
    """
    from .store import _id_key, _json

    store._check_writable()
    new_k = store.k if k is None else check_k(k, "k", PLAN_MAX_K)
    if expected_size is not None and (
        isinstance(expected_size, bool) or not isinstance(expected_size, int) or expected_size < 1
    ):
        raise InvalidConfigError(f"'expected_size' must be an int >= 1 (got {expected_size!r})")
    with store._lock, store._exclusive("rebuild"):
        env = store._live_env()
        for _ in range(40):
            txn = store._begin(True)
            try:
                keys, iids, fps, encs = _read_docs(store, txn)
                layout = plan(new_k, expected_size or max(len(fps), 1)).layout
                for db in store._tables:
                    txn.drop(db, delete=True)
                # the ids table is derived from docs too: re-derive it
                txn.drop(store._ids, delete=False)
                id_items = sorted(zip(map(_id_key, encs), keys, strict=True))
                txn.cursor(store._ids).putmulti(id_items, append=True)
                del id_items
                txn.put(b"layout", _json(layout.to_dict()), db=store._meta)
                store._bind(env, txn, layout, store._config, create=True)
                for t, db in enumerate(store._tables):
                    store._fill_table(txn, t, db, fps, iids)
                txn.commit()
                break
            except lmdb.MapFullError:
                _abort_and_reload(store, txn)
                store._grow()
            except BaseException:
                _abort_and_reload(store, txn)
                raise
        else:
            raise StoreError(f"store {store.path!r}: could not grow the map enough to rebuild")
    return store.stats()


def _abort_and_reload(store: SimStore, txn: Any) -> None:
    """Abort a failed rebuild and re-read layout and handles from disk."""
    try:
        txn.abort()
    except lmdb.Error:
        pass
    store._reload()


def compact(store: SimStore, dest: str | os.PathLike[str]) -> None:
    """Write a compacted copy (free pages dropped) of the store to a new directory.

    The copy is made in a sibling temporary directory and renamed into place,
    so ``dest`` is either absent or a complete store, whatever happens.
    """
    target = os.fspath(dest)
    if os.path.exists(target):
        raise StoreError(f"compact destination {target!r} exists; give a new path")
    tmp = f"{target}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    try:
        with store._lock:
            env = store._live_env()
            try:
                env.copy(tmp, compact=True)
            except lmdb.Error as exc:
                from .store import _translate

                raise _translate(exc, store.path) from exc
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pairs(store: SimStore, k: int | None = None) -> Iterator[tuple[DocId, DocId, int]]:
    """Every pair of stored docs within k, as (doc_id_a, doc_id_b, distance)."""
    from . import batch

    kk = store.k if k is None else check_k(k)
    ids, fps = store.snapshot()
    found = batch.find_all(fps, kk)
    for i, j, d in zip(found.i.tolist(), found.j.tolist(), found.distance.tolist(), strict=True):
        yield ids[i], ids[j], d


def clusters(store: SimStore, k: int | None = None) -> list[list[DocId]]:
    """Groups (size >= 2) of docs connected by distance <= k, in insertion order."""
    from . import batch

    kk = store.k if k is None else check_k(k)
    ids, fps = store.snapshot()
    labels = batch.clusters(fps, kk)
    groups: dict[int, list[DocId]] = {}
    for i, label in enumerate(labels.tolist()):
        groups.setdefault(label, []).append(ids[i])
    return [g for g in groups.values() if len(g) > 1]
