"""dedup_corpus(exact=True): decisions by exact Jaccard of shingle sets, in bounded memory.

Pass 1 reads the input once. For each chunk, on a worker thread, the texts'
shingle sets (C), their widened band keys and their digests
(:mod:`simstore.search.exact`); the sets go to a temporary file beside the output
(8 bytes per distinct shingle; flock-held like the outputs' temporaries, so after a
``kill -9`` the next run writing the same output removes it), and only ids, places,
keys (4 bytes per band, a column per band) and digests stay in memory: ~300 bytes a
document. Then the pair search over the keys, the candidates measured a step at a
time on their sets read back from the file (:data:`MEASURE_BYTES` of sets in memory,
never the file: a memory map of it would stay resident, 8 bytes per shingle of the
corpus), and the greedy pass in priority order: input order for keep="first" (what
``add_if_new`` in input order keeps, under the exact rule), largest value first for
"longest" or a FIELD. Pass 2 (:func:`simstore.corpus.twopass.write_pass`) writes the
kept documents and the removed report, with each removed document's exact Jaccard
to its representative.

:class:`ExactPass` is that pass over any source of texts (``simstore.hf.dedup`` runs it
over a dataset's rows). This is the mode without a persistent store. With one
(keep="first"), the store itself keeps the sets (``SimStore(path, exact=True)``) and each
chunk is decided by its ``add_if_new_many`` (:mod:`simstore.corpus.ingest`).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from .._distinct import distinct
from .._files import TempFile
from ..search.bandpairs import run_pairs
from ..search.exact import keys_of_sets, set_digests
from ..search.greedy import Representatives, representatives_from_pairs
from ..text.fingerprinting import SIGNATURE_CONFIG
from ..text.jaccard import ShingleSets, exact_jaccard, shingle_sets
from .ingest import CorpusRun
from .progress import SILENT, Progress
from .stores import scratch_dir
from .summary import NEW, Interrupted
from .twopass import Decisions, Pass1, check_keep_field, write_pass

MEASURE_BYTES = 8 << 20  # bytes of sets read from the spill file for one measuring step
_PAIR_CHUNK = 1 << 20  # candidate pairs taken at a time (their index arrays)


class SetSpill:
    """Shingle sets appended chunk by chunk to a temporary file beside ``output``;
    :meth:`read` brings some of them back into memory."""

    def __init__(self, output: str) -> None:
        self._tmp = TempFile(output, "-o")
        self.path = self._tmp.tmp
        self._sizes = array("q")
        self.offsets = np.zeros(1, dtype=np.int64)

    def append(self, sets: ShingleSets) -> None:
        self._tmp.file.write(sets.hashes.data)
        self._sizes.extend(sets.sizes.tolist())

    def finish(self) -> np.ndarray:
        """Each set's size (call once, after the last append)."""
        self._tmp.file.flush()
        sizes = np.frombuffer(self._sizes, dtype=np.int64)
        self.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.offsets[1:])
        return sizes

    def read(self, ids: np.ndarray) -> ShingleSets:
        """Sets ``ids`` (ascending, distinct) as one compact ShingleSets, adjacent sets
        read together."""
        lo, hi = self.offsets[ids], self.offsets[ids + 1]
        local = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=local[1:])
        hashes = np.empty(int(local[-1]), dtype=np.uint64)
        cuts = np.flatnonzero(lo[1:] != hi[:-1]) + 1
        fd = self._tmp.file.fileno()
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(ids)].tolist(), strict=True):
            _read_exactly(fd, hashes[local[a] : local[b]], int(lo[a]) * 8)
        return ShingleSets(hashes, local)

    def close(self) -> None:
        """Remove the file."""
        self._tmp.discard()


def _read_exactly(fd: int, into: np.ndarray, offset: int) -> None:
    """Fill ``into`` from the file at ``offset`` (a short read is retried from where it
    stopped; the end of the file before it is full: OSError)."""
    view = into.data.cast("B")
    while len(view):
        n = os.preadv(fd, [view], offset)
        if n <= 0:
            raise OSError(f"the shingle-set file ended {len(view)} bytes early")
        view, offset = view[n:], offset + n


class BandKeys:
    """Each document's widened band keys, one growing column per band (a chunk's keys are
    added band by band: the matrix is never copied whole)."""

    def __init__(self) -> None:
        self.columns: list[array[int]] = []

    def append(self, keys: np.ndarray) -> None:
        if not self.columns:
            self.columns = [array("I") for _ in range(keys.shape[1])]
        for b, col in enumerate(self.columns):
            col.frombytes(np.ascontiguousarray(keys[:, b]).tobytes())

    def pairs(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct pairs (a < b) of positions in ``heads`` whose documents share a key in
        some band (:func:`simstore.search.bandpairs.band_candidates`, column by column)."""
        n = np.uint64(len(heads))
        codes = [np.empty(0, dtype=np.uint64)]
        for col in self.columns:
            a, c = run_pairs(np.frombuffer(col, dtype=np.uint32)[heads])
            codes.append(a.astype(np.uint64) * n + c.astype(np.uint64))
        u = distinct(np.concatenate(codes))
        return (u // n).astype(np.int64), (u % n).astype(np.int64)


class Prepared(NamedTuple):
    """A chunk's shingle sets, their widened band keys and their digests."""

    sets: ShingleSets
    keys: np.ndarray
    digests: np.ndarray


class ExactPass:
    """The exact pass: documents' shingle sets added chunk by chunk (spilled to a file, only
    keys and digests kept in memory), then the greedy decision in a priority order.
    ``dedup_corpus(exact=True)`` and ``simstore.hf.dedup(exact=True)`` both run it.

    ``beside``: the spill file goes beside this path (flock-held like the outputs'
    temporaries); None: in a private scratch directory in TMPDIR. Close it (or use it as a
    context manager) to remove the file."""

    def __init__(self, threshold: float, beside: str | None = None) -> None:
        self.threshold = threshold
        self._scratch = scratch_dir() if beside is None else None
        try:
            self._spill = SetSpill(beside if self._scratch is None
                                   else os.path.join(self._scratch.tmp, "sets"))
        except BaseException:
            if self._scratch is not None:
                self._scratch.discard()
            raise
        self._keys = BandKeys()
        self._digests = array("Q")

    def prepare(self, texts: list[str]) -> Prepared:
        """A chunk's shingle sets, widened band keys and digests: the C work, which touches
        nothing of the pass (run it on a worker thread), for :meth:`append`."""
        sets = shingle_sets(texts, SIGNATURE_CONFIG)
        return Prepared(sets, keys_of_sets(sets, SIGNATURE_CONFIG, self.threshold),
                        set_digests(sets))

    def append(self, chunk: Prepared) -> None:
        """Add a prepared chunk's documents, after those added before."""
        self._spill.append(chunk.sets)
        self._keys.append(chunk.keys)
        self._digests.frombytes(chunk.digests.tobytes())

    def add(self, texts: list[str]) -> None:
        """Prepare and append a chunk of texts."""
        self.append(self.prepare(texts))

    def decide(self, values: np.ndarray | None = None,
               progress: Progress = SILENT) -> Representatives:
        """Each document's representative at exact Jaccard >= threshold, the greedy pass in
        priority order: input order (``values`` None, keep="first"), else the largest value
        first, ties in input order. Call once, after the last chunk."""
        sizes = self._spill.finish()
        digests = np.frombuffer(self._digests, dtype=np.uint64)
        n = len(digests)
        group = _groups(digests, sizes, self._spill)
        heads = np.flatnonzero(group == np.arange(n))
        order = (np.arange(n, dtype=np.int64) if values is None
                 else np.lexsort((np.arange(n), -np.asarray(values, dtype=np.float64))))
        with progress.step(f"exact Jaccard among {n:,} documents"):
            i, j, jac = _head_pairs(self._keys, heads, sizes, self._spill, self.threshold)
            rep, via = representatives_from_pairs(n, i, j, -jac, order, group)
        near = np.where(via >= 0, jac[np.maximum(via, 0)] if len(jac) else 1.0, 1.0)
        return Representatives(rep, np.zeros(n, dtype=np.uint8), near)

    def close(self) -> None:
        """Remove the spill file (and the scratch directory)."""
        try:
            self._spill.close()
        finally:
            if self._scratch is not None:
                self._scratch.discard()

    def __enter__(self) -> ExactPass:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_pass(run: CorpusRun, exact: ExactPass) -> Pass1:
    """Pass 1: ids and places into the first-pass record, each chunk's sets into ``exact``
    (prepared on a worker thread while the next chunk is read)."""
    inp = run.inp
    p = Pass1(inp)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-shingles")
    pending: Future[Prepared] | None = None
    try:
        with run.progress.bar("reading (pass 1 of 2)", inp.total_bytes) as bar:
            for c in run.chunks(with_rows=False):
                base = p.add_chunk(c, run.keep)
                for pos in range(base, base + len(c)):
                    p.status[pos] = NEW
                fut = pool.submit(exact.prepare, c.texts)
                if pending is not None:
                    exact.append(pending.result())
                pending = fut
                bar.update(c.nbytes, docs=len(p.ids))
            if pending is not None:
                exact.append(pending.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    p.cand = array("q", range(len(p.ids)))
    return p


def exact_dedup(run: CorpusRun) -> None:
    """Both passes at Jaccard >= run.mode.threshold (see the module docstring); outputs
    complete or absent."""
    threshold, keep = run.mode.threshold, run.keep
    assert threshold is not None
    with ExactPass(threshold, beside=run.out.kept_path) as exact:
        try:
            p = _read_pass(run, exact)
            values = None if keep == "first" else np.frombuffer(p.value, dtype=np.float64)
            reps = exact.decide(values, run.progress)
        except KeyboardInterrupt:
            raise Interrupted(run.summary) from None
        if keep not in ("first", "longest"):
            run.summary.keep_missing = check_keep_field(p, run.inp, keep)
        write_pass(run, Decisions.of(p, reps, None))


def _steps(sizes: np.ndarray, i: np.ndarray, j: np.ndarray) -> Iterator[slice]:
    """Runs of the pairs whose sets add up to at most MEASURE_BYTES (at least one pair)."""
    cum = np.cumsum((sizes[i] + sizes[j]) * 8)
    start = 0
    while start < len(i):
        done = int(cum[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(cum, done + MEASURE_BYTES, side="right")))
        yield slice(start, end)
        start = end


def _measure(sizes: np.ndarray, spill: SetSpill, i: np.ndarray, j: np.ndarray,
             threshold: float) -> np.ndarray:
    """exact_jaccard of the pairs (i, j) of spilled sets, MEASURE_BYTES of sets at a time."""
    out = np.empty(len(i), dtype=np.float64)
    for step in _steps(sizes, i, j):
        ids, where = np.unique(np.concatenate([i[step], j[step]]), return_inverse=True)
        k = step.stop - step.start
        out[step] = exact_jaccard(spill.read(ids), where[:k], where[k:], threshold=threshold)
    return out


def _groups(digests: np.ndarray, sizes: np.ndarray, spill: SetSpill) -> np.ndarray:
    """Each set's group: the smallest index with an identical set (equal digests,
    verified: a set whose digest collides with a different one is its own group)."""
    n = len(digests)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)
    group = first[inverse.ravel()].astype(np.int64)
    moved = np.flatnonzero(group != np.arange(n))
    if len(moved):
        same = _measure(sizes, spill, moved, group[moved], 0.0) == 1.0
        group[moved[~same]] = moved[~same]
    return group


def _head_pairs(keys: BandKeys, heads: np.ndarray, sizes: np.ndarray, spill: SetSpill,
                threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, jaccard): the pairs of group heads (i < j) at exact Jaccard >= threshold."""
    ci, cj = keys.pairs(heads)
    keep_i, keep_j, keep_s = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0)]
    for a in range(0, len(ci), _PAIR_CHUNK):
        pi, pj = heads[ci[a : a + _PAIR_CHUNK]], heads[cj[a : a + _PAIR_CHUNK]]
        jac = _measure(sizes, spill, pi, pj, threshold)
        ok = jac >= threshold
        keep_i.append(pi[ok])
        keep_j.append(pj[ok])
        keep_s.append(jac[ok])
    return np.concatenate(keep_i), np.concatenate(keep_j), np.concatenate(keep_s)
