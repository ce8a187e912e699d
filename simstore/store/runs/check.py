"""The run tables' checks for ``verify``: every level against the live docs.

Each level holds exactly the (permuted key, iid) rows of the live docs in its range of
internal ids, plus stale rows of removed docs, each with a tombstone, at most as many
as the state counts (a merge also leaves out the rows of docs removed while it runs,
where it has yet to pass); each level's index names exactly its runs; the recent docs
match the state's hash; no table is left over from another layout. Reads copies of the
runs (with their order checked), never the in-place views of queries.

While a merge is under way its target level covers its sources' ids: it holds the
rows below the job's cursor of that run database, the sources those from it on
(their rows below it, in a run not yet passed in full, are copies and are not
counted), and the stale rows it has left out are no longer in any level.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from ...exceptions import CorruptStoreError
from ...native import core as _core
from ..check.ranges import TreeGuard
from .format import (
    CLEAN_KEY,
    CURSOR_KEY,
    EMPTY,
    Job,
    State,
    band_rows,
    mix_xor,
    read_level,
    table_name,
    unpack_cursors,
)
from .index import index_problem
from .removed import read_job, tombstones


class _Merging(NamedTuple):
    """A merge under way as the checks see it."""

    job: Job
    cursors: list[int | None]  # per run database
    lo: int  # its sources' first id


def _merging(rt: RunTables, txn: Any, st: State) -> _Merging | None:
    """The merge under way whose target is a level of the state, if any."""
    job = read_job(txn, rt.meta_db(), rt.meta_guard())
    if job is None or txn.get(CLEAN_KEY, db=rt.meta_db()) is not None:
        return None
    if job.target not in st.gens():
        return None
    cursors = unpack_cursors(txn.get(CURSOR_KEY, db=rt.meta_db()), len(rt.run_dbs))
    lo = next(lo for lv, lo, _ in st.bounds() if lv.id == job.target)
    return _Merging(job, cursors, lo)


class RunTables(Protocol):
    """What the checks read of :class:`simstore.store.runs.tables.RunTables`."""

    dbs: list[Any]  # the permutation tables' run databases
    run_dbs: list[Any]  # those, then the band entries' (a similarity store), the ids'
    run_guards: list[TreeGuard]  # the pages a cursor of each steps on
    specs: list[tuple[bytes, bytes, bytes]]
    nbands: int
    bands_at: int | None  # the band entries' place in run_dbs
    ids_at: int  # the ids'

    def state(self, txn: Any) -> State: ...

    def meta_db(self) -> Any: ...

    def meta_guard(self) -> TreeGuard: ...

    def extra(self, txn: Any) -> list[str]: ...


def check_tables(rt: RunTables, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
    """Problems of the run tables against the live docs (iids, fps in iid order)."""
    try:
        st = rt.state(txn)
    except CorruptStoreError as exc:
        return [str(exc)]
    problems = []
    if len(iids) and int(iids[-1]) >= st.next:
        problems.append(f"run state: next internal id {st.next} is not past the last doc")
    bounds = [(lo, hi) for _, lo, hi in st.bounds()]
    if any(lo > hi for lo, hi in bounds) or st.flushed > st.next or (
        bounds and bounds[-1][1] != st.flushed
    ):
        problems.append(f"run state: level bounds {bounds} (flushed {st.flushed}) out of order")
    if len({lv.id for lv in st.levels}) != len(st.levels):
        problems.append("run state: two levels share an id")
    recent = iids >= np.uint64(st.flushed)
    if mix_xor(iids[recent], fps[recent]) != st.recent_xor:
        problems.append("run state: the recent docs' hash does not match the docs table")
    gone = tombstones(txn, rt.meta_db(), rt.meta_guard(), 0, 1 << 64)
    pending = _pending(txn, rt.meta_db(), rt.meta_guard())
    if len(gone) != st.stale + pending:
        problems.append(f"run state: {st.stale} stale docs and {pending} tombstones left "
                        f"to delete, but {len(gone)} tombstones")
    merging = _merging(rt, txn, st)
    for t, db in enumerate(rt.dbs):
        problems.extend(_check_table(rt, txn, t, db, st, iids[~recent], fps[~recent], gone,
                                     merging))
    extra = rt.extra(txn)
    if extra:
        problems.append(f"tables left over from another layout: {', '.join(extra)}")
    return problems


def _pending(txn: Any, meta: Any, guard: TreeGuard) -> int:
    """Tombstones of a merge already swapped in, not yet deleted (they name no entry)."""
    cleaned, job = txn.get(CLEAN_KEY, db=meta), read_job(txn, meta, guard)
    if cleaned is None or job is None:
        return 0
    return len(job.gone) - int.from_bytes(cleaned, "little")


def _check_table(rt: RunTables, txn: Any, t: int, db: Any, st: State,
                 iids: np.ndarray, fps: np.ndarray, gone: np.ndarray,
                 merging: _Merging | None) -> list[str]:
    want = _core.permute_blocks(fps, *rt.specs[t])
    name = table_name(t).decode()
    guard = rt.run_guards[t]
    return _check_index(txn, name, db, guard, st) + _check_level_rows(
        txn, name, db, guard, st, want, iids, 1, gone, merging, t)


def _check_index(txn: Any, name: str, db: Any, guard: TreeGuard, st: State) -> list[str]:
    """Each level's index names exactly its runs."""
    found = (index_problem(txn, db, guard, lv.id) for lv in st.levels)
    return [f"table {name}: {p}" for p in found if p]


def check_bands(rt: RunTables, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
    """Problems of the band entries against the live docs (iids and band keys, iid order)."""
    try:
        st = rt.state(txn)
    except CorruptStoreError as exc:
        return [str(exc)]
    old = iids < np.uint64(st.flushed)
    want, vals = band_rows(iids[old], keys32[old])
    assert rt.bands_at is not None
    return _check_db(rt, txn, rt.bands_at, "of band keys", st, want, vals, rt.nbands)


def check_ids(rt: RunTables, txn: Any, iids: np.ndarray, idh: np.ndarray) -> list[str]:
    """Problems of the ids' entries against the live docs (iids and id hashes, iid order)."""
    try:
        st = rt.state(txn)
    except CorruptStoreError as exc:
        return [str(exc)]
    old = iids < np.uint64(st.flushed)
    return _check_db(rt, txn, rt.ids_at, "of ids", st, idh[old], iids[old], 1)


def _check_db(rt: RunTables, txn: Any, i: int, name: str, st: State, want: np.ndarray,
              vals: np.ndarray, per_doc: int) -> list[str]:
    """Run database i (not a table) holds the wanted rows, its index its runs."""
    gone = tombstones(txn, rt.meta_db(), rt.meta_guard(), 0, 1 << 64)
    db, guard = rt.run_dbs[i], rt.run_guards[i]
    return _check_index(txn, name, db, guard, st) + _check_level_rows(
        txn, name, db, guard, st, want, vals, per_doc, gone, _merging(rt, txn, st), i)


def _check_level_rows(txn: Any, name: str, db: Any, guard: TreeGuard, st: State,
                      want: np.ndarray, want_vals: np.ndarray, per_doc: int, gone: np.ndarray,
                      merging: _Merging | None, i: int) -> list[str]:
    """A run database's levels hold exactly the wanted (key, iid) rows, plus at most
    per_doc stale rows per removed doc the state counts, each one's iid a tombstone
    (merges leave out some: see the module's docstring); i: the run database's place
    (its merge cursor)."""
    try:
        levels = [read_level(txn, db, guard, lv.id) for lv in st.levels]
    except CorruptStoreError as exc:
        return [f"table {name}: {exc}"]
    problems = []
    sources = set() if merging is None else {lv.id for lv in merging.job.sources}
    for j, ((lv, lo, hi), (keys, vals)) in enumerate(zip(st.bounds(), levels, strict=True)):
        if merging is not None and lv.id == merging.job.target:
            lo, hi = merging.lo, merging.job.sources[-1].hi
            c = merging.cursors[i]
            if c is not None and len(keys) and int(keys[-1]) >= c:
                problems.append(f"table {name}: the merge target holds keys from its cursor on")
        elif lv.id in sources:
            c = merging.cursors[i] if merging is not None else None
            keep = np.zeros(len(keys), bool) if c is None else keys >= np.uint64(c)
            levels[j] = keys, vals = keys[keep], vals[keep]
        if len(vals) and (int(vals.min()) < lo or int(vals.max()) >= hi):
            problems.append(f"table {name} level {lv.id}: an internal id outside its level")
    keys = np.concatenate([EMPTY] + [lv[0] for lv in levels])
    vals = np.concatenate([EMPTY] + [lv[1].astype(np.uint64) for lv in levels])
    live = np.isin(vals, want_vals)
    stale = int((~live).sum())
    if not np.isin(vals[~live], gone).all():
        problems.append(f"table {name}: a stale entry without a tombstone")
    got = sorted(zip(keys[live].tolist(), vals[live].tolist(), strict=True))
    need = sorted(zip(want.tolist(), want_vals.tolist(), strict=True))
    if got != need:
        gs, ns = set(got), set(need)
        problems.append(
            f"table {name}: {len(ns - gs)} {'docs' if per_doc == 1 else 'band entries'} "
            "missing, "
            f"{len(gs - ns) + len(got) - len(gs)} wrong entries"
        )
    # at most as many as the state counts: a merge also leaves out the entries of docs
    # removed while it runs where it has yet to pass, their tombstones (counted) kept
    if stale > st.stale * per_doc:
        problems.append(
            f"table {name}: {stale} stale entries, the state says {st.stale * per_doc}"
        )
    return problems
