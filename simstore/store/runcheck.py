"""The run tables' checks for ``verify``: every level against the live docs.

A level holds exactly the (permuted key, iid) rows of the live docs below its
bound, plus the stale rows the state counts; the recent docs match the state's
hash; no table is left over from another layout. Reads copies of the runs
(with their order checked), never the in-place views of queries.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..exceptions import CorruptStoreError
from ..native import core as _core
from .runfile import BASE, L1, State, band_rows, mix_xor, read_level, table_name


class RunTables(Protocol):
    """What the checks read of :class:`simstore.store.runs.RunTables`."""

    dbs: list[Any]  # the permutation tables' run databases
    run_dbs: list[Any]  # those, then the band entries' (a similarity store)
    specs: list[tuple[bytes, bytes, bytes]]
    nbands: int

    def state(self, txn: Any) -> State: ...

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
    if not st.base_end <= st.l1_end <= st.next:
        problems.append(f"run state: level bounds {st.base_end}, {st.l1_end} out of order")
    recent = iids >= np.uint64(st.l1_end)
    if mix_xor(iids[recent], fps[recent]) != st.recent_xor:
        problems.append("run state: the recent docs' hash does not match the docs table")
    for t, db in enumerate(rt.dbs):
        problems.extend(_check_table(rt, txn, t, db, st, iids[~recent], fps[~recent]))
    extra = rt.extra(txn)
    if extra:
        problems.append(f"tables left over from another layout: {', '.join(extra)}")
    return problems


def _check_table(rt: RunTables, txn: Any, t: int, db: Any, st: State,
                 iids: np.ndarray, fps: np.ndarray) -> list[str]:
    want = _core.permute_blocks(fps, *rt.specs[t])
    return _check_level_rows(txn, table_name(t).decode(), db, st, want, iids, 1)


def check_bands(rt: RunTables, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
    """Problems of the band entries against the live docs (iids and band keys, iid order)."""
    try:
        st = rt.state(txn)
    except CorruptStoreError as exc:
        return [str(exc)]
    old = iids < np.uint64(st.l1_end)
    want, vals = band_rows(iids[old], keys32[old])
    return _check_level_rows(txn, "of band keys", rt.run_dbs[-1], st, want, vals,
                                  rt.nbands)


def _check_level_rows(txn: Any, name: str, db: Any, st: State, want: np.ndarray,
                      want_vals: np.ndarray, per_doc: int) -> list[str]:
    """A run database's levels hold exactly the wanted (key, iid) rows, plus
    per_doc stale rows per removed doc."""
    try:
        levels = [read_level(txn, db, lev) for lev in (BASE, L1)]
    except CorruptStoreError as exc:
        return [f"table {name}: {exc}"]
    problems = []
    bounds = ((0, st.base_end), (st.base_end, st.l1_end))
    for lev, ((_, vals), (lo, hi)) in enumerate(zip(levels, bounds, strict=True)):
        if len(vals) and (int(vals.min()) < lo or int(vals.max()) >= hi):
            problems.append(f"table {name} level {lev}: an internal id outside its level")
    keys = np.concatenate([lv[0] for lv in levels])
    vals = np.concatenate([lv[1].astype(np.uint64) for lv in levels])
    live = np.isin(vals, want_vals)
    stale = int((~live).sum())
    got = sorted(zip(keys[live].tolist(), vals[live].tolist(), strict=True))
    need = sorted(zip(want.tolist(), want_vals.tolist(), strict=True))
    if got != need:
        gs, ns = set(got), set(need)
        problems.append(
            f"table {name}: {len(ns - gs)} {'docs' if per_doc == 1 else 'band entries'} "
            "missing, "
            f"{len(gs - ns) + len(got) - len(gs)} wrong entries"
        )
    if stale != st.stale * per_doc:
        problems.append(
            f"table {name}: {stale} stale entries, the state says {st.stale * per_doc}"
        )
    return problems
