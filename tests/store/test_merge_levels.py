"""store.merge_levels() and ``simstore-cli merge-levels``: every level merged into one now,
in bounded commits of its own (the merge the stale share begins), answers unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import simstore
from simstore import SimStore
from simstore.cli import main
from simstore.store.runs import merges, tables as runs
from tools.stress.constants import CHURN_RUNS

from ..oracles import brute_matches
from ..testlib import merging


def _grown(path: Path, n: int = 60_000, batch: int = 1_500) -> SimStore:
    rng = np.random.default_rng(21)
    s = SimStore(path, k=5, durable=False, expected_size=n)
    for lo in range(0, n, batch):
        s.add_many(range(lo, lo + batch), rng.integers(0, 2**64 - 1, batch, dtype=np.uint64,
                                                      endpoint=True))
    s.remove_many(range(0, n, 7))  # stale entries the merge drops
    return s


def test_merge_levels_leaves_one_level_and_the_same_answers(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setattr(merges, "MERGE_COMMIT_MAX", 4_096)  # several commits, not one
    with _grown(tmp_path / "s") as s:
        levels = s.stats()["levels"]
        assert len(levels) >= 2, levels
        stored = dict(s.items())
        fps = list(stored.values())
        qs = [fp ^ 0b10011 for fp in fps[::4_000]]
        commits = s.merge_levels()
        assert commits >= 2
        assert len(s.stats()["levels"]) == 1
        for q in qs:
            assert s.query(q, 5) == brute_matches(stored, q, 5)
        assert s.verify() == []
        assert s.merge_levels() == 0  # one level: nothing to do
        with pytest.raises(simstore.StoreError, match="batch"), s.batch():
            s.merge_levels()


def test_a_merge_under_way_is_finished_then_every_level_merged(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Merges spread thin (the stress churn's constants): a merge of the newest levels is
    under way when merge_levels() is called; it is finished, then every level merged."""
    for module, values in CHURN_RUNS.items():
        for name, value in values.items():
            monkeypatch.setattr({"runs.tables": runs, "runs.merges": merges}[module], name, value)
    rng = np.random.default_rng(22)
    with SimStore(tmp_path / "s", k=3, durable=False) as s:
        under_way = False
        for lo in range(0, 20_000, 200):
            s.add_many(range(lo, lo + 200), rng.integers(0, 2**64 - 1, 200, dtype=np.uint64,
                                                         endpoint=True))
            under_way = merging(s) is not None
            if under_way and len(s.stats()["levels"]) >= 3:
                break
        assert under_way
        stored = dict(s.items())
        assert s.merge_levels() >= 1
        assert len(s.stats()["levels"]) == 1
        assert merging(s) is None
        for fp in list(stored.values())[::997]:
            q = fp ^ 0b111
            assert s.query(q, 3) == brute_matches(stored, q, 3)
        assert s.verify() == []


def test_merge_levels_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s"
    _grown(path).close()
    assert main(["--json", "merge-levels", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["levels_before"]) >= 2 and len(out["levels"]) == 1 and out["commits"] >= 1
    assert main(["merge-levels", str(path)]) == 0
    assert "1 level(s) -> 1 in 0 commit(s)" in capsys.readouterr().out
