"""The streaming writer of the corpus workflow: chunks in, one write transaction per chunk.

For each chunk: the ids already stored (or repeated in the input) are set
aside *before* any fingerprinting; the remaining texts are fingerprinted (or
signed) on a worker thread while the previous chunk commits (the C pipeline
releases the GIL); then, in ONE write transaction (``store.batch()``), every
document is added (``add_many``) or decided by ``add_if_new_many`` (what
``add_if_new`` in input order would do, in one pass), and the caller's
``write`` callback runs before the commit. A chunk is durable at its commit
and is atomic against other processes: they see all of it or none of it, and
no other writer runs between one document's check and its insertion. Ctrl-C
is held back while a chunk is decided, written out and committed, so it stops
the run between chunks: the committed ones stay, and the outputs hold exactly
those.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..store import SimStore
from ..store.decisions import Decisions
from ..text.fingerprinting import fingerprints
from ..text.jaccard import signatures_and_sets
from ..text.minhash import signatures
from .progress import Bar, Progress
from .readers import Chunk, iter_chunks
from .records import OnBad
from .seen import SeenIds
from .sources import Inputs, ReadOptions
from .summary import NEAR, NEW, REPEATED, STORED, CorpusSummary, Interrupted
from .writers import Outputs


@dataclass
class Decided:
    """What happened to each document of a chunk: NEW, STORED (its id was stored before
    this run met it), REPEATED (its id came earlier in the input) or NEAR.

    ``near[i]`` is the nearest stored match (Match / SimilarMatch) of a NEAR document.
    """

    chunk: Chunk
    keys: list[Any]
    status: list[int]
    near: dict[int, Any] = field(default_factory=dict)
    # a NEAR document's removed-report fields beyond its id and place, as the store
    # remembers them (a run with ``memory``): decided now, or by an earlier run
    records: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Mode:
    """How documents go in: add everything (k and threshold None) or only the new ones
    (``add_if_new_many``: add_if_new's rule, in input order)."""

    k: int | None = None
    threshold: float | None = None
    check_stored: bool = True  # set aside ids already stored (off for private scratch stores)

    @property
    def dedup(self) -> bool:
        return self.k is not None or self.threshold is not None


@dataclass(frozen=True)
class CorpusRun:
    """One :func:`simstore.corpus.dedup_corpus` run as its passes see it (each pass takes
    this one value; nothing in it is replaced once made, the summary only counts up)."""

    inp: Inputs
    opts: ReadOptions  # every pass reads with these; :meth:`chunks` says whether rows stay
    out: Outputs  # started: the kept documents' writer and the removed report
    summary: CorpusSummary
    keep: str  # "first", "longest" or a FIELD
    skip_bad: bool
    on_bad: OnBad  # bad records: raise, or count and report (readers.bad_handler)
    progress: Progress
    mode: Mode
    store: SimStore | None = None  # None: the exact rule, which keeps no store
    persistent: bool = False  # the caller's store (else a private scratch one, or none)

    def chunks(self, with_rows: bool, on_bad: OnBad | None = None) -> Iterator[Chunk]:
        """The input's chunks, each record kept as read too (``with_rows``) for a pass that
        writes them out; bad records go to ``on_bad`` (default: the run's)."""
        opts = replace(self.opts, with_rows=with_rows)
        return iter_chunks(self.inp.sources, opts, self.on_bad if on_bad is None else on_bad)


def _items(store: SimStore, texts: list[str]) -> Any:
    """Signatures (a similarity store) or fingerprints under the store's recorded config;
    an exact store's (Signatures, ShingleSets) pair, made in one pass over the texts."""
    cfg = store.config
    if store.exact:
        return signatures_and_sets(texts, cfg)
    return signatures(texts, cfg) if cfg.has_signature else fingerprints(texts, cfg)


class Stream:
    """Runs chunks through a store (see the module docstring)."""

    def __init__(self, store: SimStore, mode: Mode,
                 key_of: Callable[[Chunk], list[Any]] | None = None,
                 track: bool = False, memory: Decisions | None = None) -> None:
        """track: an id's first occurrence in the run is decided (STORED if the store holds
        it), later ones are REPEATED, whatever the chunks (:class:`SeenIds`); else ids
        repeated within a chunk or the one before are REPEATED, stored ones STORED.
        memory: the store's record of earlier decisions (:mod:`simstore.store.decisions`):
        an id an earlier run removed is NEAR again without being decided, with the record
        it was given then; each chunk's decisions are added to it in the chunk's commit."""
        self.store = store
        self.mode = mode
        self.key_of = key_of or (lambda c: list(c.ids))
        self.seen = SeenIds() if mode.check_stored and track else None
        self.memory = memory

    def _split(self, chunk: Chunk, keys: list[Any],
               pending: set[Any]) -> tuple[list[int], set, list[int], dict[int, Any]]:
        """(positions to fingerprint, their keys, every document's status: NEW for those,
        the remembered records of documents an earlier run removed)."""
        fresh, seen = [], set()
        status = [NEW] * len(keys)
        run_seen, check, store = self.seen, self.mode.check_stored, self.store
        for i, key in enumerate(keys):
            if (key in seen or key in pending) if run_seen is None else \
                    not run_seen.first(key):
                status[i] = REPEATED
                continue
            if check and key in store:
                status[i] = STORED
                continue
            seen.add(key)
            fresh.append(i)
        records: dict[int, Any] = {}
        if self.memory is not None and fresh:
            known = self.memory.removed([keys[i] for i in fresh])
            for i in fresh:
                if keys[i] in known:
                    status[i] = NEAR
                    records[i] = known[keys[i]]
                    seen.discard(keys[i])
            fresh = [i for i in fresh if i not in records]
        return fresh, seen, status, records

    def run(self, chunks: Iterable[Chunk],
            write: Callable[[Decided], None] | None = None) -> Iterator[Decided]:
        """Each chunk's decisions, yielded after its commit (``write`` runs just before it)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-fingerprint")
        pending: _Pending | None = None
        pending_keys: set[Any] = set()
        try:
            for chunk in chunks:
                keys = self.key_of(chunk)
                fresh, fresh_keys, status, records = self._split(chunk, keys, pending_keys)
                fut = pool.submit(_items, self.store, [chunk.texts[i] for i in fresh])
                if pending is not None:
                    yield from self._committed(pending, write)
                pending = _Pending(Decided(chunk, keys, status, records=records), fresh, fut)
                pending_keys = fresh_keys
            if pending is not None:
                yield from self._committed(pending, write)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _committed(self, pending: _Pending,
                   write: Callable[[Decided], None] | None) -> Iterator[Decided]:
        """Commit a chunk and yield its decisions; a Ctrl-C meanwhile is raised after the
        caller has counted them, so the outputs, the store and the count agree."""
        items = pending.items.result()  # waiting for the signatures: Ctrl-C acts at once
        if pending.dec.chunk.kind != "text":
            # hashed: the rows as read are written out, never the texts (a long one goes now)
            pending.dec.chunk.texts.clear()
        with _SigintHold() as hold:
            self._commit(pending.dec, pending.fresh, items, write)
        yield pending.dec
        hold.deliver()

    def _commit(self, dec: Decided, fresh: list[int], items: Any,
                write: Callable[[Decided], None] | None) -> None:
        """Decide, remember, write out and commit one chunk in one write transaction."""
        with self.store.batch():
            self._decide(dec, fresh, items)
            if self.memory is not None:
                self._remember(dec, fresh)
            if write is not None:
                write(dec)

    def _remember(self, dec: Decided, fresh: list[int]) -> None:
        """Add the chunk's new decisions to the store's memory (in its transaction): where
        each kept document was read, and each removed one's report record."""
        assert self.memory is not None
        c, keys = dec.chunk, dec.keys
        kept = [(keys[i], c.location(i)) for i in fresh if dec.status[i] == NEW]
        near = [i for i in fresh if dec.status[i] == NEAR]
        recs = self.memory.record(
            kept, [(keys[i], dec.near[i].doc_id, nearness(dec.near[i])) for i in near])
        dec.records.update(zip(near, recs, strict=True))

    def _decide(self, dec: Decided, fresh: list[int], items: Any) -> None:
        """Add the chunk's documents at positions ``fresh`` (items: theirs), or offer them
        to ``add_if_new_many`` and mark the near-duplicates NEAR."""
        if not fresh:
            return
        store, mode = self.store, self.mode
        keys = [dec.keys[i] for i in fresh]
        if not mode.dedup:
            store.add_many(keys, items)
            return
        if mode.threshold is not None:
            found = store.add_if_new_many(keys, items, threshold=mode.threshold)
        else:
            found = store.add_if_new_many(keys, items, mode.k)
        for i, near in zip(fresh, found, strict=True):
            if near:
                dec.status[i] = NEAR
                dec.near[i] = near[0]


@dataclass
class _Pending:
    """A chunk read and split, its signatures being made: committed next."""

    dec: Decided
    fresh: list[int]
    items: Future[Any]


def nearness(match: Any) -> dict[str, Any]:
    """How near a removed document is to its kept one, as the removed report says it."""
    if hasattr(match, "jaccard"):
        return {"jaccard": round(float(match.jaccard), 4)}
    return {"distance": int(match.distance)}


class _SigintHold:
    """Holds SIGINT (Ctrl-C) back during a ``with`` block; :meth:`deliver` raises it later.

    Delivered as it would have been (the previous handler is called: by default a
    KeyboardInterrupt). Only the main thread receives signals in Python; elsewhere
    this holds nothing.
    """

    def __init__(self) -> None:
        self._old: Any = None
        self._active = False
        self._caught: Any = None

    def __enter__(self) -> _SigintHold:
        # SIGINT ignored (a process started under nohup or in the background): keep it so
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            self._old = signal.signal(signal.SIGINT, self._note)
            self._active = True
        return self

    def _note(self, signum: int, frame: Any) -> None:
        self._caught = (signum, frame)

    def __exit__(self, *exc: object) -> None:
        if self._active:
            signal.signal(signal.SIGINT, self._old)
            self._active = False

    def deliver(self) -> None:
        """Raise (or pass on) the held SIGINT, if one came during the block."""
        caught, self._caught = self._caught, None
        if caught is None:
            return
        if callable(self._old):
            self._old(*caught)
        elif self._old == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


def tally(summary: CorpusSummary, bar: Bar, c: Chunk, status: Sequence[int]) -> None:
    """Count a written chunk, then the progress bar's step for it."""
    summary.count(c, status)
    bar.update(c.nbytes, docs=summary.documents, kept=summary.kept, removed=summary.removed)


@contextmanager
def committing(out: Outputs, summary: CorpusSummary) -> Iterator[None]:
    """Write a run's outputs in the block: ``out.close(True)`` publishes them when it ends
    normally, anything else drops them; Ctrl-C becomes :class:`Interrupted` (a rerun
    writes every stored document again)."""
    committed = False
    try:
        yield
        committed = True
    except KeyboardInterrupt:
        raise Interrupted(summary) from None
    finally:
        out.close(committed)
