"""Shingle-hash sets and their exact Jaccard in C, against Python sets of shingle strings."""

from __future__ import annotations

import itertools

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import FingerprintConfig, ShingleSets, exact_jaccard, shingle_sets
from simstore.exceptions import SimstoreTypeError, SimstoreValueError
from simstore.text.fingerprinting import _no_feature_fingerprint

from ..oracles import brute_jaccard, shingle_set
from ..strategies import any_texts


def _hashes(text: str, cfg: FingerprintConfig) -> list[int]:
    """The sorted distinct shingle hashes of one text, by mmh3 over the Python features."""
    found = simstore.features(text, cfg)
    if not found:
        return [_no_feature_fingerprint(text, cfg.seed)]
    return sorted({mmh3.hash64(s.encode("utf-8"), cfg.seed, signed=False)[0] for s in found})


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(any_texts, max_size=6), ngram=st.sampled_from([1, 2, 3, 5]),
       seed=st.sampled_from([0, 7, (1 << 32) - 1]))
def test_shingle_sets_are_the_sorted_distinct_feature_hashes(texts, ngram, seed):
    """Each set is exactly the sorted distinct murmur3 hashes of the text's shingles."""
    cfg = FingerprintConfig(ngram=ngram, seed=seed)
    sets = shingle_sets(texts, cfg)
    assert len(sets) == len(texts)
    for d, text in enumerate(texts):
        assert sets[d].tolist() == _hashes(text, cfg)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(any_texts, min_size=1, max_size=7),
       threshold=st.sampled_from([0.0, 0.3, 0.8, 1.0]))
def test_exact_jaccard_equals_python_sets(texts, threshold):
    """Every pair's value equals |A & B| / |A | B| of the shingle strings; below t it may read -1."""
    sets = shingle_sets(texts)
    pairs = list(itertools.combinations_with_replacement(range(len(texts)), 2))
    i, j = (np.array(x, dtype=np.int64) for x in zip(*pairs, strict=True))
    got = exact_jaccard(sets, i, j, threshold=threshold)
    for p, (a, b) in enumerate(pairs):
        want = brute_jaccard(shingle_set(texts[a]), shingle_set(texts[b]))
        if want >= threshold:
            assert got[p] == want
        else:
            assert got[p] == -1.0 or got[p] == want


def test_exact_jaccard_across_two_collections():
    """With b given, pair p compares a[i[p]] with b[j[p]]."""
    a = shingle_sets(["one two three four", "five six seven eight"])
    b = shingle_sets(["five six seven eight nine", "one two three four five"])
    got = exact_jaccard(a, [0, 1, 0], [1, 0, 0], b)
    assert got.tolist() == [2 / 3, 2 / 3, 0.0]


def test_take_and_concat_keep_the_sets():
    """take() and concat() give the same sets, compacted."""
    sets = shingle_sets(["a b c d", "", "e f g", "a b c d e f g h"])
    picked = sets.take([3, 1, 3])
    assert [picked[d].tolist() for d in range(3)] == [sets[3].tolist(), sets[1].tolist(),
                                                      sets[3].tolist()]
    both = ShingleSets.concat([sets, picked])
    assert both.sizes.tolist() == sets.sizes.tolist() + picked.sizes.tolist()
    assert len(sets.take([])) == 0


def test_bad_arguments_are_refused():
    """Indices out of range, unequal lengths and a bad threshold raise, naming the argument."""
    sets = shingle_sets(["a b c", "d e f"])
    with pytest.raises(SimstoreValueError, match="'j'"):
        exact_jaccard(sets, [0], [2])
    with pytest.raises(SimstoreValueError, match="length"):
        exact_jaccard(sets, [0, 1], [1])
    with pytest.raises(simstore.InvalidConfigError):
        exact_jaccard(sets, [0], [1], threshold=1.5)
    with pytest.raises(SimstoreTypeError):
        exact_jaccard([1, 2], [0], [1])
    with pytest.raises(SimstoreValueError):
        ShingleSets(np.zeros(2, dtype=np.uint64), np.array([0, 1], dtype=np.int64))


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(any_texts, max_size=6),
       weighting=st.sampled_from(["uniform", "tf"]), seed=st.sampled_from([0, 7]))
def test_signatures_and_sets_equal_the_two_calls(texts, weighting, seed):
    """One pass gives the same signatures and sets as signatures() and shingle_sets()."""
    cfg = FingerprintConfig(weighting=weighting, seed=seed, sketch_bits=128, bands=4, rows=3)
    sigs, sets = simstore.signatures_and_sets(texts, cfg)
    want = simstore.signatures(texts, cfg)
    assert np.array_equal(sigs.fingerprints, want.fingerprints)
    assert np.array_equal(sigs.sketches, want.sketches)
    assert np.array_equal(sigs.bands, want.bands)
    assert np.array_equal(sets.hashes, shingle_sets(texts, cfg).hashes)


@pytest.mark.parametrize("words", [49, 300, 5000])
def test_long_texts_give_sorted_distinct_hashes(words):
    """Sets larger than the insertion-sort cut-off come out sorted and complete too."""
    rng = np.random.default_rng(words)
    text = " ".join(f"w{x}" for x in rng.integers(0, words // 2 + 3, size=words))
    cfg = FingerprintConfig()
    assert shingle_sets([text], cfg)[0].tolist() == _hashes(text, cfg)
