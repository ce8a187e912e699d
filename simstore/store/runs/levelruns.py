"""A merge's view of its source levels: each one's runs fetched one by one as the merge
needs them, sliced by key, and trimmed of the runs it has merged in full.

The records are those of :mod:`simstore.store.runs.format` and
:mod:`simstore.store.runs.index`; :mod:`simstore.store.runs.merges` drives the job.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ...exceptions import CorruptStoreError
from ...native.probe import Run
from ..check.ranges import TreeGuard
from .format import EMPTY, full_keys, parse_run
from .index import read_index, trim_index


class LevelRuns:
    """One level's runs in one run database, fetched one by one as a merge needs them
    (a write transaction copies what it gets: fetching the whole level would copy it all)."""

    def __init__(self, txn: Any, db: Any, guard: TreeGuard, level: int) -> None:
        self._txn, self._db, self._guard, self.level = txn, db, guard, level
        index = read_index(txn, db, guard, level)
        if index is None:
            raise CorruptStoreError(f"merge source level {level} has no index record")
        self.firsts = index.tolist()
        lead = bytes((level,))
        self.keys = [lead + f.to_bytes(8, "big") for f in self.firsts]
        self._got: dict[int, Run] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def run(self, i: int) -> Run:
        got = self._got.get(i)
        if got is None:
            key = self.keys[i]
            got = self._got[i] = parse_run(key, self._txn.get(key, db=self._db), key[0])[1]
        return got

    def start(self, lo: int) -> int:
        """Index of the run where keys >= lo begin."""
        return max(bisect.bisect_right(self.firsts, lo) - 1, 0)

    def trim(self, upto: int | None) -> bool:
        """Delete the runs whose keys all lie below ``upto`` (None: every run) and drop
        them from the level's index record; whether any went (a merge's source).

        Run j's keys are below run j + 1's first key, so run j goes once that first
        key is below upto; the run upto falls in stays whole until a later slice
        passes its end (its merged entries are then in the target too: a probe of
        both finds them twice, and answers each doc once). The object then names
        only the runs left.
        """
        cut = len(self.firsts) if upto is None else bisect.bisect_left(self.firsts, upto, 1) - 1
        if not cut:
            return False
        for key in self.keys[:cut]:
            if not self._txn.delete(key, db=self._db):
                raise CorruptStoreError(f"table level {self.level} names a run its index "
                                        "has and the table not")
        self.keys, self.firsts = self.keys[cut:], self.firsts[cut:]
        self._got = {i - cut: r for i, r in self._got.items() if i >= cut}
        trim_index(self._txn, self._db, self._guard, self.level, cut)
        return True


def key_after(runs: LevelRuns, lo: int, count: int) -> int | None:
    """The key ``count`` places after the first key >= lo in a level's runs; None if the
    level has no more than ``count`` keys >= lo."""
    for i in range(runs.start(lo), len(runs)):
        keys = full_keys(runs.run(i))
        a = int(np.searchsorted(keys, np.uint64(lo), side="left"))
        if count < len(keys) - a:
            return int(keys[a + count])
        count -= len(keys) - a
    return None


def slice_level(runs: LevelRuns, lo: int, hi: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Private copies of a level's (keys, vals) with lo <= key < hi (hi None: no bound)."""
    ks, vs = [EMPTY], [EMPTY]
    for i in range(runs.start(lo), len(runs)):
        if hi is not None and runs.firsts[i] >= hi:
            break
        run = runs.run(i)
        keys = full_keys(run)
        a = int(np.searchsorted(keys, np.uint64(lo), side="left"))
        b = len(keys) if hi is None else int(np.searchsorted(keys, np.uint64(hi), side="left"))
        if b > a:
            ks.append(np.array(keys[a:b], dtype=np.uint64))
            vs.append(run.vals[a:b].astype(np.uint64))
    return np.concatenate(ks), np.concatenate(vs)
