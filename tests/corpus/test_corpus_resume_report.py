"""dedup-corpus --store: a run resumed after a kill, or rerun over a grown input, writes
the removed report one uninterrupted run writes, byte for byte, and decides no document
twice (issue #48 items 4 and 5). Real simstore-cli processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simstore import corpus
from simstore.corpus import ingest
from tools.stress.corpus_kills import write_corpus

REPO = Path(__file__).resolve().parents[2]
DOCS = 2400
CHUNK = "25"


def _cli(cwd: Path, *args: str, progress: bool = False) -> list[str]:
    quiet = ["--progress-every", "0.02"] if progress else ["-q"]
    return [sys.executable, "-m", "simstore", *quiet, "dedup-corpus", *args, "--chunk", CHUNK]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _run(cwd: Path, *args: str) -> None:
    res = subprocess.run(
        _cli(cwd, *args), capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120
    )
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def one_shot(tmp_path_factory) -> tuple[Path, str, str]:
    """The corpus and what one uninterrupted run into a new store writes (report, kept)."""
    d = tmp_path_factory.mktemp("oneshot")
    write_corpus(str(d / "in.jsonl"), DOCS, 13)
    _run(d, "in.jsonl", "-o", "kept.jsonl", "--removed", "removed.jsonl", "--store", "s")
    return d / "in.jsonl", (d / "removed.jsonl").read_text(), (d / "kept.jsonl").read_text()


def test_the_report_names_where_each_kept_document_was_read(one_shot) -> None:
    """With --store, every near-duplicate line has kept_source: the kept one's file:line,
    earlier in the input than the removed one."""
    _, report, _ = one_shot
    near = [json.loads(line) for line in report.splitlines() if "near-duplicate" in line]
    assert near
    for rec in near:
        assert list(rec) == ["id", "source", "reason", "kept", "kept_source", "jaccard"]
        kept_line = int(rec["kept_source"].rsplit(":", 1)[1])
        assert kept_line < int(rec["source"].rsplit(":", 1)[1])


def test_a_killed_run_resumed_writes_the_one_shot_report(one_shot, tmp_path) -> None:
    """SIGKILL once a third of the input is committed; the same command again writes the
    report and the kept documents of one uninterrupted run, byte for byte."""
    src, report, kept = one_shot
    (tmp_path / "in.jsonl").write_bytes(src.read_bytes())
    args = ("in.jsonl", "-o", "kept.jsonl", "--removed", "removed.jsonl", "--store", "s")
    proc = subprocess.Popen(
        _cli(tmp_path, *args, progress=True),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:  # kill once a third of the input is committed
        done = re.search(r"([\d,]+) docs", line) if "deduplicating:" in line else None
        if done and int(done[1].replace(",", "")) >= DOCS // 3:
            proc.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, "no progress line"
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before the kill"
    assert not (tmp_path / "removed.jsonl").exists()
    _run(tmp_path, *args)
    assert (tmp_path / "removed.jsonl").read_text() == report
    assert (tmp_path / "kept.jsonl").read_text() == kept


def test_a_grown_input_decides_only_its_new_documents(one_shot, tmp_path, monkeypatch) -> None:
    """A run over the first half, then over the whole input: the second run fingerprints
    only documents the first did not decide (removed ones are remembered), and writes the
    one-shot report byte for byte (through the CLI)."""
    src, report, kept = one_shot
    lines = src.read_text().splitlines(True)
    half = len(lines) // 2
    (tmp_path / "in.jsonl").write_text("".join(lines[:half]))
    args = ("in.jsonl", "-o", "kept.jsonl", "--removed", "removed.jsonl", "--store", "s")
    _run(tmp_path, *args)
    (tmp_path / "in.jsonl").write_text("".join(lines))
    _run(tmp_path, *args)
    assert (tmp_path / "removed.jsonl").read_text() == report
    assert (tmp_path / "kept.jsonl").read_text() == kept

    signed: list[int] = []
    items = ingest._items
    monkeypatch.setattr(
        ingest, "_items", lambda store, texts: (signed.append(len(texts)), items(store, texts))[1]
    )
    monkeypatch.chdir(tmp_path)  # the report names the input as the CLI runs gave it
    s = corpus.dedup_corpus(["in.jsonl"], "again.jsonl", "again-removed.jsonl", store="s")
    assert sum(signed) == 0  # every document decided before: none fingerprinted again
    assert s.removed == len(report.splitlines())
    assert (tmp_path / "again-removed.jsonl").read_text() == report
