"""SimStore: exact queries against brute force, ids, durability options, reopen, fork."""

from __future__ import annotations

import os
import pickle
import tempfile

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simstore.exceptions import (
    ConfigMismatchError,
    CorruptStoreError,
    FormatVersionError,
    InvalidDocIdError,
    LayoutMismatchError,
    NotAStoreError,
    ReadOnlyError,
    SimstoreTypeError,
    StoreClosedError,
)
from simstore.store import MAX_DOC_ID_BYTES, Match, SimStore, format as F
from simstore.text.fingerprinting import FingerprintConfig

from ..oracles import brute_matches, brute_neighbours
from ..strategies import MAX_FP, fingerprint_sets, fingerprints, packed_neighbour

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(fingerprint_sets(max_size=60, max_distance=9), st.integers(0, 4), st.data())
def test_query_equals_brute_force(fps: list[int], k_store: int, data: st.DataObject) -> None:
    """query(fp, k) == brute force for k <= store k and k above it (scan fallback)."""
    with tempfile.TemporaryDirectory() as d, SimStore(
        d, k=k_store, expected_size=1_000_000, durable=False
    ) as s:
        stored = {}
        for i, fp in enumerate(fps):
            s.add(i, fp)
            stored[i] = fp
        queries = [data.draw(st.sampled_from(fps)) for _ in range(3)] + [
            data.draw(packed_neighbour(fps[0], data.draw(st.integers(0, 9)))),
            data.draw(fingerprints),
        ]
        for q in queries:
            for k in sorted({0, k_store, k_store + 1, min(k_store + 5, 64)}):
                assert s.query(q, k) == brute_matches(stored, q, k)
        assert s.query_many(queries, k_store) == [brute_matches(stored, q, k_store) for q in queries]


@pytest.mark.parametrize("k_store", [3, 6, 8])
def test_packed_flips_and_extremes_are_found(tmp_path, k_store: int) -> None:
    """Neighbours with all flips in one run, around 0 and 2**64-1, are all found."""
    rng = np.random.default_rng(k_store)
    base = [0, MAX_FP, int(rng.integers(0, 2**63)) * 2 + 1]
    stored = {}
    with SimStore(tmp_path / "s", k=k_store, durable=False) as s:
        n = 0
        for b in base:
            for dist in range(0, k_store + 2):
                for start in range(0, 64 - dist + 1, 7):
                    fp = b ^ (((1 << dist) - 1) << start)
                    stored[n] = fp
                    n += 1
        s.add_many(list(stored), np.array(list(stored.values()), dtype=np.uint64))
        for b in base:
            for k in (0, k_store, k_store + 1):
                assert s.query(b, k) == brute_matches(stored, b, k)


def test_thousands_of_identical_fingerprints(tmp_path) -> None:
    """3000 docs sharing one fingerprint all come back, in insertion order."""
    fp = 0xDEADBEEF_12345678
    with SimStore(tmp_path / "s", durable=False) as s:
        s.add_many(range(2000), np.full(2000, fp, dtype=np.uint64))
        with s.batch():
            for i in range(2000, 3000):
                s.add(i, fp)
        s.add("near", fp ^ 1)
        got = s.query(fp ^ 3, 3)
        assert [m.doc_id for m in got] == ["near"] + list(range(3000))
        assert [m.distance for m in got[:2]] == [1, 2]


@FAST
@given(st.lists(st.tuples(st.integers(0, 30), fingerprint_sets(max_size=3).map(lambda x: x[0])), max_size=40))
def test_add_many_and_replacement_equal_adds(items) -> None:
    """add_many (last duplicate wins) and re-adding an id leave exactly brute-force state."""
    with tempfile.TemporaryDirectory() as d, SimStore(d, durable=False) as s:
        half = len(items) // 2
        s.add_many([i for i, _ in items[:half]], [fp for _, fp in items[:half]])
        s.add_many([i for i, _ in items[half:]], np.array([fp for _, fp in items[half:]], dtype=np.uint64))
        stored: dict = {}
        for i, fp in items:
            stored[i] = fp
        assert len(s) == len(stored)
        assert {i: s[i] for i in stored} == stored
        for _, fp in items[:5]:
            got = s.query(fp, 3)
            assert sorted(got, key=lambda m: (m.distance, str(m.doc_id))) == sorted(
                brute_matches(stored, fp, 3), key=lambda m: (m.distance, str(m.doc_id))
            )


def test_replace_moves_a_doc_in_every_table(tmp_path) -> None:
    """Re-adding an id with a far fingerprint removes the old one from all tables."""
    with SimStore(tmp_path / "s") as s:
        s.add("u", 0)
        s.add("u", MAX_FP)
        assert s.query(0, 3) == []
        assert s.query(MAX_FP, 0) == [Match("u", MAX_FP, 0)]
        assert len(s) == 1


def test_remove_and_mapping_protocol(tmp_path) -> None:
    """remove returns bool, del/[] raise KeyError, in/len/iteration follow the contents."""
    with SimStore(tmp_path / "s") as s:
        s.add_many(["a", "b", 3], [1, 2, 3])
        assert s.remove("b") is True and s.remove("b") is False
        assert "a" in s and "b" not in s and 3.5 not in s
        assert s.get("b") is None and s["a"] == 1
        with pytest.raises(KeyError):
            s["b"]
        with pytest.raises(KeyError):
            del s["b"]
        assert list(s) == ["a", 3] and list(s.items()) == [("a", 1), (3, 3)]
        assert s.remove_many(["a", "zz", 3]) == 2 and len(s) == 0
        assert s.query(1, 8) == []


@pytest.mark.parametrize(
    "doc_id",
    ["x", "é東😀", "u" * 5000, 0, -1, 2**200, -(2**70), 10**600, "h" + "x" * 510],
)
def test_doc_ids_round_trip_with_their_type(tmp_path, doc_id) -> None:
    """str and int ids (long, huge, any script) come back equal and of the same type."""
    with SimStore(tmp_path / "s") as s:
        s.add(doc_id, 42)
        s.add("other", 42)
        [m] = [m for m in s.query(42, 0) if m.doc_id == doc_id]
        assert type(m.doc_id) is type(doc_id) and m.doc_id == doc_id
        assert s[doc_id] == 42 and list(s)[0] == doc_id
    with SimStore(tmp_path / "s") as s:
        assert s.remove(doc_id) and doc_id not in s and len(s) == 1


_ID = F.RecordCodec().id_start  # where a fingerprint store's record holds the encoded id


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda rec: rec[:-2] + b"\xff\xfe", "not UTF-8"),  # a text id's bytes broken
        (lambda rec: rec[:_ID] + b"z" + rec[_ID + 1:], "unknown type tag"),  # the id's tag
        (lambda rec: b"\x07" + rec[1:], "has tag"),  # the record's tag
        (lambda rec: rec[:_ID], "has tag"),  # no id at all
    ],
)
def test_a_damaged_hit_record_is_corrupt_store_error(tmp_path, damage, says) -> None:
    """A query whose hit's docs record is damaged raises CorruptStoreError saying what is
    wrong, whichever way the answer's records are decoded."""
    with SimStore(tmp_path / "s", k=3) as s:  # past the recent docs: in a level's runs
        s.add("éa", 42)
        s.add(7, 2**40)
        s.add_many(range(8, 5008), np.arange(5000, dtype=np.uint64) << np.uint64(44))
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        docs = env.open_db(b"docs", txn=txn, create=False)
        rec = txn.get((0).to_bytes(8, "big"), db=docs)
        assert rec is not None and rec[_ID:_ID + 1] == b"s"
        txn.put((0).to_bytes(8, "big"), damage(rec), db=docs)
    env.close()
    with SimStore(tmp_path / "s") as s:
        assert s.query(2**40, 0) == [(7, 2**40, 0)]
        with pytest.raises(CorruptStoreError, match=says):
            s.query(42, 1)


def test_bad_doc_ids_are_refused(tmp_path) -> None:
    """Empty str, bool, float, bytes, None and over-long ids are refused by type/value."""
    with SimStore(tmp_path / "s") as s:
        for bad in ("", "x" * (MAX_DOC_ID_BYTES + 1), 1 << (8 * MAX_DOC_ID_BYTES + 8),
                    "bad\ud800id", "\udfff"):
            with pytest.raises(InvalidDocIdError):
                s.add(bad, 1)
            with pytest.raises(InvalidDocIdError):
                s.add_many([bad], [1])
            with pytest.raises(InvalidDocIdError):
                s.add_if_new(bad, 1)
        assert len(s) == 0
        for bad in (True, 1.0, b"x", None, ("a",)):
            with pytest.raises(SimstoreTypeError):
                s.add(bad, 1)
        assert len(s) == 0


def test_add_if_new_policy(tmp_path) -> None:
    """add_if_new stores only when nothing is within k, and returns what blocked it."""
    with SimStore(tmp_path / "s", k=3) as s:
        assert s.add_if_new("a", 0b1111) == []
        assert s.add_if_new("b", 0b1110) == [Match("a", 0b1111, 1)]
        assert "b" not in s
        assert s.add_if_new("a", 0b1111) == [Match("a", 0b1111, 0)]
        assert s.add_if_new("c", 0b1110, k=0) == []
        assert s.add_if_new("d", MAX_FP, k=10) == []
        assert len(s) == 3


def test_batch_commits_once_and_aborts_on_error(tmp_path) -> None:
    """batch() groups writes (reads inside see them); an exception discards them all."""
    with SimStore(tmp_path / "s") as s:
        with s.batch():
            s.add("a", 1)
            assert s.add_if_new("b", 1) == [Match("a", 1, 0)]
            assert s.get("a") == 1
        with pytest.raises(RuntimeError), s.batch():
            s.add("c", 5)
            raise RuntimeError("boom")
        assert list(s) == ["a"]


def test_map_grows_automatically(tmp_path) -> None:
    """A tiny initial map grows for add, add_many and inside batch(); nothing is lost."""
    rng = np.random.default_rng(1)
    fps = rng.integers(0, 2**63, 6000, dtype=np.uint64)
    with SimStore(tmp_path / "s", map_size=1 << 16, durable=False) as s:
        s.add_many(range(3000), fps[:3000])
        with s.batch():
            for i in range(3000, 4500):
                s.add(i, int(fps[i]))
        for i in range(4500, 6000):
            s.add(i, int(fps[i]))
        assert len(s) == 6000
        assert np.array_equal(s.fingerprints(), fps)
        assert s.query(int(fps[5999]), 0)[0].doc_id == 5999


def test_reopen_keeps_everything_and_refuses_mismatches(tmp_path) -> None:
    """Reopen reads layout and config from meta; other k/config fail and change nothing."""
    cfg = FingerprintConfig(ngram=2)
    with SimStore(tmp_path / "s", k=6, config=cfg) as s:
        s.add("a", 7)
        layout = s.layout
    before = (tmp_path / "s" / "data.mdb").read_bytes()
    with pytest.raises(LayoutMismatchError):
        SimStore(tmp_path / "s", k=3)
    with pytest.raises(ConfigMismatchError):
        SimStore(tmp_path / "s", config=FingerprintConfig())
    assert (tmp_path / "s" / "data.mdb").read_bytes() == before
    with SimStore(tmp_path / "s", k=6, config=cfg) as s:
        assert (s.k, s.layout, s.config, s["a"]) == (6, layout, cfg, 7)


def test_foreign_paths_are_not_stores(tmp_path) -> None:
    """A file, a non-empty non-store dir and a foreign LMDB env raise NotAStoreError."""
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotAStoreError):
        SimStore(tmp_path / "f")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x")
    with pytest.raises(NotAStoreError):
        SimStore(tmp_path / "d")
    env = lmdb.open(str(tmp_path / "e"))
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    with pytest.raises(NotAStoreError):
        SimStore(tmp_path / "e")
    with pytest.raises(NotAStoreError):
        SimStore(tmp_path / "missing", readonly=True)
    assert not (tmp_path / "missing").exists()


def test_other_format_version_is_refused(tmp_path) -> None:
    """A store whose meta names another format version raises FormatVersionError."""
    SimStore(tmp_path / "s").close()
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", b'{"format":"simstore","version":99}', db=meta)
    env.close()
    with pytest.raises(FormatVersionError):
        SimStore(tmp_path / "s")


def test_readonly_never_writes(tmp_path) -> None:
    """readonly=True reads and refuses every write with ReadOnlyError."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
    with SimStore(tmp_path / "s", readonly=True) as s:
        assert s.query(1, 0) == [Match("a", 1, 0)]
        for call in (lambda: s.add("b", 2), lambda: s.remove("a"), lambda: s.add_many(["c"], [3])):
            with pytest.raises(ReadOnlyError):
                call()
        with pytest.raises(ReadOnlyError), s.batch():
            pass


def test_closed_and_double_open(tmp_path) -> None:
    """A closed handle raises StoreClosedError; a second open in-process shares the first's
    environment (tests/store/test_handles.py says more)."""
    s = SimStore(tmp_path / "s")
    t = SimStore(tmp_path / "s")
    t.add("a", 1)
    assert s.get("a") == 1
    t.close()
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.query(1)


def test_forked_child_reopens_and_writes(tmp_path) -> None:
    """After fork the child uses the store transparently; the parent sees its writes."""
    with SimStore(tmp_path / "s") as s:
        s.add("parent", 1)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            ok = s.query(1, 0) == [Match("parent", 1, 0)]
            s.add("child", 3)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert s.query(1, 1) == [Match("parent", 1, 0), Match("child", 3, 1)]


def test_pickled_store_reopens_in_a_forked_child(tmp_path) -> None:
    """A store unpickled in a forked child (multiprocessing) opens by path and writes."""
    with SimStore(tmp_path / "s", k=4) as s:
        blob = pickle.dumps(s)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            t = pickle.loads(blob)
            t.add("w", 9)
            os._exit(0 if t.k == 4 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert s["w"] == 9


def test_snapshot_fingerprints_and_doc_ids_agree(tmp_path) -> None:
    """snapshot(), fingerprints() and doc_ids() list every doc in insertion order."""
    with SimStore(tmp_path / "s") as s:
        s.add_many(["a", 2, "c"], np.array([5, 6, MAX_FP], dtype=np.uint64))
        ids, fps = s.snapshot()
        assert ids == ["a", 2, "c"] == s.doc_ids()
        assert fps.dtype == np.uint64 and fps.tolist() == [5, 6, MAX_FP]
        assert s.fingerprints().tolist() == [5, 6, MAX_FP]


@FAST
@given(
    st.sampled_from([0, 1, 3, 6, 8]),
    fingerprint_sets(max_size=80, max_distance=10),
    st.lists(st.sampled_from([0, 1, 1 << 63, MAX_FP, MAX_FP ^ 1, MAX_FP >> 1]), max_size=12),
    st.data(),
)
def test_probing_is_exact_at_table_edges_and_radius(
    k_store: int, fps: list[int], edges: list[int], data: st.DataObject
) -> None:
    """Every k <= store k (radius 0 and sorted multi-range probes) equals brute force near 0 and 2**64-1, with many copies."""
    fps = fps + edges + edges  # copies of extreme values: many docs under one key
    with tempfile.TemporaryDirectory() as d, SimStore(d, k=k_store, durable=False) as s:
        stored = dict(enumerate(fps))
        s.add_many(list(stored), np.array(fps, dtype=np.uint64))
        queries = [0, MAX_FP, 1 << 63, (1 << 63) - 1] + [
            data.draw(packed_neighbour(data.draw(st.sampled_from(fps)), data.draw(st.integers(0, 10))))
            for _ in range(4)
        ]
        for q in queries:
            for k in range(k_store + 1):
                assert s.query(q, k) == brute_matches(stored, q, k)


@FAST
@given(st.lists(st.one_of(st.integers(-(2**63) + 1, 2**63 - 1), st.integers(-300, 300)), max_size=50))
def test_vectorized_int_ids_encode_like_one_by_one(xs: list[int]) -> None:
    """add_many's numpy encoding of int ids equals encode_id."""
    from simstore.store.format import encode_id, int_encodings

    arr = np.array(xs, dtype=np.int64)
    assert int_encodings(arr) == [encode_id(x) for x in xs]


def test_add_many_of_int_ids_into_a_full_store_replaces_and_appends(tmp_path) -> None:
    """Int ids given as range, array and list: new ones appended, stored ones re-pointed, all queryable."""
    with SimStore(tmp_path / "s", durable=False) as s:
        s.add_many(range(-500, 500), np.arange(1000, dtype=np.uint64) << np.uint64(20))
        s.add_many(np.array([499, 10_000, -500, 2**40], dtype=np.int64), [7, 8, 9, 10])
        s.add_many([2**40, "x", 3], [11, 12, 13])
        s.add_many([5, 5, 6], [1 << 60, 2 << 60, 3 << 60])
        stored = {i: (i + 500) << 20 for i in range(-500, 500)}
        stored.update({499: 7, 10_000: 8, -500: 9, 2**40: 11, "x": 12, 3: 13, 5: 2 << 60, 6: 3 << 60})
        assert len(s) == len(stored)
        assert dict(s.items()) == stored
        assert s.verify() == []
        for q in (7, 13, 2 << 60, 500 << 20):
            assert {m.doc_id for m in s.query(q, 3)} == {m.doc_id for m in brute_matches(stored, q, 3)}


def test_large_add_many_pipelined_fill_is_exact(tmp_path) -> None:
    """add_many over the threaded fill threshold (chunked appends, copies, re-adds) stays exact and consistent."""
    rng = np.random.default_rng(7)
    n = 150_000
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    fps[1000:1300] = fps[5]  # many docs under one key in every table
    fps[2000] = fps[3000] ^ np.uint64(0b1011)
    with SimStore(tmp_path / "s", durable=False) as s:
        s.add_many(range(n), fps)
        s.add_many(np.arange(n - 10, n + 140_000), rng.integers(0, 2**64, size=140_010, dtype=np.uint64))
        assert len(s) == n + 140_000
        assert s.verify() == []
        all_fps = s.fingerprints()
        ids = s.doc_ids()
        for q in (int(fps[5]), int(fps[3000]), int(fps[77]) ^ 0b111, int(all_fps[-1])):
            want = sorted((d, i) for i, d in brute_neighbours(all_fps, q, 3))
            assert [(m.distance, m.doc_id) for m in s.query(q, 3)] == [(d, ids[i]) for d, i in want]
