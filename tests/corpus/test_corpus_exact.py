"""dedup_corpus(exact=True) and dedup-corpus --exact against the brute-force exact greedy rule."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from simstore import (
    SIGNATURE_CONFIG,
    NotExactStoreError,
    SimStore,
    SimstoreValueError,
    corpus,
    signatures,
)
from simstore.cli import main

from ..oracles import brute_jaccard, brute_representatives_exact, shares_band, shingle_set
from ..strategies import planted_texts


@pytest.fixture
def docs():
    """Planted near-copies (Jaccard 1 down to ~0.5) with a score field, ids d0.."""
    texts = planted_texts(11, 8, 5)
    return [{"id": f"d{i}", "text": t, "score": (i * 7919) % 101} for i, t in enumerate(texts)]


def _write_jsonl(path, docs):
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _order(docs, keep):
    if keep == "first":
        return list(range(len(docs)))
    value = [len(d["text"]) if keep == "longest" else d["score"] for d in docs]
    return sorted(range(len(docs)), key=lambda i: (-value[i], i))


@pytest.mark.parametrize("keep", ["first", "longest", "score"])
@pytest.mark.parametrize("t", [0.8, 0.9])
def test_exact_dedup_keeps_the_exact_greedy_representatives(tmp_path, docs, keep, t):
    """Kept documents are the brute-force exact representatives; the report gives exact J."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    s = corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), str(tmp_path / "rm.jsonl"),
                            threshold=t, keep=keep, exact=True, chunk_docs=7)
    rep, _ = brute_representatives_exact([d["text"] for d in docs], t, _order(docs, keep))
    want = [d for i, d in enumerate(docs) if rep[i] == i]
    assert _read_jsonl(tmp_path / "kept.jsonl") == want
    removed = _read_jsonl(tmp_path / "rm.jsonl")
    assert s.kept == len(want) and s.removed == len(removed) == len(docs) - len(want)
    for r in removed:
        i, j = int(r["id"][1:]), int(r["kept"][1:])
        assert j == rep[i]
        exact = brute_jaccard(shingle_set(docs[i]["text"]), shingle_set(docs[j]["text"]))
        assert r["jaccard"] == round(exact, 4) and exact >= t


def test_exact_dedup_parquet_in_parquet_out(tmp_path, docs):
    """Parquet in, Parquet out, every column, the exact representatives kept."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src, row_group_size=16)
    s = corpus.dedup_corpus([str(src)], str(tmp_path / "kept.parquet"), threshold=0.85,
                            exact=True, chunk_docs=10)
    kept = pq.read_table(tmp_path / "kept.parquet")
    assert kept.column_names == ["id", "text", "score"] and kept.num_rows == s.kept
    rep, _ = brute_representatives_exact([d["text"] for d in docs], 0.85, range(len(docs)))
    assert kept.column("id").to_pylist() == [d["id"] for i, d in enumerate(docs) if rep[i] == i]


def test_exact_is_refused_with_k_a_plain_store_or_another_keep(tmp_path, docs):
    """exact needs a threshold; with a store, one that keeps shingle sets and keep="first";
    nothing is written."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    out = str(tmp_path / "kept.jsonl")
    with pytest.raises(SimstoreValueError, match="threshold"):
        corpus.dedup_corpus([str(src)], out, k=3, exact=True)
    SimStore(tmp_path / "plain", config=SIGNATURE_CONFIG).close()
    with pytest.raises(NotExactStoreError, match="shingle sets"):
        corpus.dedup_corpus([str(src)], out, exact=True, store=str(tmp_path / "plain"))
    with pytest.raises(SimstoreValueError, match="keep='first'"):
        corpus.dedup_corpus([str(src)], out, exact=True, store=str(tmp_path / "s"),
                            keep="longest")
    assert not os.path.exists(out) and not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize("t", [0.8, 0.9])
def test_exact_store_dedup_keeps_the_exact_greedy_representatives(tmp_path, docs, t):
    """--exact --store on a new path: an exact store, the brute-force exact representatives
    (pairs sharing a band key: the store's candidates) kept and stored, the report exact;
    a second run over more documents keeps the stored ones and removes their near copies."""
    first, more = docs[:40], docs[40:]
    texts = [d["text"] for d in docs]
    bands = signatures(texts, SIGNATURE_CONFIG).bands
    meet = lambda m, r: shares_band(bands[m], bands[r])  # noqa: E731
    src, src2 = tmp_path / "in.jsonl", tmp_path / "in2.jsonl"
    _write_jsonl(src, first)
    _write_jsonl(src2, docs)
    store = str(tmp_path / "s")
    corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), str(tmp_path / "rm.jsonl"),
                        threshold=t, exact=True, store=store, chunk_docs=7)
    rep, _ = brute_representatives_exact(texts[:40], t, range(40), candidate=meet)
    assert _read_jsonl(tmp_path / "kept.jsonl") == [d for i, d in enumerate(first) if rep[i] == i]
    for r in _read_jsonl(tmp_path / "rm.jsonl"):
        i, j = int(r["id"][1:]), int(r["kept"][1:])
        assert j == rep[i]
        exact = brute_jaccard(shingle_set(texts[i]), shingle_set(texts[j]))
        assert r["jaccard"] == round(exact, 4) and exact >= t
    with SimStore(store) as s:
        assert s.exact and sorted(s) == sorted(d["id"] for i, d in enumerate(first) if rep[i] == i)
        assert s.verify() == []
    s2 = corpus.dedup_corpus([str(src2)], str(tmp_path / "kept2.jsonl"), threshold=t,
                             exact=True, store=store, chunk_docs=9)
    rep2, _ = brute_representatives_exact(texts, t, range(len(docs)), candidate=meet)
    want = [d for i, d in enumerate(docs) if (i < 40 and rep[i] == i) or (i >= 40 and rep2[i] == i)]
    assert rep2[:40] == rep  # the first run's decisions are the greedy's prefix
    assert _read_jsonl(tmp_path / "kept2.jsonl") == want
    assert s2.already_stored == sum(rep[i] == i for i in range(40))
    assert more  # the second run had new documents to decide


def test_cli_exact_says_exact_and_leaves_no_scratch(tmp_path, docs, capsys, monkeypatch):
    """dedup-corpus --exact prints 'exact Jaccard' and removes its temporary shingle file."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    rc = main(["dedup-corpus", str(src), "-o", str(tmp_path / "kept.jsonl"), "--exact",
               "--threshold", "0.9", "--quiet"])
    assert rc == 0
    assert "exact Jaccard >= 0.9" in capsys.readouterr().out
    assert os.listdir(tmp_path / "tmp") == []
    rc = main(["dedup-corpus", str(src), "-o", str(tmp_path / "kept2.jsonl"), "--exact",
               "--threshold", "0.9", "--store", str(tmp_path / "s"), "--quiet"])
    assert rc == 0
    assert "exact Jaccard >= 0.9" in capsys.readouterr().out
    assert _read_jsonl(tmp_path / "kept2.jsonl") == _read_jsonl(tmp_path / "kept.jsonl")


def test_exact_pairs_are_measured_a_bounded_step_at_a_time(tmp_path, docs, monkeypatch):
    """With the step budget cut to 4 KiB, every exact-Jaccard call sees at most that many
    bytes of sets (or one pair's, when a pair alone is larger), never the whole spilled
    corpus; the kept documents and the report are those of the default budget."""
    from simstore.corpus import exact as corpus_exact
    from simstore.native import jaccard as native_jaccard

    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    corpus.dedup_corpus([str(src)], str(tmp_path / "k1.jsonl"), str(tmp_path / "r1.jsonl"),
                        threshold=0.8, exact=True)
    seen: list[tuple[int, int]] = []
    measure = native_jaccard.jaccard_pairs

    def spy(ha, offa, hb, offb, i, j, threshold):
        seen.append((ha.nbytes, int(max(np.diff(offa)) * 8 * 2)))
        return measure(ha, offa, hb, offb, i, j, threshold)

    monkeypatch.setattr(native_jaccard, "jaccard_pairs", spy)
    monkeypatch.setattr(corpus_exact, "MEASURE_BYTES", 4 << 10, raising=False)
    corpus.dedup_corpus([str(src)], str(tmp_path / "k2.jsonl"), str(tmp_path / "r2.jsonl"),
                        threshold=0.8, exact=True)
    total = sum(len(shingle_set(d["text"])) for d in docs) * 8
    assert len(seen) > 3 and total > 8 * (4 << 10)
    assert all(held <= max(4 << 10, pair) for held, pair in seen), seen
    assert (tmp_path / "k2.jsonl").read_text() == (tmp_path / "k1.jsonl").read_text()
    assert (tmp_path / "r2.jsonl").read_text() == (tmp_path / "r1.jsonl").read_text()
