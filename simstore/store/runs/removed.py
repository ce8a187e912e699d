"""The records of removed docs in database ``runs``: tombstones and a merge's list of them.

A removed doc's level entries stay (stale) until a merge of their level leaves them out;
its tombstone says which. Tombstones are *blocks*: ``t`` + the block number (iid >> 9, 8
bytes big-endian) -> a 64-byte bitmap of the block's 512 internal ids (bit i of byte j:
iid block * 512 + 8 j + i). Removes come in runs of neighbouring ids (a crawl's oldest
pages, a dataset's rows), so a block holds many: about a byte a tombstone. A merge
records the tombstones it honours (its ``gone`` list) beside its ``merge`` record in
chunks that each fit inside a leaf page, of whichever kind takes fewer bytes: ids
(``mgone`` + a 4-byte number -> up to 240 ids, 8 bytes little-endian each) or tombstone
blocks (``mgb`` + a 4-byte number -> up to 26 blocks, each its number, 8 bytes
little-endian, and its bitmap: a byte or less a removed doc where neighbours were
removed; a 1M store's merge of 62.5k tombstones took 132 leaf pages as ids, held while
it runs and read by every write).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ...exceptions import CorruptStoreError
from ..check.ranges import TreeGuard
from .format import MERGE_KEY, Job

BLOCK = b"t"  # tombstone blocks: BLOCK + (iid >> BLOCK_BITS) -> bitmap
BLOCK_BITS = 9  # 512 ids a block: a 64-byte bitmap
_BLOCK_BYTES = (1 << BLOCK_BITS) // 8
GONE_KEY = b"mgone"  # + 4-byte chunk number: the merge's honoured tombstones, as ids
GONE_CHUNK = 240  # internal ids per chunk: 1,920 bytes, inside a 4 KB leaf page
GONE_BLOCKS_KEY = b"mgb"  # + 4-byte chunk number: the gone list as blocks
_GONE_BLOCK = 8 + _BLOCK_BYTES  # a block's number (little-endian) and bitmap
GONE_BLOCKS_CHUNK = 26  # blocks per chunk: 1,872 bytes, inside a 4 KB leaf page


def _block_key(block: int) -> bytes:
    return BLOCK + block.to_bytes(8, "big")


def _block(raw: Any) -> bytearray:
    """A tombstone block's bytes to edit (all clear when there is none), checked."""
    if raw is None:
        return bytearray(_BLOCK_BYTES)
    if len(raw) != _BLOCK_BYTES:
        raise CorruptStoreError("a tombstone block of the run tables is malformed")
    return bytearray(raw)


def put_tombstones(txn: Any, db: Any, iids: list[int]) -> None:
    """Add many removed docs' tombstones (sorted ids: each block read and written once)."""
    _set_bits(txn, db, iids, True)


def drop_tombstones(txn: Any, db: Any, iids: np.ndarray) -> None:
    """Delete the tombstones of these internal ids (a merge honoured them)."""
    if not len(iids):
        return
    _set_bits(txn, db, iids.tolist(), False)


def _set_bits(txn: Any, db: Any, iids: Iterable[int], on: bool) -> None:
    """Set (or clear) the bits of these ids in their blocks, each block read and written
    once a run of ids in it; a block left empty is deleted."""
    key, buf = None, None

    def flush() -> None:
        if key is None or buf is None:
            return
        if any(buf):
            txn.put(key, bytes(buf), db=db)
        else:
            txn.delete(key, db=db)

    for iid in iids:
        k = _block_key(iid >> BLOCK_BITS)
        if k != key:
            flush()
            raw = txn.get(k, db=db)
            if raw is None and not on:
                key, buf = None, None
                continue
            key, buf = k, _block(raw)
        off = iid & ((1 << BLOCK_BITS) - 1)
        if on:
            buf[off >> 3] |= 1 << (off & 7)
        else:
            buf[off >> 3] &= ~(1 << (off & 7)) & 0xFF
    flush()


def _block_maps(txn: Any, db: Any, guard: TreeGuard, first: int, end: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The numbers (uint64) and bitmaps ((n, 64) uint8, checked) of the tombstone blocks
    numbered first <= b < end, in order: one cursor walk, the bytes copied in one step."""
    nums, maps = [], []
    stop = _block_key(end)
    cur = guard.cursor(txn, db, _block_key(first), stop=stop)
    if cur.set_range(_block_key(first)):
        for key, val in cur.iternext():
            if len(key) != 9 or bytes(key[:1]) != BLOCK or bytes(key) >= stop:
                break
            nums.append(bytes(key[1:]))
            maps.append(bytes(_block(val)))
    return (np.frombuffer(b"".join(nums), dtype=">u8").astype(np.uint64),
            np.frombuffer(b"".join(maps), dtype=np.uint8).reshape(-1, _BLOCK_BYTES))


def tombstones(txn: Any, db: Any, guard: TreeGuard, lo: int, hi: int) -> np.ndarray:
    """Sorted internal ids of the tombstones with lo <= iid < hi."""
    nums, maps = _block_maps(txn, db, guard, lo >> BLOCK_BITS,
                             (hi + (1 << BLOCK_BITS) - 1) >> BLOCK_BITS)
    at, bit = np.nonzero(np.unpackbits(maps, axis=1, bitorder="little"))
    # blocks come in key order, each one's ids ascending: sorted and distinct already
    arr = (nums[at] << np.uint64(BLOCK_BITS)) + bit.astype(np.uint64)
    keep = arr >= np.uint64(lo)
    if hi < 1 << 64:
        keep &= arr < np.uint64(hi)
    return arr[keep]


_BIT = np.array([1 << i for i in range(8)], dtype=np.uint8)  # bit i of a byte


class GoneSet:
    """The removed docs a merge leaves out: its gone list (sorted), and, late, the
    tombstones set since in its sources' range of internal ids, as one bitmap over it.

    Tombstones in a merge's sources' range only grow while it runs (internal ids are
    never reused; only the merge's own clean-up, after its last slice, and a fold of a
    level outside its sources delete any), so every id here names a removed doc: its
    entries may go wherever the merge has yet to pass. Honouring only the gone list
    left a doc removed during the merge stale everywhere until the next merge (at 1M
    under churn merges run back to back: stale entries about live / STALE_SHARE).
    """

    def __init__(self, txn: Any, db: Any, guard: TreeGuard, lo: int, hi: int,
                 gone: np.ndarray, late: bool = True, listed: bool = False) -> None:
        """late: read the tombstone blocks of the range too; listed: they are known to
        hold every id of gone (checked by an earlier GoneSet of the same merge: its
        tombstones stay until it is done), so gone need not be set bit by bit."""
        self.gone = np.asarray(gone, dtype=np.uint64)  # honoured in full (tombstones go)
        self._base = lo >> BLOCK_BITS << BLOCK_BITS
        nblocks = max((hi - self._base + (1 << BLOCK_BITS) - 1) >> BLOCK_BITS, 0) if late else 0
        self._bits = np.zeros(nblocks * _BLOCK_BYTES, dtype=np.uint8)
        if nblocks:
            self._read_blocks(txn, db, guard, nblocks)
            if not listed:
                self._set(self.gone[~self.contains(self.gone)])

    def _read_blocks(self, txn: Any, db: Any, guard: TreeGuard, nblocks: int) -> None:
        """OR in the tombstone blocks of the range."""
        first = self._base >> BLOCK_BITS
        nums, maps = _block_maps(txn, db, guard, first, first + nblocks)
        rows = self._bits.reshape(nblocks, _BLOCK_BYTES)
        rows[(nums - np.uint64(first)).astype(np.intp)] |= maps

    def _set(self, ids: np.ndarray) -> None:
        """Set these ids' bits; none outside the range (no entry there matches)."""
        off = ids[self._inside(ids)] - np.uint64(self._base)
        if not len(off):
            return
        if not bool((off[1:] >= off[:-1]).all()):  # a merge's list is sorted; if not,
            off = np.sort(off)  # the OR below would lose bits of a byte's repeats
        byte = (off >> np.uint64(3)).astype(np.intp)
        # sorted: each byte's bits are neighbours, OR-ed in one pass (ufunc.at is slow)
        starts = np.flatnonzero(np.concatenate([[True], byte[1:] != byte[:-1]]))
        bits = _BIT[(off & np.uint64(7)).astype(np.intp)]
        self._bits[byte[starts]] |= np.bitwise_or.reduceat(bits, starts)

    def _inside(self, ids: np.ndarray) -> np.ndarray:
        return (ids >= np.uint64(self._base)) & (
            ids - np.uint64(self._base) < np.uint64(len(self._bits) * 8))

    def contains(self, vals: np.ndarray) -> np.ndarray:
        """Which of these internal ids name removed docs."""
        vals = np.asarray(vals, dtype=np.uint64)
        if not len(self._bits):  # the list alone: a binary search a value
            if not len(self.gone):
                return np.zeros(len(vals), dtype=bool)
            at = np.minimum(np.searchsorted(self.gone, vals), len(self.gone) - 1)
            return self.gone[at] == vals
        inside = self._inside(vals)
        off = np.where(inside, vals - np.uint64(self._base), np.uint64(0))
        byte = self._bits[(off >> np.uint64(3)).astype(np.intp)]
        return inside & (byte & _BIT[(off & np.uint64(7)).astype(np.intp)] != 0)


# --- a merge's gone list ----------------------------------------------------------


def _gone_chunks(txn: Any, db: Any, guard: TreeGuard, prefix: bytes = GONE_KEY
                 ) -> list[tuple[bytes, bytes]]:
    """(key, value) of the merge's gone chunks of one kind, in order (one walk)."""
    cur = guard.cursor(txn, db, prefix, stop=prefix[:-1] + bytes((prefix[-1] + 1,)))
    out: list[tuple[bytes, bytes]] = []
    if cur.set_range(prefix):
        for key, val in cur.iternext():
            if bytes(key[:len(prefix)]) != prefix:
                break
            out.append((bytes(key), bytes(val)))
    return out


def read_job(txn: Any, db: Any, guard: TreeGuard) -> Job | None:
    """The merge under way (record ``merge`` and its gone chunks of either kind), if any."""
    raw = txn.get(MERGE_KEY, None, db)  # (db by place: read by every write)
    if raw is None:
        return None

    def chunks(count: int) -> np.ndarray:
        parts = [val for _, val in _gone_chunks(txn, db, guard)]
        blocks = [val for _, val in _gone_chunks(txn, db, guard, GONE_BLOCKS_KEY)]
        if any(len(p) % 8 for p in parts) or any(len(b) % _GONE_BLOCK for b in blocks):
            raise CorruptStoreError("the run tables' merge record is malformed")
        ids = np.frombuffer(b"".join(parts), dtype="<u8").astype(np.uint64)
        return np.concatenate([ids, blocks_ids(b"".join(blocks))]) if blocks else ids

    return Job.unpack(raw, chunks)


def blocks_ids(raw: bytes) -> np.ndarray:
    """The sorted internal ids of tombstone blocks packed as put_job packs them (their
    numbers strictly ascending, checked)."""
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _GONE_BLOCK)
    nums = rows[:, :8].copy().view("<u8").ravel().astype(np.uint64)
    if len(nums) > 1 and not bool(np.all(nums[1:] > nums[:-1])) or \
            bool(np.any(nums >= np.uint64(1 << (64 - BLOCK_BITS)))):
        raise CorruptStoreError("the run tables' merge record is malformed")
    at, bit = np.nonzero(np.unpackbits(rows[:, 8:], axis=1, bitorder="little"))
    return (nums[at] << np.uint64(BLOCK_BITS)) + bit.astype(np.uint64)


def ids_blocks(ids: np.ndarray) -> bytes:
    """Sorted distinct internal ids as tombstone blocks: each block's number (8 bytes
    little-endian) and its 64-byte bitmap, in order."""
    ids = np.asarray(ids, dtype=np.uint64)
    nums, row = np.unique(ids >> np.uint64(BLOCK_BITS), return_inverse=True)
    off = (ids & np.uint64((1 << BLOCK_BITS) - 1)).astype(np.int64)
    maps = np.zeros((len(nums), _BLOCK_BYTES), dtype=np.uint8)
    np.bitwise_or.at(maps, (row, off >> 3), (1 << (off & 7)).astype(np.uint8))
    return np.concatenate([nums.astype("<u8").view(np.uint8).reshape(-1, 8), maps],
                          axis=1).tobytes()


def put_job(txn: Any, db: Any, guard: TreeGuard, job: Job) -> None:
    """Write a merge's record and its gone list in chunks that each fit in a leaf page
    (one record of 8 bytes per removed doc would take a run of free pages: the file
    grew): its ids, or its tombstone blocks where they take fewer bytes (more than 9
    removed docs a block of 512 ids, on average)."""
    drop_gone(txn, db, guard)
    txn.put(MERGE_KEY, job.pack(), db=db)
    raw = np.ascontiguousarray(job.gone, dtype="<u8").tobytes()
    key, step = GONE_KEY, 8 * GONE_CHUNK
    if len(raw):
        packed = ids_blocks(job.gone)
        if len(packed) < len(raw):
            raw, key, step = packed, GONE_BLOCKS_KEY, _GONE_BLOCK * GONE_BLOCKS_CHUNK
    for n, at in enumerate(range(0, len(raw), step)):
        txn.put(key + n.to_bytes(4, "big"), raw[at:at + step], db=db)


def drop_gone(txn: Any, db: Any, guard: TreeGuard) -> None:
    """Delete the gone chunks of a merge (done, or rewritten), of either kind."""
    for prefix in (GONE_KEY, GONE_BLOCKS_KEY):
        for key, _ in _gone_chunks(txn, db, guard, prefix):
            txn.delete(key, db=db)
