"""The paged index of the run tables: per level of each run database, the first keys of
its runs (uint64 little-endian, ascending). Opening a level reads its index; a run is
fetched when a probe first lands in it (py-lmdb touches every page of a value it
returns, so reading every run at open would read the whole tables).

A level's index is a head record keyed ``INDEX_LEAD`` + the level byte (empty value: the
level is indexed) and chunks of at most ``CHUNK_KEYS`` first keys keyed by the same two
bytes and a 4-byte big-endian chunk number, so each chunk sits inside a leaf page. A
merge appends to its target's last chunk and trims its sources' first ones, at a cost
bounded by its slice whatever the level's size, and no index ever needs a run of free
pages (a record of many pages rewritten every slice, one page larger each time, would
fit no page range the previous one freed: the file would grow).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...exceptions import CorruptStoreError
from ..check.ranges import TreeGuard

_LE8 = np.dtype("<u8")
INDEX_LEAD = 0xFF  # above every level id: the index records sort after every run
CHUNK_KEYS = 240  # first keys per chunk: 1,920 bytes, inside a 4 KB leaf page


def _head(level: int) -> bytes:
    return bytes((INDEX_LEAD, level))


def _chunk_key(level: int, number: int) -> bytes:
    return _head(level) + number.to_bytes(4, "big")


def _chunks(txn: Any, db: Any, guard: TreeGuard, level: int
            ) -> list[tuple[bytes, bytes]] | None:
    """(key, value) of one level's chunks in order, or None when it has no head record."""
    head = _head(level)
    cur = guard.cursor(txn, db, head, stop=_head(level + 1))
    if not cur.set_key(head):
        return None
    out = []
    if cur.next():
        for key, val in cur.iternext():
            if bytes(key[:2]) != head:
                break
            if len(key) != 6 or len(val) % 8:
                raise CorruptStoreError(f"an index record of table level {level} is malformed")
            out.append((bytes(key), bytes(val)))
    return out


def _last(txn: Any, db: Any, guard: TreeGuard, level: int) -> tuple[bytes, bytes] | None:
    """The last record of one level's index (its head when it has no chunk), or None when
    it has no head. Level ids stay below INDEX_LEAD - 1, so the next one's head exists
    as a key to seek."""
    after = _head(level + 1)
    cur = guard.cursor(txn, db, after, stop=after, back=True)
    moved = cur.prev() if cur.set_range(after) else cur.last()
    if not moved or bytes(cur.key()[:2]) != _head(level):
        return None
    return bytes(cur.key()), bytes(cur.value())


def _put_chunks(txn: Any, db: Any, level: int, firsts: np.ndarray, number: int) -> None:
    """Write firsts as chunks numbered from ``number`` on."""
    raw = firsts.astype(_LE8).tobytes()
    step = 8 * CHUNK_KEYS
    for at in range(0, len(raw), step):
        txn.put(_chunk_key(level, number), raw[at:at + step], db=db)
        number += 1


def drop_index(txn: Any, db: Any, guard: TreeGuard, level: int) -> None:
    """Delete one level's index: its head and chunks."""
    head = _head(level)
    cur = guard.cursor(txn, db, head, stop=_head(level + 1))
    if not cur.set_range(head):
        return
    while bytes(cur.key()[:2]) == head:
        if not cur.delete():
            break


def append_index(txn: Any, db: Any, guard: TreeGuard, level: int, firsts: np.ndarray
                 ) -> None:
    """Add the first keys of runs just written (above the level's others) to its index:
    the last chunk filled up, then new ones (a level without an index gets one)."""
    last = _last(txn, db, guard, level)
    if last is None:
        put_index(txn, db, guard, level, firsts)
        return
    key, val = last
    if len(key) == 2:  # the head alone: no chunk yet
        _put_chunks(txn, db, level, firsts, 0)
        return
    room = CHUNK_KEYS - len(val) // 8
    if room > 0 and len(firsts):
        txn.put(key, val + firsts[:room].astype(_LE8).tobytes(), db=db)
    _put_chunks(txn, db, level, firsts[room:], int.from_bytes(key[2:], "big") + 1)


def put_index(txn: Any, db: Any, guard: TreeGuard, level: int, firsts: np.ndarray) -> None:
    """Write a level's index: exactly these first keys (none: an empty level)."""
    drop_index(txn, db, guard, level)
    txn.put(_head(level), b"", db=db)
    _put_chunks(txn, db, level, firsts, 0)


def trim_index(txn: Any, db: Any, guard: TreeGuard, level: int, cut: int) -> None:
    """Drop the first ``cut`` keys of a level's index (a merge deleted those runs): the
    chunks they fill are deleted, the one they end in rewritten; later ones stay."""
    head = _head(level)
    # the head, a first chunk trimmed before, the full ones and the one cut ends in
    cur = guard.cursor(txn, db, head, cut // CHUNK_KEYS + 3, stop=_head(level + 1))
    if not cur.set_key(head):
        raise CorruptStoreError(f"table level {level} has fewer index keys than runs")
    gone: list[bytes] = []
    rest: tuple[bytes, bytes] | None = None
    while cut > 0 and cur.next() and bytes(cur.key()[:2]) == head:
        key, val = bytes(cur.key()), bytes(cur.value())
        if cut < len(val) // 8:
            rest = (key, val[8 * cut:])
            cut = 0
        else:
            gone.append(key)
            cut -= len(val) // 8
    if cut > 0:
        raise CorruptStoreError(f"table level {level} has fewer index keys than runs")
    for key in gone:
        txn.delete(key, db=db)
    if rest is not None:
        txn.put(*rest, db=db)


def read_index(txn: Any, db: Any, guard: TreeGuard, level: int) -> np.ndarray | None:
    """The first keys of one level's runs from its index (a private copy, checked
    ascending), or None when the level has no index head."""
    chunks = _chunks(txn, db, guard, level)
    if chunks is None:
        return None
    raw = b"".join(val for _, val in chunks)
    firsts = np.frombuffer(raw, dtype=_LE8).astype(np.uint64)
    if len(firsts) > 1 and bool((firsts[1:] <= firsts[:-1]).any()):
        raise CorruptStoreError(f"the index record of table level {level} is out of order")
    return firsts


def run_keys(txn: Any, db: Any, guard: TreeGuard, level: int) -> list[bytes]:
    """The record keys of one level's runs, in key order (a walk of the keys)."""
    lead = bytes((level,))
    cur = guard.cursor(txn, db, lead, stop=bytes((level + 1,)))
    out: list[bytes] = []
    if cur.set_range(lead):
        for key in cur.iternext(values=False):
            if bytes(key[:1]) != lead:
                break
            out.append(bytes(key))
    return out


def index_problem(txn: Any, db: Any, guard: TreeGuard, level: int) -> str | None:
    """What is wrong with one level's index against its runs' keys, if anything."""
    try:
        firsts = read_index(txn, db, guard, level)
    except CorruptStoreError as exc:
        return str(exc)
    want = [int.from_bytes(k[1:9], "big") for k in run_keys(txn, db, guard, level)]
    if firsts is None:
        return f"table level {level} has no index record" if want else None
    if firsts.tolist() != want:
        return (f"the index record of table level {level} names {len(firsts)} runs, "
                f"not its {len(want)}")
    return None
