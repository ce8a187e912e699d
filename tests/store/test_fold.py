"""Flushes during a merge fold into the newest level instead of piling up new ones."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from simstore import SimStore

from .test_runs import check_answers, merging, small, state_of, tombstoned


def test_flushes_during_a_merge_fold_into_the_newest_level(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """While a merge is under way, a flush rewrites the newest level (one the merge does not
    involve) with the recent docs, until it spans FOLD_FLUSHES * RECENT_MAX ids: the
    levels stay few. Docs removed from a folded level leave no tombstone and no stale
    count behind; answers equal brute force, in this handle and in a fresh one, and
    verify() finds nothing."""
    small(monkeypatch, RECENT_MAX=8, MERGE_STEP=4, MERGE_PER_DOC=1, MERGE_SHARE=10_000,
          MERGE_STEP_MAX=4, FOLD_FLUSHES=4)
    rng = random.Random(21)
    model = {i: rng.getrandbits(64) for i in range(800)}
    path = tmp_path / "s"
    with SimStore(path, k=3, expected_size=2000, durable=False) as s:
        s.add_many(list(model), list(model.values()))
        for i in range(0, 800, 4):  # stale past live / 4: the next write merges every level
            assert s.remove(i)
            del model[i]
        nxt, writes, most, flushes = 800, 0, 0, 0
        folded_removed: list[int] = []  # doc ids, equal to internal ids here (each add new)
        while writes < 400:
            model[nxt] = rng.getrandbits(64)
            before = state_of(s).flushed
            s.add(nxt, model[nxt])
            nxt += 1
            writes += 1
            st = state_of(s)
            flushes += st.flushed != before
            most = max(most, len(st.levels))
            if writes % 25 == 0:  # remove a doc of the newest (flushed) level: its
                lo = st.bounds()[-1][1]  # tombstone goes when the level is folded next
                victim = next((i for i in range(lo, st.flushed) if i in model), None)
                if victim is not None:
                    assert s.remove(victim)
                    del model[victim]
                    folded_removed.append(victim)
                check_answers(s, model, [model[nxt - 1], rng.getrandbits(64)])
            if merging(s) is None:
                break
        assert merging(s) is None and writes > 150, writes  # one long merge, now done
        # a flush every 9 writes; a level folds 3 of them (27 ids; a 4th would pass 32),
        # beside the merge's target and source and the level flushed as it began
        assert flushes >= writes // 10 and most <= 3 + -(-flushes // 3), (writes, flushes, most)
        st = state_of(s)
        assert s.stats()["levels"] == [hi - lo for _, lo, hi in st.bounds()]
        assert st.stale == len(tombstoned(s))
        # the merge's removed docs were fixed at its start: only folds dropped these
        kept = set(folded_removed) & tombstoned(s)
        assert len(folded_removed) >= 8 and len(kept) <= 3, (folded_removed, kept)
        queries = [model[i] for i in rng.sample(sorted(model), 30)]
        check_answers(s, model, queries)
        assert s.verify() == []
    with SimStore(path) as fresh:
        check_answers(fresh, model, queries)
