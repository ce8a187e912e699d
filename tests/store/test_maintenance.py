"""verify, rebuild, compact, pairs and clusters of a store, against brute force."""

from __future__ import annotations

import multiprocessing as mp
import os

import lmdb
import numpy as np
import pytest
from hypothesis import given, settings

import simstore
from simstore import SimStore

from ..oracles import brute_clusters, brute_neighbours, brute_pairs
from ..strategies import fingerprint_sets


def _fill(path, fps, k=3):
    store = SimStore(path, k=k, expected_size=1000)
    store.add_many([f"d{i}" for i in range(len(fps))], np.array(fps, dtype=np.uint64))
    return store


def _raw(path):
    env = lmdb.open(str(path), max_dbs=64, subdir=True)
    return env


def test_verify_passes_on_a_sound_store(tmp_path):
    """A freshly built store, with replacements and removals, verifies clean."""
    rng = np.random.default_rng(1)
    fps = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    with _fill(tmp_path / "s", fps.tolist()) as s:
        s.add("d3", 12345)
        s.remove("d7")
        s.add("new", 1)
        assert s.verify() == []


def test_verify_reports_missing_and_orphan_entries_and_rebuild_repairs(tmp_path):
    """Table damage (a doc's entry pointing at an internal id no doc has) and ids damage
    (the ids' run deleted) are reported; rebuild repairs all."""
    path = tmp_path / "s"
    _fill(path, [1, 2, 3, 1 << 40]).close()  # one level: a run a table
    env = _raw(path)
    with env.begin(write=True) as txn:
        t1 = env.open_db(b"r01", txn=txn, create=False)
        key, val = next((bytes(k), bytearray(v)) for k, v in txn.cursor(t1) if len(k) == 9)
        n, width = int.from_bytes(val[:4], "little"), val[4]
        assert (n, width) == (4, 4)  # the documented header: 4 entries, 4-byte ids
        val[8 + 8 * n : 12 + 8 * n] = (999).to_bytes(4, "little")  # the first entry's id
        txn.put(key, bytes(val), db=t1)
        rids = env.open_db(b"rids", txn=txn, create=False)
        assert txn.delete(next(bytes(k) for k, _ in txn.cursor(rids) if len(k) == 9), db=rids)
    env.close()
    with SimStore(path) as s:
        text = " ".join(s.verify())
        assert "table r01: 1 docs missing" in text and "stale entry without a tombstone" in text
        assert "table of ids: 4 docs missing" in text
        s.rebuild()
        assert s.verify() == []
        assert sorted(s) == ["d0", "d1", "d2", "d3"] and s.get("d2") == 3
        assert [m.doc_id for m in s.query(1 << 40, 0)] == ["d3"]


@settings(max_examples=25, deadline=None)
@given(fps=fingerprint_sets(max_size=40, max_distance=8))
def test_rebuild_to_another_k_stays_exact(tmp_path_factory, fps):
    """After rebuild to a larger k, queries up to the new k equal brute force."""
    path = tmp_path_factory.mktemp("rb") / "s"
    with _fill(path, fps, k=2) as s:
        info = s.rebuild(k=7)
        assert info["k"] == 7 and s.k == 7
        assert s.verify() == []
        for q in fps[:5]:
            for k in (0, 3, 7):
                got = sorted((m.doc_id, m.distance) for m in s.query(q, k))
                want = sorted((f"d{i}", d) for i, d in brute_neighbours(fps, q, k))
                assert got == want
    with SimStore(path) as s:
        assert s.k == 7 and len(s.layout.tables) == s.stats()["tables"]


def _hold_open(path, ready, release):
    s = SimStore(path, readonly=True)
    ready.set()
    release.wait(30)
    s.close()


def test_rebuild_refuses_while_another_process_has_the_store_open(tmp_path):
    """rebuild raises StoreInUseError while another process holds the store; works after."""
    path = str(tmp_path / "s")
    _fill(path, [1, 2, 3]).close()
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_open, args=(path, ready, release))
    proc.start()
    try:
        assert ready.wait(60)
        with SimStore(path) as s:
            with pytest.raises(simstore.StoreInUseError, match="another process"):
                s.rebuild(k=5)
            assert s.k == 3 and s.verify() == []
            release.set()
            proc.join(30)
            assert s.rebuild(k=5)["k"] == 5
    finally:
        release.set()
        proc.join(30)


def test_rebuild_inside_batch_is_refused(tmp_path):
    """rebuild() inside batch() is refused instead of deadlocking or half-applying."""
    with _fill(tmp_path / "s", [1]) as s, s.batch():
        with pytest.raises(simstore.StoreError, match="batch"):
            s.rebuild()


def test_compact_makes_an_equal_smaller_or_same_copy(tmp_path):
    """compact writes a complete store with the same docs; an existing dest is refused."""
    rng = np.random.default_rng(2)
    fps = rng.integers(0, 2**64 - 1, 2000, dtype=np.uint64, endpoint=True)
    src = tmp_path / "s"
    dest = tmp_path / "c"
    with _fill(src, fps.tolist()) as s:
        s.remove_many([f"d{i}" for i in range(0, 2000, 2)])
        s.compact(dest)
        with pytest.raises(simstore.StoreError, match="exists"):
            s.compact(dest)
        before = dict(s.items())
    assert not [p for p in os.listdir(tmp_path) if "tmp-" in p]
    with SimStore(dest, readonly=True) as c:
        assert dict(c.items()) == before
        assert c.verify() == []
    size = lambda p: os.path.getsize(os.path.join(p, "data.mdb"))  # noqa: E731
    assert size(dest) <= size(src)


@settings(max_examples=30, deadline=None)
@given(fps=fingerprint_sets(max_size=50, max_distance=6))
def test_store_pairs_and_clusters_equal_brute_force(tmp_path_factory, fps):
    """store.pairs(k) is exactly the brute-force pair set; clusters are its components."""
    path = tmp_path_factory.mktemp("pc") / "s"
    with _fill(path, fps) as s:
        got = {tuple(sorted((a, b))) + (d,) for a, b, d in s.pairs(4)}
        brute = set(zip(*brute_pairs(fps, 4), strict=True))
        assert got == {tuple(sorted((f"d{i}", f"d{j}"))) + (d,) for i, j, d in brute}
        # components of the brute-force pairs
        comps: dict[int, set[str]] = {}
        for i, label in enumerate(brute_clusters(fps, 4)):
            comps.setdefault(label, set()).add(f"d{i}")
        want = sorted(sorted(c) for c in comps.values() if len(c) > 1)
        assert sorted(sorted(c) for c in s.clusters(4)) == want
