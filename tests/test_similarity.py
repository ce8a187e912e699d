"""Similarity mode: batch find_similar and store similar/add_if_new against the brute-force rule."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simstore
from simstore import (
    SIGNATURE_CONFIG,
    FingerprintConfig,
    InvalidConfigError,
    InvalidSignatureError,
    NotSimilarityStoreError,
    Signatures,
    SimilarMatch,
    SimStore,
    SimstoreTypeError,
    find_similar,
    similar_clusters,
)
from simstore.native import core as _core

from .oracles import brute_clusters_of_pairs, brute_similar_pairs, shares_band, sketch_estimate
from .strategies import planted_hash_sets

SMALL = FingerprintConfig(sketch_bits=128, bands=16, rows=2)  # many band collisions: a hard case


def synthetic(config: FingerprintConfig, seed: int, n_base: int, copies: int) -> Signatures:
    """Signatures of planted synthetic hash sets (fingerprints: simhash of the sets)."""
    hashes, offsets = planted_hash_sets(seed, n_base, copies)
    sk, bands = _core.signature_hashes(
        hashes, offsets, config.seed, config.sketch_bits, config.bands, config.rows
    )
    fps = _core.simhash_batch(hashes, None, offsets)
    return Signatures(config, fps, sk, bands)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_base=st.integers(0, 6),
    copies=st.integers(0, 4),
    threshold=st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0]),
    config=st.sampled_from([SIGNATURE_CONFIG, SMALL]),
)
def test_find_similar_equals_the_rule_pair_by_pair(seed, n_base, copies, threshold, config):
    """find_similar returns exactly the pairs sharing a band with estimate >= t, once each."""
    sigs = synthetic(config, seed, n_base, copies)
    got = find_similar(sigs, threshold)
    want = brute_similar_pairs(sigs.sketches, sigs.bands, threshold)
    assert list(zip(got.i.tolist(), got.j.tolist(), strict=True)) == [(i, j) for i, j, _ in want]
    assert np.allclose(got.jaccard, [s for _, _, s in want])


def test_find_similar_with_many_identical_copies_is_exact():
    """200 identical copies plus near-copies: every copy pair once (J = 1), nothing extra."""
    base = synthetic(SIGNATURE_CONFIG, 5, 3, 3)
    sigs = Signatures.concat([base, base[np.zeros(200, dtype=np.int64)]])
    got = find_similar(sigs, 0.9)
    want = brute_similar_pairs(sigs.sketches, sigs.bands, 0.9)
    assert list(zip(got.i.tolist(), got.j.tolist(), strict=True)) == [(i, j) for i, j, _ in want]
    assert len(want) >= 200 * 199 // 2


def test_similar_clusters_are_components_of_the_pairs():
    """similar_clusters labels each doc with the smallest doc of its component."""
    sigs = synthetic(SIGNATURE_CONFIG, 9, 5, 3)
    pairs = brute_similar_pairs(sigs.sketches, sigs.bands, 0.8)
    assert similar_clusters(sigs, 0.8).tolist() == brute_clusters_of_pairs(len(sigs), pairs)


def test_real_text_near_duplicates_are_found_and_ranked():
    """A lightly edited text scores high, an unrelated one is not returned."""
    words = [f"w{i % 97}x{i}" for i in range(600)]
    a = " ".join(words)
    b = " ".join(words[:300] + ["edited"] + words[301:])
    c = " ".join(f"other{i}" for i in range(600))
    sigs = simstore.signatures([a, b, c])
    got = find_similar(sigs, 0.9)
    assert got.i.tolist() == [0] and got.j.tolist() == [1] and got.jaccard[0] > 0.95


@pytest.fixture
def sim_store(tmp_path):
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, k=3, durable=False) as s:
        yield s


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), threshold=st.sampled_from([0.8, 0.9, 0.95]))
def test_store_similar_equals_the_rule(tmp_path_factory, seed, threshold):
    """similar(sig, t): every stored doc sharing a band with the query and estimate >= t, best first."""
    sigs = synthetic(SIGNATURE_CONFIG, seed, 4, 3)
    half = len(sigs) // 2
    path = tmp_path_factory.mktemp("sim") / "s"
    with SimStore(path, config=SIGNATURE_CONFIG, durable=False) as s:
        s.add_many([f"d{i}" for i in range(half)], sigs[:half])
        for i in range(half, len(sigs)):
            s.add(f"d{i}", sigs[i])
        assert s.verify() == []
        for q in range(len(sigs)):
            want = []
            for i in range(len(sigs)):
                if shares_band(sigs.bands[q], sigs.bands[i]):
                    est = sketch_estimate(sigs.sketches[q], sigs.sketches[i])
                    if est >= threshold:
                        want.append((-est, i))
            want.sort()
            got = s.similar(sigs[q], threshold)
            assert [m.doc_id for m in got] == [f"d{i}" for _, i in want]
            assert all(isinstance(m, SimilarMatch) for m in got)
            assert np.allclose([m.jaccard for m in got], [-e for e, _ in want])
            if got:
                f = int(sigs.fingerprints[want[0][1]])
                assert got[0].fingerprint == f
                assert got[0].distance == (f ^ int(sigs.fingerprints[q])).bit_count()


def test_store_add_if_new_by_threshold_keeps_first_of_near_copies(sim_store):
    """add_if_new(id, sig) stores a text only if nothing at Jaccard >= t is stored yet."""
    words = [f"w{i}" for i in range(400)]
    a = " ".join(words)
    b = " ".join(words[:200] + ["edit"] + words[201:])
    c = " ".join(f"other{i}" for i in range(400))
    assert sim_store.add_if_new("a", sim_store.signature(a)) == []
    found = sim_store.add_if_new("b", sim_store.signature(b))
    assert [m.doc_id for m in found] == ["a"] and found[0].jaccard >= 0.9
    assert sim_store.add_if_new("c", sim_store.signature(c), threshold=0.8) == []
    assert sorted(sim_store) == ["a", "c"]
    by_k = sim_store.add_if_new("b", sim_store.signature(b), k=3)  # a Hamming check by k
    assert [m.doc_id for m in by_k] == ["a"] and by_k[0].distance <= 3
    assert sim_store.add_if_new("b", sim_store.signature(b), k=0) == []
    assert {m.doc_id for m in sim_store.similar(b)} == {"a", "b"}


def test_remove_update_rebuild_and_reopen_keep_the_band_tables_exact(tmp_path):
    """remove and re-add drop and replace band entries; rebuild and reopen keep them; verify."""
    path = tmp_path / "s"
    sigs = synthetic(SIGNATURE_CONFIG, 3, 5, 2)
    with SimStore(path, config=SIGNATURE_CONFIG, durable=False) as s:
        s.add_many(range(len(sigs)), sigs)
        assert s.remove(0) and s.verify() == []
        assert all(m.doc_id != 0 for m in s.similar(sigs[0], 0.5))
        s.add(1, sigs[2])  # doc 1 now has doc 2's signature
        assert s.verify() == []
        assert {1, 2} <= {m.doc_id for m in s.similar(sigs[2], 1.0)}
        s.rebuild(k=4)
        assert s.verify() == [] and s.k == 4
        assert {1, 2} <= {m.doc_id for m in s.similar(sigs[2], 1.0)}
        blob = pickle.dumps(s)
    with SimStore(path, readonly=True) as s:
        assert s.config == SIGNATURE_CONFIG and s.stats()["similarity"]
        assert {m.doc_id for m in s.similar(sigs[2], 1.0)} >= {1, 2}
    with pickle.loads(blob) as s:
        assert s.verify() == []


def test_hamming_queries_work_on_a_similarity_store(sim_store):
    """query(fp, k) answers by fingerprint in a similarity store, with a Signature too."""
    sig = sim_store.signature("some text here to index and find again")
    sim_store.add("x", sig)
    assert [m.doc_id for m in sim_store.query(sig.fingerprint, 0)] == ["x"]
    assert [m.doc_id for m in sim_store.query(sig, 0)] == ["x"]


def test_bad_similarity_input_is_refused_and_stores_nothing(tmp_path, sim_store):
    """Wrong sketch size or scheme, bare fingerprints, bad thresholds: specific errors, no writes."""
    other = FingerprintConfig(sketch_bits=256, bands=16, rows=8)
    sig = simstore.signature("a text for the test", other)
    with pytest.raises(InvalidSignatureError, match="make it with store.signature"):
        sim_store.add("a", sig)
    with pytest.raises(InvalidSignatureError):
        sim_store.add_many(["a"], simstore.signatures(["a text"], other))
    with pytest.raises(SimstoreTypeError, match="keeps similarity signatures"):
        sim_store.add("a", 12345)
    with pytest.raises(SimstoreTypeError, match="keeps similarity signatures"):
        sim_store.add_many(["a"], [12345])
    good = sim_store.signature("a text for the test")
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(InvalidConfigError, match="threshold"):
            sim_store.similar(good, bad)
        with pytest.raises(InvalidConfigError, match="threshold"):
            sim_store.add_if_new("a", good, threshold=bad)
    with pytest.raises(SimstoreTypeError, match="threshold"):
        sim_store.similar(good, "0.9")
    with pytest.raises(SimstoreTypeError, match="'item'"):
        sim_store.similar(12345)
    assert len(sim_store) == 0
    mixed = [simstore.signatures(["x"]), simstore.signatures(["y"], other)]
    with pytest.raises(InvalidSignatureError):
        Signatures.concat(mixed)
    with pytest.raises(InvalidConfigError, match="threshold"):
        find_similar(simstore.signatures(["x"]), 0)
    with SimStore(tmp_path / "plain") as plain:
        with pytest.raises(SimstoreTypeError, match="keeps fingerprints only.*SIGNATURE_CONFIG"):
            plain.add("p", good)  # its sketch would be dropped without a word
        with pytest.raises(SimstoreTypeError, match="not Signatures"):
            plain.add_many(["p"], simstore.signatures(["x"]))
        plain.add("p", good.fingerprint)
        assert plain["p"] == good.fingerprint
        with pytest.raises(NotSimilarityStoreError, match="indexed again with signatures"):
            plain.similar(good)
        with pytest.raises(NotSimilarityStoreError):
            list(plain.similar_pairs())
        with pytest.raises(InvalidConfigError, match="threshold"):
            plain.add_if_new("q", good.fingerprint, threshold=0.9)
        with pytest.raises(SimstoreTypeError, match="keeps fingerprints only"):
            plain.add_if_new("q", good)


def test_store_similar_pairs_equal_batch_find_similar(sim_store):
    """similar_pairs over a store gives find_similar's pairs over the same signatures."""
    sigs = synthetic(SIGNATURE_CONFIG, 21, 6, 3)
    sim_store.add_many([f"d{i}" for i in range(len(sigs))], sigs)
    got = sorted((a, b) for a, b, _ in sim_store.similar_pairs(0.85))
    found = find_similar(sigs, 0.85)
    want = sorted((f"d{i}", f"d{j}") for i, j in zip(found.i.tolist(), found.j.tolist(), strict=True))
    assert got == want and want


@pytest.mark.parametrize("cut", [12, 30])  # inside the sketch; inside the band keys
def test_similar_on_a_damaged_candidate_record_is_corrupt_store_error(tmp_path, cut) -> None:
    """similar() whose candidate's docs record is cut short raises CorruptStoreError naming
    the record's size, never a numpy reshape error (the doc sits in a level, so opening the
    store does not read its record)."""
    import lmdb

    text = "the quick brown fox jumps over the lazy dog " * 20
    others = [f"other document number {i} of {i % 7} words" for i in range(5000)]
    with simstore.SimStore(tmp_path / "s", config=simstore.SIGNATURE_CONFIG) as s:
        s.add("a", s.signature(text))
        s.add_many(range(5000), s.signatures(others))  # past the recent docs: in a level
        assert [m.doc_id for m in s.similar(text, 0.9)] == ["a"]
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64)
    with env.begin(write=True) as txn:
        docs = env.open_db(b"docs", txn=txn, create=False)
        key = (0).to_bytes(8, "big")
        txn.put(key, txn.get(key, db=docs)[:cut], db=docs)
    env.close()
    with simstore.SimStore(tmp_path / "s") as s, pytest.raises(
        simstore.CorruptStoreError, match="bytes"
    ):
        s.similar(text, 0.9)
