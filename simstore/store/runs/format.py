"""The records of the run tables: the state record, the merge records and the runs.

Database ``runs`` holds the record ``state`` (:class:`State`: the next internal id,
where the recent docs begin, ``flushed``, an upper bound of the stale entries, an XOR
hash of the recent docs, then per level, oldest first, its one-byte id, generation and
end internal id), the merge under way if any (``merge``: :class:`Job`; ``mcursor``: its
progress per run database; ``mclean``, once its level is swapped in: how many of the
tombstones it honoured are deleted; its gone list in ``mgone`` or ``mgb`` chunks) and
the tombstones (``t`` + block number -> a 64-byte bitmap): those two kinds are
:mod:`simstore.store.runs.removed`'s. Each run database (``r00``, ``r01``, ... for the
permutation tables, ``rbands`` for the band keys of a similarity store, ``rids`` for
the id hashes) holds a level as runs: records keyed by the level byte and the run's
first key (8 bytes big-endian) whose value is a header (entries, id width, key width,
directory bits, directory shift), the keys (uint64 little-endian, or their low halves
when every key of the run shares the record key's high half), the internal ids (4 bytes
little-endian, 8 when one of them needs it), then, in a permutation table's run of
``DIR_MIN_ENTRIES`` keys or more, its directory (2**bits + 1 uint32 little-endian, see
:func:`simstore.native.probe.run_dir`). Each level of each run database also has a
paged index under the lead byte 0xFF (:mod:`simstore.store.runs.index`). docs/format.md
gives every byte; :mod:`simstore.store.runs.tables` keeps the levels up to date and probes
them where LMDB maps them.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...exceptions import CorruptStoreError
from ...native.probe import MAX_RUN_DIR_BITS, Placed, Run, run_dir
from ..check.ranges import TreeGuard
from .index import append_index, drop_index
from .rows import band_keys
from .size import DIR_MIN_ENTRIES, RUN_HEAD, dir_bits

STATE_DB = b"runs"
STATE_KEY = b"state"
BANDS_DB = b"rbands"
IDS_DB = b"rids"  # id_hash(encoded id) -> iid (simstore.store.runs.ids)
MERGE_KEY = b"merge"  # the merge under way, if any (Job)
CURSOR_KEY = b"mcursor"  # its progress per run database
CLEAN_KEY = b"mclean"  # once swapped in: how many of its tombstones are deleted
MAX_LEVEL_ID = 250
EMPTY = np.empty(0, dtype=np.uint64)
_STATE = struct.Struct("<4QB")
_LEVEL = struct.Struct("<BQQ")
_JOB = struct.Struct("<BQBQ")
_CURSOR = struct.Struct("<BQ")


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


class Level(NamedTuple):
    """One level of the run tables: the runs of the docs with lo <= iid < hi (lo is the
    previous level's hi), under a one-byte id and a random generation."""

    id: int
    gen: int
    hi: int


class State(NamedTuple):
    """The levels, oldest first, and the recent docs (record ``state`` of database ``runs``).

    The levels cover internal ids [0, flushed) without gaps; the docs from
    ``flushed`` on are the recent docs, read from the docs table. (A named
    tuple: every single add and remove makes one.)
    """

    next: int = 0  # the next internal id (iids are never reused)
    flushed: int = 0
    # removed docs whose entries levels may still hold, each with a tombstone: an upper
    # bound of a table's stale entries (a merge also leaves out docs removed while it runs,
    # counted until the next merge of their level)
    stale: int = 0
    recent_xor: int = 0  # XOR of mix(iid, fp) over the live recent docs
    levels: tuple[Level, ...] = ()

    def pack(self) -> bytes:
        head = _STATE.pack(self.next, self.flushed, self.stale, self.recent_xor,
                           len(self.levels))
        return head + b"".join(_LEVEL.pack(lv.id, lv.gen, lv.hi) for lv in self.levels)

    def bounds(self) -> list[tuple[Level, int, int]]:
        """(level, lo, hi) of every level, oldest first."""
        out, lo = [], 0
        for lv in self.levels:
            out.append((lv, lo, lv.hi))
            lo = lv.hi
        return out

    def gens(self) -> dict[int, int]:
        """Level id -> generation."""
        return {lv.id: lv.gen for lv in self.levels}

    @classmethod
    def unpack(cls, raw: Any) -> State:
        if raw is None:
            raise CorruptStoreError("the run tables' state record is missing or malformed")
        return _unpack_state(bytes(raw))


@functools.lru_cache(maxsize=16)
def _unpack_state(raw: bytes) -> State:
    """A state record's fields (cached: every write and query reads the same few records)."""
    bad = CorruptStoreError("the run tables' state record is missing or malformed")
    if len(raw) < _STATE.size:
        raise bad
    nxt, flushed, stale, xor, n = _STATE.unpack_from(raw)
    if len(raw) != _STATE.size + n * _LEVEL.size:
        raise bad
    levels = tuple(Level(*_LEVEL.unpack_from(raw, _STATE.size + i * _LEVEL.size))
                   for i in range(n))
    return State(nxt, flushed, stale, xor, levels)


@dataclass(frozen=True)
class Job:
    """A merge under way (record ``merge``): the source levels (a run of consecutive
    levels, oldest first) become the target level, a slice per commit; the sources'
    docs removed when the merge began (``gone``, sorted: their tombstones go once it is
    done) are left out, and so are those removed since where it has yet to pass
    (:class:`~simstore.store.runs.removed.GoneSet`)."""

    target: int
    gen: int
    sources: tuple[Level, ...]
    gone: np.ndarray

    def pack(self) -> bytes:
        """The ``merge`` record: its head and sources (``gone`` is chunks of its own:
        :func:`simstore.store.runs.removed.put_job`)."""
        head = _JOB.pack(self.target, self.gen, len(self.sources), len(self.gone))
        return head + b"".join(_LEVEL.pack(lv.id, lv.gen, lv.hi) for lv in self.sources)

    @classmethod
    def unpack(cls, raw: Any, chunks: Callable[[int], np.ndarray] | None = None) -> Job:
        """The job of a ``merge`` record, its ``gone`` read by ``chunks(count)`` (without:
        a job whose gone list is left empty)."""
        raw = bytes(raw)
        try:
            target, gen, ns, ng = _JOB.unpack_from(raw)
            if len(raw) != _JOB.size + ns * _LEVEL.size:
                raise ValueError
        except (struct.error, ValueError):
            raise CorruptStoreError("the run tables' merge record is malformed") from None
        srcs = tuple(Level(*_LEVEL.unpack_from(raw, _JOB.size + i * _LEVEL.size))
                     for i in range(ns))
        gone = np.empty(0, np.uint64) if chunks is None else chunks(ng)
        if chunks is not None and len(gone) != ng:
            raise CorruptStoreError("the run tables' merge names more removed docs "
                                    "than its records hold")
        return cls(target, gen, srcs, gone)


def pack_cursors(cur: list[int | None]) -> bytes:
    """A merge's progress per run database: the next key to merge, None once done."""
    return b"".join(_CURSOR.pack(0, 0) if c is None else _CURSOR.pack(1, c) for c in cur)


def unpack_cursors(raw: Any, n: int) -> list[int | None]:
    raw = bytes(raw)
    if len(raw) != n * _CURSOR.size:
        raise CorruptStoreError("the run tables' merge cursor record is malformed")
    out: list[int | None] = []
    for i in range(n):
        live, key = _CURSOR.unpack_from(raw, i * _CURSOR.size)
        out.append(key if live else None)
    return out


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


_STEP_BITS = 24  # a generation: a level's random lineage, then a count of its changes


def new_gen() -> int:
    """A generation number for a level just written: a new random lineage, change 1."""
    return (int.from_bytes(os.urandom(5), "little") << _STEP_BITS) | 1


def next_gen(gen: int) -> int:
    """The generation of a level after a merge slice changed its runs: the same lineage,
    the next change (a merge adds runs to its target and deletes runs of its sources,
    never rewriting one, so a run a reader holds under one generation of a lineage is
    the same record under a later one that still names it)."""
    step = (gen & ((1 << _STEP_BITS) - 1)) % ((1 << _STEP_BITS) - 1) + 1
    return (gen >> _STEP_BITS << _STEP_BITS) | step


def lineage(gen: int) -> int:
    """The lineage of a generation (see :func:`next_gen`)."""
    return gen >> _STEP_BITS


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


def put_runs(txn: Any, db: Any, guard: TreeGuard, level: int, keys: np.ndarray,
             vals: np.ndarray, *,
             run_entries: int, halves: bool = False, dirs: bool = False,
             tail: int = 0) -> None:
    """Add sorted (keys, vals) to one level as runs of about run_entries keys, never
    splitting a key, and their first keys to its index; the level's runs so far must
    all hold keys below keys[0] (a merge writes its target in slices).

    halves: runs also end where the keys' high 32 bits change, and store only the
    low halves (band entries: the high half is the band). dirs: runs of
    DIR_MIN_ENTRIES keys or more carry a directory (never with halves) whose buckets
    are never finer than the table's tail bits (a probe's range).
    """
    n = len(keys)
    if not n:
        return
    starts = _run_bounds(keys, run_entries)
    if halves:
        high = np.flatnonzero(np.diff(keys >> np.uint64(32))) + 1
        starts = sorted(set(starts) | set(high.tolist()))
    lead = bytes((level,))
    for i, a in enumerate(starts):
        b = starts[i + 1] if i + 1 < len(starts) else n
        wide = bool(vals[a:b].max() >= 1 << 32)  # 4-byte ids unless the run needs 8
        vtype = "<u8" if wide else "<u4"
        dbits, shift, dtail = 0, 0, b""
        if dirs and not halves and b - a >= DIR_MIN_ENTRIES:
            values = (int(keys[b - 1]) >> tail) - (int(keys[a]) >> tail) + 1
            dbits = dir_bits(b - a, values)
            d, shift = run_dir(np.ascontiguousarray(keys[a:b], dtype=np.uint64), dbits, tail)
            dbits = len(d).bit_length() - 1
            dtail = d.astype("<u4").tobytes()
        head = RUN_HEAD.pack(b - a, 8 if wide else 4, 4 if halves else 0, dbits, shift)
        ktype = "<u4" if halves else "<u8"
        body = keys[a:b].astype(ktype).tobytes() + vals[a:b].astype(vtype).tobytes() + dtail
        txn.put(lead + int(keys[a]).to_bytes(8, "big"), head + body, db=db)
    append_index(txn, db, guard, level, keys[np.asarray(starts, dtype=np.int64)])


def drop_level(txn: Any, db: Any, guard: TreeGuard, level: int) -> None:
    """Delete every run of one level, and its index."""
    drop_index(txn, db, guard, level)
    lead = bytes((level,))
    cur = guard.cursor(txn, db, lead, stop=bytes((level + 1,)))
    if not cur.set_range(lead):
        return
    while bytes(cur.key()[:1]) == lead:
        if not cur.delete():
            break


def read_runs(txn: Any, db: Any, guard: TreeGuard, level: int) -> list[tuple[int, Run]]:
    """(first key, run) of every run of one level, in key order, as views of what txn
    read (copies where not aligned to their widths). Each record's framing is checked;
    key order is not (:func:`read_level` checks it)."""
    lead = bytes((level,))
    cur = guard.cursor(txn, db, lead, stop=bytes((level + 1,)))
    out: list[tuple[int, Run]] = []
    if not cur.set_range(lead):
        return out
    for key, val in cur.iternext():
        if bytes(key[:1]) != lead:
            break
        out.append(parse_run(key, val, level))
    return out


def parse_run(key: Any, val: Any, level: int, copy_below: int = 0) -> tuple[int, Run]:
    """(first key, run) of one run record as numpy views, its framing checked.

    copy_below: a value shorter than this is copied first. Give the map's page
    size when val views the map: a shorter value may sit inside a leaf page,
    which LMDB copies elsewhere (and later reuses) whenever a neighbouring
    record changes, while a longer one has overflow pages of its own that stay
    put until the record itself is rewritten or deleted.
    """
    val, f = _frame(key, val, level, copy_below)
    keys = _view(val, _LE4 if f.kw == 4 else _LE8, f.n, f.koff)
    vals = _view(val, _LE4 if f.vw == 4 else _LE8, f.n, f.voff)
    d = _view(val, _LE4, (1 << f.dbits) + 1, f.doff) if f.dbits else None
    return f.first, Run(keys, vals, f.high, d, f.shift)


def place_run(key: Any, val: Any, level: int, copy_below: int, in_map: bool) -> Placed | Run:
    """One run record as :class:`~simstore.native.probe.Placed` (no array object made:
    what a reader keeps of a run it fetched), checked as :func:`parse_run` checks
    it (``ss_runset_load`` checks its first key and directory end again).

    in_map: val views LMDB's map, whose memory the caller keeps valid (see
    :mod:`simstore.store.runs.tables`), so the set holds nothing for it; else (private
    bytes), or when it is shorter than copy_below and so copied (see
    :func:`parse_run`), the set holds the bytes. A record whose arrays do not lie at
    multiples of their widths (a band run of 8-byte ids and an odd number of entries
    has its ids at offset 4 mod 8) comes back as :func:`parse_run` reads it: a
    :class:`Run` of copies where a view would not be aligned.
    """
    val, f = _frame(key, val, level, copy_below)
    held = not in_map or len(val) < copy_below
    if f.koff % f.kw or f.voff % f.vw or f.doff % 4:
        return parse_run(key, val, level)[1]
    return Placed(val, f.n, f.kw, f.vw, f.koff, f.voff, f.doff, f.dbits, f.shift, f.high,
                  keep=held)


class _Frame(NamedTuple):
    first: int
    n: int
    kw: int
    vw: int
    koff: int
    voff: int
    doff: int
    dbits: int
    shift: int
    high: int


def _frame(key: Any, val: Any, level: int, copy_below: int) -> tuple[Any, _Frame]:
    """(val, copied when shorter than copy_below; where its parts lie), checked: the
    header's fields, the record's length, its first key against the record key and
    its directory's last entry against its count."""
    if len(key) != 9 or val is None or len(val) < RUN_HEAD.size:
        raise CorruptStoreError(f"a run record of table level {level} is malformed")
    if len(val) < copy_below:
        val = bytes(val)
    n, width, kw, dbits, shift = RUN_HEAD.unpack_from(val)
    kbytes = kw or 8
    dlen = 4 * ((1 << dbits) + 1) if dbits else 0
    if width not in (4, 8) or kw not in (0, 4) or n == 0 or shift > 63 or (
        dbits and (kw or dbits > MAX_RUN_DIR_BITS)
    ) or (not dbits and shift) or len(val) != RUN_HEAD.size + n * (kbytes + width) + dlen:
        raise CorruptStoreError(f"a run record of table level {level} is malformed")
    first = int.from_bytes(key[1:9], "big")
    koff = RUN_HEAD.size
    voff = koff + kbytes * n
    doff = voff + width * n
    end = doff + 4 * (1 << dbits)
    if dbits and int.from_bytes(val[end:end + 4], "little") != n:
        raise CorruptStoreError(f"a run directory of table level {level} is malformed")
    if int.from_bytes(val[koff:koff + kbytes], "little") != first & (_HIGH32 if kw else _MASK64):
        raise CorruptStoreError(f"a run of table level {level} does not begin at its key")
    return val, _Frame(first, n, kbytes, width, koff, voff, doff, dbits, shift,
                       first & _HIGH if kw else 0)


_HIGH = 0xFFFFFFFF00000000
_HIGH32, _MASK64 = 0xFFFFFFFF, (1 << 64) - 1


_LE4, _LE8 = np.dtype("<u4"), np.dtype("<u8")


def _view(buf: Any, dtype: np.dtype, n: int, offset: int) -> np.ndarray:
    """n values of buf from offset as a native-order array: a view when aligned, else a copy.

    Called three times per run when a level is opened (thousands of runs at
    100M): the flags and dtype are read, no ctypes object is made.
    """
    a = np.frombuffer(buf, dtype=dtype, count=n, offset=offset)
    if not (a.flags.aligned and dtype.isnative):
        a = a.astype(dtype.newbyteorder("="))
    return a


def run_arrays(runs: list[tuple[int, Run]]) -> tuple[np.ndarray, np.ndarray]:
    """The (keys, vals) of runs as private arrays: uint64 keys, uint32 or uint64 vals."""
    if not runs:
        return EMPTY, EMPTY
    keys = [full_keys(r) for _, r in runs]
    vals = [r.vals for _, r in runs]
    narrow = all(v.itemsize == 4 for v in vals)
    return (np.concatenate(keys).astype(np.uint64, copy=False),
            np.concatenate(vals).astype(np.uint32 if narrow else np.uint64, copy=False))


def read_level(txn: Any, db: Any, guard: TreeGuard, level: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(keys, vals) of one level in key order, copied: uint64 keys, uint32 or uint64 vals.

    Values stay 32-bit when every run of the level stores them so. Checks the
    key order (the walk of ``verify`` and a merge's input).
    """
    k, v = run_arrays(read_runs(txn, db, guard, level))
    if len(k) > 1 and bool((k[1:] < k[:-1]).any()):
        raise CorruptStoreError(f"the runs of table level {level} are out of key order")
    return k, v


def full_keys(run: Run) -> np.ndarray:
    """A run's keys as uint64 (the record key's high half put back on stored low halves)."""
    if run.keys.itemsize == 4:
        return run.keys.astype(np.uint64) | np.uint64(run.high)
    return run.keys
