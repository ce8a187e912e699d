"""Format 11: level indexes and merge records in page-sized chunks, runs written full.

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
from simstore.store import format as F
from simstore.store.removed import GoneSet, blocks_ids, ids_blocks, put_tombstones
from simstore.store.runfile import Job

from .test_runs import (
    Watch,
    check_answers,
    check_levels,
    format_version,
    merging,
    small,
    state_of,
    tombstoned,
)

CHUNK = 240  # first keys (or removed ids) per chunk: 1,920 bytes


def index_chunks(store: SimStore) -> list[dict[int, list[tuple[bytes, bytes]]]]:
    """Per run database: level -> its index chunks (key, value) in key order."""
    out = []
    with store._env.reading() as txn:
        for db in store._h.tables.run_dbs:
            levels: dict[int, list[tuple[bytes, bytes]]] = {}
            for key, val in txn.cursor(db):
                if len(key) == 6 and key[0] == 0xFF:
                    levels.setdefault(key[1], []).append((bytes(key), bytes(val)))
            out.append(levels)
    return out


def run_lengths(store: SimStore, level: int) -> list[int]:
    """Keys per run of one level in the first table, in key order (the run header's count)."""
    with store._env.reading() as txn:
        db = store._h.tables.run_dbs[0]
        return [int.from_bytes(bytes(v)[:4], "little") for k, v in txn.cursor(db)
                if len(k) == 9 and k[0] == level]


def gone_chunks(store: SimStore) -> list[bytes]:
    """The values of the merge's removed-doc chunks (``mgone`` + 4-byte number), in order."""
    with store._env.reading() as txn:
        return [bytes(v) for k, v in txn.cursor(store._h.tables.meta_db())
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
    with store._env.reading() as txn:
        return [bytes(v) for k, v in txn.cursor(store._h.tables.meta_db())
                if bytes(k).startswith(b"mgb") and len(k) == 7]


def blocks_read(chunks: list[bytes]) -> list[int]:
    """Internal ids of block chunks as format 15 documents them: 72 bytes a block, its
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


@pytest.mark.parametrize("version", [13, 15])
def test_a_merge_keeps_its_removed_docs_in_chunks(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, version: int) -> None:
    """A merge that honours more removed docs than a chunk holds records them as chunks
    that fit a leaf page (the ``merge`` record holds only their count): in formats 11-14
    of at most 240 ids; from 15 (removes of neighbouring ids, as here) of at most 26
    tombstone blocks, fewer bytes. It leaves out exactly their entries and deletes the
    chunks when done; verify passes throughout."""
    small(monkeypatch, MERGE_STEP=256, STALE_SHARE=4)
    monkeypatch.setattr(F, "FORMAT_VERSION", version)
    monkeypatch.setattr(F, "EXACT_FORMAT_VERSION", version + 1)
    rng = random.Random(4)
    model = {i: rng.getrandbits(64) for i in range(3000)}
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        assert format_version(s) == version
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
                if version < 15:
                    assert blocks == [] and len(chunks) == -(-len(job.gone) // CHUNK)
                    assert all(len(c) <= 8 * CHUNK for c in chunks)
                    ids = np.frombuffer(b"".join(chunks), dtype="<u8").tolist()
                else:
                    assert chunks == [] and all(len(c) <= 26 * 72 for c in blocks)
                    assert sum(map(len, blocks)) < 8 * len(job.gone)
                    ids = blocks_read(blocks)
                assert ids == sorted(job.gone.tolist())
                with s._env.reading() as txn:
                    raw = bytes(txn.get(b"merge", db=s._h.tables.meta_db()))
                assert len(raw) == len(Job(job.target, job.gen, job.sources,
                                           np.empty(0, np.uint64)).pack())
            assert s.verify() == []
        assert seen is not None
        while merging(s) is not None:
            s.add(f"more{len(model)}", 5)
            model[f"more{len(model)}"] = 5
        assert gone_chunks(s) == [] and gone_blocks(s) == []
        watch.check(s)
        check_answers(s, model, list(model.values())[::41])
        assert s.verify() == [] and format_version(s) == version


def test_a_merge_lists_scattered_removed_docs_as_ids(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """Format 15: where removed docs are few in their blocks (one in 100 ids here: 8 bytes
    each against a block's 72 for 5), a merge keeps their ids."""
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


def test_a_simstore_of_format_14_refuses_a_format_15_store(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """A simstore that knows formats up to 14 reads no block chunks: it refuses a new store
    (format 15) rather than meet a merge whose removed docs it cannot read; a format 13
    store rebuilt moves to 15."""
    SimStore(tmp_path / "new", k=3).close()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "FORMAT_VERSIONS", tuple(range(1, 15)))
        with pytest.raises(simstore.FormatVersionError):
            SimStore(tmp_path / "new")
        mp.setattr(F, "FORMAT_VERSION", 13)
        mp.setattr(F, "EXACT_FORMAT_VERSION", 14)
        with SimStore(tmp_path / "old", k=3) as s:
            s.add_many(range(100), range(100))
    with SimStore(tmp_path / "old") as s:
        assert format_version(s) == 13 and not s._h.tables.gone_blocks
        s.rebuild()
        assert format_version(s) == 17 and s._h.tables.gone_blocks
        assert [m.doc_id for m in s.query(7, 0)] == [7] and s.verify() == []


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
                got = GoneSet(txn, db, lo, hi, listed, late=late).contains(vals)
                want = (tomb if late else set()) | set(gone.tolist())
                inside = (vals >= lo) & (vals < hi)
                assert got[inside].tolist() == [int(v) in want for v in vals[inside]]
                far = (vals + 512 < lo) | (vals >= hi + 512)
                assert not got[far].any()
    finally:
        env.close()


def tomb_keys(store: SimStore) -> tuple[int, int]:
    """(tombstone records of formats 5-10, tombstone blocks of format 11) in the store."""
    with store._env.reading() as txn:
        keys = [bytes(k) for k in txn.cursor(store._h.tables.meta_db()).iternext(values=False)]
    return (sum(k[:1] == b"g" and len(k) == 9 for k in keys),
            sum(k[:1] == b"t" and len(k) == 9 for k in keys))


def test_neighbouring_removes_share_tombstone_blocks(tmp_path: Path) -> None:
    """Tombstones are 64-byte blocks of 512 ids: 1,000 removed neighbours take 3 records
    (2 or 3 by alignment), scattered ones a block each; the ids read back exactly."""
    with SimStore(tmp_path / "s", k=3, expected_size=10**5, durable=False) as s:
        s.add_many(range(20000), list(range(20000)))
        s.remove_many(range(3000, 4000))
        assert tomb_keys(s) == (0, 3) and tombstoned(s) == set(range(3000, 4000))
        s.remove_many([5000, 9000, 15000])
        assert tomb_keys(s) == (0, 6)
        assert tombstoned(s) == set(range(3000, 4000)) | {5000, 9000, 15000}
        assert s.verify() == []


def _to_format_9(path: Any, with_merge: bool) -> None:
    """Rewrite a store as a format-9 simstore left it: one index record per level keyed
    by the level byte, and a merge's removed docs inline in its record."""
    env = lmdb.open(str(path), max_dbs=64, subdir=True)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn, create=False)
        runs = env.open_db(b"runs", txn=txn, create=False)
        for t in range(2):
            db = env.open_db(b"r%02d" % t, txn=txn, create=False)
            heads: dict[int, bytes] = {}
            for key, val in list(txn.cursor(db)):
                if key[:1] == b"\xff":
                    if len(key) == 6:
                        heads[key[1]] = heads.get(key[1], b"") + bytes(val)
                    else:
                        heads.setdefault(key[1], b"")
                    txn.delete(bytes(key), db=db)
            for level, raw in heads.items():
                txn.put(bytes((level,)), raw, db=db)
        for key, val in list(txn.cursor(runs)):  # tombstone blocks: a record each
            key = bytes(key)
            if key[:1] == b"t" and len(key) == 9:
                base = 512 * int.from_bytes(key[1:], "big")
                bits = np.unpackbits(np.frombuffer(bytes(val), np.uint8), bitorder="little")
                for iid in (base + np.flatnonzero(bits)).tolist():
                    txn.put(b"g" + iid.to_bytes(8, "big"), b"", db=runs)
                txn.delete(key, db=runs)
        raw = txn.get(b"merge", db=runs)
        assert (raw is not None) == with_merge
        if raw is not None:
            gone = b"".join(bytes(v) for k, v in list(txn.cursor(runs))
                            if bytes(k).startswith(b"mgone"))
            for k, _ in list(txn.cursor(runs)):
                if bytes(k).startswith(b"mgone"):
                    txn.delete(bytes(k), db=runs)
            txn.put(b"merge", bytes(raw) + gone, db=runs)
        txn.put(b"format", b'{"format":"simstore","version":9}', db=meta)
    env.close()


@pytest.mark.parametrize("with_merge", [False, True])
def test_a_format_9_store_is_read_and_paged_by_its_first_write(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, with_merge: bool) -> None:
    """A store in format 9 (whole index records, a merge's removed docs inline) answers
    exactly; its first write brings it to 11: chunked indexes only, the merge's removed
    docs in chunks, and the merge then finishes; verify passes at every step."""
    small(monkeypatch, RUN_ENTRIES=4, MERGE_STEP=64, STALE_SHARE=4)
    rng = random.Random(5)
    model = {i: rng.getrandbits(64) for i in range(2000)}
    path = tmp_path / "s"
    monkeypatch.setattr(F, "RUN_IDS_FROM", 99)  # an ids B-tree, as formats 3-12 kept
    with SimStore(path, k=3, expected_size=10**5, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        i = 0
        while with_merge and not (merging(s) is not None and len(merging(s).gone) > CHUNK):
            churn(s, model, rng, i, 40)
            i += 40
        job = merging(s)
    _to_format_9(path, with_merge)
    with SimStore(path) as s:
        assert format_version(s) == 9 and index_chunks(s)[0] == {}
        assert tomb_keys(s) == (len(tombstoned(s)), 0) and bool(tomb_keys(s)[0]) == with_merge
        if with_merge:
            assert merging(s).gone.tolist() == job.gone.tolist()
        check_answers(s, model, list(model.values())[::53])
        assert s.verify() == []
        s.add("new", 77)
        model["new"] = 77
        assert format_version(s) == 11
        with s._env.reading() as txn:
            for db in s._h.tables.run_dbs:
                assert not [k for k, _ in txn.cursor(db) if len(k) == 1]
        assert set(index_chunks(s)[0]) >= {lv.id for lv in state_of(s).levels
                                           if run_lengths(s, lv.id)}
        check_levels(s, state_of(s), 4)
        assert s.verify() == []
        while merging(s) is not None:
            d, fp = f"m{len(model)}", rng.getrandbits(64)
            s.add(d, fp)
            model[d] = fp
        check_levels(s, state_of(s), 4)
        check_answers(s, model, list(model.values())[::61])
        assert s.verify() == []
        blocks = 0
        for _ in range(100):  # the old records go as merges honour them
            blocks = max(blocks, tomb_keys(s)[1])
            if not tomb_keys(s)[0] and i >= 1000:
                break
            churn(s, model, rng, i, 40)
            i += 40
            assert s.verify() == []
        assert tomb_keys(s)[0] == 0 and blocks  # the new removes' tombstones are blocks


# --- int ids keyed by value ---------------------------------------------------------


def _ordered_key(x: int) -> bytes:
    """The documented key of int id x in a store created from format 11: b"n", a length
    byte (0x80 + n, or 0x80 - n below zero) and n bytes big-endian (x + 256**n if x < 0)."""
    n = 1
    while not -(256 ** n) <= x < 256 ** n:
        n += 1
    return b"n" + bytes((0x80 + n if x >= 0 else 0x80 - n,)) + (x % 256 ** n).to_bytes(n, "big")


def test_ordered_int_keys_known_answers_and_order() -> None:
    """Known answers, numeric order over signed ints of every width, and the vectorized
    keys equal to the single ones."""
    from simstore.store import format as F

    assert F.ordered_id_key(F.encode_id(0)) == b"n\x81\x00"
    assert F.ordered_id_key(F.encode_id(255)) == b"n\x81\xff"
    assert F.ordered_id_key(F.encode_id(256)) == b"n\x82\x01\x00"
    assert F.ordered_id_key(F.encode_id(-1)) == b"n\x7f\xff"
    assert F.ordered_id_key(F.encode_id(-257)) == b"n\x7e\xfe\xff"
    assert F.ordered_id_key(F.encode_id("x")) == F.id_key(F.encode_id("x"))
    rng = random.Random(6)
    xs = sorted({rng.randrange(-(1 << rng.randrange(1, 200)), 1 << rng.randrange(1, 200))
                 for _ in range(3000)} | {0, -1, 1, 255, 256, -256, -257})
    keys = [F.ordered_id_key(F.encode_id(x)) for x in xs]
    assert keys == sorted(keys) and keys == [_ordered_key(x) for x in xs]
    arr = np.array([x for x in xs if -(1 << 63) <= x < 1 << 63], dtype=np.int64)
    assert F.ordered_int_keys(arr) == [_ordered_key(x) for x in arr.tolist()]


def test_removing_neighbouring_int_ids_touches_few_pages(tmp_path: Path) -> None:
    """Ids 0..999 key side by side (not among the 2- and 3-byte ints that share their
    first byte), so removing them rewrites a few pages of ``ids``, not one each: five
    such commits grow the file by a few pages where they grew it by about 800."""
    with SimStore(tmp_path / "s", k=3, expected_size=10**6, durable=False) as s:
        s.add_many(range(200_000), np.arange(200_000, dtype=np.uint64))
        s.add(-5, 5)  # a write after the bulk load: its pages settle
        before = s._env.env.info()["last_pgno"]
        for i in range(5):  # (pages a commit frees are reused two commits later)
            s.remove_many(range(1000 * i, 1000 * (i + 1)))
        assert s._env.env.info()["last_pgno"] - before < 100  # keyed as encoded: ~800
        assert s.get(5000) == 5000 and s.query(0, 0) == [] and len(s) == 195_001
        assert s.verify() == []


def test_a_store_keyed_before_format_11_keeps_its_keys_until_a_rebuild(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A store without meta ``idkeys`` (every store written before format 11) keys ids
    as encoded: gets, adds (one and many), removes and updates of int and str ids work
    on those keys and verify passes; a rebuild keys its ints by value and records so."""
    from simstore.store import format as F

    path = tmp_path / "s"
    monkeypatch.setattr(F, "RUN_IDS_FROM", 99)  # an ids B-tree (formats 11-12)
    monkeypatch.setattr(F, "ordered_id_key", F.id_key)  # what an older simstore wrote
    monkeypatch.setattr(F, "ordered_int_keys", F.int_encodings)
    monkeypatch.setattr(F, "ORDERED_KEY", b"i")
    rng = random.Random(8)
    model: dict[Any, int] = {i: rng.getrandbits(64) for i in range(-300, 700)}
    with SimStore(path, k=3, expected_size=10**4, durable=False) as s:
        s.add_many(list(model), list(model.values()))
    monkeypatch.undo()
    env = lmdb.open(str(path), max_dbs=64, subdir=True)
    with env.begin(write=True) as txn:
        assert txn.delete(b"idkeys", db=env.open_db(b"meta", txn=txn, create=False))
    env.close()

    def keys() -> list[bytes]:
        with s._env.reading() as txn:
            return [bytes(k) for k in txn.cursor(s._h.ids).iternext(values=False)]

    with SimStore(path, durable=False) as s:
        assert not s._h.ordered_ids and keys() == sorted(F.encode_id(i) for i in model)
        s.add_many(list(range(700, 900)) + [-1000, 5], [7] * 202)
        model.update({i: 7 for i in range(700, 900)} | {-1000: 7, 5: 7})
        s.add("text", 9)
        model["text"] = 9
        assert s.remove_many(range(-300, 0)) == 300
        for i in range(-300, 0):
            del model[i]
        assert all(s.get(d) == fp for d, fp in model.items())
        assert keys() == sorted(F.encode_id(d) for d in model) and s.verify() == []
        check_answers(s, model, list(model.values())[::50])
        s.rebuild()
    with SimStore(path) as s:  # rebuilt: its ids are a run database (format 13 on)
        assert s._h.ids is None and s.stats()["format_version"] == 17 and s.verify() == []
        assert all(s.get(d) == fp for d, fp in model.items())
        check_answers(s, model, list(model.values())[::50])


def ids_leaf_pages(store: SimStore) -> int:
    with store._env.reading() as txn:
        return int(txn.stat(store._h.ids)["leaf_pages"])


def test_ids_put_between_stored_ones_fill_pages(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """Batches of ids that sort between stored ids (each batch a block in key order just
    before the last batch's, as 'w{i}-{j}' ids land among earlier ones) are put spread,
    not in key order: they take at most 0.85 of the ids table's leaf pages that the same
    adds put in key order take (LMDB leaves a trail of half-full pages behind ordered
    inserts between stored keys); every id is found after either way."""
    from simstore.store import rows

    monkeypatch.setattr(F, "RUN_IDS_FROM", 99)  # the ids B-tree of formats 11-12
    pages = {}
    for spread in (1, rows.SPREAD):
        monkeypatch.setattr(rows, "SPREAD", spread)
        monkeypatch.setattr(rows.spread_order, "__defaults__", (spread,))
        with SimStore(tmp_path / f"s{spread}", k=3, expected_size=10**5) as s:
            s.add_many(range(10_000), [random.Random(i).getrandbits(64) for i in range(10_000)])
            base = ids_leaf_pages(s)
            for i in range(20):
                ids = [f"x{20 - i:02d}-{j:04d}" for j in range(1000)]
                s.add_many(ids, [random.Random(f"{i}-{j}").getrandbits(64) for j in range(1000)])
            assert len(s) == 30_000 and "x07-0123" in s and 9_999 in s
            pages[spread] = ids_leaf_pages(s) - base
    assert pages[rows.SPREAD] <= 0.85 * pages[1], pages  # 201 vs 254 pages


def test_ids_past_the_end_are_appended_in_later_batches(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Int ids numbered on after a store's own (ordered keys past the ids table's end) are
    appended by every add_many, not just the first (a format 11-12 store's ids B-tree): 20
    batches into a stored table take no more leaf pages than one bulk load of the same
    ids, plus one a batch."""
    monkeypatch.setattr(F, "RUN_IDS_FROM", 99)
    fps = [random.Random(i).getrandbits(64) for i in range(30_000)]
    with SimStore(tmp_path / "one", k=3, expected_size=10**5) as s:
        s.add_many(range(30_000), fps)
        bulk = ids_leaf_pages(s)
    with SimStore(tmp_path / "many", k=3, expected_size=10**5) as s:
        s.add_many(range(10_000), fps[:10_000])
        for i in range(20):
            a = 10_000 + 1000 * i
            s.add_many(range(a, a + 1000), fps[a:a + 1000])
        assert len(s) == 30_000 and s.get(29_999) == fps[-1]
        assert ids_leaf_pages(s) <= bulk + 20, (ids_leaf_pages(s), bulk)
