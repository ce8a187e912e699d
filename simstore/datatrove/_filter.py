"""One machine, one store: a datatrove step that keeps each document once across all tasks.

Every task (a process: datatrove's ranks) opens the same store and runs its documents
through it in batches of ``batch_size``, each batch one write transaction of
``add_if_new_many`` (the :class:`simstore.corpus.ingest.Stream` that
``simstore-cli dedup-corpus --store`` runs): a document near one already stored, by any
task, is dropped; the others are stored and passed on. So the store's LMDB write lock,
not a later stage, settles which of two near-duplicate documents in two tasks stays. A
document whose id the store held before the run is passed on again (a rerun after a
crash loses nothing and decides nothing twice); a repeated id within a task is dropped.
Ids must therefore be unique across dumps (a reader's ``id_key``, not its default
``file/index``).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator
from typing import Any

from .._validate import check_int, check_path
from ..corpus import open_store
from ..corpus.ingest import Decided, Mode, Stream
from ..corpus.records import BadRecord, Chunk, check_doc_id
from ..corpus.summary import NEAR, REPEATED, STORED
from ..exceptions import SimstoreTypeError, SimstoreValueError
from ..search.similar import check_threshold
from ._deps import DiskWriter, Document, DocumentsPipeline, PipelineStep, StatHints, batched


class NearDedupFilter(PipelineStep):
    """Drop documents near one already in the store at ``path`` (see the module docstring).

    threshold: Jaccard (estimated from the sketches, or exact with ``exact=True``: the
    store then keeps shingle sets; a new path is created so). Dropped documents go to
    ``exclusion_writer`` with ``metadata["simstore_kept_id"]`` and
    ``metadata["simstore_jaccard"]``. Stats: total, forwarded, dropped,
    dropped_near_duplicate, dropped_repeated_id, stored_before.
    """

    type = "🫂 - DEDUP"
    name = "🔎 simstore near-duplicate filter"

    def __init__(
        self,
        path: str | os.PathLike[str],
        threshold: float = 0.9,
        *,
        exact: bool = False,
        exclusion_writer: DiskWriter | None = None,
        batch_size: int = 1000,
    ) -> None:
        super().__init__()
        self.path = check_path(path, "path")
        self.threshold = check_threshold(threshold)
        if not isinstance(exact, bool):
            raise SimstoreTypeError(f"'exact' must be True or False (got {type(exact).__name__})")
        self.exact = exact
        self.exclusion_writer = exclusion_writer
        self.batch_size = check_int(batch_size, "batch_size", 1)

    def run(
        self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
    ) -> Iterator[Document]:
        if data is None:
            return
        writer = self.exclusion_writer
        with open_store(self.path, threshold=self.threshold, exact=self.exact) as opened:
            with writer if writer else contextlib.nullcontext() as excluded:
                for dec, docs in self._decided(opened.store, data):
                    yield from self._settle(dec, docs, excluded, rank)

    def _decided(self, store: Any, data: Any) -> Iterator[tuple[Decided, list[Document]]]:
        """Each batch's decisions with its documents (the stream reads one batch ahead)."""
        waiting: deque[list[Document]] = deque()

        def chunks() -> Iterator[Chunk]:
            for docs in batched(data, self.batch_size):
                check_documents(docs)
                waiting.append(docs)
                yield Chunk(
                    "datatrove", None, ids=[d.id for d in docs], texts=[d.text for d in docs]
                )

        decisions = Stream(store, Mode(None, self.threshold), track=True).run(chunks())
        while True:
            with self.track_time("batch"):
                dec = next(decisions, None)
            if dec is None:
                return
            yield dec, waiting.popleft()

    def _settle(
        self, dec: Decided, docs: list[Document], excluded: Any, rank: int
    ) -> Iterator[Document]:
        for i, doc in enumerate(docs):
            self.stat_update(StatHints.total)
            s = dec.status[i]
            if s in (NEAR, REPEATED):
                self.stat_update(StatHints.dropped)
                if s == NEAR:
                    m = dec.near[i]
                    doc.metadata["simstore_kept_id"] = m.doc_id
                    doc.metadata["simstore_jaccard"] = round(float(m.jaccard), 4)
                    self.stat_update("dropped_near_duplicate")
                else:
                    doc.metadata["simstore_kept_id"] = doc.id
                    self.stat_update("dropped_repeated_id")
                if excluded is not None:
                    excluded.write(doc, rank)
                continue
            if s == STORED:
                self.stat_update("stored_before")
            self.stat_update(StatHints.forwarded)
            self.update_doc_stats(doc)
            yield doc


def check_documents(docs: list[Document]) -> None:
    """Refuse a batch holding a document without a str text or a usable id (before the
    batch's transaction: what earlier batches stored stays)."""
    for d in docs:
        if not isinstance(d.text, str):
            raise SimstoreValueError(
                f"document {d.id!r:.80}: text must be a str (got {type(d.text).__name__})"
            )
        try:
            check_doc_id(d.id, "id")
        except BadRecord as exc:
            raise SimstoreValueError(f"a document's {exc}") from None
