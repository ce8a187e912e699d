"""Ctrl-C on a real ``python -m simstore dedup-corpus`` process, mid-run.

SIGINT arrives once the progress log shows committed chunks. Then: exit 130,
a message saying how far it got, the kept output and the removed report
holding exactly the committed chunks (a whole-chunk prefix of the input, no
half chunk) and agreeing with the store, and a second run with the same
--store finishing the rest: the two runs keep exactly what one uninterrupted
run keeps.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simstore import SimStore, corpus

CHUNK = 50
DOCS = 12_000
_REPO = Path(__file__).resolve().parent.parent


def _corpus(path: Path) -> list[str]:
    """JSON lines of short texts; 20% are near copies of a recent one (one word changed)."""
    rng = random.Random(13)
    words = [f"w{i}" for i in range(20_000)]
    recent: list[list[str]] = []
    ids = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(DOCS):
            if recent and rng.random() < 0.2:
                text = list(rng.choice(recent))
                text[rng.randrange(len(text))] = rng.choice(words)
            else:
                text = rng.sample(words, 60)
            recent = (recent + [text])[-200:]
            ids.append(f"d{i}")
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(text)}) + "\n")
    return ids


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


def test_ctrl_c_keeps_whole_chunks_and_a_rerun_finishes(tmp_path):
    src = tmp_path / "in.jsonl"
    ids = _corpus(src)
    store = tmp_path / "store"
    kept1, removed1 = tmp_path / "kept1.jsonl", tmp_path / "removed1.jsonl"
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    proc = subprocess.Popen(
        _cli(str(src), "-o", str(kept1), "--removed", str(removed1), "--store", str(store),
             "--chunk", str(CHUNK)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        preexec_fn=_default_sigint)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:  # the progress log: interrupt once chunks are committed
        if "deduplicating:" in line and re.search(r"[1-9][\d,]* docs", line):
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline, "no progress line"
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    m = re.search(r"interrupted; (\d+) documents committed to (\S+) \(through (\S+):(\d+)\); "
                  r"(\S+) holds their (\d+) kept documents", rest)
    assert m, rest
    done, kept = int(m[1]), int(m[6])
    assert m[2] == str(store) and m[5] == str(kept1)
    assert 0 < done < DOCS, "the run was not interrupted mid-way: make the corpus larger"
    assert done % CHUNK == 0 and int(m[4]) == done  # whole chunks; the last one's line

    # the outputs hold exactly the committed prefix, consistent with the store
    got_kept, got_removed = _ids(kept1), _ids(removed1)
    assert len(got_kept) == kept
    assert sorted(got_kept + got_removed, key=lambda d: int(d[1:])) == ids[:done]
    with SimStore(store, readonly=True) as s:
        assert sorted(s.doc_ids()) == sorted(got_kept)

    # a second run with the same store finishes the rest
    kept2, removed2 = tmp_path / "kept2.jsonl", tmp_path / "removed2.jsonl"
    res = subprocess.run(
        _cli(str(src), "-o", str(kept2), "--removed", str(removed2), "--store", str(store),
             "--chunk", str(CHUNK * 20)),
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    whole = tmp_path / "whole.jsonl"
    corpus.dedup_corpus([str(src)], str(whole), threshold=0.9)  # one uninterrupted run
    want = set(_ids(whole))
    again = _ids(kept2)
    assert not set(again) & set(got_kept)  # stored ids count as already stored
    assert set(again) | set(got_kept) == want and len(again) + kept == len(want)
    reasons = {json.loads(line)["id"]: json.loads(line)["reason"]
               for line in removed2.read_text().splitlines()}
    assert all(reasons[d] == "id already stored" for d in got_kept)
    with SimStore(store, readonly=True) as s:
        assert set(s.doc_ids()) == want


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
    if store:
        assert len(_ids(tmp_path / "kept.jsonl")) == summary.kept
        with SimStore(tmp_path / "s", readonly=True) as s:
            assert len(s) == summary.kept
    else:
        assert not (tmp_path / "kept.jsonl").exists()  # a private store: nothing written
