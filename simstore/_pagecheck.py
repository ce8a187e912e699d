"""A structural check of a store's data.mdb, read as plain bytes: no LMDB call walks it.

LMDB trusts its pages: a branch page where a leaf belongs, a child number
past the file's end or a node offset outside its page makes it abort
(``assert``), read outside the map (SIGSEGV/SIGBUS) or loop. This module
walks the B-trees of one committed snapshot with bounds checks on every
field it follows, so a damaged page is reported as a sentence instead.
It reads the file with ``os.pread`` (never a memory map), so nothing it
reads can kill the process.

The layout it checks (LMDB 0.9 data files, little-endian, 64-bit builds):

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

Checked: both meta pages' fields; in the snapshot's meta, every tree:
page numbers in range and matching the page's header, each page reached
once, the page kind each level needs, depth equal to the record's, offsets
and sizes inside their page, overflow runs inside the file, sub-pages and
nested trees, flags LMDB defines, key sizes within LMDB's limit, the page
and entry counts each record claims; free pages in range and not in use.
Not checked: key order and the bytes of keys and values (verify's record
checks look at those).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

PAGE_HEADER = 16
NODE_HEADER = 8
DB_RECORD = 48
MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
NUM_METAS = 2
EMPTY = (1 << 64) - 1  # the root of an empty tree
MAX_DEPTH = 32  # LMDB's cursor stack
MAX_KEY = 511  # LMDB's key size limit (the default build)
MAX_LISTED = 20

P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2, P_SUBP = 0x01, 0x02, 0x04, 0x08, 0x20, 0x40
P_KIND = P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP
P_STATE = 0x10 | 0x4000 | 0x8000  # dirty, loose, keep: in-memory marks, ignored
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
DB_REVERSEKEY, DB_DUPSORT, DB_INTEGERKEY, DB_DUPFIXED = 0x02, 0x04, 0x08, 0x10
DB_INTEGERDUP, DB_REVERSEDUP = 0x20, 0x40
DB_FLAGS = 0x7E
DUP_ONLY = DB_DUPFIXED | DB_INTEGERDUP | DB_REVERSEDUP
DUPS_TREE_FLAGS = DB_DUPFIXED | DB_INTEGERKEY | DB_REVERSEKEY  # a key's duplicates' tree

_HEADER = struct.Struct("<QHHHH")
_OVERFLOW = struct.Struct("<QHHI")
_NODE = struct.Struct("<HHHH")
_RECORD = struct.Struct("<IHHQQQQQ")
_META = struct.Struct("<IIQQ")
_TAIL = struct.Struct("<QQ")
_U64 = struct.Struct("<Q")


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


class _Stop(Exception):
    """Too many problems: the walk ends."""


class FileCheck:
    """The structural check of one data.mdb; ``seen`` and ``free`` mark pages after run()."""

    def __init__(self, path: str, psize: int) -> None:
        self.path = path
        self.psize = psize
        self.problems: list[str] = []
        self.npages = 0
        self.seen = bytearray()
        self.free = bytearray()
        self._fd = -1
        self._more = 0
        self._free_lists: list[bytes] = []

    # --- entry points ---------------------------------------------------------------

    def metas(self) -> list[Meta | None]:
        """Both meta pages (None for one that is not a meta page of this layout)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            out: list[Meta | None] = []
            for pg in range(NUM_METAS):
                page = os.pread(fd, self.psize, pg * self.psize)
                if len(page) < self.psize:
                    out.append(None)
                    continue
                pgno, _, flags, _, _ = _HEADER.unpack_from(page)
                meta = Meta.parse(page)
                ok = pgno == pg and flags & ~P_STATE == P_META
                out.append(meta if ok and meta.magic == MAGIC else None)
            return out
        finally:
            os.close(fd)

    def run(self, txnid: int, *, full: bool = True) -> list[str] | None:
        """Problems of the snapshot of transaction txnid; None if no meta page holds it.

        ``full=False`` checks the metas, the main tree and the ``meta``
        database only (what opening a store reads).
        """
        metas = self.metas()
        meta = next((m for m in metas if m is not None and m.txnid == txnid), None)
        if meta is None:
            return None
        self.problems = []
        self._more = 0
        self._free_lists = []
        size = os.path.getsize(self.path)
        self.npages = meta.last_pg + 1
        self.seen = bytearray(self.npages)
        self.free = bytearray(self.npages)
        try:
            self._check_meta(meta, size)
            if not self.problems:
                self._fd = os.open(self.path, os.O_RDONLY)
                try:
                    self._walk_all(meta, full)
                finally:
                    os.close(self._fd)
                    self._fd = -1
        except _Stop:
            pass
        if self._more:
            self.problems.append(f"... and {self._more} more structural problems")
        return self.problems

    # --- meta ----------------------------------------------------------------------

    def _check_meta(self, meta: Meta, size: int) -> None:
        if meta.version != DATA_VERSION:
            self._bad(f"the meta page holds data version {meta.version}, not {DATA_VERSION}")
        if meta.free.pad != self.psize:
            self._bad(f"the meta page records page size {meta.free.pad}, not {self.psize}")
        if meta.last_pg < NUM_METAS - 1 or self.npages * self.psize > size:
            self._bad(
                f"the meta page says pages reach {self.npages * self.psize} bytes; "
                f"the file has {size}"
            )
        for name, rec in (("free-page tree", meta.free), ("main tree", meta.main)):
            if rec.flags & ~DB_FLAGS or rec.root != EMPTY and rec.root >= self.npages:
                self._bad(f"the meta page's {name} record is damaged ({rec})")

    def _walk_all(self, meta: Meta, full: bool) -> None:
        names = self._tree("the main tree", meta.main, main=True)
        if not full:
            if b"meta" in names:
                self._tree("database 'meta'", names[b"meta"])
            return
        for name, rec in sorted(names.items()):
            self._tree(f"database {name.decode('latin-1')!r}", rec)
        self._tree("the free-page tree", meta.free, free=True)
        self._check_free(self._free_lists)
        if not self.problems:
            lost = self.npages - NUM_METAS - sum(self.seen) - sum(self.free)
            if lost:
                self._bad(f"{lost} pages are neither in use nor on the free-page list")

    # --- trees ---------------------------------------------------------------------

    def _tree(
        self, name: str, rec: Record, *, main: bool = False, free: bool = False,
        dups: int = 0,
    ) -> dict[bytes, Record]:
        """Walk one tree; returns the named database records (main tree) or {}.

        ``dups``: walking the duplicates' tree of a key (1) or of a
        fixed-size duplicates key (2), whose leaves hold bare keys.
        """
        names: dict[bytes, Record] = {}
        allowed = DUPS_TREE_FLAGS if dups else DB_FLAGS
        if rec.flags & ~allowed or (
            not dups and rec.flags & DUP_ONLY and not rec.flags & DB_DUPSORT
        ):
            self._bad(f"{name}: its record has unknown flags {rec.flags:#x}")
            return names
        if rec.root == EMPTY:
            if rec.depth or rec.entries or rec.branch or rec.leaf or rec.overflow:
                self._bad(f"{name}: its record says empty but counts {rec.entries} entries")
            return names
        if not 1 <= rec.depth <= MAX_DEPTH:
            self._bad(f"{name}: its record has depth {rec.depth}")
            return names
        counts = [0, 0, 0, 0]  # branch, leaf, overflow pages, entries
        fixed = rec.pad if dups == 2 else 0
        stack = [(rec.root, 1)]
        while stack:
            pgno, level = stack.pop()
            page = self._page(pgno, name)
            if page is None:
                continue
            kind = _HEADER.unpack_from(page)[2] & ~P_STATE
            lower, upper = _HEADER.unpack_from(page)[3:]
            leaf = level == rec.depth
            want = (P_LEAF | P_LEAF2 if fixed else P_LEAF) if leaf else P_BRANCH
            if kind != want:
                self._bad(
                    f"{name}: page {pgno} at level {level} of {rec.depth} has flags "
                    f"{kind:#x}, not {want:#x} ({'leaf' if leaf else 'branch'})"
                )
                continue
            if not PAGE_HEADER <= lower <= upper <= self.psize or lower & 1:
                self._bad(f"{name}: page {pgno} has bounds lower={lower} upper={upper}")
                continue
            n = (lower - PAGE_HEADER) >> 1
            if n == 0 or (not leaf and n < 2):
                self._bad(f"{name}: page {pgno} holds {n} entries")
                continue
            counts[0 if not leaf else 1] += 1
            if fixed and leaf:
                if PAGE_HEADER + n * fixed > self.psize:
                    self._bad(f"{name}: page {pgno} holds more {fixed}-byte keys than fit")
                    continue
                counts[3] += n
                continue
            ptrs = struct.unpack_from(f"<{n}H", page, PAGE_HEADER)
            if not leaf:
                for child in self._branch_nodes(name, pgno, page, ptrs, upper):
                    stack.append((child, level + 1))
                continue
            self._leaf_nodes(
                name, pgno, page, ptrs, upper, rec.flags, counts,
                names if main else None, free, dups,
            )
        self._check_counts(name, rec, counts)
        return names

    def _branch_nodes(
        self, name: str, pgno: int, page: bytes, ptrs: tuple[int, ...], upper: int
    ) -> list[int]:
        children = []
        for i, ptr in enumerate(ptrs):
            if not upper <= ptr <= self.psize - NODE_HEADER or ptr & 1:
                self._bad(f"{name}: page {pgno} node {i} lies at offset {ptr}, outside its page")
                return []
            lo, hi, flags, ksize = _NODE.unpack_from(page, ptr)
            if ksize > MAX_KEY or ptr + NODE_HEADER + ksize > self.psize:
                self._bad(f"{name}: page {pgno} node {i} has a {ksize}-byte key past its page")
                return []
            child = lo | hi << 16 | flags << 32
            if not NUM_METAS <= child < self.npages:
                self._bad(f"{name}: page {pgno} node {i} points to page {child}, out of range")
                return []
            children.append(child)
        children.reverse()  # popped in key order
        return children

    def _leaf_nodes(
        self, name: str, pgno: int, page: bytes, ptrs: tuple[int, ...], upper: int,
        db_flags: int, counts: list[int], names: dict[bytes, Record] | None, free: bool,
        dups: int,
    ) -> None:
        psize = self.psize
        dupsort = bool(db_flags & DB_DUPSORT) and not dups
        for i, ptr in enumerate(ptrs):
            where = f"{name}: page {pgno} node {i}"
            if not upper <= ptr <= psize - NODE_HEADER or ptr & 1:
                self._bad(f"{where} lies at offset {ptr}, outside its page")
                return
            lo, hi, flags, ksize = _NODE.unpack_from(page, ptr)
            dsize = lo | hi << 16
            start = ptr + NODE_HEADER + ksize
            if ksize > MAX_KEY or start > psize:
                self._bad(f"{where} has a {ksize}-byte key past its page")
                return
            if dups and (flags or dsize):
                self._bad(f"{where}: a duplicate carries data (flags {flags:#x}, {dsize} bytes)")
                return
            if flags & ~(F_BIGDATA | F_SUBDATA | F_DUPDATA) or (
                flags & F_BIGDATA and flags != F_BIGDATA
            ):
                self._bad(f"{where} has unknown node flags {flags:#x}")
                return
            if flags & F_DUPDATA and not dupsort:
                self._bad(f"{where} holds duplicates in a database without them")
                return
            if flags == F_SUBDATA and names is None:
                self._bad(f"{where} holds a database record outside the main tree")
                return
            if flags & F_BIGDATA:
                if start + 8 > psize:
                    self._bad(f"{where}: its overflow page number lies past its page")
                    return
                first = _U64.unpack_from(page, start)[0]
                data = self._overflow(where, first, dsize, counts, read=free)
                counts[3] += 1
                if data is not None and free:
                    self._free_lists.append(data)
                continue
            if start + dsize > psize:
                self._bad(f"{where} has {dsize} bytes of data past its page")
                return
            if flags & F_SUBDATA:
                if dsize != DB_RECORD:
                    self._bad(f"{where} holds a {dsize}-byte database record")
                    return
                sub = Record.parse(page, start)
                if flags & F_DUPDATA:
                    fixed = bool(db_flags & DB_DUPFIXED)
                    before = len(self.problems) + self._more
                    self._tree(f"{where} (duplicates)", sub, dups=2 if fixed else 1)
                    counts[3] += sub.entries
                    counts[0] += sub.branch
                    counts[1] += sub.leaf
                    counts[2] += sub.overflow
                    if len(self.problems) + self._more > before:
                        return
                else:
                    assert names is not None
                    names[bytes(page[ptr + NODE_HEADER:start])] = sub
                    counts[3] += 1
                continue
            if flags & F_DUPDATA:
                got = self._subpage(where, page[start:start + dsize], db_flags)
                if got is None:
                    return
                counts[3] += got
                continue
            if free:
                self._free_lists.append(bytes(page[start:start + dsize]))
            counts[3] += 1

    def _subpage(self, where: str, sub: bytes, db_flags: int) -> int | None:
        """The number of duplicates in a sub-page, or None if it is damaged."""
        size = len(sub)
        if size < PAGE_HEADER:
            self._bad(f"{where}: its {size}-byte sub-page is smaller than a page header")
            return None
        _, pad, kind, lower, upper = _HEADER.unpack_from(sub)
        fixed = bool(db_flags & DB_DUPFIXED)
        want = P_SUBP | P_LEAF | (P_LEAF2 if fixed else 0)
        if kind & ~P_STATE != want:
            self._bad(f"{where}: its sub-page has flags {kind:#x}, not {want:#x}")
            return None
        if not PAGE_HEADER <= lower <= upper <= size or lower & 1:
            self._bad(f"{where}: its sub-page has bounds lower={lower} upper={upper} of {size}")
            return None
        n = (lower - PAGE_HEADER) >> 1
        if n == 0:
            self._bad(f"{where}: its sub-page holds no duplicates")
            return None
        if fixed:
            if pad == 0 or pad > MAX_KEY or PAGE_HEADER + n * pad > size:
                self._bad(f"{where}: its sub-page holds {n} keys of {pad} bytes in {size}")
                return None
            return n
        for i, ptr in enumerate(struct.unpack_from(f"<{n}H", sub, PAGE_HEADER)):
            if not upper <= ptr <= size - NODE_HEADER or ptr & 1:
                self._bad(f"{where}: its sub-page's node {i} lies outside it")
                return None
            ksize = _NODE.unpack_from(sub, ptr)[3]
            if ksize > MAX_KEY or ptr + NODE_HEADER + ksize > size:
                self._bad(f"{where}: its sub-page's node {i} has a key past its end")
                return None
        return n

    def _overflow(
        self, where: str, first: int, dsize: int, counts: list[int], *, read: bool
    ) -> bytes | None:
        """Check a run of overflow pages; None if damaged, else its data (b"" unless read)."""
        page = self._page(first, where, overflow=True)
        if page is None:
            return None
        pgno, _, kind, pages = _OVERFLOW.unpack_from(page)
        need = (PAGE_HEADER - 1 + dsize) // self.psize + 1
        if kind & ~P_STATE != P_OVERFLOW:
            self._bad(f"{where}: its overflow page {first} has flags {kind:#x}")
            return None
        if not need <= pages or first + pages > self.npages:
            self._bad(
                f"{where}: its overflow run at page {first} claims {pages} pages "
                f"for {dsize} bytes (the file has {self.npages})"
            )
            return None
        for p in range(first + 1, first + pages):
            if self.seen[p]:
                self._bad(f"{where}: its overflow run reaches page {p}, already in use")
                return None
            self.seen[p] = 1
        counts[2] += pages
        if not read:
            return b""
        if dsize <= self.psize - PAGE_HEADER:
            return bytes(page[PAGE_HEADER:PAGE_HEADER + dsize])
        rest = os.pread(self._fd, dsize - (self.psize - PAGE_HEADER), (first + 1) * self.psize)
        return bytes(page[PAGE_HEADER:]) + rest

    def _page(self, pgno: int, name: str, *, overflow: bool = False) -> bytes | None:
        if not NUM_METAS <= pgno < self.npages:
            self._bad(f"{name}: page number {pgno} is out of range (the file has {self.npages})")
            return None
        if self.seen[pgno]:
            self._bad(f"{name}: page {pgno} is reached twice")
            return None
        self.seen[pgno] = 1
        page = os.pread(self._fd, self.psize, pgno * self.psize)
        if len(page) < self.psize:
            self._bad(f"{name}: page {pgno} lies past the file's end")
            return None
        if _U64.unpack_from(page)[0] != pgno:
            self._bad(
                f"{name}: page {pgno} says it is page {_U64.unpack_from(page)[0]} "
                "(overwritten?)"
            )
            return None
        return page

    def _check_counts(self, name: str, rec: Record, counts: list[int]) -> None:
        branch, leaf, over, entries = counts
        got = (rec.branch, rec.leaf, rec.overflow, rec.entries)
        if got != (branch, leaf, over, entries):
            self._bad(
                f"{name}: its record counts {got[0]} branch, {got[1]} leaf, {got[2]} overflow "
                f"pages and {got[3]} entries; the walk found {branch}, {leaf}, {over}, {entries}"
            )

    # --- free pages ----------------------------------------------------------------

    def _check_free(self, lists: list[bytes]) -> None:
        for data in lists:
            if len(data) < 8:
                self._bad(f"a free-page list of {len(data)} bytes")
                continue
            n = _U64.unpack_from(data)[0]
            if 8 * (n + 1) > len(data):
                self._bad(f"a free-page list claims {n} pages in {len(data)} bytes")
                continue
            for pg in struct.unpack_from(f"<{n}Q", data, 8):
                if not NUM_METAS <= pg < self.npages:
                    self._bad(f"the free-page list names page {pg}, out of range")
                elif self.seen[pg]:
                    self._bad(f"page {pg} is both in use and on the free-page list")
                elif self.free[pg]:
                    self._bad(f"page {pg} is on the free-page list twice")
                else:
                    self.free[pg] = 1

    def _bad(self, text: str) -> None:
        if len(self.problems) >= MAX_LISTED:
            self._more += 1
            if self._more > 10_000:
                raise _Stop
            return
        self.problems.append(f"data.mdb: {text}")
