"""Flushes during a merge fold into the newest level instead of piling up new ones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import simstore
from simstore import SimStore

from ..testlib import (
    all_answers,
    check_answers,
    folded,
    fp_of,
    merging,
    near_texts,
    small,
    state_of,
    tombstoned,
)


@pytest.mark.parametrize("sim", [False, True])
def test_flushes_during_a_merge_fold_into_the_newest_level(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, sim: bool) -> None:
    """While a merge is under way, a flush rewrites the newest level (one the merge does not
    involve) with the recent docs, until it spans FOLD_FLUSHES * RECENT_MAX ids: the
    levels stay few. Docs removed from a folded level leave no tombstone and no stale
    count behind; answers (and similar() in a similarity store, whose band levels fold
    too) equal brute force, in this handle and in a fresh one, and verify() finds nothing."""
    small(monkeypatch, RECENT_MAX=8, MERGE_STEP=4, MERGE_PER_DOC=1, MERGE_SHARE=10_000,
          MERGE_STEP_MAX=4, FOLD_FLUSHES=4)
    rng = random.Random(21)
    all_texts = near_texts(rng, 2000)
    texts = iter(all_texts)

    def item() -> Any:
        return simstore.signature(next(texts)) if sim else rng.getrandbits(64)

    model = {i: item() for i in range(800)}
    path = tmp_path / "s"
    cfg = simstore.SIGNATURE_CONFIG if sim else None
    with SimStore(path, k=3, config=cfg, expected_size=2000, durable=False) as s:
        s.add_many(list(model), s.signatures(all_texts[:800]) if sim else list(model.values()))
        for i in range(0, 800, 4):  # stale past live / 4: the next write merges every level
            assert s.remove(i)
            del model[i]
        nxt, writes, most, flushes, folds = 800, 0, 0, 0, 0
        # removed docs of the newest level (doc ids, equal to internal ids here: each add
        # is new) -> that level's start, until a fold rewrites it (then: dropped)
        pending: dict[int, int] = {}
        dropped: set[int] = set()
        while writes < 400:
            model[nxt] = item()
            prev = state_of(s)
            s.add(nxt, model[nxt])
            nxt += 1
            writes += 1
            st = state_of(s)
            flushes += st.flushed != prev.flushed
            most = max(most, len(st.levels))
            lo = st.bounds()[-1][1]
            if folded(prev, st):
                folds += 1
                dropped |= {v for v, at in pending.items() if at == lo}
                pending = {v: at for v, at in pending.items() if at != lo}
            if writes % 25 == 0:  # remove a doc of the newest (flushed) level
                victim = next((i for i in range(lo, st.flushed) if i in model), None)
                if victim is not None:
                    assert s.remove(victim)
                    del model[victim]
                    pending[victim] = lo
                fps = {d: fp_of(v) for d, v in model.items()}
                check_answers(s, fps, [fp_of(model[nxt - 1]), rng.getrandbits(64)])
            if merging(s) is None:
                break
        # one long merge, done (a similarity store's band entries make its merge longer)
        assert writes > 150 and (sim or merging(s) is None), writes
        # a flush every 9 writes; a level folds 3 of them (27 ids; a 4th would pass 32),
        # beside the merge's target and source and the level flushed as it began
        assert flushes >= writes // 10 and most <= 3 + -(-flushes // 3), (writes, flushes, most)
        st = state_of(s)
        assert s.stats()["levels"] == [hi - lo for _, lo, hi in st.bounds()]
        assert st.stale == len(tombstoned(s))
        # the merge's removed docs were fixed at its start: only folds dropped tombstones,
        # exactly those of the docs removed from a level before it was folded
        assert folds >= 10 and len(dropped) >= 5, (folds, dropped)
        assert not dropped & tombstoned(s) and set(pending) <= tombstoned(s)
        queries = [model[i] for i in rng.sample(sorted(model), 20)]
        before_answers = all_answers(s, model, queries)
        assert s.verify() == []
    with SimStore(path) as fresh:
        assert all_answers(fresh, model, queries) == before_answers
