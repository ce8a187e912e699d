"""Merges in tiers: when the run tables' levels are due for a merge, and the merge job
that combines their sorted runs a slice per write (see :mod:`simstore.store.runs.tables`).

:class:`Merger`, owned by :class:`~simstore.store.runs.tables.RunTables` and writing
through its :class:`RunWriter` protocol, begins, steps, swaps in and cleans up a
merge. Its records (``merge``, ``mcursor``, ``mclean``, in database ``runs``) are
described in :mod:`simstore.store.runs.format`, the tombstones and its gone list in
:mod:`simstore.store.runs.removed`. Every step runs inside the caller's write
transaction: atomic and crash-safe like any commit; a merge a killed writer left goes
on with the next write, from any process.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...exceptions import CorruptStoreError
from ..check.ranges import TreeGuard
from .format import (
    CLEAN_KEY,
    CURSOR_KEY,
    MAX_LEVEL_ID,
    MERGE_KEY,
    Job,
    Level,
    State,
    drop_level,
    new_gen,
    next_gen,
    pack_cursors,
    unpack_cursors,
)
from .index import put_index
from .levelruns import LevelRuns, key_after, slice_level
from .removed import GoneSet, drop_gone, drop_tombstones, put_job, read_job, tombstones

LEVEL_RATIO = 4  # a level absorbs the newer ones once they hold 1 / LEVEL_RATIO of its docs
# Entries per run database a write merges at least while a merge is under way. Small steps
# free few pages a commit, and LMDB reuses a page only two commits after the one that freed
# it, so the file stays small under churn; a step must still hold a bulk level's whole run
# and an eighth (Merger._slice). Tuned: docs/bench/journal.md, "Disk under churn".
MERGE_STEP = 1 << 14
MERGE_PER_DOC = 16  # ... or this many per doc the write added, if more
# ... or 1 / MERGE_SHARE of the merge's own entries, up to MERGE_STEP_MAX: no other merge
# begins while one is under way, so a large merge must end before the levels flushed
# meanwhile pile up and slow queries (docs/bench/journal.md, "Writes and merges").
MERGE_SHARE = 128
MERGE_STEP_MAX = 1 << 17
# Merge every level when stale entries exceed live / STALE_SHARE: stale entries are disk a
# churned store holds, full merges cost writes (docs/bench/journal.md, "Disk under churn").
STALE_SHARE = 24
# Entries per run database one commit merges at most; a bulk write's share past it is owed
# and paid by commits of their own right after (Merger.repay). LMDB reuses no page the
# committed store held until two commits after the one that freed it, so a commit that
# merged two large levels at once would hold both and their merge, and leave that much
# free space in the file (docs/bench/journal.md, "Tables read in place").
MERGE_COMMIT_MAX = 1 << 19
_MASK = (1 << 64) - 1
_NO_RUNS = np.empty(0, dtype=np.uint64)


def _moved_on(st: State, ids: set[int]) -> State:
    """st with the levels of these ids at the next generation of their lineages."""
    return st._replace(levels=tuple(lv._replace(gen=next_gen(lv.gen)) if lv.id in ids else lv
                                    for lv in st.levels))


def due(sizes: list[int], stale: int, live: int) -> int | None:
    """The first of the levels (sizes in docs, oldest first) that a merge of it and every
    newer level should begin at, or None.

    A level absorbs the newer ones once they hold 1 / LEVEL_RATIO of its docs:
    sizes then shrink geometrically from the oldest level, so a store keeps
    about log(N / RECENT_MAX) / log(LEVEL_RATIO + 1) levels and each doc is
    rewritten about that many times LEVEL_RATIO / 2 (leveled merging, as in
    LSM trees). Stale entries beyond live / STALE_SHARE merge every level.
    """
    if sizes and stale and stale * STALE_SHARE > live:
        return 0
    for j in range(len(sizes) - 1):
        if sum(sizes[j + 1:]) * LEVEL_RATIO >= sizes[j]:
            return j
    return None


class RunWriter(Protocol):
    """What a :class:`Merger` needs of its run tables: their run databases, a doc's
    entries in each, the state record, and how rows are written into a level."""

    run_dbs: list[Any]
    run_guards: list[TreeGuard]  # the pages a cursor of each steps on
    per_doc: list[int]  # entries a doc has in each run database (a band database: nbands)

    def state(self, txn: Any) -> State:
        """The state as txn sees it."""

    def put_state(self, txn: Any, st: State) -> None:
        """Write the state record."""

    def put_rows(self, txn: Any, i: int, level: int, keys: np.ndarray, vals: np.ndarray,
                 size: int) -> None:
        """Add sorted rows to run database i's level, in runs of about size keys."""

    def run_size(self, docs: int) -> int:
        """Keys per run in a level of about docs docs."""


class Merger:
    """The merge job of one :class:`~simstore.store.runs.tables.RunTables`: begins, steps,
    swaps in and cleans up merges of its levels through a :class:`RunWriter`."""

    def __init__(self, tables: RunWriter, meta: Any, guard: TreeGuard, docs: Any) -> None:
        """meta: the database of the state and merge records (guard: of its pages); docs:
        the docs table."""
        self._tables = tables
        self._meta = meta
        self._guard = guard
        self._docs = docs
        self._listed: int | None = None  # the merge (generation) whose list a GoneSet found
        self._owe: tuple[Any, int] | None = None  # (write transaction, docs' worth it owes)

    def _per_write(self, entries: int) -> int:
        """Docs a write merges for a share of ``entries`` entries per run database: fewer in
        a similarity store, whose docs have more entries (band keys) than tables."""
        return entries * len(self._tables.per_doc) // sum(self._tables.per_doc)

    def budget(self, added: int) -> int:
        """Docs a write of ``added`` docs merges in every run database (a merge under way):
        MERGE_STEP entries' worth, or MERGE_PER_DOC per doc added if more."""
        return max(self._per_write(MERGE_STEP), MERGE_PER_DOC * added)

    def capped(self, txn: Any, budget: int) -> int:
        """budget, or MERGE_COMMIT_MAX entries' worth if less: the rest is owed by txn
        (a batch's writes add up)."""
        cap = self._per_write(MERGE_COMMIT_MAX)
        if budget <= cap:
            return budget
        held = self._owe[1] if self._owe is not None and self._owe[0] is txn else 0
        self._owe = (txn, held + budget - cap)
        return cap

    def owes(self) -> bool:
        """Whether a write left merging owed (read without the store's lock: a hint that
        spares a caller the lock when nothing is owed)."""
        return self._owe is not None

    def take_owed(self, txn: Any) -> int:
        """Docs' worth of merging the committed write transaction txn owes (then none)."""
        owe, self._owe = self._owe, None
        return owe[1] if owe is not None and owe[0] is txn else 0

    def repay(self, txn: Any, owed: int) -> int:
        """A commit of its own after a bulk write: up to MERGE_COMMIT_MAX entries' worth
        of the merging it owed (the merge under way, or one due); how many docs' worth
        (0: no merge was left to do)."""
        st = self._tables.state(txn)
        job = read_job(txn, self._meta, self._guard)
        if job is None:
            job, st = self._start(txn, st)
            if job is None:
                return 0
        budget = min(owed, self._per_write(MERGE_COMMIT_MAX))
        self._tables.put_state(txn, self.spend(txn, st, job, budget))
        return budget

    def merge_all(self, txn: Any, start: bool) -> tuple[int, bool]:
        """A commit of its own towards one level: up to MERGE_COMMIT_MAX entries' worth of
        the merge under way, or (start, when none is) of one of every level begun now, the
        merge the stale share begins and as crash-safe; (how many docs' worth, whether it
        began one). (0, False): no merge was under way and none began (at most one
        level, or not start)."""
        st = self._tables.state(txn)
        job = read_job(txn, self._meta, self._guard)
        began = False
        if job is None:
            if not start or len(st.levels) < 2:
                return 0, False
            job, st = self._start(txn, st, first=0)
            assert job is not None
            began = True
        budget = self._per_write(MERGE_COMMIT_MAX)
        self._tables.put_state(txn, self.spend(txn, st, job, budget))
        return budget, began

    def spend(self, txn: Any, st: State, job: Job | None, budget: int) -> State:
        """Merge up to budget docs' worth: the merge under way (job), or one that is due,
        and the next ones while budget is left; the new state."""
        if job is None:
            job, st = self._start(txn, st)
        while job is not None:
            st, left = self._merge(txn, st, job, budget)
            if left is None:  # not done: the next write goes on
                break
            budget = left
            job = None
            if budget > 0:
                job, st = self._start(txn, st)
        return st

    def free_id(self, txn: Any, st: State) -> int:
        """A level id neither the state nor the merge under way uses."""
        raw = txn.get(MERGE_KEY, db=self._meta)
        used = {lv.id for lv in st.levels} | ({Job.unpack(raw).target} if raw else set())
        for lid in range(MAX_LEVEL_ID):
            if lid not in used:
                return lid
        raise CorruptStoreError(f"the run tables hold {len(st.levels)} levels, too many")

    def _start(self, txn: Any, st: State, first: int | None = None
               ) -> tuple[Job | None, State]:
        """Begin the merge that is due, if any (or the one of levels first.. on): its
        record, and its target as an empty level (covering no ids yet) just before its
        sources in the state; the new state."""
        if first is None:  # (the live docs count only against stale entries)
            live = int(txn.stat(self._docs)["entries"]) if st.stale else 0
            first = due([hi - lo for _, lo, hi in st.bounds()], st.stale, live)
        if first is None:
            return None, st
        lo = st.bounds()[first][1]
        sources = st.levels[first:]
        job = Job(self.free_id(txn, st), new_gen(), sources,
                  tombstones(txn, self._meta, self._guard, lo, sources[-1].hi))
        for db, guard in zip(self._tables.run_dbs, self._tables.run_guards, strict=True):
            drop_level(txn, db, guard, job.target)
            put_index(txn, db, guard, job.target, _NO_RUNS)
        put_job(txn, self._meta, self._guard, job)
        txn.put(CURSOR_KEY, pack_cursors([0] * len(self._tables.run_dbs)), db=self._meta)
        target = Level(job.target, job.gen, lo)
        return job, st._replace(levels=st.levels[:first] + (target,) + st.levels[first:])

    def _merge(self, txn: Any, st: State, job: Job, budget: int) -> tuple[State, int | None]:
        """Merge up to ``budget`` entries per run database (or the merge's share,
        MERGE_SHARE, if more) of the job's sources into its target and delete the
        sources' runs merged in full, then, once all are, swap it
        in and delete up to ``budget`` of its tombstones a write; the new state and the
        budget left once the job is done (else None).

        Readers see the target from the start: a slice gives the levels whose runs
        it added or deleted new generations of their lineages (readers re-read only
        those levels' index records), so every entry is in a level they probe
        (the target below the cursor, the sources from it), and the sources' pages
        are freed as the merge goes, for its next slices to reuse.
        """
        # the target's size: the ids from its start (it is a level of the state from the
        # merge's start on, swapped in or not) to its sources' end
        lo = next((lo for lv, lo, _ in st.bounds() if lv.id == job.target), None)
        if lo is None:
            raise CorruptStoreError("the run tables' merge names a target the state does not")
        span = job.sources[-1].hi - lo
        budget = max(budget, min(span // MERGE_SHARE, self._per_write(MERGE_STEP_MAX)))
        cleaned = txn.get(CLEAN_KEY, db=self._meta)
        if cleaned is not None:  # swapped in already: its tombstones go
            return st, self._clean(txn, job, int.from_bytes(cleaned, "little"), budget)
        cursors = unpack_cursors(txn.get(CURSOR_KEY, db=self._meta), len(self._tables.run_dbs))
        # the tombstones beyond its own list (docs removed since it began), if any
        late = st.stale > len(job.gone)
        gone = GoneSet(txn, self._meta, self._guard, lo, job.sources[-1].hi, job.gone, late=late,
                       listed=self._listed == job.gen)
        if late:  # its list is among the tombstones (so until it is done)
            self._listed = job.gen
        size = self._tables.run_size(span)
        left = budget
        changed: set[int] = set()  # the levels whose runs this slice added or deleted
        for i, (db, guard) in enumerate(zip(self._tables.run_dbs, self._tables.run_guards,
                                            strict=True)):
            if cursors[i] is None:
                continue
            srcs = [LevelRuns(txn, db, guard, lv.id) for lv in job.sources]
            entries = budget * self._tables.per_doc[i]  # every database a doc's worth alike
            cursors[i], spent, wrote = self._slice(txn, i, srcs, job, gone, cursors[i],
                                                   entries, size)
            if wrote:
                changed.add(job.target)
            changed.update(src.level for src in srcs if src.trim(cursors[i]))
            left = min(left, (entries - spent) // self._tables.per_doc[i])
        st = _moved_on(st, changed)
        if any(c is not None for c in cursors):
            txn.put(CURSOR_KEY, pack_cursors(cursors), db=self._meta)
            return st, None
        st = self._swap(txn, st, job)
        return st, self._clean(txn, job, 0, max(left, 0))

    def _slice(self, txn: Any, i: int, srcs: list[LevelRuns], job: Job, gone: GoneSet, c: int,
               budget: int, size: int) -> tuple[int | None, int, bool]:
        """Merge the sources' entries (srcs: their runs in run database i) from key c on
        into the target, about budget of them (whole keys), in whole runs of size keys
        where a step holds one, leaving out removed docs' (gone); the next key to merge
        (None: all done), how many entries it took and whether it wrote any.

        A step ends on a whole run, the rest going next (runs stay full); where a step
        can hold a run, the write takes the number of runs nearest its budget, at least
        one: counting the entries a cut left as spent made a budget of 1.7 runs take
        one (a similarity store's tables merged 9.6k docs a write of their 16k).
        """
        spent, wrote = 0, False
        cur: int | None = c
        # a step can hold a whole run (and an eighth more for removed docs left out)
        whole = size + size // 8 <= MERGE_STEP
        while cur is not None and spent < budget and (
                not whole or spent == 0 or 2 * (budget - spent) >= size):
            step = min(max(budget - spent, size + size // 8) if whole else budget - spent,
                       MERGE_STEP)
            ends = [e for e in (key_after(r, cur, step) for r in srcs) if e is not None]
            hi = min(ends) if ends else None
            if hi == cur:  # a key more frequent than a step: take all of it
                hi = cur + 1 if cur < _MASK else None
            parts = [slice_level(r, cur, hi) for r in srcs]
            keys = np.concatenate([p[0] for p in parts])
            vals = np.concatenate([p[1] for p in parts])
            if len(parts) > 1:
                order = np.argsort(keys, kind="stable")
                keys, vals = keys[order], vals[order]
            taken = keys  # every source entry of the step, removed docs' included
            drop = gone.contains(vals)
            if drop.any():
                keys, vals = keys[~drop], vals[~drop]
            if hi is not None and len(keys) > size and len(keys) % size:  # full runs only:
                cut = int(np.searchsorted(keys, keys[len(keys) // size * size], side="left"))
                if cut:  # the rest goes next (never splitting a key)
                    hi, keys, vals = int(keys[cut]), keys[:cut], vals[:cut]
            spent += max(len(taken) if hi is None else
                         int(np.searchsorted(taken, np.uint64(hi), side="left")), 1)
            self._tables.put_rows(txn, i, job.target, keys, vals, size)
            wrote = wrote or bool(len(keys))
            cur = hi
        return cur, spent, wrote

    def _clean(self, txn: Any, job: Job, done: int, budget: int) -> int | None:
        """Delete up to ``budget`` more of the tombstones a swapped-in merge honoured (done
        so far: ``done``); the budget left once all are gone and the job with them, else
        None (the next write goes on: deleting a million keys takes a second)."""
        end = min(done + budget, len(job.gone))
        drop_tombstones(txn, self._meta, job.gone[done:end])
        if end < len(job.gone):
            txn.put(CLEAN_KEY, end.to_bytes(8, "little"), db=self._meta)
            return None
        for key in (MERGE_KEY, CURSOR_KEY, CLEAN_KEY):
            txn.delete(key, db=self._meta)
        drop_gone(txn, self._meta, self._guard)
        return budget - (end - done)

    @staticmethod
    def _sources_at(st: State, job: Job) -> int:
        """Where the job's sources begin in the state's levels (right after its target);
        by id and end, as their generations change with every slice."""
        n, want = len(job.sources), [(lv.id, lv.hi) for lv in job.sources]
        for j in range(1, len(st.levels) - n + 1):
            if [(lv.id, lv.hi) for lv in st.levels[j:j + n]] == want and \
                    st.levels[j - 1].id == job.target:
                return j
        raise CorruptStoreError("the run tables' merge names levels the state does not")

    def _swap(self, txn: Any, st: State, job: Job) -> State:
        """The merged level replaces its sources in the state (their records go: the runs
        are gone already); the stale count drops by the tombstones the merge honoured
        (deleted by _clean)."""
        at = self._sources_at(st, job)
        for db, guard in zip(self._tables.run_dbs, self._tables.run_guards, strict=True):
            for lv in job.sources:
                drop_level(txn, db, guard, lv.id)
        target = Level(job.target, next_gen(st.levels[at - 1].gen), job.sources[-1].hi)
        rest = st.levels[at + len(job.sources):]
        return st._replace(levels=st.levels[:at - 1] + (target,) + rest,
                           stale=max(st.stale - len(job.gone), 0))
