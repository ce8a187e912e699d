"""Level indexes, merge records and tombstones in page-sized records, runs written full.

Each test reads the records as the format documents them (raw keys and values), next to
the answers checked against brute force and verify().
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import SimStore
from simstore.store.check.ranges import TreeGuard
from simstore.store.runs.format import Job
from simstore.store.runs.removed import GoneSet, blocks_ids, ids_blocks, put_tombstones

from ...testlib import (
    Watch,
    check_answers,
    check_levels,
    lmdb_env,
    merging,
    meta_db,
    reading,
    small,
    sound,
    state_of,
    tables,
    tombstoned,
)

CHUNK = 240  # first keys (or removed ids) per chunk: 1,920 bytes


def index_chunks(store: SimStore) -> list[dict[int, list[tuple[bytes, bytes]]]]:
    """Per run database: level -> its index chunks (key, value) in key order."""
    out = []
    with reading(store) as txn:
        for db in tables(store).run_dbs:
            levels: dict[int, list[tuple[bytes, bytes]]] = {}
            for key, val in txn.cursor(db):
                if len(key) == 6 and key[0] == 0xFF:
                    levels.setdefault(key[1], []).append((bytes(key), bytes(val)))
            out.append(levels)
    return out


def run_lengths(store: SimStore, level: int) -> list[int]:
    """Keys per run of one level in the first table, in key order (the run header's count)."""
    with reading(store) as txn:
        db = tables(store).run_dbs[0]
        return [int.from_bytes(bytes(v)[:4], "little") for k, v in txn.cursor(db)
                if len(k) == 9 and k[0] == level]


def gone_chunks(store: SimStore) -> list[bytes]:
    """The values of the merge's removed-doc chunks (``mgone`` + 4-byte number), in order."""
    with reading(store) as txn:
        return [bytes(v) for k, v in txn.cursor(meta_db(store))
                if bytes(k).startswith(b"mgone") and len(k) == 9]


def churn(s: SimStore, model: dict[Any, int], rng: random.Random, i: int, n: int) -> None:
    """Remove ids i..i+n and add one doc in the same write (removes alone step no merge: an
    add in the same write does), the model kept alike."""
    with s.batch():
        s.remove_many(range(i, i + n))
        s.add(f"n{i}", rng.getrandbits(64))
    model[f"n{i}"] = s.get(f"n{i}")
    for j in range(i, i + n):
        model.pop(j, None)


def test_a_merge_appends_and_trims_index_chunks_in_place(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """Levels of more runs than a chunk holds: each slice of a merge fills its target's
    last chunk and adds new ones, deletes its sources' passed chunks and rewrites only
    the one the cut falls in (later chunks keep their bytes); every chunk holds at most
    240 keys, the target's runs are full but its last, and answers equal brute force."""
    small(monkeypatch, RUN_ENTRIES=4, MERGE_STEP=300, MERGE_PER_DOC=1, RECENT_MAX=64)
    rng = random.Random(3)
    model = {f"d{i}": rng.getrandbits(64) for i in range(4000)}
    items = list(model.items())
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        s.add_many([d for d, _ in items[:3000]], [f for _, f in items[:3000]])
        stored = dict(items[:3000])
        base = state_of(s).levels[0].id
        assert len(index_chunks(s)[0][base]) >= 3000 // 4 // CHUNK  # several chunks
        slices = kept = 0
        for d, fp in items[3000:]:
            before = index_chunks(s)
            s.add(d, fp)
            stored[d] = fp
            job = merging(s)
            after = index_chunks(s)
            for b, a in zip(before, after, strict=True):
                for chunks in a.values():
                    assert all(0 < len(v) <= 8 * CHUNK and len(v) % 8 == 0
                               for _, v in chunks) or chunks == []
                if job is None:
                    continue
                slices += 1
                for src in job.sources:
                    old, new = b.get(src.id, []), a.get(src.id, [])
                    if old and new and len(new) < len(old):
                        tail = old[len(old) - len(new):]
                        assert [k for k, _ in new] == [k for k, _ in tail]  # not renumbered
                        assert new[1:] == tail[1:]  # only the first one rewritten
                        kept += len(new) - 1
            if len(stored) % 97 == 0:
                check_levels(s, state_of(s), 4)
                check_answers(s, stored, list(stored.values())[::211])
        assert slices and kept  # merges went slice by slice over levels of many chunks
        check_levels(s, state_of(s), 4)
        for level in {lv.id for lv in state_of(s).levels}:
            lengths = run_lengths(s, level)
            assert lengths[:-1] == [4] * (len(lengths) - 1)  # full runs but the last
        check_answers(s, stored, list(stored.values())[::37])
        assert s.verify() == []


def gone_blocks(store: SimStore) -> list[bytes]:
    """The values of the merge's removed-doc block chunks (``mgb`` + 4-byte number)."""
    with reading(store) as txn:
        return [bytes(v) for k, v in txn.cursor(meta_db(store))
                if bytes(k).startswith(b"mgb") and len(k) == 7]


def blocks_read(chunks: list[bytes]) -> list[int]:
    """Internal ids of block chunks as docs/format.md documents them: 72 bytes a block, its
    number (8 bytes little-endian), then 64 bytes whose bit i of byte j marks iid
    512 * number + 8 * j + i."""
    out = []
    raw = b"".join(chunks)
    assert len(raw) % 72 == 0
    for at in range(0, len(raw), 72):
        base = int.from_bytes(raw[at:at + 8], "little") * 512
        out += [base + 8 * j + i for j in range(64) for i in range(8)
                if raw[at + 8 + j] >> i & 1]
    return out


def test_a_merge_keeps_its_removed_docs_in_chunks(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """A merge that honours more removed docs than a chunk holds records them as chunks
    that fit a leaf page (the ``merge`` record holds only their count): removes of
    neighbouring ids, as here, as chunks of at most 26 tombstone blocks, fewer bytes than
    their ids. It leaves out exactly their entries and deletes the chunks when done;
    the store stays sound throughout and verify passes at the end."""
    small(monkeypatch, MERGE_STEP=256, STALE_SHARE=4)
    rng = random.Random(4)
    model = {i: rng.getrandbits(64) for i in range(3000)}
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        seen = None
        watch = Watch(s, {"merges": 0, "purges": 0, "flushes": 0, "spread": 0, "cleans": 0})
        for i in range(0, 2000, 25):
            churn(s, model, rng, i, 25)
            watch.check(s)  # the levels: exactly the live docs' and the stale ones'
            job = merging(s)
            if job is not None and len(job.gone) > CHUNK and seen is None:
                seen = job
                chunks, blocks = gone_chunks(s), gone_blocks(s)
                assert chunks == [] and all(len(c) <= 26 * 72 for c in blocks)
                assert sum(map(len, blocks)) < 8 * len(job.gone)
                ids = blocks_read(blocks)
                assert ids == sorted(job.gone.tolist())
                with reading(s) as txn:
                    raw = bytes(txn.get(b"merge", db=meta_db(s)))
                assert len(raw) == len(Job(job.target, job.gen, job.sources,
                                           np.empty(0, np.uint64)).pack())
            assert sound(s) == []  # verify's checks, in this process (cheaper each round)
        assert seen is not None
        while merging(s) is not None:
            s.add(f"more{len(model)}", 5)
            model[f"more{len(model)}"] = 5
        assert gone_chunks(s) == [] and gone_blocks(s) == []
        watch.check(s)
        check_answers(s, model, list(model.values())[::41])
        assert s.verify() == []


def test_a_merge_lists_scattered_removed_docs_as_ids(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """Where removed docs are few in their blocks (one in 100 ids here: 8 bytes each
    against a block's 72 for 5), a merge keeps their ids, in chunks of at most 240."""
    small(monkeypatch, MERGE_STEP=256, STALE_SHARE=128)
    rng = random.Random(5)
    model = {i: rng.getrandbits(64) for i in range(20000)}
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        with s.batch():
            assert s.remove_many(range(0, 20000, 100)) == 200
            s.add("x", 5)
        for i in range(0, 20000, 100):
            del model[i]
        model["x"] = 5
        job = merging(s)
        assert job is not None and len(job.gone) == 200 and gone_blocks(s) == []
        ids = np.frombuffer(b"".join(gone_chunks(s)), dtype="<u8").tolist()
        assert ids == job.gone.tolist() == list(range(0, 20000, 100))
        check_answers(s, model, list(model.values())[::97])
        assert s.verify() == []


@settings(max_examples=200, deadline=None)
@given(st.sets(st.one_of(st.integers(0, 5000), st.integers(0, (1 << 64) - 1)), max_size=300))
def test_gone_blocks_round_trip(ids: set[int]) -> None:
    """Sorted internal ids packed as blocks read back the same, in the documented layout;
    blocks out of order are refused."""
    arr = np.array(sorted(ids), dtype=np.uint64)
    raw = ids_blocks(arr)
    assert blocks_ids(raw).tolist() == blocks_read([raw]) == sorted(ids)
    assert len(raw) == 72 * len({i >> 9 for i in ids})
    if len(raw) >= 144:
        swapped = raw[72:144] + raw[:72] + raw[144:]
        with pytest.raises(simstore.CorruptStoreError):
            blocks_ids(swapped)


@settings(max_examples=60, deadline=None)
@given(tomb=st.sets(st.integers(0, 6000), max_size=400),
       listed=st.sets(st.integers(0, 6000), max_size=50),
       lo=st.integers(0, 6000), width=st.integers(0, 3000), seed=st.integers(0, 2**32 - 1))
def test_gone_set_is_the_tombstones_and_the_list_in_range(
        tmp_path_factory: pytest.TempPathFactory, tomb: set[int], listed: set[int], lo: int,
        width: int, seed: int) -> None:
    """A merge's GoneSet over ids [lo, hi) against sets: within the range an id is in it
    iff it has a tombstone block bit (blocks beside the range's and other records in the
    database ignored) or is on the merge's list; never an id a block or more outside."""
    hi = lo + width
    env = lmdb.open(str(tmp_path_factory.mktemp("g")), max_dbs=2, map_size=1 << 24)
    try:
        db = env.open_db(b"runs")
        with env.begin(write=True) as txn:
            put_tombstones(txn, db, sorted(tomb))
            txn.put(b"state", b"x" * 40, db=db)  # records of other kinds around them
            txn.put(b"u" + bytes(8), b"y", db=db)
        vals = np.random.default_rng(seed).integers(0, 7000, 500).astype(np.uint64)
        vals = np.concatenate([vals, np.arange(lo, hi, dtype=np.uint64)])
        gone = np.array(sorted(i for i in listed if lo <= i < hi), dtype=np.uint64)
        with env.begin() as txn:
            for late in (True, False):  # (the bitmap takes a list in any order)
                listed = np.random.default_rng(seed).permutation(gone) if late else gone
                got = GoneSet(txn, db, TreeGuard(env, b"runs"), lo, hi, listed,
                              late=late).contains(vals)
                want = (tomb if late else set()) | set(gone.tolist())
                inside = (vals >= lo) & (vals < hi)
                assert got[inside].tolist() == [int(v) in want for v in vals[inside]]
                far = (vals + 512 < lo) | (vals >= hi + 512)
                assert not got[far].any()
    finally:
        env.close()


def tomb_keys(store: SimStore) -> int:
    """The tombstone blocks in the store."""
    with reading(store) as txn:
        keys = [bytes(k) for k in txn.cursor(meta_db(store)).iternext(values=False)]
    return sum(k[:1] == b"t" and len(k) == 9 for k in keys)


def test_neighbouring_removes_share_tombstone_blocks(tmp_path: Path) -> None:
    """Tombstones are 64-byte blocks of 512 ids: 1,000 removed neighbours take 3 records
    (2 or 3 by alignment), scattered ones a block each; the ids read back exactly."""
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        s.add_many(range(20000), list(range(20000)))
        s.remove_many(range(3000, 4000))
        assert tomb_keys(s) == 3 and tombstoned(s) == set(range(3000, 4000))
        s.remove_many([5000, 9000, 15000])
        assert tomb_keys(s) == 6
        assert tombstoned(s) == set(range(3000, 4000)) | {5000, 9000, 15000}
        assert s.verify() == []


def test_removing_neighbouring_int_ids_touches_few_pages(tmp_path: Path) -> None:
    """Docs added together are neighbours by internal id, in the docs table and in the
    tombstone blocks, so removing 1,000 of them rewrites a few pages, not one each: five
    such commits grow the file by a few pages."""
    with SimStore(tmp_path / "s", k=3, expected_size=10**6, durable=False) as s:
        s.add_many(range(200_000), np.arange(200_000, dtype=np.uint64))
        s.add(-5, 5)  # a write after the bulk load: its pages settle
        before = lmdb_env(s).info()["last_pgno"]
        for i in range(5):  # (pages a commit frees are reused two commits later)
            s.remove_many(range(1000 * i, 1000 * (i + 1)))
        assert lmdb_env(s).info()["last_pgno"] - before < 100
        assert s.get(5000) == 5000 and s.query(0, 0) == [] and len(s) == 195_001
        assert s.verify() == []
