"""The layout of LMDB's data file (data.mdb), as simstore's checks read it.

Facts only, no walking: the structural check is :mod:`simstore.store.check.pages`.

LMDB 0.9 data files, little-endian, 64-bit builds):

* Every page starts with a 16-byte header: page number (u64), pad (u16),
  flags (u16: 1 branch, 2 leaf, 4 overflow, 8 meta, 0x20 fixed-size-key
  leaf, 0x40 sub-page), then ``lower`` and ``upper`` (u16 each), or for an
  overflow page the number of pages of its run (u32). A page's node offsets
  (u16 each) follow the header up to ``lower``; the nodes sit from ``upper``
  to the page's end.
* Pages 0 and 1 are meta pages: after the header, magic 0xBEEFC0DE (u32),
  data version 1 (u32), address and map size (u64 each), two 48-byte
  database records (the free-page tree, then the main tree), the last used
  page number and the transaction id (u64 each). LMDB uses the meta of the
  higher transaction id. A database record is: pad (u32; the page size in
  the free tree's record, the key size of a fixed-size-key tree), flags
  (u16), depth (u16), branch, leaf and overflow page counts, entries, root
  page (u64 each; all ones when the tree is empty).
* A node is: two u16 halves of a number, flags (u16), key size (u16), the
  key. In a branch node the number, with the flags as bits 32..47, is the
  child page. In a leaf node it is the data size and the data follows the
  key, unless flag 1 (big data) says the data is a run of overflow pages
  whose first page number (u64) follows the key. Flag 2 marks a database
  record as data (named databases in the main tree); flag 4 marks the
  duplicates of a key, either as a sub-page inside the node or, with flag
  2, as a database record of their own tree.
* The free-page tree maps a transaction id to the pages it freed: a count
  (u64) then that many page numbers.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import lmdb

PAGE_HEADER = 16
NODE_HEADER = 8
DB_RECORD = 48
MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
NUM_METAS = 2
EMPTY = (1 << 64) - 1  # the root of an empty tree
MAX_DEPTH = 32  # LMDB's cursor stack
MAX_KEY = 511  # LMDB's key size limit (the default build)
ATTEMPTS = 5  # snapshots tried when writers keep replacing the meta pages

P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2, P_SUBP = 0x01, 0x02, 0x04, 0x08, 0x20, 0x40
P_STATE = 0x10 | 0x4000 | 0x8000  # dirty, loose, keep: in-memory marks, ignored
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
DB_REVERSEKEY, DB_DUPSORT, DB_INTEGERKEY, DB_DUPFIXED = 0x02, 0x04, 0x08, 0x10
DB_INTEGERDUP, DB_REVERSEDUP = 0x20, 0x40
DB_FLAGS = 0x7E
DUP_ONLY = DB_DUPFIXED | DB_INTEGERDUP | DB_REVERSEDUP
DUPS_TREE_FLAGS = DB_DUPFIXED | DB_INTEGERKEY | DB_REVERSEKEY  # a key's duplicates' tree

HEADER = struct.Struct("<QHHHH")  # page number, pad, flags, lower, upper
OVERFLOW = struct.Struct("<QHHI")  # page number, pad, flags, pages in the run
NODE = struct.Struct("<HHHH")  # low and high halves, flags, key size
U64 = struct.Struct("<Q")
_RECORD = struct.Struct("<IHHQQQQQ")
_META = struct.Struct("<IIQQ")
_TAIL = struct.Struct("<QQ")
META_SIZE = _META.size + 2 * DB_RECORD + _TAIL.size  # bytes after the page header


@dataclass(frozen=True)
class Record:
    """A database record (the 48 bytes that describe one B-tree)."""

    pad: int
    flags: int
    depth: int
    branch: int
    leaf: int
    overflow: int
    entries: int
    root: int

    @classmethod
    def parse(cls, buf: bytes, offset: int) -> Record:
        return cls(*_RECORD.unpack_from(buf, offset))


@dataclass(frozen=True)
class Meta:
    """One meta page's fields."""

    magic: int
    version: int
    mapsize: int
    free: Record
    main: Record
    last_pg: int
    txnid: int

    @classmethod
    def parse(cls, page: bytes) -> Meta:
        magic, version, _addr, mapsize = _META.unpack_from(page, PAGE_HEADER)
        base = PAGE_HEADER + _META.size
        last_pg, txnid = _TAIL.unpack_from(page, base + 2 * DB_RECORD)
        return cls(
            magic, version, mapsize, Record.parse(page, base),
            Record.parse(page, base + DB_RECORD), last_pg, txnid,
        )


def read_metas(path: str, psize: int) -> list[Meta | None]:
    """Both meta pages of the data file at path (None for one whose header or magic is wrong,
    or that lies past the file's end). A page the file's end cuts reads as LMDB's map
    shows it, zeros past the end: LMDB takes the meta in it, so the check must too (it
    then finds the file too short instead of leaving the truncated file to LMDB)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        out: list[Meta | None] = []
        for pg in range(NUM_METAS):
            page = os.pread(fd, psize, pg * psize)
            if len(page) < HEADER.size + META_SIZE:
                out.append(None)
                continue
            page = page.ljust(psize, b"\0")
            pgno, _, flags, _, _ = HEADER.unpack_from(page)
            meta = Meta.parse(page)
            ok = pgno == pg and flags & ~P_STATE == P_META
            out.append(meta if ok and meta.magic == MAGIC else None)
        return out
    finally:
        os.close(fd)


def begin(env: Any) -> Any:
    """A read transaction, adopting a map another process grew meanwhile."""
    for _ in range(ATTEMPTS * 8):
        try:
            return env.begin()
        except lmdb.MapResizedError:
            env.set_mapsize(0)
    return env.begin()
