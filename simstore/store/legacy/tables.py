"""The permutation tables of a store: handles, probe plan, search, bulk fill, checks.

Table t (LMDB database ``t00``, ``t01``, ...; ``dupsort``/``dupfixed``) maps
every stored fingerprint, permuted by :meth:`Layout.shifts` so table t's
header blocks lead, as an 8-byte big-endian key to the internal ids of the
docs holding it. A query permutes its fingerprint for every table in one C
call, range-scans each table for every header value within the layout's
radius, and checks the tail bits of all candidates in one C call
(:class:`simstore.native.core.CandidateVerifier`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ...native import core as _core
from ...native.probe import probe_masks
from ...search.layout import Layout
from ..format import iid_rows
from ..rows import PUT_CHUNK, put_sorted, read_rows, tables_beyond
from .bands import Bands

_PIPELINE_MIN = 100_000  # rows from which a fill sorts the next table in a thread
_PAST_END = b"\xff" * 9  # sorts after every 8-byte key


def table_name(t: int) -> bytes:
    """The LMDB database name of permutation table t."""
    return b"t%02d" % t


class Tables:
    """Handles and query plan of one layout's permutation tables in one environment."""

    name = "dupsort"

    def __init__(self, env: Any, txn: Any, layout: Layout, docs: Any, *, create: bool,
                 bands: Bands | None = None) -> None:
        """bands: the band table of a similarity store (format 2), kept with the tables."""
        self.bands = bands
        self.layout = layout
        self.docs = docs
        n = len(layout.tables)
        self.dbs = [
            env.open_db(table_name(t), txn=txn, create=create, dupsort=True, dupfixed=True)
            for t in range(n)
        ]
        specs = [layout.shifts(t) for t in range(n)]
        self._specs: tuple[bytes, bytes, bytes] = (
            b"".join(s[0] for s in specs),
            b"".join(s[1] for s in specs),
            b"".join(s[2] for s in specs),
        )
        self._tails = [64 - layout.header_bits(t) for t in range(n)]
        self._verify = _core.CandidateVerifier(n)
        self._probes: dict[int, tuple[Any, tuple[tuple[int, Any, int, int], ...]]] = {}
        self._by_k = self._probes.copy()  # the same plans, looked up by query k

    def _probe_plan(self, k: int) -> tuple[Any, tuple[tuple[int, Any, int, int], ...]]:
        """(ranges function, per-table rows) of the probes answering distance k.

        A row is (table index, db, first and past-last index of the table's
        (lo, hi) range keys in the tuple the ranges function returns). Built
        once per radius: a k below the layout's needs a smaller radius.
        """
        got = self._by_k.get(k)
        if got is not None:
            return got
        radius = self.layout.radius_for(k)
        got = self._probes.get(radius)
        if got is None:
            tails = self._tails
            masks = [probe_masks(64 - tail, radius, tail) for tail in tails]
            ranges = _core.query_ranges_fn(*self._specs, bytes(tails), masks)
            rows = []
            pos = len(tails)
            for t, db in enumerate(self.dbs):
                rows.append((t, db, pos, pos + 2 * len(masks[t])))
                pos += 2 * len(masks[t])
            got = self._probes[radius] = (ranges, tuple(rows))
        self._by_k[k] = got
        return got

    # --- single writes -------------------------------------------------------------

    def init(self, txn: Any, next_iid: int = 0) -> None:
        """Nothing to write at creation (the next internal id follows the docs table)."""

    def next_iid(self, txn: Any) -> int:
        """The next internal id: one past the last docs key."""
        cur = txn.cursor(self.docs)
        return int.from_bytes(cur.key(), "big") + 1 if cur.last() else 0

    def _keys(self, fp: int) -> list[bytes]:
        keys = _core.permute_tables(fp, len(self.dbs), *self._specs)
        return [key.to_bytes(8, "big") for key in keys]

    def index(self, txn: Any, iid: bytes, fp: int, keys: list[bytes]) -> None:
        """Put internal id iid under fp's key in every table (and its band keys)."""
        for db, key in zip(self.dbs, self._keys(fp), strict=True):
            txn.put(key, iid, db=db, dupdata=True)
        if self.bands is not None:
            self.bands.index(txn, iid, keys)

    def unindex(self, txn: Any, iid: bytes, fp: int, keys: list[bytes]) -> None:
        """Delete internal id iid from fp's key in every table (and its band keys)."""
        for db, key in zip(self.dbs, self._keys(fp), strict=True):
            txn.delete(key, iid, db=db)
        if self.bands is not None:
            self.bands.unindex(txn, iid, keys)

    def unindex_many(self, txn: Any, docs: list[tuple[bytes, int, list[bytes]]]) -> None:
        """:meth:`unindex` of each (internal id, fp, band keys)."""
        for doc in docs:
            self.unindex(txn, *doc)

    # --- search --------------------------------------------------------------------

    def search(self, txn: Any, q: int, k: int) -> list[tuple[int, bytes]]:
        """(distance, internal id) of every doc within k <= the layout's k of q."""
        ranges_fn, plan = self._by_k.get(k) or self._probe_plan(k)
        ranges, raw = ranges_fn(q)
        cursor = txn.cursor
        # The first (smallest) internal id under a key names its fingerprint:
        # docs with one fingerprint share one id list in every table.
        seen: set[bytes] = set()
        keys: list[bytes] = []
        tabs: list[int] = []
        firsts: list[bytes] = []
        curs = []
        for t, db, start, stop in plan:
            cur = cursor(db)
            curs.append(cur)
            at = None  # the key the cursor is on; _PAST_END once it ran off the table
            for j in range(start, stop, 2):
                if at is None or at < ranges[j]:
                    if not cur.set_range(ranges[j]):
                        break
                    at = cur.key()
                hi = ranges[j + 1]
                while at <= hi:
                    first = cur.value()
                    if first not in seen:
                        seen.add(first)
                        keys.append(at)
                        tabs.append(t)
                        firsts.append(first)
                    at = cur.key() if cur.next_nodup() else _PAST_END
        if not keys:
            return []
        rows = []
        for i, d in self._verify(b"".join(keys), bytes(tabs), raw, k):
            rows.append((d, firsts[i]))
            cur = curs[tabs[i]]
            if cur.set_key(keys[i]) and cur.count() > 1:
                while cur.next_dup():
                    rows.append((d, cur.value()))
        return rows

    # --- bulk fill -------------------------------------------------------------------

    def sorted_rows(
        self, t: int, fps: np.ndarray, iids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Table t's rows (permuted keys, ids; uint64) in key order, ids ascending per key."""
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        iids = np.ascontiguousarray(iids, dtype=np.uint64)
        if len(iids) > 1 and not bool((iids[1:] > iids[:-1]).all()):
            order = np.argsort(iids, kind="stable")  # the C sort keeps id order per key
            fps, iids = fps[order], iids[order]
        return _core.sort_table(fps, iids, *self.layout.shifts(t))

    def _put(self, txn: Any, db: Any, keys: np.ndarray, vals: np.ndarray, pool: Any) -> None:
        """Write sorted rows in chunks, appending while the table allows it.

        With a thread pool, the next chunk's bytes objects are made while
        LMDB writes this one (py-lmdb releases the GIL as it writes).
        """

        def rows(a: int) -> tuple[list[bytes], list[bytes]]:
            b = a + PUT_CHUNK
            return keys[a:b].astype(">u8").view("V8").tolist(), iid_rows(vals[a:b]).tolist()

        cur = txn.cursor(db)
        append = txn.stat(db)["entries"] == 0
        starts = range(0, len(keys), PUT_CHUNK)
        ahead = pool.submit(rows, 0) if pool is not None and starts else None
        for a in starts:
            if ahead is None:
                kl, vl = rows(a)
            else:
                kl, vl = ahead.result()
                if a + PUT_CHUNK < len(keys):
                    ahead = pool.submit(rows, a + PUT_CHUNK)
            append = put_sorted(cur, kl, vl, append=append)
            del kl, vl

    def fill(self, txn: Any, fps: np.ndarray, iids: np.ndarray, before: Any = None,
             bands: Any = None, idh: Any = None) -> None:
        """Insert (permuted fp, internal id) of many docs into every table, in key order,
        and their (n, nbands) 32-bit band keys into the band table.

        Empty tables are filled by appends (pages fill ~100%). ``before()``, if
        given, runs first; for large fills the first table is sorted (in C,
        without the GIL) in a thread meanwhile, and each next table while the
        current one is written.
        """
        if self.bands is not None and bands is not None:
            inner, before = before, None

            def before_and_bands() -> None:
                if inner is not None:
                    inner()
                assert self.bands is not None
                self.bands.fill(txn, bands, iids)

            before = before_and_bands
        if len(fps) < _PIPELINE_MIN:
            if before is not None:
                before()
            for t, db in enumerate(self.dbs):
                self._put(txn, db, *self.sorted_rows(t, fps, iids), pool=None)
            return
        with ThreadPoolExecutor(1) as sorter, ThreadPoolExecutor(1) as chunker:
            ahead = sorter.submit(self.sorted_rows, 0, fps, iids)
            if before is not None:
                before()
            for t, db in enumerate(self.dbs):
                rows = ahead.result()
                if t + 1 < len(self.dbs):
                    ahead = sorter.submit(self.sorted_rows, t + 1, fps, iids)
                self._put(txn, db, *rows, pool=chunker)
                del rows

    def drop(self, txn: Any) -> None:
        """Delete every table of this layout and the band table (for a rebuild)."""
        for db in self.dbs:
            txn.drop(db, delete=True)
        if self.bands is not None:
            self.bands.drop(txn)

    def take_owed(self, txn: Any) -> int:
        """No upkeep is ever owed: every write updates the B-trees in place."""
        return 0

    def repay(self, txn: Any, owed: int) -> int:
        return 0

    def merge_all(self, txn: Any, start: bool) -> tuple[int, bool]:
        return 0, False  # no levels to merge

    def levels(self, txn: Any) -> list[int]:
        """No levels: each table is one B-tree."""
        return []

    # --- checks ------------------------------------------------------------------------

    def check(self, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
        """Problems of the tables: each must hold exactly (permuted fp, id) of every doc."""
        problems = []
        for t, db in enumerate(self.dbs):
            problems.extend(self._check_table(txn, t, db, iids, fps))
        extra = self._extra(txn)
        if extra:
            problems.append(f"tables left over from another layout: {', '.join(extra)}")
        return problems

    def _check_table(
        self, txn: Any, t: int, db: Any, iids: np.ndarray, fps: np.ndarray
    ) -> list[str]:
        name = table_name(t).decode()
        src, width, dst = self.layout.shifts(t)
        perm = _core.permute_blocks(fps, src, width, dst)
        order = np.lexsort((iids, perm))
        want_k, want_v = perm[order], iids[order]
        rows = read_rows(txn, db, 8)
        if rows is None:
            return [f"table {name} holds an entry that is not 8+8 bytes"]
        got_k, got_v = rows
        if np.array_equal(got_k, want_k) and np.array_equal(got_v, want_v):
            return []
        want = set(zip(want_k.tolist(), want_v.tolist(), strict=True))
        got = set(zip(got_k.tolist(), got_v.tolist(), strict=True))
        missing, orphans = len(want - got), len(got - want)
        return [
            f"table {name}: {len(got_k)} entries for {len(want_k)} docs; "
            f"{missing} docs missing, {orphans} orphan entries"
        ]

    def _extra(self, txn: Any) -> list[str]:
        """Names of permutation tables beyond this layout's (left by another layout)."""
        return tables_beyond(txn, b"t", len(self.dbs))
