"""find_similar / similar_clusters / representatives with texts: against brute-force exact Jaccard."""

from __future__ import annotations

import numpy as np
import pytest

import simstore
from simstore import FingerprintConfig, find_similar, similar_clusters
from simstore.corpus import representative_clusters
from simstore.search import exact

from ..oracles import brute_clusters_of_pairs, brute_exact_pairs, brute_representatives_exact
from ..strategies import planted_texts

FEW_BANDS = FingerprintConfig(sketch_bits=128, bands=4, rows=8)  # misses pairs: widening needed


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("config", [simstore.SIGNATURE_CONFIG, FEW_BANDS])
def test_find_similar_with_texts_equals_brute_force(seed, config):
    """Every pair with exact Jaccard >= t, with its exact value, nothing else (copies included)."""
    texts = planted_texts(seed, n_base=1 + seed % 4, copies=4)
    t = [0.8, 0.9, 0.95, 0.7][seed % 4]
    sigs = simstore.signatures(texts, config)
    got = find_similar(sigs, t, texts=texts)
    want = brute_exact_pairs(texts, t)
    assert list(zip(got.i.tolist(), got.j.tolist(), strict=True)) == [(i, j) for i, j, _ in want]
    assert got.jaccard.tolist() == [x for _, _, x in want]


def test_shingle_sets_may_stand_for_the_texts():
    """Passing shingle_sets(texts, config) gives the same pairs as the texts."""
    texts = planted_texts(3, 3, 3)
    sigs = simstore.signatures(texts)
    a = find_similar(sigs, 0.8, texts=texts)
    b = find_similar(sigs, 0.8, texts=simstore.shingle_sets(texts, sigs.config))
    assert a.i.tolist() == b.i.tolist() and a.jaccard.tolist() == b.jaccard.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_similar_clusters_with_texts_are_components_of_exact_pairs(seed):
    """similar_clusters(texts=) labels each doc with the smallest doc of its exact component."""
    texts = planted_texts(seed, 3, 4)
    sigs = simstore.signatures(texts)
    want = brute_clusters_of_pairs(len(texts), brute_exact_pairs(texts, 0.85))
    assert similar_clusters(sigs, 0.85, texts=texts).tolist() == want


@pytest.mark.parametrize("seed", range(8))
def test_representatives_with_texts_equal_the_exact_greedy_rule(seed):
    """Greedy representatives by exact Jaccard equal brute force, in a shuffled order."""
    texts = planted_texts(seed, 2 + seed % 3, 4)
    t = [0.8, 0.9, 0.95][seed % 3]
    order = np.random.default_rng(seed).permutation(len(texts))
    got = representative_clusters(simstore.signatures(texts), threshold=t, order=order,
                                  texts=texts)
    rep, jac = brute_representatives_exact(texts, t, order.tolist())
    assert got.rep.tolist() == rep
    assert got.jaccard.tolist() == jac


def test_widening_adds_bands_only_when_the_signature_misses_pairs_near_t():
    """Extra bands come in when the modelled miss at t exceeds the target, and then meet it."""
    cfg = simstore.SIGNATURE_CONFIG
    assert exact.miss_probability(0.95, cfg.bands, cfg.rows) <= exact.TARGET_MISS
    assert exact.miss_probability(0.8, cfg.bands, cfg.rows) > exact.TARGET_MISS
    r = exact.extra_rows(0.8)
    assert exact.miss_probability(0.8, exact.EXTRA_BANDS, r) <= exact.TARGET_MISS
    assert exact.miss_probability(0.8, exact.EXTRA_BANDS, r + 1) > exact.TARGET_MISS
    texts = planted_texts(1, 2, 2)
    sigs = simstore.signatures(texts)
    sets = simstore.shingle_sets(texts, cfg)
    assert exact.widened_keys(sigs, sets, 0.95).shape[1] == cfg.bands
    assert exact.widened_keys(sigs, sets, 0.8).shape[1] == cfg.bands + exact.EXTRA_BANDS


def test_texts_must_match_the_signatures():
    """One text per signature, or the call is refused."""
    sigs = simstore.signatures(["a b c d", "e f g h"])
    with pytest.raises(simstore.SimstoreValueError, match="one text per signature"):
        find_similar(sigs, 0.9, texts=["a b c d"])


@pytest.mark.parametrize("t", [0.95, 0.8])
def test_keys_of_sets_are_the_signatures_keys(t):
    """Band keys made from the shingle sets equal those of the signatures of the texts."""
    texts = planted_texts(5, 3, 3) + ["", "!!", "one"]
    sigs = simstore.signatures(texts)
    sets = simstore.shingle_sets(texts, sigs.config)
    got = exact.keys_of_sets(sets, sigs.config, t)
    assert np.array_equal(got, exact.widened_keys(sigs, sets, t))


def test_texts_need_a_threshold_in_representatives():
    """representative_clusters refuses texts with k (exact Jaccard needs a threshold)."""
    sigs = simstore.signatures(["a b c d", "a b c d e"])
    with pytest.raises(simstore.InvalidConfigError, match="'texts' needs 'threshold'"):
        representative_clusters(sigs, k=3, texts=["a b c d", "a b c d e"])
