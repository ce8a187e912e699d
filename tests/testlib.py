"""The tests' one door to a store's private state, and the run-table helpers built on it.

A test that needs what :class:`simstore.SimStore` keeps private (its handles ``_h``, its
environment ``_env``) asks here, so a change of those internals is mended in one file.
The run-table helpers shrink the engine's constants (here and in child processes), read
its records as docs/format.md documents them, and check its levels against the docs.
"""

from __future__ import annotations

import bisect
import importlib
import os
import random
import struct
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest

import simstore.store.runs.tables
from simstore.search.layout import permute
from simstore.store import SimStore
from simstore.store.check.lmdbfile import read_metas
from simstore.store.check.pages import FileCheck
from simstore.store.format import encode_id
from simstore.store.runs.format import Job, lineage
from simstore.store.runs.removed import read_job
from simstore.store.runs.tables import State
from simstore.store.verify import records

from .oracles import brute_matches, shares_band, sketch_estimate

# --- the door to private state ----------------------------------------------------------


def handles(store: SimStore) -> Any:
    """The store's bound databases (``Handles``: docs, tables, codec, ...)."""
    return store._h


def env(store: SimStore) -> Any:
    """The store's environment (``simstore.store.env.Env``)."""
    return store._env


def tables(store: SimStore) -> Any:
    """The store's run tables (``RunTables``)."""
    return store._h.tables


def cache(store: SimStore) -> Any:
    """The run tables' level cache (``LevelCache``: levels, recent docs, probers)."""
    return store._h.tables.cache


def lmdb_env(store: SimStore) -> Any:
    """The open ``lmdb.Environment`` under the store."""
    return store._env.env


def meta_db(store: SimStore) -> Any:
    """The run tables' meta database (state, merge records, tombstones)."""
    return store._h.tables.meta_db()


def reading(store: SimStore) -> AbstractContextManager[Any]:
    """A short read transaction of the store (a context manager)."""
    return store._env.reading()


def sound(store: SimStore) -> list[str]:
    """What :meth:`SimStore.verify` finds, checked in this process: the file's pages (as
    bytes, when the snapshot read is the newest commit) and every record of the snapshot.
    For stores a test wrote itself, checked in a loop, where verify's child process costs
    ~0.3 s a call; verify's isolation from damaged files is tested on its own."""
    h = store._h
    psize = int(lmdb_env(store).stat()["psize"])
    with reading(store) as txn:
        found = FileCheck(os.path.join(h.path, "data.mdb"), psize).run(txn.id())
        return found or records(txn, h)


def tree_pages(data: Path, name: bytes, psize: int = 4096) -> tuple[list[int], list[int]]:
    """(branch pages, root first; leaf pages in key order) of a named database's B-tree in
    the newest snapshot of the data file at data (a sound one)."""
    txnid = max(m.txnid for m in read_metas(str(data), psize) if m)
    check = FileCheck(str(data), psize)
    assert check.run(txnid) == []
    rec = check.names[name]
    branches: list[int] = []
    leaves: list[int] = []
    with open(data, "rb") as fh:
        def walk(pgno: int, level: int) -> None:
            if level == rec.depth:
                leaves.append(pgno)
                return
            branches.append(pgno)
            fh.seek(pgno * psize)
            page = fh.read(psize)
            n = (struct.unpack_from("<H", page, 12)[0] - 16) // 2
            for ptr in struct.unpack_from(f"<{n}H", page, 16):
                lo, hi, flags, _ = struct.unpack_from("<HHHH", page, ptr)
                walk(lo | hi << 16 | flags << 32, level + 1)
        walk(rec.root, 1)
    return branches, leaves


# --- run tables at small constants -------------------------------------------------------

# RECENT_MAX 8: a new level every ninth new doc; MERGE_STEP 8, MERGE_PER_DOC 2: a
# merge takes several writes; RUN_ENTRIES 16: levels of many runs; STALE_SHARE 4;
# DIR_MIN_ENTRIES 4 (of simstore.store.runs.format): runs of 4 keys or more carry a directory.
SMALL = {"RECENT_MAX": 8, "MERGE_STEP": 8, "MERGE_PER_DOC": 2, "RUN_ENTRIES": 16,
         "STALE_SHARE": 4, "DIR_MIN_ENTRIES": 4}
# entries, iid width, key width (0: 8-byte keys), directory bits, directory shift: the
# documented run header
RUN_HEAD = struct.Struct("<IBBBB")


def _module_of(name: str) -> str:
    """The module of simstore.store.runs that holds a run-table constant."""
    if name == "DIR_MIN_ENTRIES":
        return "format"
    if name in ("RECENT_MAX", "RUN_ENTRIES", "BULK_RUN_ENTRIES", "BULK_DOCS", "FOLD_FLUSHES"):
        return "tables"
    return "merges"


def small(monkeypatch: pytest.MonkeyPatch, **over: int) -> dict[str, int]:
    """Shrink the run tables' constants in this process; the values set."""
    values = {**SMALL, **over}
    for name, value in values.items():
        module = importlib.import_module(f"simstore.store.runs.{_module_of(name)}")
        monkeypatch.setattr(module, name, value)
    return values


def child_prelude(values: dict[str, int]) -> str:
    """Python lines that set the same constants in a child process."""
    sets = "; ".join(f"simstore.store.runs.{_module_of(name)}.{name} = {value}"
                     for name, value in values.items())
    return ("import simstore.store.runs.tables, simstore.store.runs.format, "
            f"simstore.store.runs.merges; {sets}\n")


def state_of(store: SimStore) -> State:
    """The run tables' state record as a fresh read sees it."""
    with reading(store) as txn:
        return tables(store).state(txn)


def merging(store: SimStore) -> Job | None:
    """The merge under way, if any."""
    with reading(store) as txn:
        return read_job(txn, meta_db(store), tables(store).meta_guard())


def tombstoned(store: SimStore) -> set[int]:
    """Internal ids of the tombstones, read from the documented keys: blocks b"t" + block
    number (8 bytes) -> 64 bytes whose bit i of byte j marks iid 512 * block + 8 * j + i."""
    out = set()
    with reading(store) as txn:
        for key, val in txn.cursor(meta_db(store)):
            key = bytes(key)
            if key[:1] == b"t" and len(key) == 9:
                assert len(val) == 64 and any(val)  # an empty block is deleted
                base = 512 * int.from_bytes(key[1:], "big")
                out.update(base + 8 * j + i for j, byte in enumerate(bytes(val))
                           for i in range(8) if byte >> i & 1)
    return out


def put(model: dict[Any, int], doc_id: Any, fp: int) -> None:
    """The model of add: a changed fingerprint moves the doc to the end of insertion order."""
    if model.get(doc_id, fp) != fp:
        del model[doc_id]
    model[doc_id] = fp


def put_many(model: dict[Any, int], items: list[tuple[Any, int]]) -> None:
    """The model of add_many: last duplicate wins; stored ids first, then new ones, in call order."""
    last = {d: (n, fp) for n, (d, fp) in enumerate(items)}
    for d, (_, fp) in sorted(last.items(), key=lambda kv: (kv[0] not in model, kv[1][0])):
        put(model, d, fp)


def check_answers(store: SimStore, model: dict[Any, int], queries: list[int]) -> None:
    """Every query at every k up to the store's k equals brute force (brute force's
    answer at a smaller k is its answer at the store's k cut at that distance)."""
    for q in queries:
        want = brute_matches(model, q, store.k)
        for k in range(store.k + 1):
            assert store.query(q, k) == [m for m in want if m.distance <= k], (hex(q), k)


def near(rng: random.Random, fp: int, most: int) -> int:
    """fp with up to `most` random bits flipped."""
    for b in rng.sample(range(64), rng.randint(0, most)):
        fp ^= 1 << b
    return fp


# --- the run records, read from the documented format -------------------------------


def raw_runs(txn: Any, db: Any, tail: int | None = None
             ) -> list[tuple[int, int, list[int], list[int], int]]:
    """(level, first key in the record key, keys, iids, iid width) of every run, in key order
    (tail: the table's tail bits, below which no directory bucket may go). Each level's
    index (a head keyed 0xFF + the level byte, then chunks of at most 240 first keys keyed
    by those two bytes and a 4-byte chunk number, uint64 little-endian) lists exactly its
    runs' first keys."""
    out = []
    index: dict[int, list[int]] = {}
    for key, val in txn.cursor(db):
        key, val = bytes(key), bytes(val)
        if len(key) == 6:  # an index chunk: first keys
            assert key[0] == 0xFF and len(val) % 8 == 0 and len(val) <= 8 * 240
            index.setdefault(key[1], []).extend(
                int.from_bytes(val[i : i + 8], "little") for i in range(0, len(val), 8))
            continue
        if len(key) == 2:  # a level's index head: no value
            assert key[0] == 0xFF and val == b""
            index.setdefault(key[1], [])
            continue
        assert len(key) == 9, key
        n, width, kw, dbits, shift = RUN_HEAD.unpack_from(val)
        dlen = 4 * ((1 << dbits) + 1) if dbits else 0
        assert width in (4, 8) and kw == 0 and (dbits or not shift)
        assert len(val) == 8 + n * (8 + width) + dlen
        body = val[8:]
        keys = [int.from_bytes(body[8 * i : 8 * i + 8], "little") for i in range(n)]
        at = 8 * n
        iids = [int.from_bytes(body[at + width * i : at + width * (i + 1)], "little")
                for i in range(n)]
        if dbits:  # the directory: first index of each bucket (key >> shift) - (first >> shift)
            at += width * n
            got = [int.from_bytes(body[at + 4 * b : at + 4 * b + 4], "little")
                   for b in range((1 << dbits) + 1)]
            rel = [(x >> shift) - (keys[0] >> shift) for x in keys]
            assert rel[-1] < 1 << dbits
            assert got == [bisect.bisect_left(rel, b) for b in range((1 << dbits) + 1)]
            assert tail is None or shift >= tail  # never finer than a probe's range
        out.append((key[0], int.from_bytes(key[1:], "big"), keys, iids, width))
    levels = {r[0] for r in out}
    assert set(index) >= levels  # a merge's target or trimmed source may have no run
    for lv in index:
        assert index[lv] == [r[1] for r in out if r[0] == lv]
    return out


def cursors(store: SimStore) -> list[int | None]:
    """A merge's progress per run database (documented: a live byte and the next key)."""
    with reading(store) as txn:
        raw = bytes(txn.get(b"mcursor", db=meta_db(store)))
    return [int.from_bytes(raw[i + 1:i + 9], "little") if raw[i] else None
            for i in range(0, len(raw), 9)]


def check_levels(store: SimStore, st_: State, run_entries: int,
                 late: frozenset[int] | set[int] = frozenset()) -> None:
    """Each table's levels as the format says: sorted runs of live docs in the level's
    range of internal ids, plus st_.stale dead ones, each with a tombstone; no runs but
    the levels'. A merge under way has its target among them, covering its
    sources' ids and holding their entries below its cursor; the sources hold them
    from it on, their entries below it being copies (or left out, for its tombstones).
    late: docs removed while a merge was under way, whose entries it may have left out
    where it had yet to pass (their tombstones kept): only theirs may be missing."""
    h = store._h
    with reading(store) as txn:
        cols = h.codec.walk(txn.cursor(h.docs).iternext(), with_ids=False)
        runs = [raw_runs(txn, db, 64 - h.layout.header_bits(t))
                for t, db in enumerate(h.tables.dbs)]
    job = merging(store)
    live = dict(zip(cols.iids.tolist(), cols.fps.tolist(), strict=True))
    in_levels = {i: fp for i, fp in live.items() if i < st_.flushed}
    dead_all = tombstoned(store)
    with reading(store) as txn:  # a merge swapped in, deleting its tombstones
        cleaned = txn.get(b"mclean", db=h.tables.meta_db())
    if cleaned is not None:
        assert job is not None
        left = set(job.gone[int.from_bytes(cleaned, "little"):].tolist())
        assert left <= dead_all
        dead_all -= left
    bounds, lo = [], 0
    for lv in st_.levels:
        bounds.append((lv.id, lo, lv.hi))
        lo = lv.hi
    assert lo == st_.flushed <= st_.next
    ids = {lv.id for lv in st_.levels}
    under_way = job is not None and cleaned is None
    if under_way:  # the target covers its sources' ids
        assert job.target in ids
        at = [b[0] for b in bounds].index(job.target)
        assert [b[0] for b in bounds[at + 1:at + 1 + len(job.sources)]] == [
            lv.id for lv in job.sources]
        bounds[at] = (job.target, bounds[at][1], job.sources[-1].hi)
        cur = cursors(store)
    else:
        assert len(dead_all) == st_.stale
    sources = {lv.id for lv in job.sources} if under_way else set()
    for t, table in enumerate(runs):
        want = set(zip(permute(h.layout, t, list(in_levels.values())).tolist(), in_levels,
                       strict=True))
        got: list[tuple[int, int]] = []
        for level, lo, hi in bounds:
            mine = [r for r in table if r[0] == level]
            keys = [key for r in mine for key in r[2]]
            assert keys == sorted(keys), f"table {t} level {level}: keys out of order"
            if mine:  # 4-byte ids unless the run holds one past 32 bits
                for r in mine:
                    assert r[4] == (8 if max(r[3]) >= 1 << 32 else 4)
            for (_, first, ks, iids, _), nxt in zip(mine, [*mine[1:], None], strict=False):
                assert ks and first == ks[0]
                assert len(ks) <= run_entries or len(set(ks)) == 1  # a run never splits a key
                assert nxt is None or ks[-1] < nxt[2][0]
                assert all(lo <= i < hi for i in iids), f"table {t} level {level}: iid outside"
                rows = list(zip(ks, iids, strict=True))
                if level in sources:  # below the cursor: copies of the target's
                    rows = [] if cur[t] is None else [r for r in rows if r[0] >= cur[t]]
                elif under_way and level == job.target:
                    assert cur[t] is None or not ks or ks[-1] < cur[t]
                got += rows
        assert not [r for r in table if r[0] not in ids], f"table {t}: runs of no level"
        assert len(got) == len(set(got)) and len({i for _, i in got}) == len(got)
        dead = {i for _, i in got if i not in live}
        assert {(key, i) for key, i in got if i in live} == want, f"table {t}: live entries"
        gone = set(job.gone.tolist()) if under_way else set()
        # the merge leaves out its tombstones' entries as it goes (and late docs')
        assert dead <= dead_all, f"table {t}: a dead entry without a tombstone"
        assert dead_all - dead <= gone | late, \
            f"table {t}: {len(dead)} dead entries, stale {st_.stale}"


def folded(prev: State, now: State) -> bool:
    """Whether a write between two states folded a flush into the newest level (a merge
    under way): the recent docs joined it and it kept its id under a new lineage."""
    return bool(prev.levels and now.levels) and now.flushed > prev.flushed and \
        prev.levels[-1].id == now.levels[-1].id and \
        lineage(prev.levels[-1].gen) != lineage(now.levels[-1].gen)


def live_iids(store: SimStore) -> set[int]:
    """Internal ids of the docs table's records."""
    with reading(store) as txn:
        return {int.from_bytes(bytes(key), "big") for key in
                txn.cursor(store._h.docs).iternext(values=False)}


class Watch:
    """The state's invariants from one step to the next (one store, in this process)."""

    def __init__(self, store: SimStore, seen: dict[str, int]) -> None:
        self.prev = state_of(store)
        self.prev_live = live_iids(store)
        self.prev_merging = merging(store) is not None
        self.late: set[int] = set()  # removed while a merge was under way
        self.seen = seen

    def check(self, store: SimStore) -> None:
        """Bounds in order, recent docs merged in time, no internal id reused, stale counted."""
        st_, prev = state_of(store), self.prev
        live = live_iids(store)
        assert st_.flushed <= st_.next
        assert st_.next - st_.flushed <= simstore.store.runs.tables.RECENT_MAX
        assert st_.next >= prev.next and all(i < st_.next for i in live)
        assert all(i >= prev.next for i in live - self.prev_live), "an internal id was reused"
        # levels by id and lineage: a merge's slices move generations on, not lineages
        old, new = ({(lv.id, lineage(lv.gen)) for lv in sts.levels} for sts in (prev, st_))
        if (was_folded := folded(prev, st_)):  # its removed docs' stale entries and
            # tombstones went with its old lineage (the machine's seen has no "folds")
            self.seen["folds"] = self.seen.get("folds", 0) + 1
            old.discard((prev.levels[-1].id, lineage(prev.levels[-1].gen)))
        if old - new:  # a merge finished: only then do levels go, or stale entries
            self.seen["merges"] += 1
            self.seen["purges"] += st_.stale < prev.stale
        elif not was_folded:
            assert st_.stale >= prev.stale
        self.seen["flushes"] += st_.flushed > prev.flushed
        self.seen["spread"] += merging(store) is not None
        with reading(store) as txn:
            self.seen["cleans"] += txn.get(b"mclean", db=meta_db(store)) is not None
        now_merging = merging(store) is not None
        # a merge ran in this step (a fold happens only while one is under way)
        if self.prev_merging or now_merging or old - new or was_folded:
            self.late |= (self.prev_live | set(range(prev.next, st_.next))) - live
        check_levels(store, st_, simstore.store.runs.tables.RUN_ENTRIES, self.late)
        self.prev, self.prev_live, self.prev_merging = st_, live, now_merging


class Abort(Exception):
    """Raised to abort a batch on purpose."""


def iid_of(store: SimStore, doc_id: Any) -> int:
    """The internal id of a stored doc (as the open batch, if any, sees it)."""
    with reading(store) as txn:
        found = store._h.idx.find(txn, encode_id(doc_id))
        assert found is not None
        return int.from_bytes(found[0], "big")


def runs_env_edit(path: Path, edit: Any) -> None:
    """edit(txn, [r00, r01], state database) on the raw LMDB file of a k=3 store, committed."""
    env = lmdb.open(str(path), max_dbs=64, subdir=True)
    try:
        with env.begin(write=True) as txn:
            dbs = [env.open_db(b"r%02d" % t, txn=txn, create=False) for t in range(2)]
            edit(txn, dbs, env.open_db(b"runs", txn=txn, create=False))
    finally:
        env.close()


# --- answers of every kind, for tests that compare a store before and after --------


def brute_similar(model: dict[Any, Any], q: Any, t: float) -> list[tuple[Any, float]]:
    """(doc id, estimate) of every doc sharing a band with q at estimate >= t: best first,
    then insertion order."""
    rows = []
    for n, (d, sig) in enumerate(model.items()):
        if shares_band(q.bands, sig.bands):
            est = sketch_estimate(q.sketch, sig.sketch)
            if est >= t:
                rows.append((-est, n, d))
    return [(d, -e) for e, _, d in sorted(rows)]


def fp_of(v: Any) -> int:
    """The fingerprint of a fingerprint or a Signature."""
    return v if isinstance(v, int) else int(v.fingerprint)


def fps_of(model: dict[Any, Any]) -> dict[Any, int]:
    """The model with each value's fingerprint."""
    return {d: fp_of(v) for d, v in model.items()}


def all_answers(store: SimStore, model: dict[Any, Any], queries: list[Any]) -> list[Any]:
    """Every answer the tests compare (queries at each k; similar at two thresholds)."""
    fps = fps_of(model)
    out: list[Any] = []
    for q in queries:
        qfp = fp_of(q)
        for k in range(store.k + 1):
            got = store.query(qfp, k)
            assert got == brute_matches(fps, qfp, k)
            out.append(got)
        if not isinstance(q, int):
            for t in (0.5, 0.85):
                got = [(m.doc_id, m.jaccard) for m in store.similar(q, t)]
                want = brute_similar(model, q, t)
                assert [d for d, _ in got] == [d for d, _ in want]
                assert np.allclose([j for _, j in got], [j for _, j in want])
                out.append(got)
    return out


def near_texts(rng: random.Random, n: int) -> list[str]:
    """n texts in four families (up to two words swapped), near one another."""
    words = [f"w{i}" for i in range(300)]
    bases = [[rng.choice(words) for _ in range(60)] for _ in range(4)]
    out = []
    for i in range(n):
        ws = list(bases[i % 4])
        for _ in range(rng.randint(0, 2)):
            ws[rng.randrange(60)] = rng.choice(words)
        out.append(" ".join(ws))
    return out
