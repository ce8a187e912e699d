"""Run tables: the permutation tables as sorted runs in levels, probed in place.

Every table is derived from the docs table. The docs split by internal id into
*levels*, oldest first, each covering a range of ids and holding, per table, the
sorted (permuted fingerprint, iid) rows of its docs as runs
(:mod:`simstore.store.runfile`), and the **recent** docs past the last level,
read straight from the docs table and checked by a popcount scan: an add writes
only the docs and ids records and the state record, not a B-tree entry per
table. In a similarity store the band keys are levels too (database ``rbands``), and from
format 13 so are the ids (database ``rids``: :mod:`simstore.store.idindex`).

**Merges in tiers.** A write that leaves more than ``RECENT_MAX`` recent docs
writes them as a new level (cost: those docs). When the levels newer than one
hold 1 / ``LEVEL_RATIO`` of its docs, that level and all newer ones are merged
into one (:func:`simstore.store.merges.due`), or every level when removed docs' stale entries
exceed live / ``STALE_SHARE``. A merge combines the levels' sorted runs, never
walks the docs table, and runs a slice at a time: each write merges as many docs
in every run database (a similarity store's band database holds ``nbands``
entries a doc), ``MERGE_STEP`` entries' worth or ``MERGE_PER_DOC`` per doc it
added if more, recording its cursor in the ``mcursor`` record beside the ``merge``
record that names the job. From format 9 the target is a level of the state
from the job's start and each slice deletes the source runs it has passed in
full, so the sources' pages are freed, and reused by later slices, while the
merge goes (:mod:`simstore.store.merges`). A commit's cost is bounded by its
own size whatever the store's, and a reader re-reads only the index records
of the levels a slice changed. Every step is part of a write transaction:
atomic and crash-safe like any LMDB commit; a merge left by a killed writer
goes on with the next write, from any process.

Removing a doc leaves its level entries *stale*: queries drop hits whose docs
record is gone (iids are never reused), the state counts them and a tombstone
marks each (a bit of a 512-id block in database ``runs``:
:mod:`simstore.store.removed`); a merge leaves out the entries of the tombstones
it found when it began, then deletes those tombstones.

**Read in place.** A query probes the levels' runs where LMDB maps them (the
page cache, shared by every process): a process keeps per level and table
only the runs' first keys (the level's index record, format 7) and the
pointers of the runs a probe has landed in (:class:`~simstore.native.probe.RunSet`:
a C struct per run, no Python object for a run it points at in the map),
keyed by the level's random generation, plus the recent docs (checked against
the XOR hash the writers keep in the state). A query is one state read and
one C call (more while it meets runs not fetched yet: py-lmdb touches every
page of a value it returns, so fetching every run at open would read the
whole tables; without readahead, in a store larger than memory, a fetch places
a run from its key's leaf node once the map's address is known, reading its
first page only: :mod:`simstore.native.lmdbmap`).
The pointers are taken in a read transaction begun with ``buffers=True`` and
stay valid while both hold:

1. the transaction that dereferences them sees the same generation of that
   level in its state record, or a later generation of the same lineage whose
   index record still names that run. A level is never rewritten under the
   same generation, and within a lineage a run record is only ever added or
   deleted, never rewritten (a merge's slices add the target's runs and delete
   the sources'; see :func:`~simstore.store.runfile.next_gen`); LMDB never
   changes committed pages in place nor reuses them while a reader holds a
   snapshot that references them, so the runs named there are the very pages
   the pointers name; and
2. the map has not been remapped in this process since (the environment's
   epoch, bumped on every growth and reopen).

A run record shorter than a page is copied rather than pointed at: it may sit
inside a leaf page, which LMDB copies elsewhere (freeing the old one) when a
neighbouring record changes, while a longer one has overflow pages of its own
that stay put until that record itself is rewritten or deleted.

``_sync`` checks both before every probe; a level whose generation or epoch
changed is opened again. A write transaction whose own merge changed a level
reads that level as a private copy (its new runs are dirty pages, not the map).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..native import core as _core, probe as _probe
from ..search.layout import Layout
from . import merges, runcache, runcheck
from .env import PAGE
from .format import id_hashes, iid_bytes
from .removed import drop_tombstones, put_job, put_tombstones, read_job, tombstones
from .rows import tables_beyond
from .runfile import (
    BANDS_DB,
    BASE,
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
from .runindex import index_levels
from .runsize import run_capacity

__all__ = ["RunTables", "State"]

# A run's record fills at most RUN_PAGES overflow pages (LMDB heads the first with 16
# bytes). Every record of more than a page needs that many free pages in a row; runs of
# one size, written whole (a merge writes full runs only: merges.MergeJob._slice), fit
# the ranges other runs freed, where runs of 32,768 keys (105 pages) seldom found a
# range that single-page B-tree writes had not broken, and the file grew under churn.
RUN_PAGES = 8
RUN_ENTRIES = run_capacity(RUN_PAGES * PAGE - 16)  # 2,557 keys: a run is 32 KB
# ... except in a level of BULK_DOCS docs or more (the bulk of a store: written whole
# or by a merge of every level, seldom rewritten): there runs of BULK_RUN_PAGES pages
# cut the run directories a wide query touches (1M k = 8 p50 43 -> 34 us in one
# process), while the small levels that churn keep the short runs that fit freed ranges.
BULK_RUN_PAGES = 32
BULK_RUN_ENTRIES = run_capacity(BULK_RUN_PAGES * PAGE - 16)  # 9,555 keys: 128 KB
BULK_DOCS = 1 << 19
RECENT_MAX = 4096  # recent docs scanned by popcount before they become a level
FOLD_FLUSHES = 4  # while a merge is under way, flushes refill the newest level up to
# FOLD_FLUSHES * RECENT_MAX ids (RunTables._flush); each fold frees the level it rewrites
# two commits before its pages can be reused: at 8 the 1M int churn's file grew 10.8 %
# (8.6 % at 4) for a 10M merge's queries at 21 us p50 at worst (26 at 4, 47 without folds;
# docs/bench/writes-*-churn-int-fold*.json)


def run_entries(docs: int) -> int:
    """Keys per run in a level of about ``docs`` docs (see RUN_PAGES, BULK_RUN_PAGES)."""
    return BULK_RUN_ENTRIES if docs >= BULK_DOCS else RUN_ENTRIES


class _Walked(NamedTuple):
    iids: np.ndarray
    fps: np.ndarray
    bands: np.ndarray | None  # (n, nbands) uint32 band keys of a similarity store
    idh: np.ndarray | None = None  # their ids' hashes (uint64) in a run-ids store


class RunTables(merges.MergeJob, runcache.LevelCache):
    """Handles, cache and query plan of one layout's run tables in one environment:
    a :class:`~simstore.store.engine.TableEngine`."""

    name = "runs"

    def __init__(self, env: Any, txn: Any, layout: Layout, docs: Any, codec: Any, *,
                 create: bool, nbands: int = 0, map_epoch: Callable[[], int] | None = None,
                 dirs: bool = True, indexed: Callable[[Any], bool] | None = None,
                 upgrade: Callable[[Any], bool] | None = None, run_ids: bool = False,
                 gone_blocks: bool = False, late_gone: bool = False) -> None:
        """map_epoch: the environment's epoch (changes whenever this process remaps);
        without it levels are read as private copies, never in place. dirs: the runs
        written carry directories (format 4; format 3 runs do not). indexed: whether a
        transaction sees a store whose levels all have index records (format 7; None:
        always). upgrade: records format 9 (10) in a format 3-8 store (in the write
        that first writes its new state) and says whether it did, so its levels get
        their index records and a merge it left under way is adopted. run_ids: the ids
        are a run database too (format 13 on: ``rids``, after the tables and bands).
        gone_blocks: a merge may list its removed docs as tombstone blocks (format 15).
        late_gone: a merge leaves out the docs removed while it runs too (format 17)."""
        self.layout = layout
        self._dirs = dirs
        self.gone_blocks = gone_blocks
        self.late_gone = late_gone
        self._listed: int | None = None
        self._upgrade = upgrade
        self.indexed = indexed or (lambda txn: True)
        self._env = env
        self._psize = int(env.stat()["psize"])  # a shorter run record is copied (parse_run)
        self._txn: Any = None  # the transaction of the query under way (for _fetch)
        self._map_epoch = map_epoch
        n = len(layout.tables)
        self.nbands = nbands
        self.dbs = [env.open_db(table_name(t), txn=txn, create=create) for t in range(n)]
        # every run database: the tables, then the band entries of a similarity store,
        # then the ids of a run-ids store; bands_at and ids_at: their places, or None
        self.run_dbs = self.dbs + (
            [env.open_db(BANDS_DB, txn=txn, create=create)] if nbands else []) + (
            [env.open_db(IDS_DB, txn=txn, create=create)] if run_ids else [])
        self.bands_at = n if nbands else None
        self.ids_at = len(self.run_dbs) - 1 if run_ids else None
        self.per_doc = [1] * n + ([nbands] if nbands else []) + ([1] if run_ids else [])
        self._meta = env.open_db(STATE_DB, txn=txn, create=create)
        self._docs = docs
        self._codec = codec
        self.specs = [layout.shifts(t) for t in range(n)]
        self._hbits = [layout.header_bits(t) for t in range(n)]
        self._radius = {k: layout.radius_for(k) for k in range(layout.max_k + 1)}
        self._prober = _probe.Prober(self.specs, self._hbits)
        # Band entries (band << 32 | key32) are looked up exactly (ss_lookup).
        self._bprober = _probe.Prober([(b"\0", b"\x40", b"\0")], [64]) if nbands else None
        self._iprober = _probe.Prober([(b"\0", b"\x40", b"\0")], [64]) if run_ids else None
        self._levels: dict[int, runcache.OpenLevel] = {}
        self._recent: runcache.RecentDocs | None = None
        self._wired: tuple[bytes, int] | None = None  # what the prober holds
        self._wired_levels: tuple[Any, int] | None = None
        self._unwired: tuple[list[runcache.OpenLevel], runcache.RecentDocs, int,
                             list[int]] | None = None
        self._offer: tuple[int, int, int, _Walked] | None = None
        self._want_ids = False  # set by the first lookup by id (id_candidates)
        self._owe: tuple[Any, int] | None = None  # merging a bulk write owes (MergeJob)
        self._wired_raw: bytes | None = None  # the state record it was wired for
        self._wired_epoch = -2  # and the map epoch
        self._memo: tuple[bytes, State] | None = None  # the last state record written

    # --- state ---------------------------------------------------------------------------

    def state(self, txn: Any) -> State:
        """The run tables' state as this transaction sees it."""
        raw = txn.get(STATE_KEY, db=self._meta)
        memo = self._memo
        if memo is not None and raw is not None and raw == memo[0]:
            return memo[1]  # the record this process last wrote (a run of writes)
        return State.unpack(raw)

    def _put_state(self, txn: Any, st: State) -> None:
        raw = st.pack()
        txn.put(STATE_KEY, raw, db=self._meta)
        self._memo = (raw, st)

    def init(self, txn: Any, next_iid: int = 0) -> None:
        """Write the state of tables without levels (at creation, or a rebuild's start).

        next_iid: the next internal id to hand out (a rebuild keeps the old one).
        """
        self._put_state(txn, State(next=next_iid))

    def next_iid(self, txn: Any) -> int:
        """The next internal id (never a removed doc's)."""
        return self.state(txn).next

    # --- single writes -----------------------------------------------------------------

    def index(self, txn: Any, iid: bytes, fp: int, keys: list[bytes]) -> None:
        """Note a doc just written to the docs table at iid (>= next); merge if due.
        (Its band keys are read from its docs record when its level is written.)"""
        st = self._writable(txn)
        i = int.from_bytes(iid, "big")
        st = st._replace(next=max(st.next, i + 1), recent_xor=st.recent_xor ^ mix(i, fp))
        self._put_state(txn, self._advance(txn, st, 1))

    def unindex(self, txn: Any, iid: bytes, fp: int, keys: list[bytes]) -> None:
        """Note a doc about to leave the docs table: a stale entry (with its tombstone,
        which the next merge of its level honours), or out of the recent docs."""
        self.unindex_many(txn, [(iid, fp, keys)])

    def unindex_many(self, txn: Any, docs: list[tuple[bytes, int, list[bytes]]]) -> None:
        """:meth:`unindex` of many docs (internal id, fp, band keys): one state write, the
        tombstones a block at a time (a remove_many of 1,000 docs wrote 1,000 of each)."""
        if not docs:
            return
        st = self._writable(txn)
        old, xor = [], st.recent_xor
        for iid, fp, _ in docs:
            i = int.from_bytes(iid, "big")
            if i < st.flushed:
                old.append(i)
            else:
                xor ^= mix(i, fp)
        put_tombstones(txn, self._meta, sorted(old))
        self._put_state(txn, st._replace(stale=st.stale + len(old), recent_xor=xor))

    # --- bulk fill -----------------------------------------------------------------------

    def fill(self, txn: Any, fps: np.ndarray, iids: np.ndarray, before: Any = None,
             bands: np.ndarray | None = None, idh: np.ndarray | None = None) -> None:
        """Note many docs written (by ``before()``, if given) at new iids; merge if due.

        bands: their (n, nbands) 32-bit band keys in a similarity store; idh: their ids'
        hashes in a run-ids store (else the first level is read back from the docs).
        """
        if before is not None:
            before()
        if not len(iids):
            return
        st = self._writable(txn)
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        iids = np.ascontiguousarray(iids, dtype=np.uint64)
        top = int(iids.max()) + 1
        w = _Walked(iids, fps, bands, idh)
        whole = self._whole(w)
        if whole and not st.levels and int(txn.stat(self._docs)["entries"]) == len(iids):
            # An empty store filled at once: the arrays are the whole first level.
            top = max(top, st.next)
            lv = Level(self._free_id(txn, st), new_gen(), top)
            self._write_level(txn, lv.id, w)
            self._put_state(txn, State(next=top, flushed=top, levels=(lv,)))
            return
        if self._map_epoch is not None and whole and int(iids[0]) == st.next and \
                top - st.next == len(iids) and (len(iids) < 2 or bool((np.diff(iids) == 1).all())):
            # the recent docs' next extension, without reading them back (a writer looks
            # up its next commit's ids): taken only in the same map epoch (an abort moves
            # it on: never the docs of a write that did not commit) and if they bring the
            # recent docs' XOR hash to the state's then, as a walk's docs would
            self._offer = (st.next, top, self._epoch(), w)
        st = st._replace(next=max(st.next, top),
                     recent_xor=st.recent_xor ^ mix_xor(iids, fps))
        self._put_state(txn, self._advance(txn, st, len(iids)))

    def _whole(self, w: _Walked) -> bool:
        """Whether docs given to fill carry all a level of them holds (a walk's worth)."""
        return (w.bands is not None or not self.nbands) and (
            w.idh is not None or self.ids_at is None)

    # --- levels and merges ---------------------------------------------------------------

    def _writable(self, txn: Any) -> State:
        """The state for a write; a format 3-4 record is first brought to format 5.

        Its stale entries have no tombstones, so if it has any, the levels are
        rebuilt from the docs table once (the last full walk such a store sees).
        """
        st = self.state(txn)
        if self._upgrade is not None:  # every write: one that aborts records nothing
            if self._upgrade(txn):
                for db in self.run_dbs:
                    index_levels(txn, db)
                job = read_job(txn, self._meta)
                if job is not None:  # formats 3-10 kept its gone list in its record
                    put_job(txn, self._meta, job)
                st = self._adopt(txn, st)
            self._dirs = True
        if not st.legacy:
            return st
        if st.stale:
            w = self._walk(txn, 0)
            keep = w.iids < np.uint64(st.next)  # not a doc this write is adding
            w = _Walked(*(None if c is None else c[keep] for c in w))
            for i in range(len(self.run_dbs)):
                for lv in st.levels:
                    drop_level(txn, self.run_dbs[i], lv.id)
            lv = Level(BASE, new_gen(), st.next)
            self._write_level(txn, lv.id, w)
            st = State(next=st.next, flushed=st.next, levels=(lv,))
        else:
            st = st._replace(legacy=False)
        return st

    def _walk(self, txn: Any, start: int, ids: bool = True) -> _Walked:
        """(iids, fps, band keys, id hashes unless not ids) of the docs with iid >= start,
        in iid order."""
        cur = txn.cursor(self._docs)
        sig, ids = bool(self.nbands), ids and self.ids_at is not None
        if not cur.set_range(iid_bytes(start)):
            return _Walked(EMPTY, EMPTY,
                           np.empty((0, self.nbands), dtype=np.uint32) if sig else None,
                           EMPTY if ids else None)
        cols = self._codec.walk(cur.iternext(), with_ids=ids, with_bands=sig)
        return _Walked(cols.iids, cols.fps, cols.bands if sig else None,
                       id_hashes(cols.encs) if cols.encs is not None else None)

    def _rows(self, w: _Walked) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sorted (keys, vals) of docs in every run database."""
        out = [_core.sort_table(w.fps, w.iids, *spec) for spec in self.specs]
        if self.nbands:
            assert w.bands is not None
            out.append(band_rows(w.iids, w.bands))
        if self.ids_at is not None:
            assert w.idh is not None
            out.append(_core.sort_table(w.idh, w.iids, b"\0", b"\x40", b"\0"))  # as is
        return out

    def _run_size(self, docs: int) -> int:
        return run_entries(docs)

    def _put(self, txn: Any, i: int, level: int, keys: np.ndarray, vals: np.ndarray,
             size: int) -> None:
        """Add sorted rows to run database i's level, in runs of about size keys (band
        entries as low halves)."""
        table = i < len(self.dbs)  # else band entries (as low halves) or ids
        put_runs(txn, self.run_dbs[i], level, keys, vals, run_entries=size,
                 halves=i == self.bands_at, dirs=self._dirs and table,
                 tail=64 - self._hbits[i] if table else 0, index=self.indexed(txn))

    def _write_level(self, txn: Any, level: int, w: _Walked) -> None:
        """Write docs as the whole of a level (replacing any runs under its id)."""
        size = self._run_size(len(w.iids))
        for i, (keys, vals) in enumerate(self._rows(w)):
            drop_level(txn, self.run_dbs[i], level)
            self._put(txn, i, level, keys, vals, size)

    def _flush(self, txn: Any, st: State, job: Job | None) -> State:
        """The recent docs become a level: a new one, or, while a merge is under way, the
        newest level rewritten with them (from the docs table) while it spans at most
        FOLD_FLUSHES * RECENT_MAX ids and the merge does not involve it.

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
                gone = tombstones(txn, self._meta, lo, st.flushed)
                drop_tombstones(txn, self._meta, gone)
                lv = Level(last.id, new_gen(), st.next)
                self._write_level(txn, lv.id, self._walk(txn, lo))
                return st._replace(flushed=st.next, recent_xor=0, levels=st.levels[:-1] + (lv,),
                                   stale=max(st.stale - len(gone), 0))
        lv = Level(self._free_id(txn, st), new_gen(), st.next)
        self._write_level(txn, lv.id, self._walk(txn, st.flushed))
        return st._replace(flushed=st.next, recent_xor=0, levels=st.levels + (lv,))

    def _advance(self, txn: Any, st: State, added: int) -> State:
        """After a write of ``added`` docs: flush the recent docs into a level of their own
        when there are too many, then do a bounded share of the merge under way (or of one
        that has become due); the new state.

        The share is as many docs in every run database, MERGE_STEP entries' worth or
        MERGE_PER_DOC per doc added if more (MergeJob._budget): a commit's cost is
        bounded by its own size, not the store's, and merges keep up with the writes
        in the band database too (see :func:`simstore.store.merges.due`). A bulk
        write's share past MERGE_COMMIT_MAX is owed: commits of their own pay it
        (MergeJob.repay), so the pages a merge frees are reused as it goes.
        """
        job = read_job(txn, self._meta)
        if st.next - st.flushed > RECENT_MAX:
            st = self._flush(txn, st, job)
        return self._spend(txn, st, job, self._capped(txn, self._budget(added)))

    # --- search --------------------------------------------------------------------------

    def search(self, txn: Any, q: int, k: int) -> list[tuple[int, bytes, bytes]]:
        """(distance, internal id, docs record) of every live doc within k <= the layout's k.

        The state record is compared as bytes: equal bytes, same levels and
        recent docs, so the prober's runs stand.
        """
        self._sync(txn)
        self._wire_tables()
        hits = self._prober.hits(q, k, self._radius[k])
        if not hits:
            return []
        get, docs = txn.get, self._docs
        rows = []
        for v, d in hits:  # by distance, then iid: the order of the answer
            iid = v.to_bytes(8, "big")  # iid_bytes, inline: once per hit
            rec = get(iid, db=docs)
            if rec is not None:  # else a removed doc's stale entry
                rows.append((d, iid, rec))
        return rows

    # --- maintenance ---------------------------------------------------------------------

    def drop(self, txn: Any) -> None:
        """Delete every run table of this layout, its state, merge and tombstones (for a
        rebuild)."""
        for db in self.run_dbs:
            txn.drop(db, delete=True)
        txn.drop(self._meta, delete=False)

    def meta_db(self) -> Any:
        """The database of the state record, the merge records and the tombstones."""
        return self._meta

    def check(self, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
        """Problems of the run tables against the live docs (iids, fps in iid order)."""
        return runcheck.check_tables(self, txn, iids, fps)

    def check_bands(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band entries against the live docs (iids and band keys, iid order)."""
        return runcheck.check_bands(self, txn, iids, keys32)

    def check_ids(self, txn: Any, iids: np.ndarray, idh: np.ndarray) -> list[str]:
        """Problems of the ids' entries against the live docs (iids and id hashes, iid order)."""
        return runcheck.check_ids(self, txn, iids, idh)

    def levels(self, txn: Any) -> list[int]:
        """The internal ids each level spans, oldest first (a merge's target included)."""
        return [hi - lo for _, lo, hi in self.state(txn).bounds()]

    def extra(self, txn: Any) -> list[str]:
        """Names of run tables beyond this layout's."""
        return tables_beyond(txn, b"r", len(self.dbs))
