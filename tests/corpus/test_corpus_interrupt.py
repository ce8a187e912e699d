"""Ctrl-C on a real ``python -m simstore dedup-corpus`` process, mid-run.

SIGINT (or SIGKILL) arrives once the progress log shows committed chunks.
Then: exit 130 and a message saying how far it got (whole chunks committed to
the store, nothing written under -o), and the same command run again writing
exactly what one uninterrupted run keeps, with no temporary file left.
"""

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

from simstore import SimStore, corpus
from tools.stress.corpus_kills import write_corpus

CHUNK = 50
DOCS = 12_000
_REPO = Path(__file__).resolve().parents[2]  # the checkout (tests/corpus/..)


def _corpus(path: Path) -> list[str]:
    """The stress tool's corpus (20% near copies of a recent text, 1% repeated ids); its ids."""
    write_corpus(str(path), DOCS, 13)
    return _ids(path)


def _ids(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["id"] for line in f]


def _default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal would deliver it. A test run started
    in the background (nohup, CI runners) inherits SIGINT ignored, and so would the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process while the test runs (it may have
    started with SIGINT ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "simstore", "--progress-every", "0.02", "dedup-corpus", *args]


def _whole(src: Path, tmp_path: Path, keep: str = "first") -> list[str]:
    """The kept ids of one uninterrupted run into a fresh store (the oracle of every rerun)."""
    whole = tmp_path / f"whole-{keep}.jsonl"
    corpus.dedup_corpus(src, whole, threshold=0.9, keep=keep, store=tmp_path / f"ref-{keep}")
    return _ids(whole)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".simstore-tmp-" in p.name)


def test_ctrl_c_keeps_whole_chunks_and_the_same_command_finishes(tmp_path):
    """Ctrl-C: whole chunks committed, nothing under -o; the same command run again writes
    exactly what one uninterrupted run keeps, and says how many were stored before."""
    src = tmp_path / "in.jsonl"
    ids = _corpus(src)
    store = tmp_path / "store"
    kept, removed = tmp_path / "kept.jsonl", tmp_path / "removed.jsonl"
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    cmd = _cli(str(src), "-o", str(kept), "--removed", str(removed), "--store", str(store),
               "--chunk", str(CHUNK))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path, preexec_fn=_default_sigint)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:  # the progress log: interrupt once chunks are committed
        if "deduplicating:" in line and re.search(r"[1-9][\d,]* docs", line):
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline, "no progress line"
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    m = re.search(r"interrupted; ([\d,]+) documents committed to (\S+) \(through (\S+):(\d+)\); "
                  r"nothing was written to (\S+)\. Run the same command again", rest)
    assert m, rest
    done = int(m[1].replace(",", ""))
    assert m[2] == str(store) and m[5] == str(kept)
    assert 0 < done < DOCS, "the run was not interrupted mid-way: make the corpus larger"
    assert done % CHUNK == 0 and int(m[4]) == done  # whole chunks; the last one's line
    assert not kept.exists() and not removed.exists() and _leftovers(tmp_path) == []
    with SimStore(store, readonly=True) as s:
        stored = set(s.doc_ids())
    assert stored and stored <= set(ids[:done])

    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    want = _whole(src, tmp_path)
    assert _ids(kept) == want  # every kept document once, in input order
    assert f"({len(stored):,} already in the store from an earlier run, " \
           f"{len(want) - len(stored):,} new)" in res.stdout
    assert {json.loads(line)["reason"] for line in removed.read_text().splitlines()} == \
        {"near-duplicate", "repeated id"}
    assert len(removed.read_text().splitlines()) == DOCS - len(want)
    with SimStore(store, readonly=True) as s:
        assert set(s.doc_ids()) == set(want)


@pytest.mark.parametrize("store", [False, True])
def test_ctrl_c_while_a_chunk_commits_is_held_until_it_is_counted(tmp_path, store,
                                                                  sigint_raises):
    """SIGINT raised inside a chunk's transaction (after its outputs are written) takes
    effect after the commit: the summary, the outputs and the store agree."""
    from simstore.corpus import ingest as _ingest

    src = tmp_path / "in.jsonl"
    _corpus(src)
    sent = []
    orig = _ingest.Stream._decide

    def decide(self, dec, part, items):
        orig(self, dec, part, items)
        if not sent and len(part):
            sent.append(1)
            signal.raise_signal(signal.SIGINT)  # mid-transaction, before the commit

    _ingest.Stream._decide = decide
    try:
        kw = {"store": str(tmp_path / "s")} if store else {}
        with pytest.raises(corpus.Interrupted) as exc:
            corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"),
                                str(tmp_path / "removed.jsonl"), chunk_docs=500, **kw)
    finally:
        _ingest.Stream._decide = orig
    summary = exc.value.summary
    assert summary.documents == 500  # the chunk in flight was committed and counted
    assert not (tmp_path / "kept.jsonl").exists()  # complete or not at all
    if store:
        with SimStore(tmp_path / "s", readonly=True) as s:
            assert len(s) == summary.kept


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["first", "longest"])
def test_kill_9_then_the_same_command_loses_no_document(tmp_path, keep):
    """kill -9 of dedup-corpus --store once chunks are committed: the same command run again
    writes exactly the uninterrupted run's kept documents and sweeps the dead temporaries."""
    src = tmp_path / "in.jsonl"
    _corpus(src)
    store, kept = tmp_path / "store", tmp_path / "kept.jsonl"
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    cmd = _cli(str(src), "-o", str(kept), "--removed", str(tmp_path / "rm.jsonl"),
               "--store", str(store), "--chunk", str(CHUNK), "--keep", keep)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    assert proc.stderr is not None
    stage = "deduplicating:" if keep == "first" else "writing (pass 2 of 2):"
    deadline = time.monotonic() + 60
    for line in proc.stderr:
        if stage in line and re.search(r"[1-9][\d,]* docs", line):
            proc.kill()
            break
        assert time.monotonic() < deadline, "no progress line"
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not kept.exists() and _leftovers(tmp_path)  # the dead run's temporaries
    with SimStore(store, readonly=True) as s:
        assert 0 < len(s)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    want = _whole(src, tmp_path, keep)
    assert _ids(kept) == want
    assert _leftovers(tmp_path) == []
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=120)  # a third run over a finished job: the same output
    assert again.returncode == 0 and _ids(kept) == want
    n = len(want)
    assert f"kept {n} of {DOCS} documents" in again.stdout
    assert f"({n:,} already in the store from an earlier run, 0 new)" in again.stdout
