"""A store one document at a time: fingerprint(), signature(), similar(), query() and
add_if_new() on the single path answer as the batch calls and the brute-force rule do,
inside and outside batch()."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simstore
from simstore import SIGNATURE_CONFIG, SimStore
from simstore.store import format as F
from simstore.store.writes import extra_of
from simstore.text.minhash import band_keys32

from ..oracles import brute_matches, shares_band, sketch_estimate
from ..strategies import any_texts, planted_texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return planted_texts(7, 12, 4, words=60)


@pytest.fixture
def sim_store(tmp_path, texts):
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, k=3, durable=False) as s:
        half = len(texts) // 2
        s.add_many(range(half), s.signatures(texts[:half]))
        for i in range(half, len(texts)):  # recent docs, not yet in a level
            s.add(i, s.signature(texts[i]))
        yield s


def _rule(store: SimStore, texts: list[str], q: simstore.Signature, t: float) -> list:
    """The stored docs the rule names for q, best first (Jaccard down, then insertion)."""
    sigs = store.signatures(texts)
    want = []
    for i in range(len(texts)):
        if shares_band(q.bands, sigs.bands[i]):
            est = sketch_estimate(q.sketch, sigs.sketches[i])
            if est >= t:
                want.append((-est, i))
    return [i for _, i in sorted(want)]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=any_texts)
def test_store_fingerprint_and_signature_of_one_text_equal_the_batch(sim_store, text):
    """store.fingerprint / store.signature of a text equal their batch calls' first row."""
    assert sim_store.fingerprint(text) == int(sim_store.fingerprint_texts([text, "x"])[0])
    assert sim_store.signature(text) == sim_store.signatures([text, "x"])[0]


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9, 1.0])
def test_similar_equals_the_rule_for_texts_and_signatures(sim_store, texts, threshold):
    """similar(text) and similar(signature) give the rule's docs, best first."""
    for q in [*texts[::5], texts[3][:-30], "an unrelated query text"]:
        sig = sim_store.signature(q)
        want = _rule(sim_store, texts, sig, threshold)
        assert [m.doc_id for m in sim_store.similar(sig, threshold)] == want
        assert [m.doc_id for m in sim_store.similar(q, threshold)] == want


def test_similar_and_query_inside_batch_see_its_writes(tmp_path, texts):
    """Inside batch() the single reads take the batch's transaction and see its writes."""
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, k=3, durable=False) as s:
        sig = s.signature(texts[0])
        with s.batch():
            s.add("a", sig)
            assert [m.doc_id for m in s.similar(sig, 0.9)] == ["a"]
            assert [m.doc_id for m in s.query(sig.fingerprint, 0)] == ["a"]
        assert [m.doc_id for m in s.similar(sig, 0.9)] == ["a"]


def test_similar_since_keeps_only_recent_docs(tmp_path, texts):
    """similar(..., since=) leaves out docs stored before it, as the batch rule would."""
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sig = s.signature(texts[0])
        s.add("old", sig, at=1000.0)
        s.add("new", sig, at=2000.0)
        assert [m.doc_id for m in s.similar(sig, 0.9)] == ["old", "new"]
        assert [m.doc_id for m in s.similar(sig, 0.9, since=1500.0)] == ["new"]


def test_add_if_new_one_at_a_time_equals_add_if_new_many(tmp_path, texts):
    """add_if_new called per doc returns and stores what add_if_new_many does."""
    sigs = simstore.signatures(texts)
    with (
        SimStore(tmp_path / "a", config=SIGNATURE_CONFIG, durable=False) as a,
        SimStore(tmp_path / "b", config=SIGNATURE_CONFIG, durable=False) as b,
    ):
        one = [a.add_if_new(i, sigs[i], threshold=0.8) for i in range(len(texts))]
        many = b.add_if_new_many(range(len(texts)), sigs, threshold=0.8)
        assert [[m.doc_id for m in r] for r in one] == [[m.doc_id for m in r] for r in many]
        assert sorted(a.doc_ids()) == sorted(b.doc_ids())


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fps=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
    k=st.integers(0, 3),
    data=st.data(),
)
def test_query_of_one_fingerprint_equals_brute_force(tmp_path_factory, fps, k, data):
    """query(fp, k) on the fast path: every stored doc within k, nearest first."""
    q = data.draw(st.sampled_from(fps)) ^ data.draw(st.sampled_from([0, 1, 3, 1 << 63]))
    with SimStore(tmp_path_factory.mktemp("q") / "s", k=3, durable=False) as s:
        s.add_many(range(len(fps)), np.array(fps, dtype=np.uint64))
        got = s.query(q, k)
    assert got == brute_matches(dict(enumerate(fps)), q, k)


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=32))
def test_one_signatures_band_key_bytes_are_the_records(keys):
    """A single write's band-key bytes (extra_of) are the docs record's: band_key_bytes of
    the keys' low 32 bits, as the bulk path writes them."""
    bands = np.array(keys, dtype=np.uint64)
    sketch = np.arange(4, dtype=np.uint64)
    assert extra_of(sketch, bands) == (sketch.astype("<u8").tobytes(),
                                       b"".join(F.band_key_bytes(band_keys32(bands))))
