"""Exact stores (SimStore(path, exact=True)): every decision against brute-force exact Jaccard,
the shingles database kept in step with the docs (update, delete, verify, kill -9, reopen)."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import simstore
from simstore import (
    SIGNATURE_CONFIG,
    ConfigMismatchError,
    InvalidConfigError,
    SimstoreTypeError,
    signatures_and_sets,
)
from simstore.native import jaccard as native_sets
from simstore.store import SimStore
from simstore.store.shingles import MAX_PIECES, PIECE, pieces

from ..oracles import brute_jaccard, brute_representatives_exact, shares_band, shingle_set
from ..strategies import hash_sets, near_copy_texts, planted_texts
from ..testlib import handles, reading, sound

ROOT = Path(__file__).resolve().parents[2]
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _oracle_similar(texts: list[str], q: str, t: float) -> list[tuple[int, float]]:
    """(index, exact J) of the stored texts a query must match: J >= t among those sharing a
    band key with it (the store's candidates), best first, then insertion order."""
    sigs = simstore.signatures(texts + [q], SIGNATURE_CONFIG)
    qs = shingle_set(q)
    out = [(i, brute_jaccard(qs, shingle_set(x))) for i, x in enumerate(texts)
           if shares_band(sigs.bands[-1], sigs.bands[i])]
    return sorted([(i, j) for i, j in out if j >= t], key=lambda r: (-r[1], r[0]))


def _bands_meet(texts: list[str]):
    bands = simstore.signatures(texts, SIGNATURE_CONFIG).bands
    return lambda m, r: shares_band(bands[m], bands[r])


def _check_matches(got, want, ids) -> None:
    assert [m.doc_id for m in got] == [ids[i] for i, _ in want]
    for m, (_, j) in zip(got, want, strict=True):
        assert m.jaccard == pytest.approx(j, abs=1e-12)


# --------------------------------------------------------------------------- the codec


@given(hash_sets)
@settings(max_examples=200, deadline=None)
def test_set_codes_decode_to_the_same_sets(values):
    """encode_sets / decode_sets give back every sorted set, and a code is <= 8 bytes a hash
    plus a 12-byte header for uniform hashes (or the escape's bound for crafted ones)."""
    sets = [np.array(sorted(values), dtype=np.uint64), np.empty(0, dtype=np.uint64),
            np.array([0, 1, 2, (1 << 64) - 1], dtype=np.uint64)]
    off = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sets], out=off[1:])
    codes, coff = native_sets.encode_sets(np.concatenate(sets), off)
    hashes, got_off, bad = native_sets.decode_sets(codes, coff)
    assert bad == -1
    assert got_off.tolist() == off.tolist()
    assert hashes.tolist() == np.concatenate(sets).tolist()
    assert coff[1] - coff[0] <= 12 + 13 * len(values)


def test_damaged_set_codes_are_named_not_decoded():
    """A truncated code, a trailing byte, an unknown version: decode_sets names the code."""
    rng = np.random.default_rng(3)
    a = np.unique(rng.integers(0, 2**64, 300, dtype=np.uint64))
    codes, off = native_sets.encode_sets(np.concatenate([a, a]), np.array([0, len(a), 2 * len(a)]))
    one = codes[: off[1]]
    for bad_code in (one[:-1], one + b"\x00", b"\x07" + one[1:]):
        blob = one + bad_code
        _, _, bad = native_sets.decode_sets(blob, np.array([0, len(one), len(blob)], dtype=np.int64))
        assert bad == 1
    with pytest.raises(InvalidConfigError):  # not ascending: refused, never stored
        native_sets.encode_sets(a[::-1].copy(), np.array([0, len(a)], dtype=np.int64))


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize("t", [0.7, 0.8, 0.9])
def test_similar_is_brute_force_exact_jaccard_on_the_candidates(tmp_path, t):
    """similar(text, t) on planted near-copies: exactly the stored docs with exact J >= t among
    those sharing a band key, with that exact value, best first."""
    texts = planted_texts(5, 6, 5)
    stored, queries = texts[:30], texts[30:]
    ids = [f"d{i}" for i in range(len(stored))]
    with SimStore(tmp_path / "s", exact=True) as s:
        s.add_many(ids, stored)
        assert s.verify() == []
        positives = 0
        for q in queries:
            want = _oracle_similar(stored, q, t)
            positives += len(want)
            _check_matches(s.similar(q, t), want, ids)
            sig, sets = signatures_and_sets([q])
            _check_matches(s.similar((sig[0], sets), t), want, ids)
        assert positives > 5  # the planted copies give the test something to find


@given(near_copy_texts())
@FEW
def test_add_if_new_in_order_is_the_exact_greedy_rule(tmp_path_factory, texts):
    """add_if_new(text, threshold=0.8) in order keeps the brute-force exact greedy
    representatives (pairs sharing a band key) and returns every stored doc with J >= t;
    add_if_new_many on another store answers the same."""
    t = 0.8
    d = tmp_path_factory.mktemp("x")
    ids = list(range(len(texts)))
    rep, _ = brute_representatives_exact(texts, t, ids, candidate=_bands_meet(texts))
    sets = [shingle_set(x) for x in texts]
    meet = _bands_meet(texts)
    with SimStore(d / "a", exact=True) as a, SimStore(d / "b", exact=True) as b:
        single = [a.add_if_new(i, x, threshold=t) for i, x in enumerate(texts)]
        assert b.add_if_new_many(ids, texts, threshold=t) == single
        kept = [i for i in ids if rep[i] == i]
        assert sorted(a) == kept
        for m, found in enumerate(single):
            want = sorted([(r, brute_jaccard(sets[m], sets[r])) for r in kept
                           if r < m and meet(m, r)], key=lambda x: (-x[1], x[0]))
            _check_matches(found, [w for w in want if w[1] >= t], ids)
        assert sound(a) == [] and sound(b) == []  # verify's checks, in this process


def test_a_bare_signature_falls_back_to_the_sketch(tmp_path):
    """similar(Signature) on an exact store answers as a sketch-only store does; writes refuse
    a bare Signature (no set to keep)."""
    texts = planted_texts(9, 4, 4)
    with SimStore(tmp_path / "e", exact=True) as e, \
            SimStore(tmp_path / "p", config=SIGNATURE_CONFIG) as p:
        e.add_many(range(len(texts)), texts)
        p.add_many(range(len(texts)), p.signatures(texts))
        for x in texts[:8]:
            sig = p.signature(x)
            assert e.similar(sig, 0.8) == p.similar(sig, 0.8)
        with pytest.raises(SimstoreTypeError, match="shingle set"):
            e.add("z", e.signature("a text"))
        with pytest.raises(SimstoreTypeError, match="shingle set"):
            e.add_many(["z"], e.signatures(["a text"]))


# --------------------------------------------------------------------------- the option


def test_the_option_is_recorded_and_checked(tmp_path):
    """exact needs a signature config; it is read back on open, pickling and stats; opening
    with the other choice is refused."""
    with pytest.raises(InvalidConfigError, match="signature config"):
        SimStore(tmp_path / "h", config=simstore.DEFAULT_CONFIG, exact=True)
    assert not (tmp_path / "h").exists()
    with SimStore(tmp_path / "e", exact=True) as s:
        assert s.exact and s.stats()["exact"] and s.config == SIGNATURE_CONFIG
        s.add("a", "one two three four five")
    with SimStore(tmp_path / "p", config=SIGNATURE_CONFIG) as s:
        assert not s.exact
    with pytest.raises(ConfigMismatchError, match="exact"):
        SimStore(tmp_path / "p", exact=True)
    with pytest.raises(ConfigMismatchError, match="exact"):
        SimStore(tmp_path / "e", exact=False)
    with SimStore(tmp_path / "e") as s:
        assert s.exact
        blob = pickle.dumps(s)
    with pickle.loads(blob) as again:
        assert again.exact and again.similar("one two three four five")[0].jaccard == 1.0


def _shingle_count(s: SimStore) -> tuple[int, int]:
    """(docs records, docs with shingle pieces) of an open exact store, in one snapshot."""
    with reading(s) as txn:
        owners = {bytes(k[:8]) for k in txn.cursor(handles(s).shingles).iternext(values=False)}
        return txn.stat(handles(s).docs)["entries"], len(owners)


def test_update_and_delete_keep_one_set_per_doc(tmp_path):
    """A changed text replaces the doc's set, a removed doc takes its set along (single and bulk
    calls); verify() finds the store sound and similar() sees the new texts only."""
    texts = planted_texts(4, 3, 3)
    path = tmp_path / "s"
    with SimStore(path, exact=True) as s:
        s.add_many(range(len(texts)), texts)
        s.add(0, texts[1])  # doc 0 now holds doc 1's text
        s.add_many([2, 3], [texts[5], texts[3]])  # 2 changes, 3 stays
        assert s.remove(4) and s.remove_many([5, 99]) == 1
        s.add(1, texts[1])  # unchanged
        assert s.verify() == []
        assert _shingle_count(s) == (len(s), len(s))
        got = {m.doc_id: m.jaccard for m in s.similar(texts[1], 0.99)}
        assert got == {0: 1.0, 1: 1.0}
        assert 2 in {m.doc_id for m in s.similar(texts[5], 0.99)}


def test_a_code_over_32_mb_is_cut_into_at_most_65536_pieces():
    """A code longer than 65,536 pieces of 500 bytes gets longer pieces, numbered in 2 bytes."""
    code = bytes(range(256)) * (PIECE * MAX_PIECES // 256 + 8)
    rows = list(pieces(b"\0" * 8, code))
    assert len(rows) == MAX_PIECES
    assert [int.from_bytes(k[8:], "big") for k, _ in rows] == list(range(MAX_PIECES))
    assert b"".join(v for _, v in rows) == code


def test_long_texts_are_kept_in_pieces_and_read_back_whole(tmp_path):
    """A set whose code is many pieces (a long text) is read back whole: similar() gives the
    brute-force exact value; replacing it by a short text leaves no piece behind."""
    rng = random.Random(5)
    long = " ".join(f"w{rng.randrange(10**6)}" for _ in range(5000))
    near = long.replace("w", "x", 40)
    with SimStore(tmp_path / "s", exact=True) as s:
        s.add_many(["a", "b"], [long, "a short text of a few words"])
        with reading(s) as txn:
            assert len([k for k in txn.cursor(handles(s).shingles).iternext(values=False)]) > 10
        got = s.similar(near, 0.5)
        assert [m.doc_id for m in got] == ["a"]
        assert got[0].jaccard == pytest.approx(brute_jaccard(shingle_set(near),
                                                             shingle_set(long)), abs=1e-12)
        s.add("a", "now a short text")
        assert _shingle_count(s) == (2, 2) and s.verify() == []
        with reading(s) as txn:
            assert txn.stat(handles(s).shingles)["entries"] == 2


def test_verify_reports_a_missing_an_orphan_and_a_damaged_set(tmp_path):
    """verify() checks the shingles database: a doc without its set, a set of no doc, a set
    that does not decode."""
    path = tmp_path / "s"
    with SimStore(path, exact=True) as s:
        s.add_many(["a", "b", "c"], ["one two three four", "five six seven eight", "nine ten"])
    env = lmdb.open(str(path), max_dbs=64)
    db = env.open_db(b"shingles")
    with env.begin(write=True) as txn:
        keys = [bytes(k) for k, _ in txn.cursor(db)]
        assert all(len(k) == 10 and k[8:] == b"\0\0" for k in keys)  # short codes: one piece
        code = bytes(txn.get(keys[0], db=db))
        txn.delete(keys[0], db=db)
        txn.put(keys[1], code[:-1], db=db)
        txn.put(b"\xff" * 8 + b"\0\0", code, db=db)
    env.close()
    with SimStore(path) as s:
        problems = s.verify()
    assert "1 docs have no shingle set (an exact store keeps one per doc)" in problems
    assert "the shingles database has 1 pieces of no doc (orphans)" in problems
    assert f"the shingle set of doc {keys[1][:8].hex()} is malformed" in problems


# --------------------------------------------------------------------------- processes


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_another_process_reads_the_option_and_writes_sets(tmp_path):
    """A fresh process opens the store without 'exact', answers exactly, and its writes come
    with their sets."""
    texts = planted_texts(2, 3, 3)
    path = tmp_path / "s"
    with SimStore(path, exact=True) as s:
        s.add_many(range(10), texts[:10])
        want = [(m.doc_id, m.jaccard) for m in s.similar(texts[10], 0.7)]
    r = _run(f"""
        import json
        from simstore.store import SimStore
        texts = {texts!r}
        with SimStore({str(path)!r}) as s:
            got = [(m.doc_id, m.jaccard) for m in s.similar(texts[10], 0.7)]
            s.add_many(range(10, len(texts)), texts[10:])
            print(json.dumps([s.exact, got]))
    """)
    assert r.returncode == 0, r.stderr
    exact, got = __import__("json").loads(r.stdout)
    assert exact and [tuple(g) for g in got] == want
    with SimStore(path) as s:
        assert len(s) == len(texts) and s.verify() == []
        assert _shingle_count(s) == (len(texts), len(texts))


_WRITER = """
import os, sys
from simstore.store import SimStore
path, ack = sys.argv[1], sys.argv[2]
words = [f"w{i}" for i in range(500)]
with SimStore(path, exact=True, durable=True) as s, open(ack, "a") as log:
    for n in range(10**6):
        texts = [" ".join(words[(n * 7 + i * 13 + j) % 500] for j in range(40)) for i in range(20)]
        ids = [f"{n}-{i}" for i in range(20)]
        log.write(f"B {n}\\n"); log.flush()
        if n % 3 == 0:
            s.add_many(ids, texts)
        elif n % 3 == 1:
            s.add_if_new_many(ids, texts, threshold=0.8)
        else:
            s.remove_many([f"{n - 2}-{i}" for i in range(0, 20, 2)])
            s.add(ids[0], texts[0])
        log.write(f"A {n}\\n"); log.flush(); os.fsync(log.fileno())
"""


@pytest.mark.parametrize("seed", range(4))
def test_sigkill_of_a_writer_never_leaves_a_doc_without_its_set(tmp_path, seed):
    """kill -9 of a process adding (add, add_many, add_if_new_many) and removing texts at a
    random instant: reopened, verify() passes (one set per doc, none orphaned) and every
    acknowledged add_many is there."""
    path, ack = tmp_path / "s", tmp_path / "ack"
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(ack)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while (not ack.exists() or "A 0" not in ack.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 1.5))
    child.send_signal(signal.SIGKILL)
    child.wait()
    lines = ack.read_text().splitlines()
    done = [int(ln.split()[1]) for ln in lines if ln.startswith("A ")]
    begun = {int(ln.split()[1]) for ln in lines if ln.startswith("B ")}
    assert done, "the writer never acknowledged a call"
    with SimStore(path) as s:
        assert s.verify() == []
        docs, sets = _shingle_count(s)
        assert docs == sets == len(s)
        for n in done:
            if n % 3 == 0:  # odd ones stay; even ones go only once call n + 2 begun
                kept = range(20) if n + 2 not in begun else range(1, 20, 2)
                assert all(f"{n}-{i}" in s for i in kept)


def test_rebuild_and_compact_keep_the_sets(tmp_path):
    """rebuild (another k) keeps internal ids, so every set still belongs to its doc; a compact
    copy is an exact store too; both answer as before and verify."""
    texts = planted_texts(6, 3, 3)
    with SimStore(tmp_path / "s", exact=True) as s:
        s.add_many(range(len(texts)), texts)
        s.remove_many([0, 1])
        before = [s.similar(x, 0.8) for x in texts]
        s.rebuild(k=3)
        assert s.k == 3 and s.exact and s.verify() == []
        assert [s.similar(x, 0.8) for x in texts] == before
        s.compact(tmp_path / "c")
    with SimStore(tmp_path / "c") as c:
        assert c.exact and c.verify() == []
        assert [c.similar(x, 0.8) for x in texts] == before


def test_an_exact_store_is_the_current_format_with_meta_exact(tmp_path) -> None:
    """An exact store records the same format version as any other store, and is named
    by its ``exact`` metadata (the set codec), which rebuild keeps; a plain similarity
    store has none."""
    from simstore.store import format as F

    texts = planted_texts(3, 30, 1, words=60)
    with SimStore(tmp_path / "e", exact=True) as s, SimStore(
            tmp_path / "p", config=simstore.SIGNATURE_CONFIG) as p:
        s.add_many(range(len(texts)), texts)
        assert s.stats()["format_version"] == p.stats()["format_version"] == F.FORMAT_VERSION
        assert _meta_exact(s) == {"codec": 1, "shingles": "rice-gaps-u64"}
        assert _meta_exact(p) is None
        s.rebuild()
        assert _meta_exact(s) == {"codec": 1, "shingles": "rice-gaps-u64"}
        assert s.exact and s.similar(texts[0], 0.99)[0].doc_id == 0


def _meta_exact(store: SimStore) -> dict | None:
    """The store's ``exact`` metadata, as JSON, or None."""
    with reading(store) as txn:
        raw = txn.get(b"exact", db=handles(store).meta)
    return None if raw is None else json.loads(bytes(raw))
