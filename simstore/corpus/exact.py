"""dedup_corpus(exact=True): decisions by exact Jaccard of shingle sets, in bounded memory.

Pass 1 reads the input once. For each chunk, on a worker thread, the texts'
shingle sets (C), their widened band keys and their digests
(:mod:`simstore.search.exact`); the sets go to a temporary file (8 bytes per
distinct shingle, removed at the end), and only ids, places, keys (4 bytes per
band) and digests stay in memory. Then the pair search over the keys, each
candidate measured on the file's sets through a read-only memory map, and the
greedy pass in priority order: input order for keep="first" (what ``add_if_new``
in input order keeps, under the exact rule), largest value first for "longest"
or a FIELD. Pass 2 (:func:`simstore.corpus.twopass.write_pass`) writes the
kept documents and the removed report, with each removed document's exact
Jaccard to its representative.

This is the mode without a persistent store. With one (keep="first"), the
store itself keeps the sets (``SimStore(path, exact=True)``) and each chunk is
decided by its ``add_if_new_many`` (:mod:`simstore.corpus.ingest`).
"""

from __future__ import annotations

import os
import tempfile
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..search.exact import head_pairs_of_keys, keys_of_sets, set_digests
from ..search.greedy import Representatives, representatives_from_pairs
from ..text.fingerprinting import SIGNATURE_CONFIG, FingerprintConfig
from ..text.jaccard import ShingleSets, shingle_sets
from .ingest import CorpusRun
from .progress import Progress
from .summary import NEW, Interrupted
from .twopass import Decisions, Pass1, check_keep_field, write_pass


class SetSpill:
    """Shingle sets appended chunk by chunk to a temporary file, read back as one
    :class:`ShingleSets` over a read-only memory map."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="simstore-shingles-", suffix=".u64")
        self._file: Any = os.fdopen(fd, "wb")
        self.sizes = array("q")

    def append(self, sets: ShingleSets) -> None:
        self._file.write(memoryview(sets.hashes))
        self.sizes.extend(sets.sizes.tolist())

    def sets(self) -> ShingleSets:
        """Every appended set, in order (call once, after the last append)."""
        self._file.close()
        offsets = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.sizes, dtype=np.int64), out=offsets[1:])
        total = int(offsets[-1])
        if not total:
            return ShingleSets(np.empty(0, dtype=np.uint64), offsets)
        return ShingleSets(np.memmap(self.path, dtype=np.uint64, mode="r", shape=(total,)),
                           offsets)

    def close(self) -> None:
        self._file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _measure(texts: list[str], cfg: FingerprintConfig, t: float
             ) -> tuple[ShingleSets, np.ndarray, np.ndarray]:
    sets = shingle_sets(texts, cfg)
    return sets, keys_of_sets(sets, cfg, t), set_digests(sets)


def _read_pass(run: CorpusRun, t: float,
               spill: SetSpill) -> tuple[Pass1, np.ndarray, np.ndarray]:
    """Pass 1: ids and places, and each document's keys and digest; sets to the spill."""
    inp = run.inp
    p = Pass1(inp)
    keys: list[np.ndarray] = []
    digests: list[np.ndarray] = []
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-shingles")

    def settle(fut: Future[Any]) -> None:
        sets, k, d = fut.result()
        spill.append(sets)
        keys.append(k)
        digests.append(d)

    pending: Future[Any] | None = None
    try:
        with run.progress.bar("reading (pass 1 of 2)", inp.total_bytes) as bar:
            for c in run.chunks(with_rows=False):
                base = p.add_chunk(c, run.keep)
                for pos in range(base, base + len(c)):
                    p.status[pos] = NEW
                fut = pool.submit(_measure, c.texts, SIGNATURE_CONFIG, t)
                if pending is not None:
                    settle(pending)
                pending = fut
                bar.update(c.nbytes, docs=len(p.ids))
            if pending is not None:
                settle(pending)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    p.cand = list(range(len(p.ids)))
    nb = SIGNATURE_CONFIG.bands
    all_keys = np.concatenate(keys) if keys else np.empty((0, nb), dtype=np.uint32)
    all_digests = np.concatenate(digests) if digests else np.empty(0, dtype=np.uint64)
    return p, all_keys, all_digests


def exact_dedup(run: CorpusRun) -> None:
    """Both passes at Jaccard >= run.mode.threshold (see the module docstring); outputs
    complete or absent."""
    threshold, keep = run.mode.threshold, run.keep
    assert threshold is not None
    spill = SetSpill()
    try:
        try:
            p, keys, digests = _read_pass(run, threshold, spill)
            reps = _decide(p, keys, digests, spill.sets(), threshold, keep, run.progress)
        except KeyboardInterrupt:
            raise Interrupted(run.summary) from None
        if keep not in ("first", "longest"):
            run.summary.keep_missing = check_keep_field(p, run.inp, keep)
        write_pass(run, Decisions.of(p, reps, None))
    finally:
        spill.close()


def _decide(p: Pass1, keys: np.ndarray, digests: np.ndarray, sets: ShingleSets,
            threshold: float, keep: str, progress: Progress) -> Representatives:
    """The exact pairs and the greedy pass in keep's priority order."""
    n = len(p.ids)
    if keep == "first":
        order = np.arange(n, dtype=np.int64)
    else:
        order = np.lexsort((np.arange(n), -np.frombuffer(p.value, dtype=np.float64)))
    with progress.step(f"exact Jaccard among {n:,} documents"):
        group, i, j, jac = head_pairs_of_keys(keys, digests, sets, threshold)
        rep, via = representatives_from_pairs(n, i, j, -jac, order, group)
    near = np.where(via >= 0, jac[np.maximum(via, 0)] if len(jac) else 1.0, 1.0)
    return Representatives(rep, np.zeros(n, dtype=np.uint8), near)
