"""Corpus input and output at speed: Parquet progress in text bytes, fast .gz output."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq

from simstore import corpus
from simstore.corpus.readers import iter_chunks, raise_bad
from simstore.corpus.sources import ReadOptions, Skipped, find_sources


def _texts(n: int) -> list[str]:
    return [f"document {i} " + "the same long shared sentence of words " * 40 for i in range(n)]


def test_parquet_progress_counts_uncompressed_text(tmp_path):
    """A Parquet source's size is its columns' uncompressed bytes, and its chunks add up to it."""
    texts = _texts(300)
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(300)], "text": texts}), path,
                   row_group_size=120)
    opts = ReadOptions(chunk_docs=50)
    (src,) = find_sources([str(path)], opts, Skipped())
    text_bytes = sum(len(t.encode()) for t in texts)
    assert src.size >= text_bytes > path.stat().st_size  # text, not the compressed file
    chunks = list(iter_chunks([src], opts, raise_bad))
    assert sum(c.nbytes for c in chunks) == src.size
    assert [t for c in chunks for t in c.texts] == texts


def test_gz_output_is_written_at_the_fast_level(tmp_path):
    """dedup-corpus writes .jsonl.gz at zlib level 1 (gzip's header says 'fastest')."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                           for i, t in enumerate(_texts(20))))
    out, plain = tmp_path / "kept.jsonl.gz", tmp_path / "kept.jsonl"
    corpus.dedup_corpus([str(src)], str(out), threshold=0.9)
    corpus.dedup_corpus([str(src)], str(plain), threshold=0.9)
    assert out.read_bytes()[8] == 4  # XFL 4: the compressor used its fastest level
    assert gzip.decompress(out.read_bytes()) == plain.read_bytes()
