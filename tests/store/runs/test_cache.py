"""The run tables' process cache (:mod:`simstore.store.runs.cache`): kept in step with
other processes' writes and aborted batches, levels opened by their index records, runs
fetched when a probe first lands in them.

At small constants (``small`` of :mod:`tests.testlib`), answers against brute force.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore
import simstore.store.runs.cache
import simstore.store.runs.tables
from simstore.store import SimStore
from simstore.store.runs.tables import State

from ...testlib import (
    RUN_HEAD,
    Abort,
    cache,
    check_answers,
    child_prelude,
    env,
    iid_of,
    lmdb_env,
    merging,
    near,
    put,
    put_many,
    small,
    state_of,
    tables,
    tombstoned,
)
from ..test_crash import run_py

# --- 2. and 3. caches against other processes' writes --------------------------------


def child_ops(path: Path, values: dict[str, int], ops: list[list[Any]]) -> None:
    """Run ops (["add", id, fp], ["add_many", ids, fps], ["remove", id], ["remove_many", ids],
    ["query", fp]) on the store in a fresh interpreter with the same constants."""
    r = run_py(child_prelude(values) + f"""
import json
from simstore.store import SimStore, format as F
with SimStore({str(path)!r}) as s:
    for op, *args in json.loads({json.dumps(ops)!r}):
        if op == "add":
            s.add(*args)
        elif op == "add_many":
            s.add_many(*args)
        elif op == "remove":
            assert s.remove(*args)
        elif op == "remove_many":
            s.remove_many(*args)
        else:
            s.query(*args)
""")
    assert r.returncode == 0, r.stderr


def apply_ops(model: dict[Any, int], ops: list[list[Any]]) -> None:
    """The model of child_ops."""
    for op, *args in ops:
        if op == "add":
            put(model, *args)
        elif op == "add_many":
            put_many(model, list(zip(*args, strict=True)))
        elif op in ("remove", "remove_many"):
            for d in args[0] if op == "remove_many" else args:
                model.pop(d, None)


def test_cache_follows_another_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process queries (caching levels and recent docs) while a child adds, removes and
    updates docs, flushes recent docs into levels and merges levels: after each child step
    every answer equals brute force; a child that writes nothing leaves the cache in place;
    removing the doc with the highest internal id and adding one never reuses that id."""
    values = small(monkeypatch)
    rng = random.Random(3)
    pool = [rng.getrandbits(64) for _ in range(4)]

    def fps(n: int) -> list[int]:
        return [near(rng, rng.choice(pool), 5) for _ in range(n)]

    path = tmp_path / "s"
    store = SimStore(path, k=3, expected_size=1000)
    model: dict[Any, int] = {}
    first = [[f"d{i}" for i in range(40)], fps(40)]
    store.add_many(*first)
    apply_ops(model, [["add_many", *first]])
    rt = cache(store)

    def step(ops: list[list[Any]]) -> tuple[State, State]:
        before = state_of(store)
        check_answers(store, model, list(model.values())[-3:] + pool)  # the cache is filled
        child_ops(path, values, ops)
        apply_ops(model, ops)
        check_answers(store, model, list(model.values()) + pool)
        assert list(store.items()) == list(model.items())
        return before, state_of(store)

    # recent docs only: no level is rewritten
    a, b = step([["add", "r0", fps(1)[0]], ["add_many", ["r1", "r2"], fps(2)]])
    assert (b.levels, b.next) == (a.levels, a.next + 3)
    # a recent doc and a base doc removed, one base doc updated, one re-added unchanged
    a, b = step([["remove", "r1"], ["remove", "d3"], ["add", "d5", model["d5"] ^ 1],
                 ["add", "d6", model["d6"]]])
    assert b.stale == a.stale + 2 and b.levels == a.levels
    # enough new docs for a level of their own
    a, b = step([["add_many", [f"m{i}" for i in range(6)], fps(6)],
                 *[["add", f"m{i}", f] for i, f in zip(range(6, 10), fps(4), strict=True)]])
    assert b.flushed > a.flushed
    # a doc of that level updated and one removed
    a, b = step([["add", "m0", model["m0"] ^ 3], ["remove", "m1"]])
    assert b.stale == len(tombstoned(store)) > 0
    # a child that writes nothing: the levels and recent docs stay cached, the prober wired
    store.query(pool[0])
    cached = (dict(rt._levels), rt._recent, rt._wired_raw)
    a, b = step([["query", pool[0]], ["remove_many", ["nope"]]])
    assert a == b
    assert (dict(rt._levels), rt._recent, rt._wired_raw) == cached
    assert all(x is y for x, y in zip(rt._levels.values(), cached[0].values(), strict=True))
    assert rt._recent is cached[1] and rt._wired_raw is cached[2]
    # many more docs: merges finish, levels go (the first one among them)
    a, b = step([["add_many", [f"g{i}" for i in range(40)], fps(40)]] +
                [["add", f"h{i}", f] for i, f in enumerate(fps(30))])
    assert a.levels[0] not in b.levels and set(a.levels) - set(b.levels)
    # the doc with the highest internal id removed, then a new doc: a new internal id
    last = list(model)[-1]
    top = iid_of(store, last)
    a, b = step([["remove", last]])
    fresh = rng.getrandbits(64)
    a, b = step([["add", "after", fresh]])
    assert iid_of(store, "after") == top + 1 == b.next - 1
    assert [m.doc_id for m in store.query(fresh, 0)] == ["after"]
    assert store.verify() == []
    store.close()


def test_reader_across_a_map_grown_by_another_process(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """This process reads the levels in place; a child grows the map (long ids) without
    touching a level, then merges: each next query remaps (a new epoch), reads the levels
    again and equals brute force, with no crash on the old pointers."""
    values = small(monkeypatch, RECENT_MAX=64)
    rng = random.Random(11)
    pool = [rng.getrandbits(64) for _ in range(4)]
    path = tmp_path / "s"
    store = SimStore(path, k=3, expected_size=1000, map_size=1 << 20)
    model: dict[Any, int] = {}
    first = [[f"d{i}" for i in range(300)], [near(rng, rng.choice(pool), 5) for _ in range(300)]]
    store.add_many(*first)
    apply_ops(model, [["add_many", *first]])
    rt = cache(store)
    check_answers(store, model, pool)
    assert rt._levels and all(lev.sets for lev in rt._levels.values())
    size0, epoch0 = lmdb_env(store).info()["map_size"], env(store).epoch
    gens0 = state_of(store).levels
    # 40 docs of 60 KB ids (made in the child: too long for its command line): the map
    # grows, every level stays (they are recent docs)
    r = run_py(child_prelude(values) + f"""
import random
from simstore.store import SimStore, format as F
rng = random.Random(5)
with SimStore({str(path)!r}) as s:
    s.add_many(["%03d" % i + "x" * 60_000 for i in range(40)],
               [rng.getrandbits(64) for _ in range(40)])
""")
    assert r.returncode == 0, r.stderr
    crng = random.Random(5)
    apply_ops(model, [["add_many", [f"{i:03d}" + "x" * 60_000 for i in range(40)],
                       [crng.getrandbits(64) for _ in range(40)]]])
    assert state_of(store).levels == gens0
    check_answers(store, model, pool + list(model.values())[-5:])
    assert env(store).epoch > epoch0 and lmdb_env(store).info()["map_size"] > size0
    # then new levels and merges in the child, and more growth
    for r in range(3):
        ops = [["add_many", [f"m{r}-{i}" for i in range(100)],
                [near(rng, rng.choice(pool), 5) for _ in range(100)]]]
        child_ops(path, values, ops)
        apply_ops(model, ops)
        check_answers(store, model, pool + list(model.values())[-3:])
    assert store.verify() == []
    store.close()


@pytest.mark.parametrize(("aborted", "child"), [(3, 3), (3, 12), (12, 12), (12, 2)])
def test_aborted_batch_leaves_nothing_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             aborted: int, child: int) -> None:
    """A batch adds docs and queries them (12 docs: a new level too), then aborts; a child
    then adds different fingerprints, which take the same internal ids: this process finds
    the child's docs and none of the aborted ones."""
    values = small(monkeypatch)
    rng = random.Random(aborted * 100 + child)
    path = tmp_path / "s"
    store = SimStore(path, k=3, expected_size=1000)
    model = {f"d{i}": rng.getrandbits(64) for i in range(20)}
    store.add_many(list(model), list(model.values()))
    store.add("d20", rng.getrandbits(64))
    model["d20"] = store["d20"]
    check_answers(store, model, list(model.values()))
    before = state_of(store)
    lost = [rng.getrandbits(64) for _ in range(aborted)]
    with pytest.raises(Abort), store.batch():
        store.add("a0", lost[0])
        store.add_many([f"a{i}" for i in range(1, aborted)], lost[1:])
        for i, fp in enumerate(lost):
            assert [m.doc_id for m in store.query(fp, 0)] == [f"a{i}"]
        inside = state_of(store)
        assert (inside.flushed != before.flushed) == (aborted > values["RECENT_MAX"])
        taken = [iid_of(store, f"a{i}") for i in range(aborted)]
        raise Abort
    assert state_of(store) == before  # (no query here: the batch's view stays cached)
    theirs = [fp ^ 0xFFFF for fp in lost][:child] + [rng.getrandbits(64)
                                                      for _ in range(child - aborted)]
    ops = [["add_many", [f"c{i}" for i in range(child)], theirs]]
    child_ops(path, values, ops)
    apply_ops(model, ops)
    n = min(aborted, child)
    assert [iid_of(store, f"c{i}") for i in range(n)] == taken[:n]  # the same internal ids
    check_answers(store, model, lost + list(model.values()))
    for fp in lost:
        assert not [m for m in store.query(fp, 3) if str(m.doc_id).startswith("a")]
    store.close()



def recent_as_read(store: SimStore) -> tuple[Any, ...]:
    """The writer's recent docs as its cache holds them (after a lookup by similarity and
    by id has brought it to the committed state)."""
    rec = cache(store)._recent
    assert rec is not None and rec.has_ids
    return (rec.flushed, rec.upto, rec.xor, rec.iids.tolist(), rec.fps.tolist(),
            {k: sorted(v) for k, v in rec.bands.as_dict().items()},
            {k: sorted(v) for k, v in rec.ids.items()})


@pytest.mark.parametrize("seed", range(3))
def test_single_writes_leave_the_cache_a_reopen_reads(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, seed: int) -> None:
    """Random single writes (add, add_if_new, updates, removes, add_many, in and out of
    batches, aborted batches among them) each take their doc into the writer's recent
    docs without reading it back; after each step the writer's cache equals the one a
    fresh handle reads from the store, and both answer alike."""
    small(monkeypatch, RECENT_MAX=24)
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(60))

    def sig() -> Any:
        return simstore.signature(text())

    path = tmp_path / "s"
    store = SimStore(path, config=simstore.SIGNATURE_CONFIG, expected_size=1000)
    sigs = simstore.signatures([text() for _ in range(30)])
    store.add_many(range(30), sigs)
    pool = list(sigs)
    nxt = 100
    walks = []
    c = cache(store)
    walk = c._walk
    c._walk = lambda *a, **k: walks.append(a[1]) or walk(*a, **k)

    def look(s: SimStore) -> list[Any]:
        s.get(-1)  # a lookup by id: the recent docs with their ids' hashes
        return [s.similar(q, 0.5) for q in pool[-6:]]

    look(store)
    for _ in range(40):
        op = rng.random()
        if op < 0.45:
            nxt += 1
            before, n = state_of(store), len(walks)
            store.add(nxt, x := sig())
            pool.append(x)
            look(store)
            if state_of(store).flushed == before.flushed:
                assert len(walks) == n  # taken as offered, not read back
        elif op < 0.65:
            nxt += 1
            x = rng.choice(pool) if rng.random() < 0.5 else sig()
            store.add_if_new(nxt, x, threshold=0.9)
            pool.append(x)
        elif op < 0.75:
            store.add(rng.randrange(30, nxt + 1), sig())  # maybe an update, maybe a new id
        elif op < 0.82:
            store.remove(rng.randrange(nxt + 1))
        elif op < 0.9:
            with store.batch():
                for _ in range(rng.randrange(1, 5)):
                    nxt += 1
                    store.add(nxt, sig())
                    if rng.random() < 0.5:
                        look(store)
        else:
            with pytest.raises(Abort), store.batch():
                store.add(nxt + 1, sig())
                look(store)  # the uncommitted doc taken in, then aborted
                raise Abort
        got = look(store)
        mine = recent_as_read(store)
        with SimStore(path) as fresh:
            assert look(fresh) == got
            assert recent_as_read(fresh) == mine
            assert dict(fresh.items()) == dict(store.items())
    store.close()


# --- 8. levels opened by their index records, runs fetched when first needed -----------


def table_sets(store: SimStore) -> list[Any]:
    """The run sets of the tables (no ids', which queries never probe) of the levels this
    process has opened."""
    nt = len(tables(store).dbs)
    return [rs for lev in cache(store)._levels.values() for rs in lev.sets[:nt]]


def loaded_runs(store: SimStore) -> tuple[int, int]:
    """(runs loaded, runs in all) of the tables over the levels this process has opened."""
    sets = table_sets(store)
    return sum(rs.loaded for rs in sets), sum(rs.nruns for rs in sets)


def test_a_query_fetches_only_the_runs_its_probes_land_in(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """Opened by its index records, a store of many runs answers a query exactly having
    fetched a few of them; more queries fetch more; once a process has fetched 1 /
    WHOLE_AT of a level's runs it fetches the rest at once."""
    small(monkeypatch, RUN_ENTRIES=8, RECENT_MAX=64)
    monkeypatch.setattr(simstore.store.runs.cache, "WHOLE_AT", 0)  # run by run, to count them
    rng = random.Random(12)
    model = {f"d{i}": rng.getrandbits(64) for i in range(3000)}
    with SimStore(tmp_path / "s", k=3, expected_size=10**6, durable=False) as s:
        s.add_many(list(model), list(model.values()))
    with SimStore(tmp_path / "s") as s:
        queries = list(model.values())
        check_answers(s, model, queries[:1])
        got, total = loaded_runs(s)
        assert total >= 3000 * len(s.layout.tables) // 8 and 0 < got < total // 20
        check_answers(s, model, queries[1:40])
        assert got < loaded_runs(s)[0] < total
        assert s.verify() == []
    monkeypatch.setattr(simstore.store.runs.cache, "WHOLE_AT", 8)
    with SimStore(tmp_path / "s") as s:
        check_answers(s, model, queries[:1])
        assert loaded_runs(s)[0] < loaded_runs(s)[1]
        check_answers(s, model, queries[1:40])
        assert loaded_runs(s)[0] == loaded_runs(s)[1]  # each level's share reached


def test_short_run_records_are_copied_long_ones_viewed() -> None:
    """parse_run copies a record shorter than copy_below (it may sit inside a leaf page
    that LMDB moves when a neighbour changes) and views a longer one where it lies."""
    from simstore.store.runs.format import parse_run

    keys = np.arange(5, 25, dtype=np.uint64) * np.uint64(3)
    head = RUN_HEAD.pack(len(keys), 4, 0, 0, 0)
    val = bytearray(head + keys.astype("<u8").tobytes()
                    + np.arange(len(keys), dtype="<u4").tobytes())
    key = bytes((2,)) + int(keys[0]).to_bytes(8, "big")
    for copy_below, shared in ((len(val) + 1, False), (len(val), True)):
        first, run = parse_run(key, memoryview(val), 2, copy_below)
        assert first == 15 and run.keys.tolist() == keys.tolist()
        assert np.shares_memory(run.keys, np.frombuffer(val, dtype=np.uint8)) == shared


def test_place_run_holds_only_short_or_private_records() -> None:
    """place_run points at a long record viewed in the map without holding it, copies
    and holds one shorter than copy_below, and holds private bytes; its offsets name
    the record's keys and values."""
    from simstore.native.probe import Placed
    from simstore.store.runs.format import place_run

    keys = np.arange(5, 25, dtype=np.uint64) * np.uint64(3)
    val = bytearray(RUN_HEAD.pack(len(keys), 4, 0, 0, 0) + keys.astype("<u8").tobytes()
                    + np.arange(len(keys), dtype="<u4").tobytes())
    key = bytes((2,)) + int(keys[0]).to_bytes(8, "big")
    for copy_below, in_map, keep in ((len(val), True, False), (len(val) + 1, True, True),
                                     (0, False, True)):
        p = place_run(key, memoryview(val), 2, copy_below, in_map)
        assert isinstance(p, Placed) and p.keep == keep
        assert (p.buf is not None and isinstance(p.buf, bytes)) == (copy_below > len(val))
        got = np.frombuffer(p.buf, dtype="<u8", count=p.n, offset=p.koff)
        assert got.tolist() == keys.tolist() and p.vw == 4 and p.high == 0
        assert np.frombuffer(p.buf, dtype="<u4", count=p.n, offset=p.voff).tolist() == \
            list(range(len(keys)))


@pytest.mark.parametrize("damage", ["first key", "directory end"])
def test_place_run_refuses_a_damaged_record_as_corrupt(damage: str) -> None:
    """A run record whose first key is not its record key's, or whose directory does not
    end at its count, is a CorruptStoreError from place_run, as from parse_run."""
    from simstore.exceptions import CorruptStoreError
    from simstore.native.probe import run_dir
    from simstore.store.runs.format import parse_run, place_run

    keys = np.arange(1, 400, dtype=np.uint64) << np.uint64(30)
    d, shift = run_dir(keys, 6)
    dbits = len(d).bit_length() - 1
    val = bytearray(RUN_HEAD.pack(len(keys), 4, 0, dbits, shift) + keys.astype("<u8").tobytes()
                    + np.arange(len(keys), dtype="<u4").tobytes() + d.astype("<u4").tobytes())
    key = bytes((3,)) + int(keys[0]).to_bytes(8, "big")
    place_run(key, memoryview(val), 3, 0, True)  # sound
    if damage == "first key":
        key = bytes((3,)) + int(keys[1]).to_bytes(8, "big")
    else:
        val[-4:] = (len(keys) - 1).to_bytes(4, "little")
    for read in (lambda: place_run(key, memoryview(val), 3, 0, True),
                 lambda: parse_run(key, memoryview(val), 3)):
        with pytest.raises(CorruptStoreError):
            read()


def test_a_reader_holds_no_object_for_a_run_it_reads_in_place(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Having fetched every run, a reading process holds a buffer only for the runs
    shorter than a page (copied); the others it points at in the map (what keeps a
    reader's memory independent of the store's size); answers are exact."""
    small(monkeypatch, RUN_ENTRIES=600, RECENT_MAX=64)
    rng = random.Random(13)
    model = {f"d{i}": rng.getrandbits(64) for i in range(6000)}
    with SimStore(tmp_path / "s", k=3, expected_size=10**6, durable=False) as s:
        s.add_many(list(model), list(model.values()))
    with SimStore(tmp_path / "s", readonly=True) as s:
        check_answers(s, model, list(model.values())[:60])
        got, total = loaded_runs(s)
        assert got == total >= 10
        sets = table_sets(s)
        held = sum(len(rs._keep) for rs in sets)
        short = sum(1 for rs in sets for i in range(rs.nruns)
                    if rs._runs[i].n * (8 + rs._runs[i].vw) < cache(s)._psize)
        assert held == short < total // 4


def test_open_adopts_a_map_grown_between_its_open_and_first_read(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Another process grows the map after this one's lmdb.open and before its first
    transaction (MDB_MAP_RESIZED there): the open adopts the new size and answers."""
    import simstore.store.schema as schema

    path = tmp_path / "s"
    with SimStore(path, k=3, map_size=1 << 20) as s:
        s.add("a", 12345)
    real_load = schema.load

    def load_after_growth(env: Any, *args: Any, **kw: Any) -> Any:
        r = run_py(f"""
from simstore.store import SimStore, format as F
with SimStore({str(path)!r}) as s:
    s.add_many(["%03d" % i + "x" * 60_000 for i in range(40)], list(range(40)))
""")
        assert r.returncode == 0, r.stderr
        assert env.info()["map_size"] < 4 << 20  # this process's map is the old one
        return real_load(env, *args, **kw)

    monkeypatch.setattr(schema, "load", load_after_growth)
    with SimStore(path, map_size=1 << 20) as s:
        assert [m.doc_id for m in s.query(12345, 0)] == ["a"] and len(s) == 41


def test_a_reader_keeps_its_runs_across_a_merges_slices(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Each slice of a merge gives its levels new generations of the same lineage: another
    process's reader re-reads their index records but keeps the runs it holds that they
    still name (fetching only the target's new ones), and answers exactly after every
    slice, while the merge deletes the sources' merged runs."""
    values = small(monkeypatch, MERGE_STEP=64, MERGE_PER_DOC=1, RUN_ENTRIES=16, RECENT_MAX=64)
    monkeypatch.setattr(simstore.store.runs.cache, "WHOLE_AT", 0)
    rng = random.Random(5)
    model = {f"d{i}": rng.getrandbits(64) for i in range(2000)}
    path = tmp_path / "s"
    with SimStore(path, k=3, expected_size=10**5, durable=False) as w:
        w.add_many(list(model)[:1600], list(model.values())[:1600])
    stored = dict(list(model.items())[:1600])
    slices = kept = 0
    with SimStore(path, readonly=True) as r:
        queries = list(stored.values())
        for at in range(1600, 2000, 40):
            for q in queries:  # every run of every level held
                r.query(q, 3)
            before = {lid: [rs.held() for rs in lev.sets] for lid, lev in cache(r)._levels.items()}
            batch = list(model.items())[at:at + 40]
            done = run_py(child_prelude(values) + "from simstore import SimStore\n"
                          f"with SimStore({str(path)!r}, durable=False) as s:\n"
                          f"    s.add_many({[d for d, _ in batch]!r}, {[f for _, f in batch]!r})\n")
            assert done.returncode == 0, done.stderr
            stored.update(batch)
            job = merging(r)
            check_answers(r, stored, list(stored.values())[::97])
            if job is None:
                continue
            slices += 1
            sources = {lv.id for lv in job.sources}  # moved on by the slice: new generations
            for lid, lev in cache(r)._levels.items():
                if lid in before and lid in sources:
                    for old, rs in zip(before[lid], lev.sets, strict=True):
                        now = rs.held()
                        kept += sum(now.get(f) == stamp for f, stamp in old.items())
        assert slices >= 2 and kept > 0
    with SimStore(path) as s:
        assert s.verify() == []
