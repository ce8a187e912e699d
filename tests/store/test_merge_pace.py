"""A merge moves a doc's worth of every run database a write: a similarity store's band
entries (nbands a doc) keep pace with its tables instead of trailing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simstore
from simstore import SimStore

from .test_runs import check_answers, merging, raw_runs, small


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
        with s._env.reading() as txn:
            sizes = [len(run[2]) for run in raw_runs(txn, s._h.tables.dbs[0])]
        return writes, list(s._h.tables.per_doc), sizes


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
