"""Merges of levels (:mod:`simstore.store.runs.merges`): space kept under churn, stale
entries merged away past their share, long runs in bulk levels, merges spread over
writes.

At small constants (``small`` of :mod:`tests.testlib`), answers against brute force.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import simstore
import simstore.store.runs.cache
import simstore.store.runs.tables
from simstore.store import SimStore

from ...testlib import (
    Watch,
    check_answers,
    check_levels,
    live_iids,
    merging,
    near,
    put,
    raw_runs,
    reading,
    small,
    state_of,
    tables,
    tombstoned,
)

# --- 6. and 7. space and stale entries --------------------------------------------------


# MERGE_PER_DOC as in the real engine: the share of merging a write does decides
# whether merges keep up with a churn that removes as many docs as it adds
@pytest.mark.parametrize("over", [
    pytest.param({"MERGE_PER_DOC": 16}, id="small-runs"),
    # one run a level: its values on overflow pages
    pytest.param({"MERGE_PER_DOC": 16, "RUN_ENTRIES": 1 << 15}, id="big-runs"),
])
def test_churn_does_not_grow_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      over: dict[str, int]) -> None:
    """30 rounds of add_many(500 new ids) then remove_many(500 old ones): merges drop the
    removed docs' entries, the file after round 30 is at most 1.5x its size after round 10,
    and verify() passes."""
    small(monkeypatch, **over)
    rng = np.random.default_rng(6)
    path = tmp_path / "s"
    seen = {"merges": 0, "purges": 0}
    sizes = []
    with SimStore(path, k=3, expected_size=1000, durable=False) as s:
        s.add_many(range(500), rng.integers(0, 2**64, 500, dtype=np.uint64, endpoint=False))
        for r in range(1, 31):
            before = state_of(s)
            s.add_many(range(500 * r, 500 * (r + 1)),
                       rng.integers(0, 2**64, 500, dtype=np.uint64, endpoint=False))
            after = state_of(s)
            seen["merges"] += bool(set(before.levels) - set(after.levels))
            seen["purges"] += after.stale < before.stale
            assert s.remove_many(range(500 * (r - 1), 500 * r)) == 500
            sizes.append((s.stats()["used_bytes"], (path / "data.mdb").stat().st_size))
        assert len(s) == 500 and s.verify() == []
        assert [fp for _, fp in s.items()] == s.fingerprints().tolist()
        assert state_of(s).stale <= 5000  # bounded: merges keep up (15,000 were removed)
    assert min(seen.values()) >= 5, seen  # merges swapped in, stale entries dropped
    (used10, file10), (used30, file30) = sizes[9], sizes[29]
    assert used30 <= 1.5 * used10 and file30 <= 1.5 * file10, sizes


def test_stale_entries_past_their_share_merge_every_level(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """Removed docs in levels are counted stale, each with a tombstone; once stale > live /
    STALE_SHARE the next add merges every level into one without them: stale back to 0,
    no tombstone left. At or under the share, the next add leaves the levels alone."""
    values = small(monkeypatch, MERGE_STEP=1000)  # STALE_SHARE 4, RECENT_MAX 8
    with SimStore(tmp_path / "s", k=3, expected_size=1000, durable=False) as s:
        s.add_many(range(100), range(0, 100 * 7919, 7919))
        first = state_of(s)
        assert first.flushed == 100 and first.stale == 0 and len(first.levels) == 1
        assert s.remove_many(range(20)) == 20  # stale 20: 20 * 4 <= 80 live
        assert state_of(s).stale == 20 and len(tombstoned(s)) == 20
        s.add(1000, 5)
        kept = state_of(s)
        assert kept.stale == 20 and kept.levels == first.levels and kept.next == 101
        assert s.remove_many(range(20, 40)) == 20  # stale 40: 40 * 4 > 61 live
        assert state_of(s).stale == 40 > len(s) / values["STALE_SHARE"]
        s.add(1001, 6)
        st_ = state_of(s)
        assert st_.stale == 0 and not tombstoned(s) and len(st_.levels) == 1
        assert st_.levels != first.levels and st_.flushed == 100 and st_.next == 102
        assert [m.doc_id for m in s.query(6, 0)] == [1001]
        check_levels(s, st_, values["RUN_ENTRIES"])
        assert s.verify() == []


def test_stale_share_rule_holds_below_recent_max(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """STALE_SHARE's rule, "merge every level when stale entries exceed live / STALE_SHARE",
    also for a small store, whose stale entries are fewer than RECENT_MAX (with the real
    constants: a store of 5,000 docs after 4,000 removes keeps 4,000 dead entries a table)."""
    values = small(monkeypatch, MERGE_STEP=1000)  # STALE_SHARE 4, RECENT_MAX 8
    with SimStore(tmp_path / "s", k=3, expected_size=1000, durable=False) as s:
        s.add_many(range(26), range(0, 26 * 7919, 7919))
        assert s.remove_many(range(6)) == 6  # stale 6 <= RECENT_MAX, 6 * 4 > 20 live
        assert state_of(s).stale * values["STALE_SHARE"] > len(s)
        s.add(1000, 5)
        assert state_of(s).stale == 0


def run_sizes(store: SimStore) -> dict[int, tuple[int, list[int]]]:
    """Each level's id span and the key counts of its runs in table 0 (run records read
    from the documented format)."""
    st_, spans, lo = state_of(store), {}, 0
    for lv in st_.levels:
        spans[lv.id], lo = lv.hi - lo, lv.hi
    with reading(store) as txn:
        runs = raw_runs(txn, tables(store).dbs[0])
    return {level: (span, [len(r[2]) for r in runs if r[0] == level])
            for level, span in spans.items()}


def test_runs_are_long_in_a_bulk_level_and_short_in_the_small_ones(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A level of BULK_DOCS docs or more, written whole or by a merge, holds runs of up to
    BULK_RUN_ENTRIES keys; the smaller levels runs of up to RUN_ENTRIES; answers exact."""
    small(monkeypatch, RUN_ENTRIES=8, BULK_RUN_ENTRIES=64, BULK_DOCS=200, RECENT_MAX=16,
          MERGE_STEP=256)
    rng = random.Random(12)
    model = {i: rng.getrandbits(64) for i in range(400)}
    with SimStore(tmp_path / "s", k=3, expected_size=1000, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        (span, sizes), = run_sizes(s).values()  # one level, written whole
        assert span == 400 and max(sizes) == 64 and len(sizes) == 7, sizes
        for i in range(400, 460):
            model[i] = rng.getrandbits(64)
            s.add(i, model[i])
        levels = sorted(run_sizes(s).values(), reverse=True)
        assert levels[0][0] >= 400 and max(levels[0][1]) == 64
        small_ones = [sizes for span, sizes in levels[1:]]
        assert small_ones and all(max(z) <= 8 for z in small_ones), levels
        assert any(sum(z) > 8 for z in small_ones), levels  # a level of many runs
        for i in range(0, 300, 2):  # stale entries past live / 4: every level merges
            assert s.remove(i)
            del model[i]
        for i in range(460, 480):
            model[i] = rng.getrandbits(64)
            s.add(i, model[i])
        assert merging(s) is None
        levels = sorted(run_sizes(s).values(), reverse=True)
        assert levels[0][0] >= 200 and max(levels[0][1]) == 64, levels
        check_answers(s, model, list(model.values())[:20])
        assert s.verify() == []


def test_merges_spread_over_writes_keep_answers(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A merge of a large level takes many writes (MERGE_STEP entries a run database each):
    while it is under way every answer is exact (the sources stay whole, the partial target
    is never read), a write never merges more than its share, and the target replaces the
    sources when done."""
    small(monkeypatch, MERGE_STEP=16, RUN_ENTRIES=8, LEVEL_RATIO=4)
    rng = random.Random(8)
    pool = [rng.getrandbits(64) for _ in range(6)]
    model = {f"d{i}": near(rng, rng.choice(pool), 6) for i in range(400)}
    with SimStore(tmp_path / "s", k=5, expected_size=1000, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        jobs, steps = set(), 0
        watch = Watch(s, {"merges": 0, "purges": 0, "flushes": 0, "spread": 0, "cleans": 0})
        for i in range(200):
            fp = near(rng, rng.choice(pool), 6)
            s.add(f"n{i}", fp)
            put(model, f"n{i}", fp)
            if i % 9 == 0:
                victim = rng.choice(list(model))
                assert s.remove(victim)
                del model[victim]
            job = merging(s)
            if job is not None:
                jobs.add(job.gen)
                steps += 1
            check_answers(s, model, [fp] + pool[:2])
            watch.check(s)  # the levels after each write (removed docs' entries left out)
        assert s.verify() == []
    assert len(jobs) >= 3 and steps >= 3 * len(jobs), (len(jobs), steps)


def stale_rows(store: SimStore) -> list[list[int]]:
    """Per table, the internal ids of its rows whose docs are gone (no merge under way)."""
    live = live_iids(store)
    with reading(store) as txn:
        return [[i for r in raw_runs(txn, db) for i in r[3] if i not in live]
                for db in tables(store).dbs]


def test_a_merge_leaves_out_docs_removed_while_it_runs(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """Docs removed while a merge is under way lose their entries wherever it has yet to
    pass (at 1M under churn merges run back to back, and honouring only the docs removed
    before it began kept ~live / STALE_SHARE stale entries at all times); their
    tombstones stay, counted, for the next merge of their level, which leaves out the
    rest. Exact answers, the levels checked and verify() clean throughout."""
    small(monkeypatch, MERGE_STEP=16, RUN_ENTRIES=8, LEVEL_RATIO=4, STALE_SHARE=10**6)
    rng = random.Random(21)
    model = {i: rng.getrandbits(64) for i in range(400)}
    with SimStore(tmp_path / "s", k=3, expected_size=1000, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        watch = Watch(s, {"merges": 0, "purges": 0, "flushes": 0, "spread": 0, "cleans": 0})
        nxt = 1000

        def write(victim: int | None = None) -> None:
            nonlocal nxt
            with s.batch():
                if victim is not None:
                    assert s.remove(victim)
                    del model[victim]
                model[nxt] = rng.getrandbits(64)
                s.add(nxt, model[nxt])
            nxt += 1
            watch.check(s)

        while (job := merging(s)) is None or 400 not in {lv.hi for lv in job.sources}:
            write()  # until a merge of the first level (ids 0-399) begins
        assert len(job.gone) == 0
        victims = rng.sample(range(400), 12)
        for v in victims:  # a remove a write, the merge going on
            write(v)
            assert (m := merging(s)) is not None and m.gen == job.gen, "it ended too soon"
        while (m := merging(s)) is not None and m.gen == job.gen:
            write()
        assert m is None or job.sources[0].hi not in {lv.hi for lv in m.sources}
        stale, gone = stale_rows(s), tombstoned(s)
        assert gone == set(victims) and state_of(s).stale == len(victims)
        assert all(set(rows) <= gone for rows in stale)
        # those it had yet to pass went: some, not all (it had passed part of each table)
        assert all(0 < len(rows) < len(victims) for rows in stale), [len(r) for r in stale]
        check_answers(s, model, list(model.values())[::7])
        assert s.verify() == []
        # the next merge of every level takes the rest, and the tombstones
        monkeypatch.setattr(simstore.store.runs.merges, "STALE_SHARE", 100)  # 12 * 100 > live
        write()
        while merging(s) is not None:
            write()
        assert stale_rows(s) == [[] for _ in tables(s).dbs]
        assert tombstoned(s) == set() and state_of(s).stale == 0
        check_answers(s, model, list(model.values())[::7])
        assert s.verify() == []


@pytest.mark.parametrize("cap", [64, 16])
def test_a_large_merge_takes_a_share_of_its_size_a_write(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path, cap: int) -> None:
    """A write merges (and then deletes the tombstones of) MERGE_STEP entries, or 1 /
    MERGE_SHARE of the merge's ids, up to MERGE_STEP_MAX: a merge of every level (stale
    entries past the share) takes about (entries + tombstones) / min(span / MERGE_SHARE,
    MERGE_STEP_MAX) writes, so fewer levels pile up meanwhile; answers stay exact."""
    small(monkeypatch, MERGE_STEP=4, MERGE_PER_DOC=1, MERGE_SHARE=4, MERGE_STEP_MAX=cap,
          RECENT_MAX=1000)
    rng = random.Random(14)
    model = {i: rng.getrandbits(64) for i in range(800)}
    with SimStore(tmp_path / "s", k=3, expected_size=2000, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        for i in range(0, 800, 4):  # stale past live / 4: the next write merges every level
            assert s.remove(i)
            del model[i]
        writes, nxt = 0, 800
        while True:
            model[nxt] = rng.getrandbits(64)
            s.add(nxt, model[nxt])
            nxt += 1
            if merging(s) is None:
                break
            writes += 1
            assert writes < 400
        # 800 entries a table and 200 tombstones: a share of 200 a write, capped at 64 or 16
        assert 1000 // cap - 2 <= writes <= 1000 // cap + 2, writes
        check_answers(s, model, list(model.values())[:20])
        assert s.verify() == []


