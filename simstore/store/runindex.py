"""The index records of the run tables (store format 7 on): one per level of each run
database, keyed by the level byte alone (so it sorts before the level's runs, keyed by
the level byte and their first key; see :mod:`simstore.store.runfile`), holding the
runs' first keys, uint64 little-endian, ascending. Opening a level reads that one
record; a run is fetched when a probe first lands in it (py-lmdb touches every page of
a value it returns, so reading every run at open read the whole tables).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import CorruptStoreError

_LE8 = np.dtype("<u8")


def append_index(txn: Any, db: Any, level: int, firsts: np.ndarray) -> None:
    """Add the first keys of runs just written (above the level's others) to its index."""
    lead = bytes((level,))
    old = txn.get(lead, db=db)
    txn.put(lead, (b"" if old is None else bytes(old)) + firsts.astype(_LE8).tobytes(), db=db)


def put_index(txn: Any, db: Any, level: int, firsts: np.ndarray) -> None:
    """Write a level's index record: exactly these first keys (none: an empty level)."""
    txn.put(bytes((level,)), firsts.astype(_LE8).tobytes(), db=db)


def read_index(txn: Any, db: Any, level: int) -> np.ndarray | None:
    """The first keys of one level's runs from its index record (a private copy, checked
    ascending), or None when the level has none (written before format 7)."""
    raw = txn.get(bytes((level,)), db=db)
    if raw is None:
        return None
    if len(raw) % 8:
        raise CorruptStoreError(f"the index record of table level {level} is malformed")
    firsts = np.frombuffer(raw, dtype=_LE8).astype(np.uint64)
    if len(firsts) > 1 and bool((firsts[1:] <= firsts[:-1]).any()):
        raise CorruptStoreError(f"the index record of table level {level} is out of order")
    return firsts


def run_keys(txn: Any, db: Any, level: int) -> list[bytes]:
    """The record keys of one level's runs, in key order (a walk of the keys)."""
    cur = txn.cursor(db)
    lead = bytes((level,))
    out: list[bytes] = []
    if cur.set_range(lead):
        for key in cur.iternext(values=False):
            if bytes(key[:1]) != lead:
                break
            if len(key) > 1:  # not the index record
                out.append(bytes(key))
    return out


def index_levels(txn: Any, db: Any) -> None:
    """Write the index record of every level a run database holds (bringing a store
    written before format 7 to it): its runs' first keys, from their record keys."""
    cur = txn.cursor(db)
    keys = [bytes(k) for k in cur.iternext(values=False)] if cur.first() else []
    levels: dict[int, list[bytes]] = {}
    for key in keys:
        if len(key) == 9:
            levels.setdefault(key[0], []).append(key[1:9])
    for level, firsts in levels.items():
        raw = np.array([int.from_bytes(f, "big") for f in firsts], dtype="<u8").tobytes()
        txn.put(bytes((level,)), raw, db=db)


def index_problem(txn: Any, db: Any, level: int, required: bool) -> str | None:
    """What is wrong with one level's index record against its runs' keys, if anything
    (required: the store's format says every level has one)."""
    try:
        firsts = read_index(txn, db, level)
    except CorruptStoreError as exc:
        return str(exc)
    want = [int.from_bytes(k[1:9], "big") for k in run_keys(txn, db, level)]
    if firsts is None:
        return f"table level {level} has no index record" if want and required else None
    if firsts.tolist() != want:
        return (f"the index record of table level {level} names {len(firsts)} runs, "
                f"not its {len(want)}")
    return None
