"""simstore-cli as a user runs it: real processes, their exit codes and one-line errors."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/cli/..)


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m simstore ARGS`` in cwd; its exit code, stdout and stderr."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "simstore", "--quiet", *args],
                          capture_output=True, text=True, env=full, cwd=cwd, timeout=300)


def one_line_error(res: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The single error line of a failed run (no traceback), checked."""
    assert res.returncode == code, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def _doc(i: int) -> dict[str, str]:
    return {"id": f"d{i}", "text": f"document {i} " + " ".join(f"w{i}x{j}" for j in range(60))}


# --------------------------------------------------------------------------- record size


def test_a_record_over_the_default_limit_is_refused_naming_its_line(tmp_path):
    """A .gz whose second line holds 65 MiB of text (a few hundred KB on disk): index and
    dedup-corpus refuse it as file:2 (exit 1, one line, nothing written or stored)."""
    piece = b"lorem ipsum " * 87382  # 1 MiB
    with gzip.open(tmp_path / "in.jsonl.gz", "wb", compresslevel=1) as f:
        f.write(json.dumps(_doc(0)).encode() + b"\n" + b'{"id": "big", "text": "')
        for _ in range(65):
            f.write(piece)
        f.write(b'"}\n' + json.dumps(_doc(2)).encode() + b"\n")
    res = cli("dedup-corpus", "in.jsonl.gz", "-o", "kept.jsonl", cwd=tmp_path)
    line = one_line_error(res)
    assert "in.jsonl.gz:2: a record of more than 64 MiB (--max-record-bytes" in line
    res = cli("index", "s.simstore", "in.jsonl.gz", cwd=tmp_path)
    assert "in.jsonl.gz:2: a record of more than 64 MiB" in one_line_error(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl.gz"]


def test_max_record_bytes_flag_refuses_or_skips_large_records(tmp_path):
    """--max-record-bytes 2k: a 3 KB JSON line (line 2), a 3 KB text file and a 3 KB Parquet
    text (row 2) are bad records; --skip-bad reports each and keeps the rest; a record of
    exactly the limit passes."""
    small = [json.dumps(_doc(i)).encode() + b"\n" for i in range(3)]
    long = json.dumps({"id": "long", "text": "x" * 3000}).encode() + b"\n"
    (tmp_path / "in.jsonl").write_bytes(small[0] + long + small[1] + small[2])
    res = cli("dedup-corpus", "in.jsonl", "-o", "kept.jsonl", "--max-record-bytes", "2k",
              cwd=tmp_path)
    assert "in.jsonl:2: a record of more than 2 KiB" in one_line_error(res)
    assert not (tmp_path / "kept.jsonl").exists()
    res = cli("dedup-corpus", "in.jsonl", "-o", "kept.jsonl", "--max-record-bytes", "2k",
              "--skip-bad", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "skipped in.jsonl:2: a record of more than 2 KiB" in res.stderr
    assert (tmp_path / "kept.jsonl").read_bytes() == b"".join(small)
    exact = json.dumps({"id": "e", "text": "y" * (2048 - 23)}).encode()
    assert len(exact) == 2048
    (tmp_path / "edge.jsonl").write_bytes(exact + b"\n")
    res = cli("dedup-corpus", "edge.jsonl", "-o", "edge-kept.jsonl", "--max-record-bytes",
              "2k", cwd=tmp_path)
    assert res.returncode == 0, res.stderr

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("short text one")
    (docs / "b.txt").write_text("z " * 1500)
    res = cli("index", "s.simstore", "docs", "--max-record-bytes", "2k", cwd=tmp_path)
    assert "docs/b.txt: a text file of more than 2 KiB" in one_line_error(res)


def test_parquet_text_over_the_limit_is_a_bad_row(tmp_path):
    """A Parquet row whose text takes more than --max-record-bytes is 'file:row N'."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [_doc(0), {"id": "long", "text": "x" * 3000}, _doc(2)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    res = cli("dedup-corpus", "in.parquet", "-o", "kept.parquet", "--max-record-bytes",
              "2k", cwd=tmp_path)
    assert "in.parquet:row 2: a text of more than 2 KiB" in one_line_error(res)
    res = cli("dedup-corpus", "in.parquet", "-o", "kept.parquet", "--max-record-bytes",
              "2k", "--skip-bad", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert pq.read_table(tmp_path / "kept.parquet").column("id").to_pylist() == ["d0", "d2"]


def test_max_record_bytes_must_be_a_size(tmp_path):
    """--max-record-bytes 0 / x: a usage error naming the flag (exit 2)."""
    for bad in ("0", "x"):
        res = cli("index", "s.simstore", "in.jsonl", "--max-record-bytes", bad, cwd=tmp_path)
        assert res.returncode == 2 and "argument --max-record-bytes" in res.stderr, res.stderr


# --------------------------------------------------------------------------- temporaries


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".simstore-tmp-" in p.name)


@pytest.mark.parametrize(("source", "mode", "want"), [
    ("in.jsonl", ["--exact"], (2, 0)), ("in.jsonl", [], (1, 1)), ("-", [], (1, 2))],
    ids=["exact-spill", "scratch-store", "stdin-spool"])
def test_a_killed_run_leaves_its_temporaries_to_the_next_run(tmp_path, source, mode, want):
    """dedup-corpus killed with kill -9 while it reads leaves its temporaries where the
    next run finds them: --exact's shingle-set file beside -o (none in TMPDIR), the
    private scratch store and standard input's copy in TMPDIR (want: how many beside -o,
    how many in TMPDIR, the output's own included); the same command run again removes
    them all and writes the output."""
    words = [f"w{i}" for i in range(5000)]
    with open(tmp_path / "in.jsonl", "w") as f:
        for i in range(6000):
            text = " ".join(words[(i * 7 + j * 13) % 5000] for j in range(700))
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    argv = [sys.executable, "-m", "simstore", "--quiet", "dedup-corpus", source, "-o",
            "out/kept.jsonl", *mode]
    with open(tmp_path / "in.jsonl", "rb") as stdin:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdin=stdin,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while (len(_temporaries(out)), len(_temporaries(tmp))) != want and proc.poll() is None:
            time.sleep(0.002)
        proc.kill()
        proc.wait()
    assert (len(_temporaries(out)), len(_temporaries(tmp))) == want
    assert len(os.listdir(tmp)) == want[1]
    with open(tmp_path / "in.jsonl", "rb") as stdin:
        res = subprocess.run(argv, cwd=tmp_path, env=env, stdin=stdin, capture_output=True,
                             timeout=300)
    assert res.returncode == 0, res.stderr
    assert _temporaries(out) == [] and os.listdir(tmp) == []
    assert (out / "kept.jsonl").stat().st_size > 0


# --------------------------------------------------------------------------- store paths


def test_a_store_path_that_is_not_utf8_is_one_error_line(tmp_path):
    """init, index, dedup-corpus --store and compact's DEST given a path whose name is not
    valid UTF-8: exit 1, one line naming the argument and the path (bytes escaped), no
    traceback, nothing created."""
    (tmp_path / "in.jsonl").write_text(json.dumps(_doc(0)) + "\n")
    bad = os.fsencode(tmp_path) + b"/st\xff.simstore"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {"store path": ["init", bad], "store path ": ["index", bad, "in.jsonl"],
            "--store": ["dedup-corpus", "in.jsonl", "-o", "kept.jsonl", "--store", bad],
            "DEST": ["compact", "in.jsonl", bad]}
    for what, args in runs.items():
        res = subprocess.run([sys.executable, "-m", "simstore", *args], capture_output=True,
                             env=env, cwd=tmp_path, timeout=120)
        err = res.stderr.decode("utf-8", "replace")
        assert res.returncode == 1 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert f"{what.strip()} '{tmp_path}/st\\xff.simstore' is not valid UTF-8" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
