"""The decisions of :func:`simstore.hf.dedup`, taken by the corpus workflow's engines.

The dataset is read as Arrow batches of ``batch_size`` rows (texts, ids, nothing else),
and each mode runs what ``dedup_corpus`` runs for it, so both decide alike on the
same rows:

- keep="first" without a store: :class:`simstore.corpus.ingest.Stream` through a
  private scratch store (``add_if_new_many`` per batch, rows keyed by their index);
- with a store (keep="first"): the same stream through it, rows keyed by their ids
  (a row whose id the store held before is kept, a repeated id is removed);
- keep="longest" or a column: :func:`simstore.corpus.representative_clusters` over
  every row's signature (~220 bytes a row in memory);
- exact=True without a store: :class:`simstore.corpus.ExactPass` (shingle sets spilled
  to a scratch file, exact pairs, the greedy pass in priority order).

What stays in memory is arrays of a few bytes per row (:class:`Outcome`), never texts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..corpus import ExactPass
from ..corpus.ingest import Mode, Stream
from ..corpus.records import Chunk
from ..corpus.summary import NEAR, NEW, REPEATED, STORED
from ..search.greedy import representative_clusters
from ..store import SimStore
from ..text.fingerprinting import SIGNATURE_CONFIG
from ..text.minhash import Signatures, signatures
from ._deps import pa


@dataclass
class Rows:
    """The dataset as the engines read it: batches of texts (and ids), and keep values."""

    ds: Any
    column: str
    id_column: str | None = None
    batch_size: int = 1000

    def __len__(self) -> int:
        return len(self.ds)

    def batches(self, with_ids: bool = False) -> Iterator[tuple[int, list[str], list[Any]]]:
        """(first row, texts, ids or []) of each batch, in row order."""
        cols = [self.column] + ([self.id_column] if with_ids and self.id_column else [])
        base = 0
        view = self.ds.select_columns(cols).with_format("arrow")
        for table in view.iter(batch_size=self.batch_size):
            texts = table.column(0).to_pylist()
            ids = table.column(1).to_pylist() if len(cols) > 1 else []
            yield base, texts, ids
            base += len(texts)

    def values(self, keep: str) -> np.ndarray:
        """Each row's keep value: its length in characters ("longest") or the column's
        value as float64, a null ranked last (-inf)."""
        compute = pa.compute
        name = self.column if keep == "longest" else keep
        out = np.empty(len(self.ds), dtype=np.float64)
        at = 0
        view = self.ds.select_columns([name]).with_format("arrow")
        for table in view.iter(batch_size=10 * self.batch_size):
            col = table.column(0)
            col = compute.utf8_length(col) if keep == "longest" else col
            col = compute.fill_null(compute.cast(col, pa.float64()), -np.inf)
            out[at : at + len(col)] = col.to_numpy()
            at += len(col)
        return out


@dataclass
class Outcome:
    """Per row: status (NEW, STORED: kept; NEAR, REPEATED: removed), the kept row that
    represents it (-1: none in the dataset), the Jaccard to it (NaN: a repeated id), and
    for rows removed against a store, the stored representative's id."""

    status: np.ndarray
    rep: np.ndarray
    jaccard: np.ndarray
    kept_id: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> Outcome:
        return cls(
            np.full(n, NEW, dtype=np.int8),
            np.full(n, -1, dtype=np.int64),
            np.full(n, np.nan, dtype=np.float64),
        )

    @property
    def kept(self) -> np.ndarray:
        return np.flatnonzero((self.status == NEW) | (self.status == STORED))

    @property
    def removed(self) -> np.ndarray:
        return np.flatnonzero((self.status == NEAR) | (self.status == REPEATED))


def streamed(rows: Rows, store: SimStore, threshold: float, persistent: bool) -> Outcome:
    """keep="first": every batch through ``store`` by ``add_if_new_many``; rows are keyed
    by index in a scratch store, by id in a persistent one."""
    out = Outcome.empty(len(rows))
    stream = Stream(store, Mode(None, threshold, check_stored=persistent), track=True)

    def chunks() -> Iterator[Chunk]:
        for base, texts, ids in rows.batches(with_ids=persistent):
            keys = ids if persistent else list(range(base, base + len(texts)))
            yield Chunk("dataset", None, ids=keys, texts=texts)

    base = 0
    for dec in stream.run(chunks()):
        for i, s in enumerate(dec.status):
            row = base + i
            out.status[row] = s
            if s == NEAR:
                m = dec.near[i]
                out.jaccard[row] = m.jaccard
                if persistent:
                    out.kept_id[row] = m.doc_id
                else:
                    out.rep[row] = m.doc_id
            elif s == REPEATED:
                out.kept_id[row] = dec.keys[i]
        base += len(dec.chunk)
    return out


def ranked(rows: Rows, threshold: float, values: np.ndarray) -> Outcome:
    """keep="longest" / a column: the greedy representatives in priority order (largest
    value first, ties in row order) over every row's signature."""
    n = len(rows)
    parts = [signatures(texts, SIGNATURE_CONFIG) for _, texts, _ in rows.batches()]
    sigs = Signatures.concat(parts) if parts else None
    out = Outcome.empty(n)
    if sigs is None:
        return out
    order = np.lexsort((np.arange(n), -values))
    reps = representative_clusters(sigs, threshold=threshold, order=order)
    return _of_reps(out, reps.rep, reps.jaccard)


def _of_reps(out: Outcome, rep: np.ndarray, jaccard: Any) -> Outcome:
    """Mark every row whose representative is another one as NEAR it."""
    moved = np.flatnonzero(rep != np.arange(len(rep)))
    out.status[moved] = NEAR
    out.rep[moved] = rep[moved]
    out.jaccard[moved] = np.asarray(jaccard, dtype=np.float64)[moved]
    return out


def exact(rows: Rows, threshold: float, keep: str, values: np.ndarray | None) -> Outcome:
    """exact=True without a store: the corpus workflow's :class:`ExactPass` over the rows."""
    out = Outcome.empty(len(rows))
    if len(rows) == 0:
        return out
    with ExactPass(threshold) as exact_pass:
        for _, texts, _ in rows.batches():
            exact_pass.add(texts)
        reps = exact_pass.decide(None if keep == "first" else values)
    return _of_reps(out, reps.rep, reps.jaccard)
