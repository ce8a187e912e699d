"""The generated corpus of ``python -m tools.bench spark-cluster``: ids, planted near
copies and their stored Jaccard, checked against the texts themselves."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the corpus is written as Arrow batches")

from tools.bench.spark_cluster import generate_block, jaccard, shingles  # noqa: E402

WORDS = [f"w{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + ["the", "of", "and", "software"]
CDF = np.cumsum(np.linspace(1, 2, len(WORDS))) / np.linspace(1, 2, len(WORDS)).sum()


def block(b: int, n: int = 2500):
    """Block b of an n-row corpus in blocks of 1,000 rows, 10% near copies."""
    return generate_block(b, n=n, rows=1000, seed=5, words=WORDS, cdf=CDF, lengths=(20, 40),
                          planted=0.1, edits=(0, 3)).to_pydict()


def test_ids_cover_the_block_once():
    """Each block holds its own id range exactly once; the last block is short."""
    ids = [i for b in range(3) for i in block(b)["id"]]
    assert sorted(ids) == list(range(2500))


def test_planted_jaccard_is_the_exact_jaccard_of_the_texts():
    """A near copy's stored Jaccard equals the exact Jaccard of its and its source's word
    3-shingle sets, computed from the texts; originals carry none."""
    rows = block(1)
    text = dict(zip(rows["id"], rows["text"], strict=True))
    copies = [(i, s, j) for i, s, j in zip(rows["id"], rows["src"], rows["planted_jaccard"],
                                            strict=True) if s is not None]
    assert len(copies) == 100
    assert sum(j is None for j in rows["planted_jaccard"]) == 900
    for i, s, j in copies:
        assert s in text and rows["src"][rows["id"].index(s)] is None  # an original
        assert j == pytest.approx(jaccard(shingles(text[i]), shingles(text[s])))
    assert any(j < 0.9 for _, _, j in copies) and any(j == 1.0 for _, _, j in copies)


def test_same_seed_same_block():
    """A block is a function of (seed, block): the executors and a rerun agree."""
    assert block(2) == block(2)
