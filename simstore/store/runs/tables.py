"""Run tables: the permutation tables, band keys and ids as sorted runs in levels, probed
in place.

Every run database (the tables ``r00``..., ``rbands`` in a similarity store, ``rids``)
is derived from the docs table: the docs split by internal id into levels, oldest first,
each holding the sorted entries of its docs as runs (:mod:`simstore.store.runs.format`), and
the recent docs past the last level, read from the docs table and scanned by popcount.
An add writes only its docs record and the state record; more than ``RECENT_MAX`` recent
docs become a level, and levels merge in tiers a slice per write
(:mod:`simstore.store.runs.merges`), so a commit's cost is bounded by its own size. A removed
doc's entries stay, stale, with a tombstone (:mod:`simstore.store.runs.removed`) until a
merge of their level leaves them out; queries drop hits without a docs record (internal
ids are never reused). docs/architecture.md tells the whole of it.

**Pointers kept across transactions.** A reader keeps pointers into LMDB's map to the
runs it read (taken in a read transaction begun with ``buffers=True``) and uses them in a
later transaction while both hold:

1. that transaction's state gives the run's level the same generation, or a later
   generation of the same lineage whose index still names the run: a level is never
   rewritten under one generation, and within a lineage a run record is only ever added
   or deleted, never rewritten (:func:`~simstore.store.runs.format.next_gen`); LMDB changes
   no committed page in place, nor reuses one while a snapshot that references it is
   read; and
2. the map has not been remapped in this process since (the environment's epoch, moved
   on by every growth, reopen and aborted write).

A run record shorter than a page is copied rather than pointed at: it may sit inside a
leaf page, which LMDB copies elsewhere when a neighbouring record changes. The level
cache (``LevelCache.sync``) checks both before every probe and opens again a level whose
generation or epoch changed; a write transaction whose own merge changed a level reads
it as a private copy.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ...native import core as _core, probe as _probe
from ...search.layout import Layout
from ..check.ranges import TreeGuard
from ..env.readahead import release_map
from ..format import PAGE, id_hashes, iid_bytes
from .cache import LevelCache, OneDoc
from .check import check_bands, check_ids, check_tables
from .format import (
    BANDS_DB,
    EMPTY,
    IDS_DB,
    STATE_DB,
    STATE_KEY,
    Job,
    Level,
    State,
    band_rows,
    drop_level,
    mix,
    mix_xor,
    new_gen,
    put_runs,
    table_name,
)
from .merges import Merger
from .removed import drop_tombstones, put_tombstones, read_job, tombstones
from .rows import tables_beyond
from .size import run_capacity

__all__ = ["RunTables", "State"]

# A run's record fills at most RUN_PAGES overflow pages (LMDB heads the first with 16
# bytes). A record of more than a page needs that many free pages in a row; runs of one
# size, written whole (a merge writes full runs only: Merger._slice), fit the ranges other
# runs freed, so the file stays small under churn (docs/bench/journal.md, "Disk under
# churn"; longer and shorter runs under "Tried and not kept").
RUN_PAGES = 8
RUN_ENTRIES = run_capacity(RUN_PAGES * PAGE - 16)  # 2,557 keys: a run is 32 KB
# ... except in a level of BULK_DOCS docs or more (the bulk of a store: written whole
# or by a merge of every level, seldom rewritten): there runs of BULK_RUN_PAGES pages
# cut the run directories a wide query touches, while the small levels that churn keep
# the short runs that fit freed ranges (docs/bench/journal.md, "Runs sized per level").
BULK_RUN_PAGES = 32
BULK_RUN_ENTRIES = run_capacity(BULK_RUN_PAGES * PAGE - 16)  # 9,555 keys: 128 KB
BULK_DOCS = 1 << 19
RECENT_MAX = 4096  # recent docs scanned by popcount before they become a level
# While a merge is under way, flushes refill the newest level up to FOLD_FLUSHES *
# RECENT_MAX ids (RunTables._flush) instead of adding a level every query probes; each
# fold frees the level it rewrites, which costs file under churn, so folds stay few
# (docs/bench/journal.md, "Writes and merges").
FOLD_FLUSHES = 4


def run_entries(docs: int) -> int:
    """Keys per run in a level of about ``docs`` docs (see RUN_PAGES, BULK_RUN_PAGES)."""
    return BULK_RUN_ENTRIES if docs >= BULK_DOCS else RUN_ENTRIES


class _Walked(NamedTuple):
    iids: np.ndarray
    fps: np.ndarray
    bands: np.ndarray | None  # (n, nbands) uint32 band keys of a similarity store
    idh: np.ndarray | None = None  # their ids' hashes (uint64), unless not asked for


def walk_docs(guard: TreeGuard, docs: Any, codec: Any, nbands: int, txn: Any, start: int,
              ids: bool = True) -> _Walked:
    """(iids, fps, band keys, id hashes unless not ids) of the docs with iid >= start in
    the docs table docs, in iid order (their pages checked by guard first: a damaged one
    is CorruptStoreError, not an abort inside LMDB's cursor)."""
    cur = guard.cursor(txn, docs, iid_bytes(start))
    sig = bool(nbands)
    if not cur.set_range(iid_bytes(start)):
        return _Walked(EMPTY, EMPTY, np.empty((0, nbands), dtype=np.uint32) if sig else None,
                       EMPTY if ids else None)
    cols = codec.walk(cur.iternext(), with_ids=ids, with_bands=sig)
    return _Walked(cols.iids, cols.fps, cols.bands if sig else None,
                   id_hashes(cols.encs) if cols.encs is not None else None)


class RunTables:
    """Handles, cache and query plan of one layout's run tables in one environment:
    a :class:`~simstore.store.engine.TableEngine`. It owns its level cache (``cache``)
    and its merger (``merger``, which writes through this object's RunWriter methods:
    state, put_state, put_rows, run_size)."""

    name = "runs"

    def __init__(self, env: Any, txn: Any, layout: Layout, docs: Any, codec: Any, *,
                 create: bool, nbands: int = 0,
                 map_epoch: Callable[[], int] | None = None) -> None:
        """nbands: band keys a doc has (a similarity store; 0: none). map_epoch: the
        environment's epoch (changes whenever this process remaps); without it levels
        are read as private copies, never in place."""
        self.layout = layout
        n = len(layout.tables)
        self.nbands = nbands
        self.dbs = [env.open_db(table_name(t), txn=txn, create=create) for t in range(n)]
        # every run database: the tables, then the band entries of a similarity store,
        # then the ids; bands_at and ids_at: their places (bands_at None: no bands)
        names = [table_name(t) for t in range(n)] + ([BANDS_DB] if nbands else []) + [IDS_DB]
        self.run_dbs = self.dbs + [env.open_db(name, txn=txn, create=create)
                                   for name in names[n:]]
        # the pages a cursor of each run database (and of the meta database) steps on
        self.run_guards = [TreeGuard(env, name) for name in names]
        self._meta_guard = TreeGuard(env, STATE_DB)
        self.bands_at = n if nbands else None
        self.ids_at = len(self.run_dbs) - 1
        self.per_doc = [1] * n + ([nbands] if nbands else []) + [1]
        self._meta = env.open_db(STATE_DB, txn=txn, create=create)
        self._docs = docs
        self._docs_guard = TreeGuard(env, b"docs")
        self._codec = codec
        self._in_place = map_epoch is not None
        self._data_file = os.path.join(env.path(), "data.mdb")
        self.specs = [layout.shifts(t) for t in range(n)]
        self._hbits = [layout.header_bits(t) for t in range(n)]
        self._radius = {k: layout.radius_for(k) for k in range(layout.max_k + 1)}
        self._prober = _probe.Prober(self.specs, self._hbits)
        self._memo: tuple[bytes, State] | None = None  # the last state record written
        self.cache = LevelCache(
            env, self._meta, self.dbs, self.run_dbs, self.run_guards, bands_at=self.bands_at,
            ids_at=self.ids_at, prober=self._prober,
            # Band entries (band << 32 | key32) and id hashes are looked up exactly
            bprober=_probe.Prober([(b"\0", b"\x40", b"\0")], [64]) if nbands else None,
            iprober=_probe.Prober([(b"\0", b"\x40", b"\0")], [64]),
            walk=functools.partial(walk_docs, self._docs_guard, docs, codec, nbands),
            map_epoch=map_epoch)
        # the cache and the merger hold no strong reference back: a dropped store's
        # tables (and their LMDB environment) go at once, not at the next collection
        self.merger = Merger(weakref.proxy(self), self._meta, self._meta_guard, docs)

    # --- state ---------------------------------------------------------------------------

    def state(self, txn: Any) -> State:
        """The run tables' state as this transaction sees it."""
        raw = txn.get(STATE_KEY, None, self._meta)
        memo = self._memo
        if memo is not None and raw is not None and raw == memo[0]:
            return memo[1]  # the record this process last wrote (a run of writes)
        return State.unpack(raw)

    def put_state(self, txn: Any, st: State) -> None:
        """Write the state record."""
        raw = st.pack()
        txn.put(STATE_KEY, raw, db=self._meta)
        self._memo = (raw, st)

    def init(self, txn: Any, next_iid: int = 0) -> None:
        """Write the state of tables without levels (at creation, or a rebuild's start).

        next_iid: the next internal id to hand out (a rebuild keeps the old one).
        """
        self.put_state(txn, State(next=next_iid))

    def next_iid(self, txn: Any) -> int:
        """The next internal id (never a removed doc's)."""
        return self.state(txn).next

    # --- single writes -----------------------------------------------------------------

    def index(self, txn: Any, iid: bytes, fp: int, keys: bytes, idh: int = 0) -> None:
        """Note a doc just written to the docs table at iid (>= next; idh: its id's hash);
        merge if due. (Its band keys are read from its docs record when its level is
        written; this process's recent docs take them from here.)"""
        st = self.state(txn)
        i = int.from_bytes(iid, "big")
        m = mix(i, fp)
        if self._in_place and i == st.next:  # the recent docs' next doc, as fill offers
            self.cache.offer_one(OneDoc(i, fp, keys, idh))
        st = State(max(st.next, i + 1), st.flushed, st.stale, st.recent_xor ^ m, st.levels)
        self.put_state(txn, self._advance(txn, st, 1))

    def unindex(self, txn: Any, iid: bytes, fp: int, keys: bytes) -> None:
        """Note a doc about to leave the docs table: a stale entry (with its tombstone,
        which the next merge of its level honours), or out of the recent docs."""
        self.unindex_many(txn, [(iid, fp, keys)])

    def unindex_many(self, txn: Any, docs: list[tuple[bytes, int, bytes]]) -> None:
        """:meth:`unindex` of many docs (internal id, fp, band keys): one state write, the
        tombstones a block at a time (a remove_many of 1,000 docs wrote 1,000 of each)."""
        if not docs:
            return
        st = self.state(txn)
        old, xor = [], st.recent_xor
        for iid, fp, _ in docs:
            i = int.from_bytes(iid, "big")
            if i < st.flushed:
                old.append(i)
            else:
                xor ^= mix(i, fp)
        put_tombstones(txn, self._meta, sorted(old))
        self.put_state(txn, st._replace(stale=st.stale + len(old), recent_xor=xor))

    # --- bulk fill -----------------------------------------------------------------------

    def fill(self, txn: Any, fps: np.ndarray, iids: np.ndarray,
             bands: np.ndarray | None = None, idh: np.ndarray | None = None) -> None:
        """Note many docs just written to the docs table at new iids; merge if due.

        bands: their (n, nbands) 32-bit band keys in a similarity store; idh: their ids'
        hashes (without: the docs are read back from the docs table when a level needs
        them).
        """
        if not len(iids):
            return
        st = self.state(txn)
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        iids = np.ascontiguousarray(iids, dtype=np.uint64)
        top = int(iids.max()) + 1
        w = _Walked(iids, fps, bands, idh)
        whole = self._whole(w)
        if whole and not st.levels and int(txn.stat(self._docs)["entries"]) == len(iids):
            # An empty store filled at once: the arrays are the whole first level.
            top = max(top, st.next)
            lv = Level(self.merger.free_id(txn, st), new_gen(), top)
            self._write_level(txn, lv.id, w)
            self.put_state(txn, State(next=top, flushed=top, levels=(lv,)))
            return
        xor = mix_xor(iids, fps)
        # the recent docs' next extension, without reading them back (a writer looks
        # up its next commit's ids): taken only in the same map epoch (an abort moves
        # it on: never the docs of a write that did not commit) and if they bring the
        # recent docs' XOR hash to the state's then, as a walk's docs would
        follows = whole and int(iids[0]) == st.next and top - st.next == len(iids) and \
            (len(iids) < 2 or bool((np.diff(iids) == 1).all()))
        if self._in_place and follows:
            self.cache.offer(st.next, top, w, xor)
        # when they are all the recent docs (there were none), a flush takes them from here
        # rather than walking them back from the docs table (a walk of 5M docs held 1.3 GB)
        fresh = w if follows and st.flushed == st.next else None
        st = st._replace(next=max(st.next, top), recent_xor=st.recent_xor ^ xor)
        self.put_state(txn, self._advance(txn, st, len(iids), fresh))
        if len(iids) > RECENT_MAX:
            self.release()

    def _whole(self, w: _Walked) -> bool:
        """Whether docs given to fill carry all a level of them holds (a walk's worth)."""
        return (w.bands is not None or not self.nbands) and w.idh is not None

    # --- levels and merges ---------------------------------------------------------------

    def _walk(self, txn: Any, start: int, ids: bool = True) -> _Walked:
        """(iids, fps, band keys, id hashes unless not ids) of the docs with iid >= start,
        in iid order."""
        return walk_docs(self._docs_guard, self._docs, self._codec, self.nbands, txn, start,
                         ids)

    def _rows(self, w: _Walked) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sorted (keys, vals) of docs in every run database."""
        out = [_core.sort_table(w.fps, w.iids, *spec) for spec in self.specs]
        if self.nbands:
            assert w.bands is not None
            out.append(band_rows(w.iids, w.bands))
        assert w.idh is not None
        out.append(_core.sort_table(w.idh, w.iids, b"\0", b"\x40", b"\0"))  # as is
        return out

    def run_size(self, docs: int) -> int:
        """Keys per run in a level of about docs docs (see RUN_PAGES, BULK_RUN_PAGES)."""
        return run_entries(docs)

    def put_rows(self, txn: Any, i: int, level: int, keys: np.ndarray, vals: np.ndarray,
                 size: int) -> None:
        """Add sorted rows to run database i's level, in runs of about size keys (band
        entries as low halves)."""
        table = i < len(self.dbs)  # else band entries (as low halves) or ids
        put_runs(txn, self.run_dbs[i], self.run_guards[i], level, keys, vals, run_entries=size,
                 halves=i == self.bands_at, dirs=table,
                 tail=64 - self._hbits[i] if table else 0)

    def _write_level(self, txn: Any, level: int, w: _Walked) -> None:
        """Write docs as the whole of a level (replacing any runs under its id)."""
        size = self.run_size(len(w.iids))
        for i, (keys, vals) in enumerate(self._rows(w)):
            drop_level(txn, self.run_dbs[i], self.run_guards[i], level)
            self.put_rows(txn, i, level, keys, vals, size)

    def _flush(self, txn: Any, st: State, job: Job | None, fresh: _Walked | None = None
               ) -> State:
        """The recent docs become a level: a new one, or, while a merge is under way, the
        newest level rewritten with them (from the docs table) while it spans at most
        FOLD_FLUSHES * RECENT_MAX ids and the merge does not involve it. fresh: the recent
        docs, all of them, when the caller holds them (a bulk write's; else a walk).

        No merge begins while one is under way, so without the fold every flush during a
        long merge (a 10M store's: ~150 writes) added a level that every query probes.
        The folded level is a new lineage (readers re-read it whole); its removed docs
        are simply not in the docs table, so their tombstones go and the stale count
        drops by as many.
        """
        bounds = st.bounds()
        if job is not None and bounds:
            last, lo, _ = bounds[-1]
            busy = {lv.id for lv in job.sources} | {job.target}
            if last.id not in busy and st.next - lo <= FOLD_FLUSHES * RECENT_MAX:
                gone = tombstones(txn, self._meta, self._meta_guard, lo, st.flushed)
                drop_tombstones(txn, self._meta, gone)
                lv = Level(last.id, new_gen(), st.next)
                self._write_level(txn, lv.id, self._walk(txn, lo))
                return st._replace(flushed=st.next, recent_xor=0, levels=st.levels[:-1] + (lv,),
                                   stale=max(st.stale - len(gone), 0))
        lv = Level(self.merger.free_id(txn, st), new_gen(), st.next)
        self._write_level(txn, lv.id, fresh if fresh is not None else self._walk(txn, st.flushed))
        return st._replace(flushed=st.next, recent_xor=0, levels=st.levels + (lv,))

    def _advance(self, txn: Any, st: State, added: int, fresh: _Walked | None = None
                 ) -> State:
        """After a write of ``added`` docs: flush the recent docs into a level of their own
        when there are too many, then do a bounded share of the merge under way (or of one
        that has become due); the new state.

        The share is as many docs in every run database, MERGE_STEP entries' worth or
        MERGE_PER_DOC per doc added if more (Merger.budget): a commit's cost is
        bounded by its own size, not the store's, and merges keep up with the writes
        in the band database too (see :func:`simstore.store.runs.merges.due`). A bulk
        write's share past MERGE_COMMIT_MAX is owed: commits of their own pay it
        (Merger.repay), so the pages a merge frees are reused as it goes. fresh: as for
        :meth:`_flush`.
        """
        job = read_job(txn, self._meta, self._meta_guard)
        if st.next - st.flushed > RECENT_MAX:
            st = self._flush(txn, st, job, fresh)
        m = self.merger
        return m.spend(txn, st, job, m.capped(txn, m.budget(added)))

    # --- merging a write left owed (the TableEngine's upkeep) ---------------------------

    def owes(self) -> bool:
        """Whether a write left merging owed (see Merger.owes)."""
        return self.merger.owes()

    def take_owed(self, txn: Any) -> int:
        """Docs' worth of merging the committed write transaction txn owes (then none)."""
        return self.merger.take_owed(txn)

    def repay(self, txn: Any, owed: int) -> int:
        """A bounded share of that merging, in a commit of its own (see Merger.repay).

        Then this process lets go of the pages of the map it read (release_map): a bulk
        load's merges read every run of the store, and each page read stays in its RSS
        until unmapped (a 100M load's held 3.8 GB); the page cache keeps them.
        """
        done = self.merger.repay(txn, owed)
        self.release()
        return done

    def merge_all(self, txn: Any, start: bool) -> tuple[int, bool]:
        """A commit of its own towards one level (see Merger.merge_all), the pages of the
        map it read then let go (see repay)."""
        done = self.merger.merge_all(txn, start)
        self.release()
        return done

    def release(self) -> None:
        """Let go of the pages of the map this process has read (see repay)."""
        release_map(self._data_file)

    # --- search --------------------------------------------------------------------------

    def search(self, txn: Any, q: int, k: int) -> list[tuple[int, bytes, bytes]]:
        """(distance, internal id, docs record) of every live doc within k <= the layout's k.

        The state record is compared as bytes: equal bytes, same levels and
        recent docs, so the prober's runs stand.
        """
        self.cache.sync(txn)
        self.cache.wire_tables()
        hits = self._prober.hits(q, k, self._radius[k])
        if not hits:
            return []
        get, docs = txn.get, self._docs
        rows = []
        for v, d in hits:  # by distance, then iid: the order of the answer
            iid = v.to_bytes(8, "big")  # iid_bytes, inline: once per hit
            rec = get(iid, None, docs)
            if rec is not None:  # else a removed doc's stale entry
                rows.append((d, iid, rec))
        return rows

    def band_candidates(self, txn: Any, keys: np.ndarray) -> list[int]:
        """Internal ids of docs sharing a band key with keys (see LevelCache)."""
        return self.cache.band_candidates(txn, keys)

    def band_parts(self, txn: Any, bands: np.ndarray) -> tuple[Any, Any]:
        """The band prober and the recent docs' band entries (see LevelCache)."""
        return self.cache.band_parts(txn, bands)

    def id_candidates(self, txn: Any, hashes: Any) -> list[int]:
        """Internal ids of docs whose id hashes to one of hashes (see LevelCache)."""
        return self.cache.id_candidates(txn, hashes)

    # --- maintenance ---------------------------------------------------------------------

    def drop(self, txn: Any) -> None:
        """Delete every run table of this layout, its state, merge and tombstones (for a
        rebuild). The pages LMDB reads to free them are checked first (a damaged one is
        CorruptStoreError, not an abort)."""
        for guard in [*self.run_guards, self._meta_guard]:
            guard.check_drop(txn)
        for db in self.run_dbs:
            txn.drop(db, delete=True)
        txn.drop(self._meta, delete=False)

    def meta_db(self) -> Any:
        """The database of the state record, the merge records and the tombstones."""
        return self._meta

    def meta_guard(self) -> TreeGuard:
        """The guard of the pages a cursor of :meth:`meta_db` steps on."""
        return self._meta_guard

    def check(self, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
        """Problems of the run tables against the live docs (iids, fps in iid order)."""
        return check_tables(self, txn, iids, fps)

    def check_bands(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band entries against the live docs (iids and band keys, iid order)."""
        return check_bands(self, txn, iids, keys32)

    def check_ids(self, txn: Any, iids: np.ndarray, idh: np.ndarray) -> list[str]:
        """Problems of the ids' entries against the live docs (iids and id hashes, iid order)."""
        return check_ids(self, txn, iids, idh)

    def levels(self, txn: Any) -> list[int]:
        """The internal ids each level spans, oldest first (a merge's target included)."""
        return [hi - lo for _, lo, hi in self.state(txn).bounds()]

    def extra(self, txn: Any) -> list[str]:
        """Names of run tables beyond this layout's."""
        return tables_beyond(txn, b"r", len(self.dbs))
