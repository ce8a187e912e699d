"""A long text, hashed in blocks, gets the values of one pass, in a few times its size.

The block path (:mod:`simstore.text.longtext`) must give the shingle set, fingerprint
and signature the one C pass gives, whatever the texts and wherever the blocks end
(tiny blocks here, so every kind of boundary is crossed). What a record near the size
cap costs on each path is measured by ``tests/test_record_cost.py``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from simstore import SIGNATURE_CONFIG, fingerprint, fingerprints, signature, signatures
from simstore.text import longtext
from simstore.text.fingerprinting import DEFAULT_CONFIG, FingerprintConfig, _prepared
from simstore.text.jaccard import shingle_sets

# Greek final sigma, NFKC expansions (ligature, full width, roman numeral, squared era
# name, compatibility ideograph), combining marks, Han and Kana with and without spaces
_WORDS = ["ΑΣ", "σοφός", "ΣΑΣ.", "Straße", "ﬁne", "ｆｕｌｌ", "Ⅻ", "㍻", "﨑", "e\u0301",
          "中文", "日本語", "かが", "x.y", "a", "don't", "𠀋", "ǅ", "İ"]
_SEPS = [" ", "  ", "\n", ", ", ".", " - ", "\t", "", "。", "\u00a0", "\u3000"]


def _text(rng: random.Random, words: int) -> str:
    return "".join(rng.choice(_WORDS) + rng.choice(_SEPS) for _ in range(words))


@pytest.mark.parametrize("ngram", [1, 2, 3, 5])
def test_the_block_set_equals_the_one_pass_set(ngram):
    """shingle_set in blocks of 1-20 characters equals the one-pass set (or None: < ngram tokens)."""
    rng = random.Random(ngram)
    cfg = FingerprintConfig(ngram=ngram)
    blocks = 0
    for _ in range(150):
        text = _text(rng, rng.randrange(1, 60))
        want = shingle_sets([text, ""], cfg)[0]
        got = longtext.shingle_set(text, ngram, cfg.seed, _prepared, block=rng.randrange(1, 20))
        if got is None:
            assert len(want) <= 1
            continue
        blocks += 1
        assert np.array_equal(got, want)
    assert blocks > 100


def test_long_texts_get_the_one_pass_values(monkeypatch):
    """With a tiny length limit, every entry point gives what one pass gave, in batches too."""
    rng = random.Random(9)
    texts = [_text(rng, rng.randrange(0, 80)) for _ in range(40)] + ["", "!!", "a b"]
    want = (fingerprints(texts), signatures(texts, SIGNATURE_CONFIG), shingle_sets(texts),
            [fingerprint(t) for t in texts], [signature(t, SIGNATURE_CONFIG) for t in texts])
    monkeypatch.setattr(longtext, "LONG_TEXT_CHARS", 30)
    monkeypatch.setattr(longtext, "BLOCK_CHARS", 7)
    got = (fingerprints(texts), signatures(texts, SIGNATURE_CONFIG), shingle_sets(texts),
           [fingerprint(t) for t in texts], [signature(t, SIGNATURE_CONFIG) for t in texts])
    assert sum(len(t) > 30 for t in texts) > 20
    assert np.array_equal(got[0], want[0])
    assert list(got[1]) == list(want[1])
    assert np.array_equal(got[2].hashes, want[2].hashes)
    assert np.array_equal(got[2].offsets, want[2].offsets)
    assert got[3] == want[3] and got[4] == want[4]
    assert DEFAULT_CONFIG.weighting == "uniform"
