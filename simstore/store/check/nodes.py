"""The nodes of one B-tree page, read with a bounds check on every field they follow.

Part of the structural check of :mod:`simstore.store.check.pages` (a mixin of its
``FileCheck``): branch, leaf and sub-page nodes, overflow runs, and whether a page's
nodes tile it as LMDB keeps them. The layout is in :mod:`simstore.store.check.lmdbfile`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import lmdbfile as L


class PageNodes:
    """Node readers of :class:`~simstore.store.check.pages.FileCheck`."""

    path: str
    psize: int
    npages: int
    seen: bytearray
    problems: list[str]
    _fd: int
    _more: int
    _free_lists: list[bytes]
    _bad: Callable[[str], None]
    _page: Callable[..., bytes | None]
    _tree: Callable[..., Any]

    def _packed(self, page: bytes, n: int, leaf: bool) -> bool:
        """Whether a page's nodes (already checked one by one) tile it from upper to its end.

        LMDB keeps them so: a deleted node's space is closed up at once. Each
        node takes its header, key and data (8 bytes for a big-data node,
        none in a branch), rounded up to an even size.
        """
        words = np.frombuffer(page, dtype="<u2")
        ptrs = np.sort(words[L.PAGE_HEADER // 2:L.PAGE_HEADER // 2 + n].astype(np.int64))
        at = ptrs >> 1
        size = L.NODE_HEADER + words[at + 3].astype(np.int64)
        if leaf:
            dsize = words[at] | words[at + 1].astype(np.int64) << 16
            size += np.where(words[at + 2] & L.F_BIGDATA, 8, dsize)
        size = (size + 1) & ~1
        upper = int(L.HEADER.unpack_from(page)[4])
        ends = ptrs + size
        return bool(
            ptrs[0] == upper and ends[-1] == self.psize and np.array_equal(ends[:-1], ptrs[1:])
        )

    def _branch_nodes(
        self, name: str, pgno: int, page: bytes, ptrs: tuple[int, ...], upper: int
    ) -> list[int]:
        children = []
        for i, ptr in enumerate(ptrs):
            if not upper <= ptr <= self.psize - L.NODE_HEADER or ptr & 1:
                self._bad(f"{name}: page {pgno} node {i} lies at offset {ptr}, outside its page")
                return []
            lo, hi, flags, ksize = L.NODE.unpack_from(page, ptr)
            if ksize > L.MAX_KEY or ptr + L.NODE_HEADER + ksize > self.psize:
                self._bad(f"{name}: page {pgno} node {i} has a {ksize}-byte key past its page")
                return []
            child = lo | hi << 16 | flags << 32
            if not L.NUM_METAS <= child < self.npages:
                self._bad(f"{name}: page {pgno} node {i} points to page {child}, out of range")
                return []
            children.append(child)
        children.reverse()  # popped in key order
        return children

    def _plain_nodes(self, page: bytes, n: int, upper: int, dups: int) -> tuple[int, list[int]]:
        """(how many leaf nodes are plain and sound, the indices of the others), in numpy.

        Plain: no flags, key and data inside the page (a duplicate: no data).
        The others go through :meth:`_leaf_nodes` one by one.
        """
        words = np.frombuffer(page, dtype="<u2")
        ptrs = words[L.PAGE_HEADER // 2:L.PAGE_HEADER // 2 + n].astype(np.int64)
        ok = (ptrs >= upper) & (ptrs <= self.psize - L.NODE_HEADER) & (ptrs & 1 == 0)
        at = np.where(ok, ptrs >> 1, 0)
        dsize = words[at] | words[at + 1].astype(np.int64) << 16
        ksize = words[at + 3].astype(np.int64)
        ok &= (words[at + 2] == 0) & (ksize <= L.MAX_KEY)
        ok &= ptrs + L.NODE_HEADER + ksize + dsize <= self.psize
        if dups:
            ok &= dsize == 0
        others = np.flatnonzero(~ok).tolist()
        return n - len(others), others

    def _leaf_nodes(
        self, name: str, pgno: int, page: bytes, ptrs: tuple[int, ...], which: Sequence[int],
        upper: int, db_flags: int, counts: list[int], names: dict[bytes, L.Record] | None,
        free: bool, dups: int,
    ) -> None:
        psize = self.psize
        dupsort = bool(db_flags & L.DB_DUPSORT) and not dups
        for i in which:
            ptr = ptrs[i]
            where = f"{name}: page {pgno} node {i}"
            if not upper <= ptr <= psize - L.NODE_HEADER or ptr & 1:
                self._bad(f"{where} lies at offset {ptr}, outside its page")
                return
            lo, hi, flags, ksize = L.NODE.unpack_from(page, ptr)
            dsize = lo | hi << 16
            start = ptr + L.NODE_HEADER + ksize
            if ksize > L.MAX_KEY or start > psize:
                self._bad(f"{where} has a {ksize}-byte key past its page")
                return
            if dups and (flags or dsize):
                self._bad(f"{where}: a duplicate carries data (flags {flags:#x}, {dsize} bytes)")
                return
            if flags & ~(L.F_BIGDATA | L.F_SUBDATA | L.F_DUPDATA) or (
                flags & L.F_BIGDATA and flags != L.F_BIGDATA
            ):
                self._bad(f"{where} has unknown node flags {flags:#x}")
                return
            if flags & L.F_DUPDATA and not dupsort:
                self._bad(f"{where} holds duplicates in a database without them")
                return
            if flags == L.F_SUBDATA and names is None:
                self._bad(f"{where} holds a database record outside the main tree")
                return
            if flags & L.F_BIGDATA:
                if start + 8 > psize:
                    self._bad(f"{where}: its overflow page number lies past its page")
                    return
                first = L.U64.unpack_from(page, start)[0]
                data = self._overflow(where, first, dsize, counts, read=free)
                counts[3] += 1
                if data is not None and free:
                    self._free_lists.append(data)
                continue
            if start + dsize > psize:
                self._bad(f"{where} has {dsize} bytes of data past its page")
                return
            if flags & L.F_SUBDATA:
                if dsize != L.DB_RECORD:
                    self._bad(f"{where} holds a {dsize}-byte database record")
                    return
                sub = L.Record.parse(page, start)
                if flags & L.F_DUPDATA:
                    fixed = bool(db_flags & L.DB_DUPFIXED)
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
                    names[bytes(page[ptr + L.NODE_HEADER:start])] = sub
                    counts[3] += 1
                continue
            if flags & L.F_DUPDATA:
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
        if size < L.PAGE_HEADER:
            self._bad(f"{where}: its {size}-byte sub-page is smaller than a page header")
            return None
        _, pad, kind, lower, upper = L.HEADER.unpack_from(sub)
        fixed = bool(db_flags & L.DB_DUPFIXED)
        want = L.P_SUBP | L.P_LEAF | (L.P_LEAF2 if fixed else 0)
        if kind & ~L.P_STATE != want:
            self._bad(f"{where}: its sub-page has flags {kind:#x}, not {want:#x}")
            return None
        if not L.PAGE_HEADER <= lower <= upper <= size or lower & 1:
            self._bad(f"{where}: its sub-page has bounds lower={lower} upper={upper} of {size}")
            return None
        n = (lower - L.PAGE_HEADER) >> 1
        if n == 0:
            self._bad(f"{where}: its sub-page holds no duplicates")
            return None
        if fixed:
            if pad == 0 or pad > L.MAX_KEY or L.PAGE_HEADER + n * pad > size:
                self._bad(f"{where}: its sub-page holds {n} keys of {pad} bytes in {size}")
                return None
            return n
        for i, ptr in enumerate(struct.unpack_from(f"<{n}H", sub, L.PAGE_HEADER)):
            if not upper <= ptr <= size - L.NODE_HEADER or ptr & 1:
                self._bad(f"{where}: its sub-page's node {i} lies outside it")
                return None
            ksize = L.NODE.unpack_from(sub, ptr)[3]
            if ksize > L.MAX_KEY or ptr + L.NODE_HEADER + ksize > size:
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
        pgno, _, kind, pages = L.OVERFLOW.unpack_from(page)
        need = (L.PAGE_HEADER - 1 + dsize) // self.psize + 1
        if kind & ~L.P_STATE != L.P_OVERFLOW:
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
        if dsize <= self.psize - L.PAGE_HEADER:
            return bytes(page[L.PAGE_HEADER:L.PAGE_HEADER + dsize])
        rest = os.pread(self._fd, dsize - (self.psize - L.PAGE_HEADER), (first + 1) * self.psize)
        return bytes(page[L.PAGE_HEADER:]) + rest
