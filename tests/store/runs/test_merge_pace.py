"""A merge moves a doc's worth of every run database a write: a similarity store's band
entries (nbands a doc) keep pace with its tables instead of trailing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simstore
from simstore import SimStore

from ...testlib import check_answers, lmdb_env, merging, raw_runs, reading, small, tables


def random_signatures(rng: np.random.Generator, n: int) -> simstore.Signatures:
    """n signatures of random fingerprints, sketches and band keys: spread evenly over
    every key range (a merge's slices are counted in keys; real texts' keys cluster)."""
    cfg = simstore.SIGNATURE_CONFIG
    return simstore.Signatures(cfg, *(rng.integers(0, 2**64, shape, dtype=np.uint64)
                                      for shape in (n, (n, cfg.sketch_bits // 64),
                                                    (n, cfg.bands))))


def _writes_to_merge(tmp_path: Path, sim: bool, every: int = 4
                     ) -> tuple[int, list[int], list[int]]:
    """How many writes (one add each) a merge of every level takes in a store of 800 docs
    of which every ``every``-th was removed; the store's entries a doc in each run
    database; the sizes of table 0's runs after it (key order). Answers checked."""
    rng = np.random.default_rng(5)
    cfg = simstore.SIGNATURE_CONFIG if sim else None
    with SimStore(tmp_path / f"s{int(sim)}", k=3, config=cfg, expected_size=2000,
                  durable=False) as s:
        items = random_signatures(rng, 1200) if sim else \
            [int(x) for x in rng.integers(0, 2**64, 1200, dtype=np.uint64, endpoint=False)]
        s.add_many(range(800), items[:800])
        for i in range(0, 800, every):  # stale past its share: the next write merges all
            assert s.remove(i)
        writes = 0
        while True:
            s.add(800 + writes, items[800 + writes])
            writes += 1
            if merging(s) is None:
                break
            assert writes < 390
        model = {i: items[i] for i in range(800 + writes) if i >= 800 or i % every}
        fps = {d: v.fingerprint if sim else v for d, v in model.items()}
        check_answers(s, fps, [fps[801], fps[5], 0x5EED])
        if sim:
            for d in (801, 5, 9):
                assert d in {m.doc_id for m in s.similar(model[d], 0.9)}
        assert s.verify() == []
        with reading(s) as txn:
            sizes = [len(run[2]) for run in raw_runs(txn, tables(s).dbs[0])]
        return writes, list(tables(s).per_doc), sizes


def test_a_similarity_stores_merge_ends_with_its_tables(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """MERGE_PER_DOC docs per doc added, in every run database: the band database's 16
    entries a doc merge as fast (in docs) as a table's one, so a similarity store's
    merge of 800 entries a table and 200 tombstones ends in as many writes (~1000 / 4)
    as a fingerprint store's; it took ~16x as many when the budget counted entries."""
    small(monkeypatch, MERGE_STEP=1, MERGE_PER_DOC=4, MERGE_SHARE=10**6, MERGE_STEP_MAX=1,
          RECENT_MAX=1000)
    fp_writes, fp_per_doc, _ = _writes_to_merge(tmp_path, sim=False)
    sim_writes, sim_per_doc, _ = _writes_to_merge(tmp_path, sim=True)
    # two tables, the band entries, the ids
    assert fp_per_doc == [1, 1, 1] and sim_per_doc == [1, 1, 16, 1]
    assert 1000 // 4 - 3 <= fp_writes <= 1000 // 4 + 3, fp_writes
    assert abs(sim_writes - fp_writes) <= 3, (sim_writes, fp_writes)


def test_a_writes_floor_is_in_entries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The least a write merges (MERGE_STEP entries a run database) is entries' worth of
    docs: 72 docs of a fingerprint store's 2 tables and ids, 72 * 4 / 19 = 15 of a
    similarity store's (2 tables, 16 band entries and an id a doc), so a commit costs
    alike in both."""
    small(monkeypatch, MERGE_STEP=72, MERGE_PER_DOC=1, MERGE_SHARE=10**6, MERGE_STEP_MAX=1,
          RECENT_MAX=1000)
    fp_writes, _, _ = _writes_to_merge(tmp_path, sim=False)
    sim_writes, _, _ = _writes_to_merge(tmp_path, sim=True)
    # a step ends on a whole run (16 keys) and counts only the entries it took: 64 of
    # a table's 72 entries, then a run more as 8 left are half a run (counting the
    # cut's 8 as taken: 16 writes and 94)
    assert 1000 // 72 <= fp_writes <= 1000 // 72 + 1, fp_writes
    assert 1000 // 15 <= sim_writes <= 1000 // 15 + 2, (sim_writes, fp_writes)


def test_a_write_takes_the_whole_runs_nearest_its_budget(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """Slices end on whole runs (16 keys here) and count only the entries they took: a
    budget of 27 entries a write (1.7 runs) takes two runs, so 750 live entries a table
    (50 docs removed) merge in ~26 writes into full runs (15 keys where a step's removed
    docs left it short of 16); counting the entries a cut left as taken, a write took
    one run and a scrap: 42 writes, runs of 16, 3, 16, 3, ..."""
    small(monkeypatch, MERGE_STEP=24, MERGE_PER_DOC=27, MERGE_SHARE=10**6, MERGE_STEP_MAX=1,
          RECENT_MAX=1000, STALE_SHARE=16)
    writes, _, sizes = _writes_to_merge(tmp_path, sim=False, every=16)
    assert 800 // 32 - 2 <= writes <= 800 // 32 + 2, writes
    # the merged level (the only one: the adds since are recent), runs full but its last
    assert sum(sizes) == 750 and min(sizes[:-1]) >= 16 - 16 // 8, sizes


def test_a_bulk_writes_merging_is_paid_in_commits_of_its_own(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """A bulk write whose merge share passes MERGE_COMMIT_MAX entries a run database
    commits its docs with that much merged and pays the rest in commits of their own
    before add_many returns (or once a batch() block commits): the store then holds one
    level, answers as brute force and verifies, and its file is smaller than one commit's
    whole merge left it (each commit reuses the pages the ones two before freed)."""
    from simstore.store.runs import merges

    small(monkeypatch, RECENT_MAX=64, MERGE_STEP=64, MERGE_PER_DOC=16, RUN_ENTRIES=256)
    rng = np.random.default_rng(3)
    fps = [int(x) for x in rng.integers(0, 2**64, 40000, dtype=np.uint64)]
    model = dict(enumerate(fps))
    pages, commits = {}, {}
    for cap in (2048, 1 << 40):
        monkeypatch.setattr(merges, "MERGE_COMMIT_MAX", cap)
        with SimStore(tmp_path / f"s{cap}", k=3, expected_size=40000, durable=False) as s:
            s.add_many(range(20000), fps[:20000])
            t0 = lmdb_env(s).info()["last_txnid"]
            s.add_many(range(20000, 40000), fps[20000:])
            commits[cap] = lmdb_env(s).info()["last_txnid"] - t0
            pages[cap] = lmdb_env(s).info()["last_pgno"]
            assert merging(s) is None and s.stats()["levels"] == [40000]
            check_answers(s, model, fps[::1999])
            assert s.verify() == []
            with s.batch():  # two more bulk writes: paid once the block commits
                s.add_many(range(40000, 45000), fps[:5000])
                s.add_many(range(45000, 50000), fps[5000:10000])
            assert merging(s) is None and len(s.stats()["levels"]) <= 2
            assert s.verify() == []
    assert commits[1 << 40] == 1 and commits[2048] >= 15
    assert pages[2048] < 0.8 * pages[1 << 40]


def test_a_similarity_stores_bulk_merging_is_paid_alike(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """In a similarity store (16 band entries a doc) the owed merging is paid the same way:
    one level after two bulk writes, every doc found by its own signature, verify clean."""
    from simstore.store.runs import merges

    small(monkeypatch, RECENT_MAX=64, MERGE_STEP=64, MERGE_PER_DOC=16, RUN_ENTRIES=256)
    monkeypatch.setattr(merges, "MERGE_COMMIT_MAX", 4096)
    sigs = random_signatures(np.random.default_rng(4), 6000)
    with SimStore(tmp_path / "s", k=3, config=simstore.SIGNATURE_CONFIG, expected_size=6000,
                  durable=False) as s:
        s.add_many(range(3000), sigs[:3000])
        t0 = lmdb_env(s).info()["last_txnid"]
        s.add_many(range(3000, 6000), sigs[3000:])
        assert lmdb_env(s).info()["last_txnid"] - t0 >= 5
        assert merging(s) is None and s.stats()["levels"] == [6000]
        for i in range(0, 6000, 397):
            assert [m.doc_id for m in s.similar(sigs[i], 0.99)] == [i]
        assert s.verify() == []
