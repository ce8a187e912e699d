"""The streaming writer of the corpus workflow: chunks in, one write transaction per chunk.

For each chunk: the ids already stored (or repeated in the input) are set
aside *before* any fingerprinting; the remaining texts are fingerprinted (or
signed) on a worker thread while the previous chunk commits (the C pipeline
releases the GIL); then, in ONE write transaction (``store.batch()``), every
document is added (``add_many``) or offered to ``add_if_new`` in input order,
and the caller's ``write`` callback runs before the commit. A chunk is durable
at its commit and is atomic against other processes: they see all of it or
none of it, and no other writer runs between one document's check and its
insertion. An interrupt aborts the chunk in flight; the committed ones stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ._readers import Chunk
from .fingerprinting import fingerprints
from .signature import signatures
from .store import SimStore

NEW, STORED, NEAR = 0, 1, 2


@dataclass
class Decided:
    """What happened to each document of a chunk: NEW, STORED (id already there) or NEAR.

    ``near[i]`` is the nearest stored match (Match / SimilarMatch) of a NEAR document.
    """

    chunk: Chunk
    keys: list[Any]
    status: list[int]
    near: dict[int, Any] = field(default_factory=dict)


@dataclass
class Mode:
    """How documents go in: add everything (k and threshold None) or add_if_new."""

    k: int | None = None
    threshold: float | None = None
    check_stored: bool = True  # set aside ids already stored (off for private scratch stores)

    @property
    def dedup(self) -> bool:
        return self.k is not None or self.threshold is not None


def _items(store: SimStore, texts: list[str]) -> Any:
    """Signatures (a similarity store) or fingerprints under the store's recorded config."""
    cfg = store.config
    return signatures(texts, cfg) if cfg.has_signature else fingerprints(texts, cfg)


class Stream:
    """Runs chunks through a store (see the module docstring)."""

    def __init__(self, store: SimStore, mode: Mode,
                 key_of: Callable[[Chunk], list[Any]] | None = None) -> None:
        self.store = store
        self.mode = mode
        self.key_of = key_of or (lambda c: list(c.ids))

    def _split(self, chunk: Chunk, keys: list[Any], pending: set[Any]) -> tuple[list[int], set]:
        """(positions to fingerprint, their keys); the others are STORED."""
        fresh, seen = [], set()
        check = self.mode.check_stored
        store = self.store
        for i, key in enumerate(keys):
            if key in seen or key in pending or (check and key in store):
                continue
            seen.add(key)
            fresh.append(i)
        return fresh, seen

    def run(self, chunks: Iterable[Chunk],
            write: Callable[[Decided], None] | None = None) -> Iterator[Decided]:
        """Each chunk's decisions, yielded after its commit (``write`` runs just before it)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-fingerprint")
        pending: tuple[Chunk, list[Any], list[int], Future[Any]] | None = None
        pending_keys: set[Any] = set()
        try:
            for chunk in chunks:
                keys = self.key_of(chunk)
                fresh, fresh_keys = self._split(chunk, keys, pending_keys)
                texts = [chunk.texts[i] for i in fresh]
                fut = pool.submit(_items, self.store, texts)
                if pending is not None:
                    yield self._commit(*pending, write)
                pending, pending_keys = (chunk, keys, fresh, fut), fresh_keys
            if pending is not None:
                yield self._commit(*pending, write)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _commit(self, chunk: Chunk, keys: list[Any], fresh: list[int], fut: Future[Any],
                write: Callable[[Decided], None] | None) -> Decided:
        items = fut.result()
        status = [STORED] * len(chunk)
        for i in fresh:
            status[i] = NEW
        dec = Decided(chunk, keys, status)
        store, mode = self.store, self.mode
        with store.batch():
            if not mode.dedup:
                if fresh:
                    store.add_many([keys[i] for i in fresh], items)
            else:
                sim = store.config.has_signature
                t, k = mode.threshold, mode.k
                for j, i in enumerate(fresh):
                    item = items[j] if sim else int(items[j])
                    if t is not None:
                        found = store.add_if_new(keys[i], item, threshold=t)
                    else:
                        found = store.add_if_new(keys[i], item, k)
                    if found:
                        status[i] = NEAR
                        dec.near[i] = found[0]
            if write is not None:
                write(dec)
        return dec


def count_corpus(summary: Any, c: Chunk, status: list[int] | Any) -> None:
    """Add a chunk's outcome to a CorpusSummary (kept = NEW, removed = NEAR)."""
    summary.documents += len(c)
    summary.bytes += c.nbytes
    for s in status:
        if s == NEW:
            summary.kept += 1
        elif s == NEAR:
            summary.removed += 1
        else:
            summary.already_stored += 1
    if len(c):
        summary.last = c.location(len(c) - 1)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a corpus run; ``summary`` (an IndexSummary or CorpusSummary of
    :mod:`simstore.corpus`) counts the committed chunks only."""

    def __init__(self, summary: Any) -> None:
        super().__init__("interrupted")
        self.summary = summary
