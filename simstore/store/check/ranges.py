"""The pages a cursor will step on, checked as bytes before LMDB walks them.

LMDB trusts its pages: a cursor stepping to the next leaf asserts (aborts the process)
when it meets a page that is no leaf, and reads outside its map for a node offset or an
overflow run that points past the file. :meth:`TreeGuard.cursor` first reads, with
``os.pread`` (never the map), the pages of one database's B-tree that a forward walk from
a start key meets: the path from the root down, then every leaf in key order (or enough
leaves for a number of records), and checks what LMDB follows in each: its number, kind
and bounds, every node inside its page, overflow runs inside the file. A damaged page is
a CorruptStoreError naming it, never a crash; the full check is
:mod:`simstore.store.check.pages`.

Valid for a read transaction, and for a write transaction as the database was at the last
commit (the tree the main database names): the pages it has copied since came from
checked ones.
"""

from __future__ import annotations

import bisect
import os
from typing import Any

import numpy as np

from ...exceptions import CorruptStoreError
from . import lmdbfile as L


class TreeGuard:
    """Checks the pages of one named database's B-tree a cursor will step on."""

    def __init__(self, env: Any, name: bytes) -> None:
        """env: the open lmdb environment; name: the database's name in the main tree."""
        self._env = env
        self._name = name
        self._dir = env.path()
        self._data = os.path.join(self._dir, "data.mdb")
        self._psize = int(env.stat()["psize"])

    def cursor(self, txn: Any, db: Any, start: bytes = b"", records: int | None = None
               ) -> Any:
        """A cursor of txn on db (not yet positioned), once the pages holding the keys from
        start on (or the first ``records`` of them) check out; CorruptStoreError if not."""
        problem = self.problem(txn, start, records)
        if problem is not None:
            raise CorruptStoreError(
                f"store {self._dir!r} looks damaged: data.mdb: {problem}; restore data.mdb "
                "from a copy (simstore-cli verify says more)")
        return txn.cursor(db)

    def problem(self, txn: Any, start: bytes = b"", records: int | None = None
                ) -> str | None:
        """What is wrong with the first page of the walk that does not check out, or None."""
        raw = txn.get(self._name)  # the database's record in the main tree
        if raw is None or len(raw) != L.DB_RECORD:
            return None  # no such database in this snapshot: LMDB says so itself
        rec = L.Record.parse(raw, 0)
        if rec.root == L.EMPTY:
            return None
        if not 1 <= rec.depth <= L.MAX_DEPTH:
            return f"{self._label}: its record has depth {rec.depth}"
        size = os.path.getsize(self._data)
        npages = min(int(self._env.info()["last_pgno"]) + 1, size // self._psize)
        fd = os.open(self._data, os.O_RDONLY)
        try:
            return _Walk(fd, self._psize, npages, self._label).run(rec, start, records)
        finally:
            os.close(fd)

    @property
    def _label(self) -> str:
        return f"database {self._name.decode('latin-1')!r}"


class _Walk:
    """One forward walk's pages, read and checked in key order."""

    def __init__(self, fd: int, psize: int, npages: int, label: str) -> None:
        self.fd, self.psize, self.npages, self.label = fd, psize, npages, label

    def run(self, rec: L.Record, start: bytes, records: int | None) -> str | None:
        stack: list[tuple[int, int, bytes | None]] = [(rec.root, 1, start or None)]
        leaves = counted = 0
        while stack:
            pgno, level, lo = stack.pop()
            leaf = level == rec.depth
            got = self._page(pgno, L.P_LEAF if leaf else L.P_BRANCH)
            if isinstance(got, str):
                return got
            page, n, upper = got
            where = f"{self.label}: page {pgno}"
            ptrs, ksize, words = _nodes(page, n)
            if not ((ptrs >= upper) & (ptrs & 1 == 0)
                    & (ptrs + L.NODE_HEADER + ksize <= self.psize)).all():
                return f"{where}: a node or its key lies outside the page"
            at = ptrs >> 1
            if not leaf:
                problem = self._branch(where, page, ptrs, ksize,
                                       (words[at], words[at + 1], words[at + 2]), level, lo,
                                       stack)
            else:
                problem = self._leaf(where, page, ptrs, ksize, words, at)
                leaves += 1
                counted += n if leaves > 1 else 0
            if problem is not None:
                return problem
            if records is not None and counted >= records:
                return None
        return None

    def _page(self, pgno: int, want: int) -> tuple[bytes, int, int] | str:
        """(page, nodes, upper) of page pgno if its header checks out, else the problem."""
        if not L.NUM_METAS <= pgno < self.npages:
            return (f"{self.label}: page number {pgno} is out of range (the file holds "
                    f"{self.npages})")
        page = os.pread(self.fd, self.psize, pgno * self.psize)
        num, _, kind, lower, upper = L.HEADER.unpack_from(page)
        kind &= ~L.P_STATE
        if num != pgno:
            return f"{self.label}: page {pgno} says it is page {num} (overwritten?)"
        if kind != want:
            return f"{self.label}: page {pgno} has flags {kind:#x}, not {want:#x}"
        n = (lower - L.PAGE_HEADER) >> 1
        if not L.PAGE_HEADER <= lower <= upper <= self.psize or lower & 1 or n < 1 \
                or (want == L.P_BRANCH and n < 2):
            return f"{self.label}: page {pgno} has bounds lower={lower} upper={upper}"
        return page, n, upper

    def _branch(self, where: str, page: bytes, ptrs: np.ndarray, ksize: np.ndarray,
                halves: Any, level: int, lo: bytes | None,
                stack: list[tuple[int, int, bytes | None]]) -> str | None:
        """Push the children holding keys from lo on (the first one keeps lo)."""
        children = (halves[0].astype(np.int64) | halves[1].astype(np.int64) << 16
                    | halves[2].astype(np.int64) << 32)
        if not ((children >= L.NUM_METAS) & (children < self.npages)).all():
            return f"{where}: a node points to a page out of range (the file holds " \
                   f"{self.npages})"
        first = 0
        if lo is not None:  # the last node whose key is <= lo (node 0's key stands for -inf)
            offs, sizes = ptrs.tolist(), ksize.tolist()
            first = bisect.bisect_right(
                range(1, len(offs)), lo,
                key=lambda i: page[offs[i] + L.NODE_HEADER:offs[i] + L.NODE_HEADER + sizes[i]])
        kids = children.tolist()
        for i in range(len(kids) - 1, first, -1):
            stack.append((kids[i], level + 1, None))
        stack.append((kids[first], level + 1, lo))
        return None

    def _leaf(self, where: str, page: bytes, ptrs: np.ndarray, ksize: np.ndarray,
              words: np.ndarray, at: np.ndarray) -> str | None:
        """Each node's data inside the page, or on an overflow run inside the file."""
        dsize = words[at].astype(np.int64) | words[at + 1].astype(np.int64) << 16
        flags = words[at + 2]
        start = ptrs + L.NODE_HEADER + ksize
        big = flags == L.F_BIGDATA
        if not ((flags == 0) | big).all():
            return f"{where}: a node has flags this database never holds"
        if not (np.where(big, start + 8, start + dsize) <= self.psize).all():
            return f"{where}: a node's data lies past the page"
        for off, size in zip(start[big].tolist(), dsize[big].tolist(), strict=True):
            problem = self._overflow(where, L.U64.unpack_from(page, off)[0], size)
            if problem is not None:
                return problem
        return None

    def _overflow(self, where: str, first: int, size: int) -> str | None:
        need = (L.PAGE_HEADER - 1 + size) // self.psize + 1
        if not L.NUM_METAS <= first or first + need > self.npages:
            return f"{where}: an overflow run at page {first} lies outside the file"
        num, _, kind, pages = L.OVERFLOW.unpack_from(
            os.pread(self.fd, L.OVERFLOW.size, first * self.psize))
        if num != first or kind & ~L.P_STATE != L.P_OVERFLOW or pages < need \
                or first + pages > self.npages:
            return (f"{where}: its overflow page {first} does not check out (number {num}, "
                    f"flags {kind:#x}, {pages} pages for {size} bytes)")
        return None


def _nodes(page: bytes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node offsets, key sizes, the page as u16 words) of a page's n nodes (a node at an
    offset outside the page: its key size is read at the page's end, the caller refuses
    the offset)."""
    words = np.frombuffer(page, dtype="<u2")
    ptrs = words[L.PAGE_HEADER // 2:L.PAGE_HEADER // 2 + n].astype(np.int64)
    ksize = words[np.minimum(ptrs, len(page) - L.NODE_HEADER) // 2 + 3].astype(np.int64)
    return ptrs, ksize, words
