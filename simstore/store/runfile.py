"""The records of the run tables (store formats 3-4): the state record and the runs.

Database ``runs`` holds one record, ``state``: the levels' bounds by internal
id, their random generations, the count of stale entries and an XOR hash of
the recent docs (see :class:`State`). Each run database (``r00``, ``r01``, ...
for the permutation tables, ``rbands`` for the band keys of a similarity
store) holds a level as runs: records keyed by the level byte and the run's
first key (8 bytes big-endian) whose value is a header (entries, id width,
key width, directory bits, directory shift), the keys (uint64 little-endian,
or their low halves when every key of the run shares the record key's high
half), the internal ids (4 or 8 bytes little-endian), then, from format 4,
the run's directory (2**bits + 1 uint32 little-endian, see
:func:`simstore.native.probe.run_dir`; bits 0: none, as in format 3).
:mod:`simstore.store.runs` keeps the levels up to date and probes them where
LMDB maps them.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..exceptions import CorruptStoreError
from ..native.probe import MAX_RUN_DIR_BITS, Run, run_dir
from .rows import band_keys

STATE_DB = b"runs"
STATE_KEY = b"state"
BANDS_DB = b"rbands"
BASE, L1 = 0, 1
EMPTY = np.empty(0, dtype=np.uint64)
_STATE = struct.Struct("<7Q")
# entries, iid width (4 or 8), key width (0: 8-byte keys; 4: their low halves, the high
# half being the record key's), directory bits (0: none) and shift
_RUN_HEAD = struct.Struct("<IBBBB")
DIR_MIN_ENTRIES = 256  # smaller runs go without a directory (a short search is as fast)


def dir_bits(n: int) -> int:
    """Directory bits for a run of n keys: 4 to 8 keys a bucket (one cache line)."""
    return max(1, min(MAX_RUN_DIR_BITS, n.bit_length() - 3))


def table_name(t: int) -> bytes:
    """The LMDB database name of run table t."""
    return b"r%02d" % t


def band_rows(iids: np.ndarray, keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The band entries of docs, sorted: keys band << 32 | key32 (uint64), their iids."""
    nb = keys32.shape[1]
    flat = band_keys(keys32).reshape(-1)
    vals = np.repeat(np.asarray(iids, dtype=np.uint64), nb)
    order = np.argsort(flat, kind="stable")
    return flat[order], vals[order]


def merged(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted (keys, vals) runs as one (a linear merge: a stable sort of two runs)."""
    keys = np.concatenate((a[0], b[0]))
    vals = np.concatenate((a[1].astype(np.uint64), b[1].astype(np.uint64)))
    order = np.argsort(keys, kind="stable")
    return keys[order], vals[order]


@dataclass(frozen=True)
class State:
    """The levels' bounds and generations (record ``state`` of database ``runs``)."""

    next: int = 0  # the next internal id (iids are never reused)
    base_end: int = 0
    l1_end: int = 0
    base_gen: int = 0
    l1_gen: int = 0
    stale: int = 0  # entries per table whose doc was removed
    recent_xor: int = 0  # XOR of mix(iid, fp) over the live recent docs

    def pack(self) -> bytes:
        return _STATE.pack(self.next, self.base_end, self.l1_end, self.base_gen,
                           self.l1_gen, self.stale, self.recent_xor)

    def level_gen(self, level: int) -> int:
        """The generation of level BASE or L1."""
        return self.base_gen if level == BASE else self.l1_gen

    @classmethod
    def unpack(cls, raw: Any) -> State:
        if raw is None or len(raw) != _STATE.size:
            raise CorruptStoreError("the run tables' state record is missing or malformed")
        return cls(*_STATE.unpack(raw))


_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLD = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def mix(iid: int, fp: int) -> int:
    """A 64-bit hash of (iid, fp) (splitmix64 finalizer)."""
    x = (fp ^ (iid * _GOLD)) & _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def mix_xor(iids: np.ndarray, fps: np.ndarray) -> int:
    """XOR of mix over many (iid, fp) pairs."""
    if not len(iids):
        return 0
    with np.errstate(over="ignore"):
        x = fps ^ (iids * np.uint64(_GOLD))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
        x = x ^ (x >> np.uint64(31))
    return int(np.bitwise_xor.reduce(x))


def new_gen() -> int:
    """A random generation number for a level just written."""
    return int.from_bytes(os.urandom(8), "little") | 1


# --- the runs ---------------------------------------------------------------------


def _run_bounds(keys: np.ndarray, run_entries: int) -> list[int]:
    """Start offsets of runs of about run_entries keys that never split a key."""
    starts = [0]
    n = len(keys)
    at = run_entries
    while at < n:
        cut = int(np.searchsorted(keys, keys[at], side="left"))
        if cut <= starts[-1]:
            cut = int(np.searchsorted(keys, keys[at], side="right"))
        if cut >= n:
            break
        starts.append(cut)
        at = cut + run_entries
    return starts


def write_level(txn: Any, db: Any, level: int, keys: np.ndarray, vals: np.ndarray, *,
                run_entries: int, halves: bool = False, dirs: bool = False,
                tail: int = 0) -> None:
    """Replace one level of a run table by sorted (keys, vals), in runs of ~run_entries.

    halves: runs also end where the keys' high 32 bits change, and store only
    the low halves (band entries: the high half is the band). dirs: runs of
    DIR_MIN_ENTRIES keys or more carry a directory (never with halves) whose
    buckets are never finer than the table's tail bits (a probe's range).
    """
    drop_level(txn, db, level)
    n = len(keys)
    if not n:
        return
    wide = bool(vals.max() >= 1 << 32)
    vtype = "<u8" if wide else "<u4"
    starts = _run_bounds(keys, run_entries)
    if halves:
        high = np.flatnonzero(np.diff(keys >> np.uint64(32))) + 1
        starts = sorted(set(starts) | set(high.tolist()))
    lead = bytes((level,))
    for i, a in enumerate(starts):
        b = starts[i + 1] if i + 1 < len(starts) else n
        dbits, shift, dtail = 0, 0, b""
        if dirs and not halves and b - a >= DIR_MIN_ENTRIES:
            dbits = dir_bits(b - a)
            d, shift = run_dir(np.ascontiguousarray(keys[a:b], dtype=np.uint64), dbits, tail)
            dbits = len(d).bit_length() - 1
            dtail = d.astype("<u4").tobytes()
        head = _RUN_HEAD.pack(b - a, 8 if wide else 4, 4 if halves else 0, dbits, shift)
        ktype = "<u4" if halves else "<u8"
        body = keys[a:b].astype(ktype).tobytes() + vals[a:b].astype(vtype).tobytes() + dtail
        txn.put(lead + int(keys[a]).to_bytes(8, "big"), head + body, db=db)


def drop_level(txn: Any, db: Any, level: int) -> None:
    """Delete every run of one level."""
    cur = txn.cursor(db)
    lead = bytes((level,))
    if not cur.set_range(lead):
        return
    while bytes(cur.key()[:1]) == lead:
        if not cur.delete():
            break


def read_runs(txn: Any, db: Any, level: int) -> list[tuple[int, Run]]:
    """(first key, run) of every run of one level, in key order, as views of what txn read.

    In a transaction begun with ``buffers=True`` the arrays view LMDB's map
    (nothing is copied: see :mod:`simstore.store.runs` for how long such views
    stay valid); otherwise they view private bytes. A view that is not aligned
    to its width (a small run stored inside a leaf page) is copied. Each
    record's framing is checked; key order is not (``verify`` checks it).
    """
    cur = txn.cursor(db)
    lead = bytes((level,))
    out: list[tuple[int, Run]] = []
    if not cur.set_range(lead):
        return out
    for key, val in cur.iternext():
        if bytes(key[:1]) != lead:
            break
        if len(key) != 9 or len(val) < _RUN_HEAD.size:
            raise CorruptStoreError(f"a run record of table level {level} is malformed")
        n, width, kw, dbits, shift = _RUN_HEAD.unpack_from(val)
        kbytes = kw or 8
        dlen = 4 * ((1 << dbits) + 1) if dbits else 0
        if width not in (4, 8) or kw not in (0, 4) or n == 0 or shift > 63 or (
            dbits and (kw or dbits > MAX_RUN_DIR_BITS)
        ) or (not dbits and shift) or len(val) != _RUN_HEAD.size + n * (kbytes + width) + dlen:
            raise CorruptStoreError(f"a run record of table level {level} is malformed")
        first = int.from_bytes(key[1:9], "big")
        off = _RUN_HEAD.size
        keys = _view(val, "<u4" if kw else "<u8", n, off)
        vals = _view(val, "<u4" if width == 4 else "<u8", n, off + kbytes * n)
        d = _view(val, "<u4", (1 << dbits) + 1, off + (kbytes + width) * n) if dbits else None
        if d is not None and int(d[-1]) != n:
            raise CorruptStoreError(f"a run directory of table level {level} is malformed")
        out.append((first, Run(keys, vals, first & _HIGH if kw else 0, d, shift)))
    return out


_HIGH = 0xFFFFFFFF00000000


def _view(buf: Any, dtype: str, n: int, offset: int) -> np.ndarray:
    """n values of buf from offset as a native-order array: a view when aligned, else a copy."""
    a = np.frombuffer(buf, dtype=dtype, count=n, offset=offset)
    if a.ctypes.data % a.itemsize or not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def run_arrays(runs: list[tuple[int, Run]]) -> tuple[np.ndarray, np.ndarray]:
    """The (keys, vals) of runs as private arrays: uint64 keys, uint32 or uint64 vals."""
    if not runs:
        return EMPTY, EMPTY
    keys = [r.keys.astype(np.uint64) | np.uint64(r.high) if r.keys.itemsize == 4 else r.keys
            for _, r in runs]
    vals = [r.vals for _, r in runs]
    narrow = all(v.itemsize == 4 for v in vals)
    return (np.concatenate(keys).astype(np.uint64, copy=False),
            np.concatenate(vals).astype(np.uint32 if narrow else np.uint64, copy=False))


def read_level(txn: Any, db: Any, level: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys, vals) of one level in key order, copied: uint64 keys, uint32 or uint64 vals.

    Values stay 32-bit when every run of the level stores them so. Checks the
    key order (the walk of ``verify`` and a merge's input).
    """
    k, v = run_arrays(read_runs(txn, db, level))
    if len(k) > 1 and bool((k[1:] < k[:-1]).any()):
        raise CorruptStoreError(f"the runs of table level {level} are out of key order")
    return k, v
