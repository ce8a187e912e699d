"""A structural check of a store's data.mdb, read as plain bytes: no LMDB call walks it.

LMDB trusts its pages: a branch page where a leaf belongs, a child number
past the file's end or a node offset outside its page makes it abort
(``assert``), read outside the map (SIGSEGV/SIGBUS) or loop. This module
walks the B-trees of one committed snapshot with bounds checks on every
field it follows, so a damaged page is reported as a sentence instead.
It reads the file with ``os.pread`` (never a memory map), so nothing it
reads can kill the process.

The layout is written down in :mod:`simstore.store.check.lmdbfile`.

Checked: both meta pages (the one in use, and the older one, which the
next commit overwrites: consecutive transaction ids, fields that fit the file); in
the snapshot's meta, every tree: page numbers in range and equal to the
number in the page's header, each page reached once, the page kind each
level needs, depth equal to the record's, node offsets and sizes inside
their page, nodes tiling the page from ``upper`` to its end (LMDB closes
up a deleted node's space at once), overflow runs inside the file,
sub-pages and nested duplicate trees, the flags LMDB defines, key sizes
within LMDB's limit, entry counts (and page counts, except of databases
with duplicates, where LMDB lets them drift); free pages in range, not in
use and not listed twice; every page either in use or free, and pages
past the file's end free. Not checked: key order, and the bytes of keys
and values (verify's record checks cross-check those).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

from . import lmdbfile as L
from .nodes import PageNodes

MAX_LISTED = 20
MAX_MAP = 1 << 47  # bytes: more than a 64-bit process can map on common systems
_PAGE_SIZES = frozenset(1 << i for i in range(9, 17))


class _Stop(Exception):
    """Too many problems: the walk ends."""


class FileCheck(PageNodes):
    """The structural check of one data.mdb.

    After :meth:`run`: ``seen`` and ``free`` mark the pages in use and the
    free ones (a byte per page), ``names`` maps each named database to its
    record.
    """

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
        self.names: dict[bytes, L.Record] = {}

    # --- entry points ---------------------------------------------------------------

    def run(self, txnid: int, *, full: bool = True) -> list[str] | None:
        """Problems of the snapshot of transaction txnid; None if no meta page holds it.

        ``full=False`` checks what opening a store reads (the meta pages, the
        main tree, the ``meta`` database), every other database's root page,
        and the free-page tree (so that a file ending before the last page is
        told from a truncated one).
        """
        metas = L.read_metas(self.path, self.psize)
        slot = next((i for i, m in enumerate(metas) if m is not None and m.txnid == txnid), -1)
        if slot < 0:
            return None
        meta = metas[slot]
        assert meta is not None
        self.problems = []
        self._more = 0
        self._free_lists = []
        size = os.path.getsize(self.path)
        self.npages = meta.last_pg + 1
        self.seen = bytearray(self.npages)
        self.free = bytearray(self.npages)
        try:
            self._check_metas(meta, slot, metas[1 - slot], size)
            if not self.problems:
                self._fd = os.open(self.path, os.O_RDONLY)
                try:
                    self._walk_all(meta, full, size)
                finally:
                    os.close(self._fd)
                    self._fd = -1
        except _Stop:
            pass
        if self._more:
            self.problems.append(f"... and {self._more} more structural problems")
        return self.problems

    # --- meta ----------------------------------------------------------------------

    def _check_metas(self, meta: L.Meta, slot: int, other: L.Meta | None, size: int) -> None:
        """The snapshot's meta page, and the other one (LMDB checks little of either)."""
        label = f"meta page {slot} (the one in use)"
        what = meta_fields(meta, self.psize)
        if what:
            self._bad(f"{label} holds {what}")
        if size < L.NUM_METAS * self.psize:
            self._bad(f"the file has {size} bytes, less than its two meta pages")
        if meta.txnid and meta.txnid & 1 != slot:
            self._bad(f"{label} holds transaction {meta.txnid}, which LMDB writes to the other")
        old = f"meta page {1 - slot} (the older one; the next commit rewrites it)"
        if other is None:
            self._bad(f"{old} is damaged: its header or magic number is wrong")
            return
        if other.txnid > meta.txnid:
            return  # a writer committed since the snapshot was pinned
        want = meta.txnid - 1 if meta.txnid else 0
        if other.txnid != want:
            self._bad(
                f"the meta pages hold transactions {meta.txnid} and {other.txnid}; LMDB "
                f"writes consecutive ones ({other.txnid} is damaged, or {meta.txnid} is)"
            )
        what = meta_fields(other, self.psize)
        if what is None and other.last_pg > meta.last_pg:
            what = f"last page {other.last_pg}, past the newer one's {meta.last_pg}"
        if what:
            self._bad(f"{old} is damaged: it holds {what}")

    def _walk_all(self, meta: L.Meta, full: bool, size: int) -> None:
        names = self.names = self._tree("the main tree", meta.main, main=True)
        for name, rec in sorted(names.items()):
            label = f"database {name.decode('latin-1')!r}"
            if full or name == b"meta":
                self._tree(label, rec)
            else:
                self._root(label, rec)
        self._tree("the free-page tree", meta.free, free=True)
        self._check_free(self._free_lists)
        if self.problems:
            return
        # The file may end before the last page: pages a transaction took and gave
        # back are never written. They must all be free pages.
        end = min(size // self.psize, self.npages)
        past = [pg for pg in range(end, self.npages) if not self.free[pg]]
        if past:
            self._bad(
                f"the file has {size} bytes but page {past[0]} past its end is in use "
                f"(truncated?); {len(past)} such pages"
            )
        elif full:
            lost = self.npages - L.NUM_METAS - sum(self.seen) - sum(self.free)
            if lost:
                self._bad(f"{lost} pages are neither in use nor on the free-page list")

    def _root(self, name: str, rec: L.Record) -> None:
        """The root page of a tree: in range, inside the file, of the kind its depth needs."""
        if rec.root == L.EMPTY or not 1 <= rec.depth <= L.MAX_DEPTH:
            return
        page = self._page(rec.root, name)
        if page is not None:
            kind = L.HEADER.unpack_from(page)[2] & ~L.P_STATE
            want = L.P_BRANCH if rec.depth > 1 else L.P_LEAF
            if kind != want:
                self._bad(f"{name}: its root page {rec.root} has flags {kind:#x}, not {want:#x}")

    # --- trees ---------------------------------------------------------------------

    def _tree(
        self, name: str, rec: L.Record, *, main: bool = False, free: bool = False,
        dups: int = 0,
    ) -> dict[bytes, L.Record]:
        """Walk one tree; returns the named database records (main tree) or {}.

        ``dups``: walking the duplicates' tree of a key (1) or of a
        fixed-size duplicates key (2), whose leaves hold bare keys.
        """
        names: dict[bytes, L.Record] = {}
        allowed = L.DUPS_TREE_FLAGS if dups else L.DB_FLAGS
        if rec.flags & ~allowed or (
            not dups and rec.flags & L.DUP_ONLY and not rec.flags & L.DB_DUPSORT
        ):
            self._bad(f"{name}: its record has unknown flags {rec.flags:#x}")
            return names
        if rec.root == L.EMPTY:
            if rec.depth or rec.entries or rec.branch or rec.leaf or rec.overflow:
                self._bad(f"{name}: its record says empty but counts {rec.entries} entries")
            return names
        if not 1 <= rec.depth <= L.MAX_DEPTH:
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
            kind = L.HEADER.unpack_from(page)[2] & ~L.P_STATE
            lower, upper = L.HEADER.unpack_from(page)[3:]
            leaf = level == rec.depth
            want = (L.P_LEAF | L.P_LEAF2 if fixed else L.P_LEAF) if leaf else L.P_BRANCH
            if kind != want:
                self._bad(
                    f"{name}: page {pgno} at level {level} of {rec.depth} has flags "
                    f"{kind:#x}, not {want:#x} ({'leaf' if leaf else 'branch'})"
                )
                continue
            if not L.PAGE_HEADER <= lower <= upper <= self.psize or lower & 1:
                self._bad(f"{name}: page {pgno} has bounds lower={lower} upper={upper}")
                continue
            n = (lower - L.PAGE_HEADER) >> 1
            if n == 0 or (not leaf and n < 2):
                self._bad(f"{name}: page {pgno} holds {n} entries")
                continue
            counts[0 if not leaf else 1] += 1
            if fixed and leaf:
                if L.PAGE_HEADER + n * fixed > self.psize:
                    self._bad(f"{name}: page {pgno} holds more {fixed}-byte keys than fit")
                    continue
                counts[3] += n
                continue
            ptrs = struct.unpack_from(f"<{n}H", page, L.PAGE_HEADER)
            before = len(self.problems) + self._more
            if not leaf:
                for child in self._branch_nodes(name, pgno, page, ptrs, upper):
                    stack.append((child, level + 1))
            else:
                if main or free:
                    rest: Sequence[int] = range(n)
                else:
                    plain, rest = self._plain_nodes(page, n, upper, dups)
                    counts[3] += plain
                if rest:
                    self._leaf_nodes(
                        name, pgno, page, ptrs, rest, upper, rec.flags, counts,
                        names if main else None, free, dups,
                    )
            if len(self.problems) + self._more == before and not self._packed(page, n, leaf):
                self._bad(
                    f"{name}: page {pgno}: its nodes do not tile it from upper={upper} to its "
                    "end (a size or offset field is damaged)"
                )
        self._check_counts(name, rec, counts)
        return names

    def _page(self, pgno: int, name: str, *, overflow: bool = False) -> bytes | None:
        if not L.NUM_METAS <= pgno < self.npages:
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
        if L.U64.unpack_from(page)[0] != pgno:
            self._bad(
                f"{name}: page {pgno} says it is page {L.U64.unpack_from(page)[0]} "
                "(overwritten?)"
            )
            return None
        return page

    def _check_counts(self, name: str, rec: L.Record, counts: list[int]) -> None:
        # LMDB does not always keep a duplicates database's page counts exact when
        # the tree of one key's duplicates shrinks: only its entries are compared.
        branch, leaf, over, entries = counts
        if rec.flags & L.DB_DUPSORT:
            branch, leaf, over = rec.branch, rec.leaf, rec.overflow
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
            n = L.U64.unpack_from(data)[0]
            if 8 * (n + 1) > len(data):
                self._bad(f"a free-page list claims {n} pages in {len(data)} bytes")
                continue
            for pg in struct.unpack_from(f"<{n}Q", data, 8):
                if not L.NUM_METAS <= pg < self.npages:
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


def meta_fields(meta: L.Meta, psize: int) -> str | None:
    """What is wrong with one meta page's own fields (as "a ... "), or None."""
    if meta.version != L.DATA_VERSION:
        return f"data version {meta.version}, not {L.DATA_VERSION}"
    if meta.free.pad != psize:
        return f"page size {meta.free.pad}, not {psize}"
    if meta.last_pg < L.NUM_METAS - 1:
        return f"last page {meta.last_pg}"
    if not (meta.last_pg + 1) * psize <= meta.mapsize <= MAX_MAP:
        return f"map size {meta.mapsize} for {meta.last_pg + 1} pages"
    for name, rec in (("free-page tree", meta.free), ("main tree", meta.main)):
        empty = rec.root == L.EMPTY
        if (
            rec.flags & ~L.DB_FLAGS or rec.depth > L.MAX_DEPTH or empty != (rec.depth == 0)
            or not empty and not L.NUM_METAS <= rec.root <= meta.last_pg
        ):
            return f"a damaged {name} record (root {rec.root}, depth {rec.depth})"
    return None


def meta_problems(path: str) -> list[str]:
    """What is wrong with a store's meta pages, read as bytes; [] if nothing is seen.

    For when LMDB refuses to open data.mdb with a bare system error (a
    damaged map size makes it fail with ENOMEM or EINVAL): this says why.
    """
    data = os.path.join(path, "data.mdb")
    try:
        with open(data, "rb") as fh:
            head = fh.read(L.PAGE_HEADER + L.META_SIZE)
    except OSError:
        return []
    if len(head) < L.PAGE_HEADER + L.META_SIZE:
        return [f"data.mdb: the file has {len(head)} bytes, less than a meta page"]
    psize = L.Meta.parse(head).free.pad
    if L.Meta.parse(head).magic != L.MAGIC or psize not in _PAGE_SIZES:
        return ["data.mdb: meta page 0 is damaged: its magic number or page size is wrong"]
    metas = L.read_metas(data, psize)
    problems = []
    for slot, meta in enumerate(metas):
        what = "a wrong header or magic number" if meta is None else meta_fields(meta, psize)
        if what:
            problems.append(f"data.mdb: meta page {slot} holds {what}")
    a, b = metas
    if a is not None and b is not None and abs(a.txnid - b.txnid) > 1:
        problems.append(
            f"data.mdb: the meta pages hold transactions {a.txnid} and {b.txnid}; LMDB "
            "writes consecutive ones"
        )
    return problems


def check_alone(path: str) -> list[str]:
    """Structural problems of the newest snapshot of the store at path, every page read as
    bytes before any LMDB call maps the file; [] when none are found.

    For a store no other process writes (its exclusive lock held): what opening reads,
    then the full walk of :class:`FileCheck`, so a command that walks every record
    (``upgrade``) never meets a damaged page inside LMDB.
    """
    problems = meta_problems(path)
    if problems:
        return problems
    data = os.path.join(path, "data.mdb")
    with open(data, "rb") as fh:
        psize = L.Meta.parse(fh.read(L.PAGE_HEADER + L.META_SIZE)).free.pad
    txnid = max(m.txnid for m in L.read_metas(data, psize) if m is not None)
    return FileCheck(data, psize).run(txnid) or []


def check_pinned(env: Any, path: str) -> tuple[Any, list[str]] | None:
    """A read transaction of env (the store at ``path``) and the structural problems of
    its snapshot, every page read as bytes ([]: sound, LMDB may walk it); None when
    writers kept replacing the snapshot before its pages were read. The caller ends the
    transaction."""
    data = os.path.join(path, "data.mdb")
    psize = int(env.stat()["psize"])
    for _ in range(L.ATTEMPTS):
        txn = L.begin(env)
        try:
            found = FileCheck(data, psize).run(txn.id())
        except BaseException:
            txn.abort()
            raise
        if found is not None:
            return txn, found
        txn.abort()  # two commits replaced the snapshot's meta page: again
    return None


def check_open(env: Any, path: str) -> list[str]:
    """Structural problems of what opening a store reads; [] when none are found.

    ``env`` is the just-opened lmdb environment of the store at ``path``.
    A read transaction pins the snapshot while its pages are read (a writer
    in another process may commit meanwhile). Cost: a few pages plus the
    free-page tree, whatever the store's size.
    """
    data = os.path.join(path, "data.mdb")
    psize = int(env.stat()["psize"])
    for _ in range(L.ATTEMPTS):
        txn = L.begin(env)
        try:
            problems = FileCheck(data, psize).run(txn.id(), full=False)
        finally:
            txn.abort()
        if problems is not None:
            return problems
    return []  # the meta pages kept changing under us: leave it to LMDB
