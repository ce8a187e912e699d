"""Corpus input and output at speed: Parquet progress in text bytes, fast .gz output,
Parquet output in row groups of the input's rows under a byte cap."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simstore import corpus
from simstore.corpus.readers import iter_chunks, raise_bad
from simstore.corpus.sources import ReadOptions, Skipped, find_sources
from simstore.exceptions import SimstoreError

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/corpus/..)


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
    """dedup-corpus writes .jsonl.gz at level 1: larger than zlib's level 6 makes of the
    same lines, no file name and time 0 in its header; the lines are the plain output's."""
    src = tmp_path / "in.jsonl"
    rng = random.Random(5)
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": " ".join(
        f"w{rng.randrange(3000)}" for _ in range(400))}) + "\n" for i in range(200)))
    out, plain = tmp_path / "kept.jsonl.gz", tmp_path / "kept.jsonl"
    corpus.dedup_corpus([str(src)], str(out), threshold=0.9)
    corpus.dedup_corpus([str(src)], str(plain), threshold=0.9)
    data = out.read_bytes()
    assert gzip.decompress(data) == plain.read_bytes()
    assert len(data) > 1.05 * len(gzip.compress(plain.read_bytes(), 6))
    assert data[3] == 0 and data[4:8] == bytes(4)  # FLG: no name; MTIME 0


# --------------------------------------------------------------------------- Parquet row groups


def _docs(n: int, width: int = 1000, seed: int = 7) -> list[dict]:
    """n documents of exactly `width` ASCII characters; every 5th is a copy of the one
    before (a near-duplicate at any threshold), so the kept rows are not contiguous."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        if i % 5 == 4:
            text = docs[-1]["text"]
        else:
            text = " ".join(f"w{rng.randrange(100_000)}" for _ in range(width // 4))[:width]
        docs.append({"id": f"d{i:04d}", "text": text, "score": i})
    return docs


def _groups(path) -> list[int]:
    meta = pq.read_metadata(path)
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def _expected(kept: int, size: int) -> list[int]:
    return [size] * (kept // size) + ([kept % size] if kept % size else [])


def test_parquet_output_row_groups_hold_the_input_s_rows(tmp_path):
    """Row groups of the input's 70 rows (chunks of 50 do not align with them); the rows
    are those the JSON-lines output of the same Parquet input and of its JSONL form hold."""
    docs = _docs(400)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src, row_group_size=70)
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps(d) + "\n" for d in docs))
    s = corpus.dedup_corpus([str(src)], str(tmp_path / "kept.parquet"), chunk_docs=50)
    corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), chunk_docs=50)
    corpus.dedup_corpus([str(lines)], str(tmp_path / "kept-l.jsonl"), chunk_docs=50)
    want = [d for i, d in enumerate(docs) if i % 5 != 4]
    assert s.kept == len(want) == 320
    assert _groups(tmp_path / "kept.parquet") == _expected(320, 70)
    assert pq.read_table(tmp_path / "kept.parquet").to_pylist() == want
    assert [json.loads(x) for x in (tmp_path / "kept.jsonl").read_text().splitlines()] == want
    assert (tmp_path / "kept-l.jsonl").read_text() == "".join(json.dumps(d) + "\n" for d in want)


def test_parquet_output_row_groups_stay_under_the_byte_cap(tmp_path):
    """An input written as one row group: groups of 7 rows under a cap of 7.5 rows' Arrow
    bytes (each row: its id and text, a 4-byte offset for each, 8 for the int64 score);
    a bad row skipped (--skip-bad) is not written and does not shift the others."""
    docs = _docs(200)
    row = len(docs[0]["id"]) + len(docs[0]["text"]) + 4 + 4 + 8
    rows = [*docs[:33], {"id": "bad", "text": None, "score": -1}, *docs[33:]]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    assert _groups(src) == [201]
    out = tmp_path / "kept.parquet"
    s = corpus.dedup_corpus([str(src)], str(out), chunk_docs=30, skip_bad=True,
                            row_group_bytes=row * 15 // 2)
    assert s.bad == 1 and s.kept == 160
    assert _groups(out) == _expected(160, 7)
    assert pq.read_table(out).to_pylist() == [d for i, d in enumerate(docs) if i % 5 != 4]
    one = tmp_path / "one.parquet"
    corpus.dedup_corpus([str(src)], str(one), skip_bad=True, row_group_bytes=1)
    assert _groups(one) == [1] * 160  # a row over the cap is a group alone


def test_parquet_output_default_row_groups_are_small_and_text_has_no_statistics(tmp_path):
    """An input of one 12 MB row group comes out in groups of at most 4 MiB of Arrow data
    by default (a group is built in memory), and the footer keeps statistics of every
    column but the text (a document as a group's min and max: ~8 KB a group, held in
    memory until the file closes)."""
    docs = _docs(1500, width=10_000)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src)
    assert _groups(src) == [1500]
    out = tmp_path / "kept.parquet"
    s = corpus.dedup_corpus([str(src)], str(out))
    row = 5 + 10_000 + 4 + 4 + 8
    assert s.kept == 1200
    assert _groups(out) == _expected(1200, (4 << 20) // row)
    meta = pq.read_metadata(out)
    names = [meta.row_group(0).column(j).path_in_schema for j in range(meta.num_columns)]
    stats = {n: meta.row_group(0).column(j).is_stats_set for j, n in enumerate(names)}
    assert stats == {"id": True, "text": False, "score": True}


@pytest.mark.parametrize("bad", [0, -1, 2.5, "32M"])
def test_row_group_bytes_must_be_a_positive_int(tmp_path, bad):
    """row_group_bytes=0 / -1 / 2.5 / '32M': refused, naming the argument, nothing written."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_docs(5)), src)
    with pytest.raises(SimstoreError, match="'row_group_bytes' must be an int >= 1"):
        corpus.dedup_corpus([str(src)], str(tmp_path / "k.parquet"), row_group_bytes=bad)
    assert list(tmp_path.iterdir()) == [src]


def _cli(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "simstore", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def test_cli_row_group_bytes_flag(tmp_path):
    """--row-group-bytes 0 / 1x / -5: usage error (exit 2) naming the flag; 12k: groups
    of the rows that fit in 12 KiB (11 rows of 1,021 bytes)."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_docs(100)), src)
    for bad in ("0", "1x", "-5", "M"):
        res = _cli("dedup-corpus", "in.parquet", "-o", "k.parquet", "--row-group-bytes", bad,
                   cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "argument --row-group-bytes: must be a positive number of bytes" in res.stderr
        assert f"(got {bad!r})" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    res = _cli("dedup-corpus", "in.parquet", "-o", "k.parquet", "--row-group-bytes", "12k",
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _groups(tmp_path / "k.parquet") == _expected(80, 12 * 1024 // 1021)


def test_parquet_run_loads_no_compute_module_and_takes_jemalloc(tmp_path):
    """A Parquet dedup in a fresh process: pyarrow.compute (~20 MB) never loads (rows are
    sliced, not taken, even around a skipped bad row); Arrow's pool is jemalloc when
    pyarrow has it, and ARROW_DEFAULT_MEMORY_POOL is left as it was (unset)."""
    docs = _docs(60)
    rows = [*docs[:7], {"id": None, "text": "x", "score": 0}, *docs[7:]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet", row_group_size=20)
    code = (
        "import os, sys\n"
        "from simstore import corpus\n"
        "corpus.dedup_corpus(['in.parquet'], 'k.parquet', chunk_docs=16, skip_bad=True)\n"
        "corpus.dedup_corpus(['in.parquet'], 'k.jsonl', chunk_docs=16, skip_bad=True)\n"
        "import pyarrow as pa\n"
        "try:\n"
        "    pa.jemalloc_memory_pool()\n"
        "    has = True\n"
        "except NotImplementedError:\n"
        "    has = False\n"
        "print('pyarrow.compute' in sys.modules, 'pandas' in sys.modules,\n"
        "      pa.default_memory_pool().backend_name == 'jemalloc' or not has,\n"
        "      os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "True", "None"]
    assert pq.read_table(tmp_path / "k.parquet").num_rows == 48


# --------------------------------------------------------------------------- record size


@pytest.mark.parametrize("piece", [4, 16, 1 << 20])
def test_bounded_lines_refuse_long_lines_without_holding_them(monkeypatch, piece):
    """Lines of up to the limit (newline not counted) come back as read, whatever the
    read piece; a longer one is None and the next lines follow in order; a last line
    without a newline too."""
    import io

    from simstore.corpus import readers

    monkeypatch.setattr(readers, "_PIECE", piece)
    data = [b"a" * 10 + b"\n", b"b" * 11 + b"\n", b"\n", b"c" * 40 + b"\n", b"d" * 10]
    got = list(readers.bounded_lines(io.BytesIO(b"".join(data)), 10))
    assert got == [data[0], None, b"\n", None, data[4]]
