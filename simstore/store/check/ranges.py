"""The pages a cursor will step on, checked as bytes before LMDB walks them.

LMDB trusts its pages: a cursor stepping to the next leaf asserts (aborts the process)
when it meets a page that is no leaf, and reads outside its map for a node offset or an
overflow run that points past the file. :meth:`TreeGuard.check` first reads, with
``os.pread`` (never the map), the pages of one database's B-tree in the order a cursor
walking forward from a start key meets them: the path from the root down, then leaf
after leaf up to the one holding the first key at or past a stop key (or enough leaves
for a number of records), and, for a cursor that steps back from the start, the leaf
before it. It checks what LMDB follows in each: its number, kind and bounds, every node
inside its page, and the overflow runs of the records the walk reads inside the file. A
damaged page is a CorruptStoreError naming it, never a crash; the full check is
:mod:`simstore.store.check.pages`.

:meth:`TreeGuard.check_drop` checks the pages LMDB reads to drop the database.

A page that checks out is remembered (the ``MEMO_PAGES`` last used, with their bytes)
with the transaction of the walk that met it, and taken as checked by a walk in a
transaction at most one apart: their snapshots are at most two commits apart, LMDB never
rewrites a page of a committed tree and reuses a freed page only two commits after the
one that freed it, so a page both trees reach holds the same bytes. Met further apart,
it is read again and taken as checked if its bytes are the same. So a walk a snapshot
repeats (a query's candidates, a writer's next commit) checks only the pages that
changed.

Valid for a read transaction, and for a write transaction as the database was at the last
commit (the tree the main database names): the pages it has copied since came from
checked ones. A lookup by key (``get``) is checked only where a caller asks (LMDB itself
checks the kind of the page it lands on); the neighbours a delete's rebalancing reaches
are not.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable
from typing import Any

import lmdb

from ...exceptions import CorruptStoreError
from . import lmdbfile as L

MEMO_PAGES = 512  # checked pages a guard remembers, with their bytes and keys (~5 MB)


class TreeGuard:
    """Checks the pages of one named database's B-tree a cursor will step on."""

    def __init__(self, env: Any, name: bytes) -> None:
        """env: the open lmdb environment; name: the database's name in the main tree."""
        self._env = env
        self._name = name
        self._dir = env.path()
        self._data = os.path.join(self._dir, "data.mdb")
        self._psize = int(env.stat()["psize"])
        self._label = f"database {name.decode('latin-1')!r}"
        self._record: tuple[bytes, L.Record] | None = None  # the last one parsed
        self._pages = (-1, 0)  # (transaction id, the pages its walks may read)
        self._memo: dict[int, _Page] = {}

    def cursor(self, txn: Any, db: Any, start: bytes = b"", records: int | None = None, *,
               stop: bytes | None = None, back: bool = False) -> Any:
        """A cursor of txn on db (not yet positioned), once :meth:`check` passes."""
        self.check(txn, start, records, stop=stop, back=back)
        return txn.cursor(db)

    def check(self, txn: Any, start: bytes = b"", records: int | None = None, *,
              stop: bytes | None = None, back: bool = False) -> None:
        """CorruptStoreError unless the pages a cursor of txn meets check out: walking from
        start (b"": the first key) through the first key at or past stop, or past
        ``records`` records (neither: to the end); back: stepping back from start too."""
        self._raise(self.problem(txn, start, records, stop=stop, back=back))

    def explain(self, start: bytes, stop: bytes) -> None:
        """After LMDB failed on a lookup of a key from start to stop (its transaction now
        refuses any call): CorruptStoreError naming the damaged page a walk over them in a
        read transaction of its own finds, if one does."""
        try:
            txn = L.begin(self._env)
        except lmdb.Error:
            return  # (the caller's error stands)
        try:
            self.check(txn, start, stop=stop)
        finally:
            txn.abort()

    def check_drop(self, txn: Any) -> None:
        """CorruptStoreError unless the pages LMDB reads to drop (or empty) the database
        check out: all, and every overflow run, when its records spill onto overflow pages
        (it frees each run); else the way to its first leaf, and every branch."""
        self._raise(self._problem(txn, lambda walk, rec: walk.drop(rec)))

    def problem(self, txn: Any, start: bytes = b"", records: int | None = None, *,
                stop: bytes | None = None, back: bool = False) -> str | None:
        """What is wrong with the first page of the walk that does not check out, or None."""
        return self._problem(
            txn, lambda walk, rec: walk.run(rec.root, start, records, stop, back))

    def _problem(self, txn: Any, how: Callable[[_Walk, L.Record], str | None]) -> str | None:
        raw = txn.get(self._name)  # the database's record in the main tree
        if raw is None or len(raw) != L.DB_RECORD:
            return None  # no such database in this snapshot: LMDB says so itself
        if self._record is None or self._record[0] != raw:
            self._record = (bytes(raw), L.Record.parse(raw, 0))
        rec = self._record[1]
        if rec.root == L.EMPTY:
            return None
        if not 1 <= rec.depth <= L.MAX_DEPTH:
            return f"{self._label}: its record has depth {rec.depth}"
        walk = _Walk(self, int(txn.id()), rec.depth)
        try:
            return how(walk, rec)
        finally:
            walk.close()

    def _raise(self, problem: str | None) -> None:
        if problem is not None:
            raise CorruptStoreError(
                f"store {self._dir!r} looks damaged: data.mdb: {problem}; restore data.mdb "
                "from a copy (simstore-cli verify says more)")

    def pages(self, tid: int, fresh: bool = False) -> int:
        """Pages a walk in transaction tid may read: the last commit's, within the file
        (as found in tid before, unless fresh: a write and a read after its commit share it)."""
        if self._pages[0] != tid or fresh:
            size = os.path.getsize(self._data)
            self._pages = (tid, min(int(self._env.info()["last_pgno"]) + 1, size // self._psize))
        return self._pages[1]


class _Page:
    """A page that checked out: its bytes and keys, a branch's children, a leaf's records on
    overflow pages, and the transaction that last met it."""

    __slots__ = ("big", "keys", "kids", "leaf", "ok", "page", "pgno", "seen")

    def __init__(self, pgno: int, page: bytes, keys: list[bytes], seen: int,
                 kids: list[int] | None, big: list[tuple[int, int, int]]) -> None:
        self.pgno, self.page, self.keys, self.seen = pgno, page, keys, seen
        self.leaf = kids is None
        self.kids = kids or []
        self.big = big  # (node, first overflow page, bytes), by node
        self.ok: set[int] = set()  # nodes whose overflow run checked out

    def at(self, key: bytes) -> int:
        """The first node of a leaf whose key is >= key (its node count: none)."""
        return bisect.bisect_left(self.keys, key)

    def child(self, key: bytes | None) -> int:
        """The child of a branch holding key (node 0's key stands for -inf; None: the last)."""
        if key is None:
            return len(self.kids) - 1
        return bisect.bisect_right(self.keys, key, 1) - 1


class _Walk:
    """One walk's pages, read (or remembered) and checked in the order a cursor meets them."""

    def __init__(self, guard: TreeGuard, tid: int, depth: int) -> None:
        self.guard, self.memo, self.psize = guard, guard._memo, guard._psize
        self.label, self.tid, self.depth = guard._label, tid, depth
        self.fd = -1
        self._npages = -1

    @property
    def npages(self) -> int:
        """The pages this walk may read (found when it first reads one)."""
        if self._npages < 0:
            self._npages = self.guard.pages(self.tid)
        return self._npages

    def _within(self, first: int, count: int) -> bool:
        """Whether pages first..first + count - 1 lie within the file."""
        if L.NUM_METAS <= first and first + count <= self.npages:
            return True
        self._npages = self.guard.pages(self.tid, fresh=True)
        return L.NUM_METAS <= first and first + count <= self._npages

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)

    def run(self, root: int, start: bytes, records: int | None, stop: bytes | None,
            back: bool) -> str | None:
        path: list[list[Any]] = []  # [branch page, node index] from the root down
        leaf = self._down(root, 1, path, start)
        if isinstance(leaf, str):
            return leaf
        a = leaf.at(start) if start else 0
        if back:  # the record before start: here, or the last of the leaf before
            before = self._side([list(step) for step in path], right=False) if not a else leaf
            if isinstance(before, str):
                return before
            if before is not None:
                problem = self._values(before, len(before.keys) - 1 if before is not leaf
                                       else a - 1, 0)
                if problem is not None:
                    return problem
        counted = 0
        while True:
            n = len(leaf.keys)
            end = n if stop is None else leaf.at(stop)
            if a < n:
                problem = self._values(leaf, a, min(end, n - 1) - a)
                if problem is not None:
                    return problem
                counted += min(end, n - 1) - a + 1
            if end < n or records is not None and counted > records:
                return None
            got = self._side(path, right=True)
            if got is None or isinstance(got, str):
                return got
            leaf, a = got, 0

    def drop(self, rec: L.Record) -> str | None:
        """The pages LMDB's drop reads (see :meth:`TreeGuard.check_drop`)."""
        if rec.overflow:
            return self.run(rec.root, b"", None, None, False)
        problem = self.run(rec.root, b"", 0, None, False)
        stack = [(rec.root, 1)] if rec.depth > 1 else []
        while problem is None and stack:
            pgno, level = stack.pop()
            page = self._page(pgno, False)
            if isinstance(page, str):
                return page
            if level + 1 < self.depth:
                stack.extend((kid, level + 1) for kid in page.kids)
        return problem

    def _down(self, pgno: int, level: int, path: list[list[Any]], key: bytes | None
              ) -> _Page | str:
        """From page pgno at level down to the leaf holding key (None: the last leaf), the
        branches passed appended to path."""
        while True:
            page = self._page(pgno, level == self.depth)
            if isinstance(page, str) or page.leaf:
                return page
            i = page.child(key)
            path.append([page, i])
            pgno, level = page.kids[i], level + 1

    def _side(self, path: list[list[Any]], right: bool) -> _Page | str | None:
        """The leaf after (right) or before the one path leads to, path moved to it, as
        LMDB's cursor moves; None at the tree's end."""
        while path and not (path[-1][1] + 1 < len(path[-1][0].kids) if right
                            else path[-1][1] > 0):
            path.pop()
        if not path:
            return None
        step = path[-1]
        step[1] += 1 if right else -1
        return self._down(step[0].kids[step[1]], len(path) + 1, path, b"" if right else None)

    def _page(self, pgno: int, leaf: bool) -> _Page | str:
        """Page pgno as a checked leaf (or branch): from the memo when a transaction one
        apart met it, or when its bytes are those checked; else the problem."""
        memo = self.memo
        got = memo.pop(pgno, None)
        page = None
        if got is not None and got.leaf == leaf:
            if abs(self.tid - got.seen) > 1:
                page = self._read(pgno, self.psize)
            if page is None or page == got.page:
                got.seen = self.tid
                memo[pgno] = got  # (the last used: kept longest)
                return got
        if not self._within(pgno, 1):
            return (f"{self.label}: page number {pgno} is out of range (the file holds "
                    f"{self.npages})")
        checked = self._check(pgno, leaf, page or self._read(pgno, self.psize))
        if isinstance(checked, _Page):
            if len(memo) >= MEMO_PAGES:
                del memo[next(iter(memo))]  # the least recently used
            memo[pgno] = checked
        return checked

    def _read(self, pgno: int, size: int) -> bytes:
        if self.fd < 0:
            self.fd = os.open(self.guard._data, os.O_RDONLY)
        return os.pread(self.fd, size, pgno * self.psize)

    def _check(self, pgno: int, leaf: bool, page: bytes) -> _Page | str:
        """Check page pgno (its bytes: page): its header and nodes."""
        psize = self.psize
        num, _, kind, lower, upper = L.HEADER.unpack_from(page)
        kind &= ~L.P_STATE
        want = L.P_LEAF if leaf else L.P_BRANCH
        where = f"{self.label}: page {pgno}"
        if num != pgno:
            return f"{where} says it is page {num} (overwritten?)"
        if kind != want:
            return f"{where} has flags {kind:#x}, not {want:#x}"
        n = (lower - L.PAGE_HEADER) >> 1
        if not L.PAGE_HEADER <= lower <= upper <= psize or lower & 1 or n < 1 \
                or (not leaf and n < 2):
            return f"{where} has bounds lower={lower} upper={upper}"
        keys: list[bytes] = []
        kids: list[int] = []
        big: list[tuple[int, int, int]] = []
        node, last = L.NODE.unpack_from, psize - L.NODE_HEADER
        for i, ptr in enumerate(struct.unpack_from(f"<{n}H", page, L.PAGE_HEADER)):
            if ptr < upper or ptr & 1 or ptr > last:
                return f"{where}: a node or its key lies outside the page"
            low, high, flags, ksize = node(page, ptr)
            end = ptr + L.NODE_HEADER + ksize
            if end > psize:
                return f"{where}: a node or its key lies outside the page"
            keys.append(page[ptr + L.NODE_HEADER:end])
            if not leaf:  # the child's page number: low, high, then the flags' 16 bits
                kids.append(low | high << 16 | flags << 32)
            elif flags == L.F_BIGDATA:
                if end + 8 > psize:
                    return f"{where}: a node's data lies past the page"
                big.append((i, L.U64.unpack_from(page, end)[0], low | high << 16))
            elif flags:
                return f"{where}: a node has flags this database never holds"
            elif end + (low | high << 16) > psize:
                return f"{where}: a node's data lies past the page"
        if kids and not (self._within(min(kids), 1) and self._within(max(kids), 1)):
            return f"{where}: a node points to a page out of range (the file holds " \
                   f"{self.npages})"
        return _Page(pgno, page, keys, self.tid, None if leaf else kids, big)

    def _values(self, leaf: _Page, first: int, more: int) -> str | None:
        """Check the overflow runs of leaf's records first..first + more (the ones a cursor
        reads there)."""
        big = leaf.big
        i = bisect.bisect_left(big, first, key=lambda run: run[0])
        while i < len(big) and big[i][0] <= first + more:
            node, pgno, size = big[i]
            if node not in leaf.ok:
                problem = self._overflow(leaf, pgno, size)
                if problem is not None:
                    return problem
                leaf.ok.add(node)
            i += 1
        return None

    def _overflow(self, leaf: _Page, first: int, size: int) -> str | None:
        where = f"{self.label}: page {leaf.pgno}"
        need = (L.PAGE_HEADER - 1 + size) // self.psize + 1
        if not self._within(first, need):
            return f"{where}: an overflow run at page {first} lies outside the file"
        num, _, kind, pages = L.OVERFLOW.unpack_from(self._read(first, L.OVERFLOW.size))
        if num != first or kind & ~L.P_STATE != L.P_OVERFLOW or pages < need \
                or not self._within(first, pages):
            return (f"{where}: its overflow page {first} does not check out (number {num}, "
                    f"flags {kind:#x}, {pages} pages for {size} bytes)")
        return None
