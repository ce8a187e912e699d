"""Run ids: a store's doc ids are a run database of its run tables.

Every lookup by id (get, in, add's update, remove, add_many's stored check, dedup) goes
through the ``rids`` levels, the recent docs and the docs records; these check it against
a dict model while levels flush and merge, with hashes that collide, across processes,
and that verify() names what damage did.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
import simstore.store.runs.tables
from simstore import SimStore
from simstore.store import format as F
from simstore.store.verify import records

from ...oracles import brute_matches
from ...testlib import Abort, cache, child_prelude, handles, merging, reading, small, tables
from ..test_crash import run_py


def url(i: int) -> str:
    return f"https://site{i * 7919 % 50021}.example.org/page/{i:x}"


def check_model(s: SimStore, model: dict[Any, int], probe: list[Any]) -> None:
    """get / in / len of the store against the model, for the probed ids."""
    assert len(s) == len(model)
    for d in probe:
        assert s.get(d) == model.get(d), d
        assert (d in s) == (d in model), d


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_writes_match_a_dict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                    seed: int) -> None:
    """Adds (one and many, new and stored ids), updates, removes (one and many, absent
    ids too) and batches of URL, str and int ids on a store whose levels flush every
    few docs and merge in slices (add_many looking ids up 7 at a time): every id reads as
    the model says after every step, queries equal brute force, verify passes, and a
    fresh process reads the same."""
    values = small(monkeypatch)
    monkeypatch.setattr("simstore.store.writes.PUT_CHUNK", 7)
    rng = random.Random(seed)
    pool = [url(i) for i in range(300)] + [f"d{i}" for i in range(100)] + list(range(-50, 150))
    model: dict[Any, int] = {}
    path = tmp_path / "s"
    merged = False
    with SimStore(path, k=3, expected_size=2000, durable=False) as s:
        assert s.stats()["format_version"] == F.FORMAT_VERSION
        for _ in range(160):
            op = rng.random()
            if op < 0.3:
                d, fp = rng.choice(pool), rng.getrandbits(64)
                s.add(d, fp)
                model[d] = fp
            elif op < 0.55:
                ids = list(dict.fromkeys(rng.sample(pool, rng.randint(1, 30))))
                fps = [rng.getrandbits(64) for _ in ids]
                s.add_many(ids, fps)
                model.update(zip(ids, fps, strict=True))
            elif op < 0.7 and model:
                d = rng.choice(pool)
                assert s.remove(d) == (d in model)
                model.pop(d, None)
            elif op < 0.85:
                ids = rng.sample(pool, rng.randint(1, 25))
                ids += ids[:2]  # an id twice: removed once
                assert s.remove_many(ids) == len(set(ids) & set(model))
                for d in ids:
                    model.pop(d, None)
            else:
                with s.batch():  # an id added and removed in one write, another updated
                    a, b = rng.sample(pool, 2)
                    s.add(a, 7)
                    assert s.remove(a)
                    model.pop(a, None)
                    s.add(b, rng.getrandbits(64))
                    model[b] = rng.getrandbits(64)
                    s.add(b, model[b])
            merged = merged or merging(s) is not None
            check_model(s, model, rng.sample(pool, 40))
        assert merged and len(s.stats()["levels"]) >= 2
        check_model(s, model, pool)
        for q in list(model.values())[:10]:  # (ties in no particular order: sorted)
            for k in range(4):
                assert sorted(map(repr, s.query(q, k))) == \
                    sorted(map(repr, brute_matches(model, q, k)))
        assert s.verify() == []
    r = run_py(child_prelude(values) + f"""
import json
from simstore import SimStore
model = dict(json.loads({json.dumps(list(model.items()))!r}))
with SimStore({str(path)!r}, readonly=True) as s:
    assert len(s) == len(model)
    for d, fp in model.items():
        assert s.get(d) == fp, d
    assert s.get("nope") is None and -10**6 not in s
""")
    assert r.returncode == 0, r.stderr


def test_ids_that_share_a_hash_are_told_apart(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """With a hash of 3 values every lookup meets other ids' entries (and removed docs'):
    each id still reads, updates and removes only its own doc, and verify passes."""
    small(monkeypatch)

    def weak(enc: bytes) -> int:
        return sum(enc) % 3

    monkeypatch.setattr(F, "id_hash", weak)
    monkeypatch.setattr(simstore.store.runs.tables, "id_hashes",
                        lambda encs: np.fromiter(map(weak, encs), dtype=np.uint64))
    monkeypatch.setattr(F, "id_hashes",
                        lambda encs: np.fromiter(map(weak, encs), dtype=np.uint64))
    rng = random.Random(4)
    with SimStore(tmp_path / "s", k=3, durable=False) as s:
        model = {f"x{i}": rng.getrandbits(64) for i in range(120)}
        s.add_many(list(model), list(model.values()))
        for i in range(0, 120, 3):
            assert s.remove(f"x{i}")
            del model[f"x{i}"]
        for i in range(1, 120, 5):
            model[f"x{i}"] = 99
            s.add(f"x{i}", 99)
        s.add_many(["x0", "x3", "x1"], [5, 6, 7])  # two removed ids back, one updated
        model.update(x0=5, x3=6, x1=7)
        check_model(s, model, [f"x{i}" for i in range(130)])
        with reading(s) as txn:  # in this process: verify()'s child has the real hash
            assert records(txn, handles(s)) == []


def _raw(path: Path) -> Any:
    return lmdb.open(str(path), max_dbs=64, subdir=True)


def test_a_store_keeps_its_ids_in_rids_and_no_ids_btree(tmp_path: Path) -> None:
    """The ids live in ``rids``: the environment has no ``ids`` database."""
    with SimStore(tmp_path / "s", k=3) as s:
        s.add_many(["a", "b"], [1, 2])
    env = _raw(tmp_path / "s")
    with env.begin() as txn:
        names = {bytes(k) for k, _ in txn.cursor()}
    env.close()
    assert b"rids" in names and b"ids" not in names and b"docs" in names


def test_verify_names_damage_to_the_ids(tmp_path: Path) -> None:
    """Two live docs with one id (a docs record rewritten with another's id) and a level's
    ids entry deleted are both reported."""
    with SimStore(tmp_path / "s", k=3) as s:
        s.add_many([f"d{i}" for i in range(20)], list(range(20)))
        assert s.verify() == []
        h = handles(s)
        with reading(s) as txn:
            level = tables(s).state(txn).levels[0].id
    env = _raw(tmp_path / "s")
    with env.begin(write=True) as txn:
        docs = env.open_db(b"docs", txn=txn, create=False)
        rec = bytes(txn.get(F.iid_bytes(5), db=docs))
        fp, _ = h.codec.parse(rec)
        txn.put(F.iid_bytes(5), h.codec.record(fp, F.encode_id("d6"), b"", b""), db=docs)
    env.close()
    with SimStore(tmp_path / "s", readonly=True) as s:
        text = " ".join(s.verify())
    assert "share an id" in text and "of ids" in text
    env = _raw(tmp_path / "s")
    with env.begin(write=True) as txn:
        rids = env.open_db(b"rids", txn=txn, create=False)
        run = next(bytes(k) for k, _ in txn.cursor(rids) if bytes(k)[:1] == bytes((level,)))
        assert txn.delete(run, db=rids)
    env.close()
    with SimStore(tmp_path / "s", readonly=True) as s:
        assert any("of ids" in p for p in s.verify())


@settings(max_examples=50)
@given(xs=st.lists(st.integers(-(2**63) + 1, 2**63 - 1), max_size=60))
def test_int_id_hashes_are_the_hashes_of_their_encodings(xs: list[int]) -> None:
    """The bulk path's hashes of int ids (packed a length at a time, no bytes objects) are
    id_hash of each id's encoding, as a single get looks it up."""
    arr = np.array(xs, dtype=np.int64)
    assert F.int_id_hashes(arr).tolist() == [F.id_hash(F.encode_id(x)) for x in xs]



def test_a_bulk_writes_docs_serve_the_next_lookup_only_if_it_committed(tmp_path: Path) -> None:
    """A process's add_many hands its docs to its next lookups (not read back): after an
    aborted batch of two docs, another process adds two others at the same internal ids
    with the same fingerprints (so the recent docs' XOR hash is the same); this process
    then finds the other's ids, not its aborted ones, and updating one adds no second."""
    path = tmp_path / "s"
    with SimStore(path, k=3) as s:
        s.add_many(["base"], [1])
        with pytest.raises(Abort), s.batch():
            s.add_many(["a", "b"], [7, 7])
            raise Abort
        r = run_py(f"""
from simstore import SimStore
with SimStore({str(path)!r}) as o:
    o.add_many(["x", "y"], [7, 7])
""")
        assert r.returncode == 0, r.stderr
        assert "x" in s and "y" in s and "a" not in s and s.get("b") is None
        s.add_many(["x", "z"], [8, 9])
        assert len(s) == 4 and s.get("x") == 8 and s.verify() == []
        s.add_many(["w"], [5])  # a committed bulk write: its docs are found next
        assert s.get("w") == 5 and s.remove_many(["w", "z"]) == 2 and len(s) == 3


def test_a_reader_hashes_the_recent_ids_only_once_it_looks_one_up(tmp_path: Path) -> None:
    """A process that only queries keeps the recent docs without their ids (no decode and
    hash of every new doc's id); its first lookup by id reads them again with their ids,
    and from then on every later commit's docs, another process's adds and removes
    included, are found by id."""
    path = tmp_path / "s"
    with SimStore(path, k=3) as w:
        w.add_many([f"d{i}" for i in range(20)], list(range(20)))

    def other(code: str) -> None:
        r = run_py(f"""
from simstore import SimStore
with SimStore({str(path)!r}) as o:
    {code}
""")
        assert r.returncode == 0, r.stderr

    with SimStore(path) as s:
        rt = cache(s)
        assert [m.doc_id for m in s.query(3, 0)] == ["d3"]
        other('o.add_many(["e1", "e2"], [1 << 40, 1 << 41])')
        assert [m.doc_id for m in s.query(1 << 40, 0)] == ["e1"]
        assert rt._recent is not None and not rt._recent.has_ids
        assert rt._recent.ids == {}
        assert s.get("e2") == 1 << 41 and "e1" in s and "e3" not in s  # now with ids
        assert rt._recent.has_ids and len(rt._recent.ids) == 2  # (d0-d19: a level)
        other('o.add("e3", 1 << 42); o.remove("e1")')
        assert s.get("e3") == 1 << 42 and "e1" not in s and s.get("e2") == 1 << 41
        assert [m.doc_id for m in s.query(1 << 42, 0)] == ["e3"]
        assert rt._recent.has_ids
