"""dedup_corpus(exact=True) and dedup-corpus --exact against the brute-force exact greedy rule."""

from __future__ import annotations

import json
import os

import pytest

from simstore import SimstoreValueError, corpus
from simstore.cli import main

from ..oracles import brute_jaccard, brute_representatives_exact, shingle_set
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


def test_exact_is_refused_with_k_or_a_store(tmp_path, docs):
    """exact needs a threshold and runs without a store; nothing is written."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    out = str(tmp_path / "kept.jsonl")
    with pytest.raises(SimstoreValueError, match="threshold"):
        corpus.dedup_corpus([str(src)], out, k=3, exact=True)
    with pytest.raises(SimstoreValueError, match="store"):
        corpus.dedup_corpus([str(src)], out, exact=True, store=str(tmp_path / "s"))
    assert not os.path.exists(out)


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
