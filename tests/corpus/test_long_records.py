"""A long record through the corpus workflow, its outputs as before.

A long line kept to be written out waits in a temporary file (:class:`simstore.corpus.
records.SpilledLine`): the kept file holds it byte for byte; the digests of sets summed
a step at a time are the pinned ones. (What a record near the size cap costs:
``tests/test_record_cost.py``.)
"""

from __future__ import annotations

import json

import numpy as np

from simstore import corpus
from simstore.corpus import readers
from simstore.search import exact
from simstore.text.jaccard import ShingleSets


def test_long_lines_kept_are_written_as_read(tmp_path, monkeypatch):
    """Lines longer than a piece wait in temporary files and come out byte for byte, in
    order among the others, with a newline added only to a last line without one."""
    monkeypatch.setattr(readers, "_PIECE", 64)
    lines = [json.dumps({"id": i, "text": f"doc {i} " + "word " * (i * 7), "x": "é"},
                        ensure_ascii=i % 2 == 0) for i in range(30)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines), encoding="utf-8")  # the last line has no newline
    out = tmp_path / "kept.jsonl"
    spilled = []
    real = readers.SpilledLine

    def spy(line: bytes | bytearray) -> readers.SpilledLine:
        spilled.append(len(line))
        return real(line)

    monkeypatch.setattr(readers, "SpilledLine", spy)
    summary = corpus.dedup_corpus([str(src)], out, threshold=0.9)
    assert summary.kept == 30 and len(spilled) > 20
    assert out.read_text(encoding="utf-8") == "\n".join(lines) + "\n"


def test_set_digests_a_step_at_a_time_are_the_known_ones(monkeypatch):
    """set_digests summed one hash at a time, or all at once, gives the pinned digests."""
    a = [1, 5, 2**40, 2**63, 2**64 - 1]
    sets = ShingleSets(np.array([*a, 5, 7, 2**63], dtype=np.uint64),
                       np.array([0, 5, 5, 8], dtype=np.int64))
    want = [0xF8A6D63EEA14628D, 0, 0xC54021DFAC3FEE4D]
    assert exact.set_digests(sets).tolist() == want
    for step in (1, 2, 3):
        monkeypatch.setattr(exact, "_DIGEST_STEP", step)
        assert exact.set_digests(sets).tolist() == want
