"""One text at a time: fingerprint(), signature() and a one-text shingle_sets() take one C
call each and give exactly what the batch calls give; the C sketch check equals the rule."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import SIGNATURE_CONFIG, FingerprintConfig, shingle_sets
from simstore.native import core as _core, single as _single
from simstore.store.format import RecordCodec
from simstore.store.reads import jaccard_list, max_distance
from simstore.text.fingerprinting import _prepared

from ..oracles import sketch_estimate
from ..strategies import any_texts, fingerprints, signature_configs

configs = st.builds(
    FingerprintConfig,
    ngram=st.sampled_from([1, 2, 3, 5]),
    weighting=st.sampled_from(["uniform", "tf", "logtf"]),
    seed=st.sampled_from([0, 1, (1 << 32) - 1]),
)
EDGE_TEXTS = ["", "   ", "!!!", "😀", "a", "½ ① ﬀ 東京 Straße ΑΒΓ", "x y " * 3000, "word " * 5]


@settings(max_examples=60, deadline=None)
@given(text=any_texts, config=configs)
def test_fingerprint_of_one_text_equals_the_batch(text, config):
    """fingerprint(text) is fingerprints([text, ...])[0], for any text and config."""
    assert simstore.fingerprint(text, config) == int(simstore.fingerprints([text, "x"], config)[0])


@settings(max_examples=40, deadline=None)
@given(text=any_texts, config=signature_configs())
def test_signature_of_one_text_equals_the_batch(text, config):
    """signature(text) is signatures([text, ...])[0]: fingerprint, sketch and band keys."""
    one = simstore.signature(text, config)
    assert one == simstore.signatures([text, "x"], config)[0]
    assert hash(one) == hash(simstore.signatures([text], config)[0])


@settings(max_examples=40, deadline=None)
@given(text=any_texts, config=configs)
def test_shingle_set_of_one_text_equals_the_batch(text, config):
    """shingle_sets([text]) holds the set shingle_sets([text, ...]) gives the text."""
    one = shingle_sets([text], config)
    assert len(one) == 1
    assert np.array_equal(one[0], shingle_sets([text, "x"], config)[0])


@pytest.mark.parametrize("text", EDGE_TEXTS)
def test_edge_texts_take_the_single_path_to_the_batch_answer(text):
    """Empty, featureless, non-ASCII and long texts: single and batch agree."""
    assert simstore.fingerprint(text) == int(simstore.fingerprints([text])[0])
    assert simstore.signature(text) == simstore.signatures([text])[0]
    assert np.array_equal(shingle_sets([text])[0], shingle_sets([text, "y"])[0])


def test_one_text_signature_is_read_only_and_pickles():
    """A one-text Signature's arrays are read-only, of the config's shape, and it pickles."""
    sig = simstore.signature("the quick brown fox jumps over the lazy dog")
    assert sig.sketch.shape == (SIGNATURE_CONFIG.sketch_bits // 64,)
    assert sig.bands.shape == (SIGNATURE_CONFIG.bands,)
    with pytest.raises(ValueError):
        sig.sketch[0] = 0
    with pytest.raises(ValueError):
        sig.bands[0] = 0
    assert pickle.loads(pickle.dumps(sig)) == sig


@pytest.mark.parametrize("text", ["plain ascii words here", "crème brûlée 東京 ﬁle", ""])
def test_byte_tokenizer_one_text_call_equals_its_batch(text):
    """The one-text C calls on prepared text (no C Unicode tables) equal the batch calls."""
    data = _prepared(text)
    offsets = np.array([0, len(data)], dtype=np.int64)
    fps, nfeat = _core.fingerprint_texts(data, offsets, 3, 0, 0, False)
    assert _single.fingerprint_one(data, 3, 0, 0, False) == (int(fps[0]), int(nfeat[0]))
    cfg = SIGNATURE_CONFIG
    fp, sk, bk, nf = _core.signature_texts(
        data, offsets, 3, 0, 0, cfg.sketch_bits, cfg.bands, cfg.rows, False
    )
    packed = _single.signature_one(data, 3, 0, 0, False, cfg.sketch_bits, cfg.bands, cfg.rows)
    assert packed.tolist() == [int(fp[0]), *sk[0].tolist(), *bk[0].tolist(), int(nf[0])]


@settings(max_examples=40, deadline=None)
@given(
    q=st.lists(fingerprints, min_size=2, max_size=2),
    rows=st.lists(st.lists(fingerprints, min_size=2, max_size=2), max_size=12),
    pads=st.data(),
    threshold=st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0]),
)
def test_sketch_hits_keep_exactly_the_records_at_or_above_the_threshold(q, rows, pads, threshold):
    """ss_sketch_hits over records of any lengths: the rows whose estimate >= threshold."""
    start = 9
    recs = []
    for row in rows:
        tail = pads.draw(st.binary(max_size=20))
        recs.append(b"\x04" * start + np.array(row, dtype="<u8").tobytes() + tail)
    sketch = np.array(q, dtype=np.uint64)
    layout = _single.docs_layout(RecordCodec(sketch_words=2, nbands=1))  # sketch at byte 9
    found = _single.sketch_hits(sketch, recs, layout, max_distance(128, threshold))
    assert not isinstance(found, int)
    want = [i for i, row in enumerate(rows) if sketch_estimate(q, row) >= threshold]
    assert found[0] == want
    table = jaccard_list(128)
    assert np.allclose([table[d] for d in found[1]], [sketch_estimate(q, rows[i]) for i in want])


def test_sketch_hits_name_the_first_record_too_short():
    """A record shorter than its sketch is reported by index, not read past its end."""
    sketch = np.zeros(2, dtype=np.uint64)
    recs = [b"\x00" * 30, b"\x00" * 20, b"\x00" * 5]
    layout = _single.docs_layout(RecordCodec(sketch_words=2, nbands=1))  # sketch at byte 9
    assert _single.sketch_hits(sketch, recs, layout, 10) == 1


@pytest.mark.parametrize("bits", [64, 128, 640])
@pytest.mark.parametrize("threshold", [0.01, 0.5, 0.9, 0.97, 1.0])
def test_max_distance_is_the_threshold_as_a_distance(bits, threshold):
    """Distances up to max_distance have estimate >= threshold, the next one not."""
    table = jaccard_list(bits)
    d = max_distance(bits, threshold)
    assert all(j >= threshold for j in table[: d + 1])
    assert all(j < threshold for j in table[d + 1 :])
