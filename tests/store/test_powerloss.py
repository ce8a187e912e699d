"""OS crashes replayed from a recorded trace of a store's writes (tools.stress powerloss, at
a small number of states; ``python -m tools.stress powerloss --states 300 --control`` is
the long run)."""

from __future__ import annotations

import random
import shutil

import pytest

from tools.stress import crash_states as cs, powerloss

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def test_safe_modes_survive_every_crash_state_and_unsafe_does_not(capsys) -> None:
    """durable=True and False: no corrupt state, no acknowledged commit lost; the unsafe
    control shows corruption, so the check can fail."""
    status = powerloss.run(["full", "normal"], states=20, seed=3, ops=40, keep=None,
                           control=True)
    out = capsys.readouterr().out
    assert status == 0, out
    lines = {line.split(" (")[0]: line for line in out.splitlines() if "states (" in line}
    for mode in ("durable=True", "durable=False"):
        assert "20 states" in lines[mode] and ": 0 corrupt, 0 lost" in lines[mode], out
    assert ": 0 corrupt, 0 lost" not in lines["durable='unsafe'"], out


def _events(*specs: tuple[int, int, bytes, bool]) -> list[cs.Event]:
    """Writes (kind, offset, data, dsync) to one file 'f'."""
    return [cs.Event(kind, "f", off, data, dsync) for kind, off, data, dsync in specs]


def test_a_crash_keeps_flushed_writes_and_only_pending_ones_vary() -> None:
    """Writes before the last flush are always in the image; a write after it may be
    there, in part (torn sectors) or not at all; an O_DSYNC write always is."""
    events = _events((cs.WRITE, 0, b"a" * 1024, False), (cs.SYNC, 0, b"", False),
                     (cs.WRITE, 0, b"b" * 1024, False), (cs.WRITE, 1024, b"c" * 512, True))
    seen = set()
    rng = random.Random(1)
    for _ in range(200):
        strategy = rng.choice(cs.STRATEGIES)
        image = cs.Replayer(events, "f", b"").image_at(len(events), rng, strategy)
        assert image[1024:] == b"c" * 512
        halves = (image[:512], image[512:1024])
        assert all(h in (b"a" * 512, b"b" * 512) for h in halves)
        seen.add(halves)
    assert len(seen) == 4  # both sectors old, both new, and each torn way


def test_the_trace_reader_refuses_writes_through_a_map(tmp_path) -> None:
    """A trace holding msync cannot be replayed (its writes were never seen): refused."""
    log = str(tmp_path / "log")
    with open(log, "wb") as f:
        f.write(cs.HEAD.pack(cs.MSYNC, 1, 0, 4, 0, 0))
    with pytest.raises(ValueError, match="msync"):
        cs.read(log)


def test_the_judge_tells_lost_commits_from_corrupt_states() -> None:
    """A state older than the last acknowledged call is a lost commit; one no call leaves,
    corrupt; one inside a call of several commits, between its states, sound."""
    recs = [{"digest": f"d{j}", "kind": "add", "front": [0, [], 0], "items": [["a", j]]}
            for j in range(4)]
    recs[3] = {"digest": "d3", "kind": "expire", "front": [0, [], 0],
               "items": [["b", 2]]}
    recs[2]["items"] = [["a", 2], ["b", 2]]
    state = {"front": [0, [], 0]}
    assert powerloss._judge({**state, "digest": "d2", "items": []}, recs, 2, 3) is None
    assert "lost" in powerloss._judge({**state, "digest": "d1", "items": []}, recs, 2, 3)
    assert "corrupt" in powerloss._judge({**state, "digest": "x", "items": [["c", 1]]},
                                         recs, 2, 3)
    between = {**state, "digest": "y", "items": [["b", 2]]}
    assert powerloss._judge(between, recs, 2, 3) is None
    assert "corrupt" in powerloss._judge({"corrupt": ["verify: page 3"]}, recs, 0, 3)
