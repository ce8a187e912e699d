"""The persistent near-duplicate index: ``SimStore``, a thin face over its seams.

The seams are the modules of :mod:`simstore.store` (format, env, schema, the table
engines, writes, reads, maintenance); the face validates and delegates. Its dict-like
reads are in :mod:`simstore.store.mapping`, its similarity calls in
:mod:`simstore.store.similarity`, its whole-store operations (stats, verify, rebuild,
compact, pairs, clusters) in :mod:`simstore.store.upkeep`.

Every read is one short transaction, so no old snapshot pins pages while a
crawler runs for days.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb
import numpy as np

from .._validate import (
    MAX_FP,
    as_fingerprint_array,
    check_expected_size,
    check_fingerprint,
    check_int,
    check_k,
    check_path,
    parse_duration,
)
from ..exceptions import InvalidConfigError, SimstoreTypeError
from ..native.core import MAX_K
from ..search.layout import Layout, Plan, plan
from ..search.similar import DEFAULT_THRESHOLD, check_threshold
from ..text.fingerprinting import (
    DEFAULT_CONFIG,
    SIGNATURE_CONFIG,
    FingerprintConfig,
    fingerprints,
)
from ..text.minhash import Signature
from . import (
    dedup_many as _dedup_bulk,
    format as F,
    inputs as _inputs,
    reads as _reads,
    schema as _schema,
    writes as _writes,
)
from .env import PAGE, Env
from .errors import translate
from .forks import current_pid
from .format import MAX_DOC_ID_BYTES, DocId
from .mapping import MappingMethods
from .reads import Match, SimilarMatch
from .similarity import SimilarityMethods
from .upgrade import upgrade
from .upkeep import UpkeepMethods

__all__ = [
    "DEFAULT_EXPECTED_SIZE", "DEFAULT_K", "MAX_DOC_ID_BYTES", "DocId", "Match", "SimilarMatch",
    "SimStore", "upgrade",
]

# Best F1 for Jaccard >= 0.9 in docs/quality.md; k = 3 serves Jaccard >= 0.95 and is ~4x faster.
DEFAULT_K = 5
DEFAULT_EXPECTED_SIZE = 1_000_000
_MIN_MAP_SIZE = 1 << 26
_MAX_INITIAL_MAP = 1 << 36
_QUERY_CHUNK = 256


class SimStore(MappingMethods, SimilarityMethods, UpkeepMethods):
    """A persistent index of (doc id, 64-bit fingerprint) answering Hamming queries.

    ``SimStore(path)`` opens the store at ``path`` or creates it there (the
    directory must be missing or empty). On creation ``k`` (default 5, at most
    16) fixes the largest distance the tables answer by index lookups and
    ``expected_size`` (default 1M) tunes their headers; ``config`` records the
    fingerprint scheme. On reopen these come from the store: passing a
    different k or config raises :class:`LayoutMismatchError` /
    :class:`ConfigMismatchError` and changes nothing; ``expected_size`` is
    then ignored.

    ``exact=True`` (a signature config, SIGNATURE_CONFIG by default) creates an
    *exact* store: it keeps each doc's shingle set (about 8 bytes a distinct
    shingle on disk, docs/exact-store.md), takes texts (or ``signatures_and_sets``
    pairs) instead of Signatures, and ``similar()`` and ``add_if_new(...,
    threshold=t)`` decide by exact Jaccard. Recorded in the store; ``exact=None``
    (default) opens either kind.

    ``durable=True`` (default): a returned write is on disk. ``durable=False``
    skips the fsyncs (LMDB ``sync=False, metasync=False``): an OS crash or power
    loss may lose the last commits, but never corrupts the store; process
    crashes lose nothing. ``readonly=True`` never writes and refuses writes
    with :class:`ReadOnlyError`. ``readahead`` (default None: off for a store
    larger than half the memory the process may use, its cgroup's or the
    machine's) lets the OS read 128 KB around each page a query reads.

    Many processes may open one store; writes are serialized by LMDB. A
    handle is usable from several threads (calls are serialized). After
    ``os.fork()`` the child reopens the environment on first use; pickling
    reopens by path, so a store can be passed to multiprocessing workers.
    """

    def __init__(
        self,
        path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        *,
        k: int | None = None,
        expected_size: int | None = None,
        config: FingerprintConfig | None = None,
        readonly: bool = False,
        durable: bool = True,
        map_size: int | None = None,
        max_readers: int = 512,
        exact: bool | None = None,
        readahead: bool | None = None,
    ) -> None:
        spath = check_path(path, "path")
        max_readers = check_int(max_readers, "max_readers", 1)
        self._want_k = None if k is None else check_k(k, "k", MAX_K)
        size = (
            DEFAULT_EXPECTED_SIZE if expected_size is None else check_expected_size(expected_size)
        )
        if config is not None and not isinstance(config, FingerprintConfig):
            raise SimstoreTypeError(
                f"'config' must be a FingerprintConfig (got {type(config).__name__})"
            )
        if map_size is not None:
            map_size = check_int(map_size, "map_size", PAGE)
        for name, flag in (("exact", exact), ("readahead", readahead)):
            if flag is not None and not isinstance(flag, bool):
                raise SimstoreTypeError(f"{name!r} must be a bool (got {type(flag).__name__})")
        if exact and config is not None and not config.has_signature:
            raise InvalidConfigError(
                "'exact' keeps each doc's shingle set for exact Jaccard: it needs a signature "
                f"config (config=simstore.SIGNATURE_CONFIG), not {config.scheme}"
            )
        self._want_config = config
        self._want_exact = exact
        self._expected_size = size
        self._map_size = map_size
        planned = plan(DEFAULT_K if self._want_k is None else self._want_k, size)
        self._layout: Layout = planned.layout
        self._config: FingerprintConfig = config or (
            SIGNATURE_CONFIG if exact else DEFAULT_CONFIG)
        self._env = Env(
            spath,
            readonly=bool(readonly),
            durable=bool(durable),
            max_readers=max_readers,
            map_size=map_size or _initial_map_size(planned, size),
            on_open=self._on_open,
            readahead=readahead,
        )
        self._scanner = _reads.Scanner(self._env)
        self._env.open()

    # --- opening: metadata and handles --------------------------------------------

    def _on_open(self, env: Any, creating: bool) -> None:
        """Create or check the metadata, then bind the databases (every (re)open)."""
        path = self._env.path
        envobj = self._env  # not self: the handles must not keep the store alive
        epoch = lambda: envobj.epoch  # noqa: E731 - the run tables' map epoch
        # the handle's begin adopts a map another process grew since the open; a store
        # being created aside (create_aside) has an environment of its own, unshared
        begin = envobj.begin if envobj.env is env else None
        with self._env.translated():
            h = None
            if creating:
                h = _schema.create(env, path, self._layout, self._config, epoch,
                                   exact=bool(self._want_exact), begin=begin)
            if h is None:
                h = _schema.load(env, path, self._want_k, self._want_config, epoch,
                                 self._want_exact, begin=begin)
        self._h = h
        self._layout = h.layout
        self._config = h.config

    # --- transactions --------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[SimStore]:
        """Group writes into one transaction: one commit (one fsync) at the end.

        Reads inside the block see its writes; an exception aborts them all.
        The handle is held by this thread for the block (other threads wait);
        other processes see nothing until the commit. Nested blocks join the
        outer one.
        """
        with self._env.batch():
            yield self
        self._repay()

    # --- writes ----------------------------------------------------------------------

    def _write(self, op: Any, *args: Any, need: int = 0) -> Any:
        """op(txn, handles, *args) in a write transaction, with the handles of the live env.

        (After fork the environment is reopened first, and the handles with it.)
        """
        with self._env.lock:
            self._env.live()
            out = self._env.write(op, self._h, *args, need=need)
            self._repay()
            return out

    def _repay(self) -> None:
        """After a commit outside batch(): the merging a bulk write left owed, in commits
        of their own (each as crash-safe as any: a killed process leaves the merge to the
        next writes), so the pages it frees are reused as it goes."""
        env = self._env
        with env.lock:
            if env.wtxn is not None:  # inside batch(): its end pays
                return
            owed = self._h.tables.take_owed(env.committed)
            while owed > 0:
                spent = env.write(_writes.repay, self._h, owed)
                if not spent:
                    break
                owed -= spent

    def add(self, doc_id: DocId, fp: int | Signature, *, at: float | None = None) -> None:
        """Store doc_id with fingerprint fp (a Signature in a similarity store; the text, or
        a (Signature, ShingleSets) pair, in an exact store).

        An existing doc_id gets the new fingerprint (and signature). ``at``: its time of
        storage in seconds since the Unix epoch (default: now; give it for replays and
        tests), kept to the millisecond: :meth:`expire` and ``since=`` read it.
        """
        enc = F.encode_id(doc_id)
        when = F.at_ms(at)
        q, extra = _inputs.item(self._h, fp)
        self._write(_writes.add, enc, q, extra, when)

    def touch(self, doc_id: DocId, *, at: float | None = None) -> bool:
        """Give a stored doc a new time of storage (default: now), its content unchanged:
        a recrawl that found it the same. Whether it was stored."""
        enc = F.encode_id(doc_id)
        return bool(self._write(_writes.touch, enc, F.at_ms(at)))

    def stored_at(self, doc_id: DocId) -> float | None:
        """When doc_id was stored (seconds since the Unix epoch, to the ms), or None."""
        enc = F.encode_id(doc_id)
        with self._env.reading() as txn:
            found = self._h.idx.find(txn, enc)
            return None if found is None else self._h.codec.stored_at(found[1]) / 1000

    def expire(self, older_than: float | str | None = None, *, before: float | None = None,
               batch: int = 1000) -> int:
        """Remove every doc stored more than ``older_than`` ago (seconds, or a duration
        such as ``"30d"``), or before the time ``before`` (seconds since the epoch).

        Runs while others read and write: docs are found a slice of the docs table at a
        time, each in a short read transaction, and removed in commits of at most
        ``batch`` docs (a doc stored again meanwhile is kept). A kill leaves some removed,
        the rest for the next call. Returns how many were removed.
        """
        cutoff = expiry_cutoff(older_than, before)
        n = check_int(batch, "batch", 1)
        env, removed = self._env, 0
        start = b""
        while True:
            with env.reading() as txn:
                encs, start = _reads.stored_before(self._h, txn, cutoff, start, 64 * n)
            for a in range(0, len(encs), n):
                removed += int(self._write(_writes.expire, encs[a : a + n], cutoff))
            if start is None:
                return removed

    def add_many(self, doc_ids: Iterable[DocId], fps: Any, *, at: float | None = None
                 ) -> None:
        """Store many docs in one transaction; a doc_id given twice keeps its last fp.

        fps: fingerprints (uint64 array or ints), or Signatures in a similarity
        store. The fast path for bulk loads: each table gets its keys sorted
        (appended in key order when the table is empty). Int ids (a range, an
        int array or a list of ints) are encoded with numpy, not one by one. The docs
        commit first; a large batch's share of merging then goes on in bounded
        commits of their own before this returns (a kill between them leaves it to
        later writes; an error there is raised, the docs stay stored). ``at``: one time
        of storage for all (seconds since the epoch; default: now).
        """
        when = F.at_ms(at)
        batch = _inputs.many(self._h, doc_ids, fps)
        if len(batch.ids):
            need = _inputs.bytes_needed(self._h, batch)
            self._write(_writes.add_many, *batch, when, need=need)

    def remove(self, doc_id: DocId) -> bool:
        """Delete doc_id; True if it was stored, False if not (never raises KeyError)."""
        enc = F.encode_id(doc_id)
        return bool(self._write(_writes.remove, enc))

    def remove_many(self, doc_ids: Iterable[DocId]) -> int:
        """Delete many docs in one transaction; returns how many were stored."""
        encs = [F.encode_id(d) for d in F.doc_ids_list(doc_ids)]
        return int(self._write(_writes.remove_many, encs))

    def add_if_new(
        self,
        doc_id: DocId,
        fp: int | Signature,
        k: int | None = None,
        *,
        threshold: float | None = None,
        at: float | None = None,
        since: float | None = None,
    ) -> list[Any]:
        """The crawler's call: near-duplicates already stored, storing the doc only if none.

        In ONE write transaction (so atomic across processes): find every
        stored doc within k (default: the store's k) of fp -- or, in a
        similarity store given a Signature and no k, every doc with estimated
        Jaccard >= threshold (default 0.9) -- and if there is none, store the
        doc and return []; otherwise store nothing and return the matches
        (:class:`Match`, or :class:`SimilarMatch` by similarity). A doc_id
        already stored counts like any other doc: an unchanged recrawl returns
        its own old entry and keeps it. An exact store takes the text (or a
        ``(Signature, ShingleSets)`` pair) and decides by exact Jaccard >= threshold.
        ``at``: the doc's time of storage (as :meth:`add`); ``since``: only docs stored
        at or after this time (seconds since the epoch) count, older ones are left as
        they are (:meth:`expire` removes them).
        """
        enc = F.encode_id(doc_id)
        when, after = F.at_ms(at), _since_ms(since)
        query = None
        if self._h.exact:
            q, extra, query = _inputs.exact_item(self._h, fp)
        else:
            q, extra = _inputs.item(self._h, fp)
        if extra is not None and k is None:
            t = check_threshold(DEFAULT_THRESHOLD if threshold is None else threshold)
            keys = extra[1]
            sketch = fp.sketch if isinstance(fp, Signature) else None
            return self._write(  # type: ignore[no-any-return]
                _writes.add_if_similar, enc, q, extra, sketch, keys, t, query, when, after
            )
        if threshold is not None:
            raise InvalidConfigError(
                "'threshold' needs a similarity store, a Signature and no k; give k for a "
                "Hamming check"
            )
        kk = self._k_arg(k)
        return self._write(  # type: ignore[no-any-return]
            self._op_add_if_new, enc, q, extra, kk, when, after)

    def _op_add_if_new(
        self, txn: Any, h: _schema.Handles, enc: bytes, fp: int, extra: _writes.Extra,
        k: int, at: int, since: int | None,
    ) -> list[Match]:
        found = self._search(txn, fp, k, since)
        if not found:
            _writes.add(txn, h, enc, fp, extra, at)
        return found

    def add_if_new_many(
        self,
        doc_ids: Iterable[DocId],
        fps: Any,
        k: int | None = None,
        *,
        threshold: float | None = None,
        at: float | None = None,
        since: float | None = None,
    ) -> list[list[Any]]:
        """:meth:`add_if_new` for many docs, in input order, in ONE write transaction.

        Returns one list per doc: exactly what ``add_if_new(doc_ids[i], fps[i], k,
        threshold=threshold)`` called in input order would return -- [] when the
        doc was stored, else its matches, nearest first -- and leaves the store as
        those calls would. So a doc is stored only if nothing near it is stored at
        its turn: no doc stored before the call and no earlier doc of this call
        that was stored (a later near copy names the earlier one); an id given
        again, or already stored, is replaced when its new item is not near
        anything. fps: as :meth:`add_many` takes them (uint64 fingerprints, or
        Signatures; a similarity store with no k checks estimated Jaccard >=
        threshold, default 0.9). Atomic against other processes: they see all
        the call's writes or none, and no other writer runs during it. The fast
        path of streaming dedup: candidates are looked up for all docs at once
        and the stored docs written in bulk (see :mod:`simstore.store.dedup_many`).
        ``at`` and ``since`` as for :meth:`add_if_new` (one time of storage for all).
        """
        when, after = F.at_ms(at), _since_ms(since)
        encs = [F.encode_id(d) for d in F.doc_ids_list(doc_ids)]
        # distinct stand-in ids: only the checks and columns of add_many's input are wanted
        cols = _inputs.many(self._h, np.arange(len(encs), dtype=np.int64), fps)
        if cols.sketches is not None and k is None:
            t = check_threshold(DEFAULT_THRESHOLD if threshold is None else threshold)
            rule = _dedup_bulk.Rule(None, t, after, when)
        elif threshold is not None:
            raise InvalidConfigError(
                "'threshold' needs a similarity store, Signatures and no k; give k for a "
                "Hamming check"
            )
        else:
            rule = _dedup_bulk.Rule(self._k_arg(k), None, after, when)
        if not encs:
            return []
        docs = _dedup_bulk.Docs(encs, cols.fps, cols.sketches, cols.bands, cols.sets)
        need = _inputs.bytes_needed(self._h, cols)
        return self._write(_dedup_bulk.add_if_new_many, docs, rule, need=need)  # type: ignore[no-any-return]

    # --- reads -------------------------------------------------------------------------

    def _k_arg(self, k: int | None) -> int:
        return self._layout.max_k if k is None else check_k(k)

    def query(self, fp: int, k: int | None = None, *, since: float | None = None
              ) -> list[Match]:
        """Every stored doc within Hamming distance k of fp, exactly.

        Sorted by distance, then insertion order. k defaults to the store's k;
        any k <= the store's k uses the tables; a larger k (up to 64) is
        answered exactly too, by a C scan of all stored fingerprints (O(n)).
        ``since``: only docs stored at or after this time (seconds since the epoch).
        """
        if since is not None:
            after = _since_ms(since)
            with self._env.reading() as txn:
                return self._search(txn, self._fp_arg(fp), self._k_arg(k), after)
        if type(fp) is int and 0 <= fp <= MAX_FP:
            q = fp
        else:
            q = fp.fingerprint if isinstance(fp, Signature) else check_fingerprint(fp)
        if k is None:
            kk = self._layout.max_k
        else:
            kk = k if type(k) is int and 0 <= k <= 64 else check_k(k)
        env = self._env
        with env.lock:
            if env.wtxn is not None or env.closed or current_pid() != env.pid:
                with env.reading() as txn:
                    return self._search(txn, q, kk)
            # The fast path: a fresh read transaction, no fork or batch to handle. It pays:
            # through env.reading() instead, query p50 was 1.23x (k = 3 and 5, 200k; `ab
            # --base HEAD`, head = this block replaced: docs/bench/ab-readpath.json).
            txn = env.begin(False)
            try:
                return self._search(txn, q, kk)
            except lmdb.Error as exc:
                raise translate(exc, env.path) from exc
            finally:
                txn.abort()

    def query_many(self, fps: Any, k: int | None = None) -> list[list[Match]]:
        """:meth:`query` for each fingerprint (a uint64 array or an iterable of ints)."""
        arr = as_fingerprint_array(fps)
        kk = self._k_arg(k)
        out: list[list[Match]] = []
        qs = arr.tolist()
        for start in range(0, len(qs), _QUERY_CHUNK):
            with self._env.reading() as txn:
                out.extend(self._search(txn, q, kk) for q in qs[start : start + _QUERY_CHUNK])
        return out

    def _fp_arg(self, fp: Any) -> int:
        return fp.fingerprint if isinstance(fp, Signature) else check_fingerprint(fp)

    def _search(self, txn: Any, q: int, k: int, since: int | None = None) -> list[Match]:
        """Every doc within k of q (k <= the layout's k uses the tables), stored since
        ``since`` (ms) when given."""
        if k > self._layout.max_k:
            return self._scanner.scan(self._h, txn, q, k, since)
        rows = self._h.tables.search(txn, q, k)
        if rows and since is not None:
            rows = _reads.recent(self._h, txn, rows, since)
        return _reads.matches(self._h, txn, rows) if rows else []

    def fingerprint(self, text: str) -> int:
        """The fingerprint of a text under this store's own recorded config."""
        return int(self.fingerprint_texts([text])[0])

    def fingerprint_texts(self, texts: Iterable[str]) -> np.ndarray:
        """Fingerprints (uint64) of many texts under this store's recorded config."""
        return fingerprints(texts, self._config)

    # --- properties and lifecycle -------------------------------------------------------

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._env.path

    @property
    def k(self) -> int:
        """The largest distance the tables answer (larger k falls back to a scan)."""
        return self._layout.max_k

    @property
    def layout(self) -> Layout:
        """The table layout recorded in the store."""
        return self._layout

    @property
    def config(self) -> FingerprintConfig:
        """The fingerprint scheme recorded in the store."""
        return self._config

    @property
    def exact(self) -> bool:
        """Whether the store keeps each doc's shingle set and decides by exact Jaccard."""
        return self._h.exact

    @property
    def readonly(self) -> bool:
        """Whether this handle refuses writes."""
        return self._env.readonly

    def sync(self) -> None:
        """Flush to disk now (useful with durable=False)."""
        with self._env.lock, self._env.translated():
            self._env.live().sync(True)

    def close(self) -> None:
        """Close the handle (idempotent); later calls raise StoreClosedError."""
        self._env.close()

    def __enter__(self) -> SimStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle by path and options: the receiver opens the store itself."""
        env = self._env
        return (
            _reopen,
            (env.path, self._layout.max_k, self._config, env.readonly, env.durable,
             self._map_size, env.max_readers, self._h.exact, env.readahead),
        )

    def __repr__(self) -> str:
        env = self._env
        state = "closed" if env.closed else ("readonly" if env.readonly else "open")
        return f"SimStore({env.path!r}, k={self.k}, {state})"


def _reopen(
    path: str, k: int, config: FingerprintConfig, readonly: bool, durable: bool,
    map_size: int | None, max_readers: int, exact: bool = False,
    readahead: bool | None = None,
) -> SimStore:
    return SimStore(
        path, k=k, config=config, readonly=readonly, durable=durable,
        map_size=map_size, max_readers=max_readers, exact=exact, readahead=readahead,
    )


def _initial_map_size(planned: Plan, expected_size: int) -> int:
    est = planned.bytes_per_fingerprint * max(expected_size, 1) // 4
    # Only a starting size (the map grows on demand): capped so a huge expected_size
    # cannot ask for more address space than the machine has.
    size = min(max(_MIN_MAP_SIZE, est), _MAX_INITIAL_MAP)
    return -(-size // PAGE) * PAGE


def _since_ms(since: float | None) -> int | None:
    """``since`` (seconds since the epoch, or None) in ms."""
    return None if since is None else F.at_ms(since, "since")


def expiry_cutoff(older_than: float | str | None, before: float | None) -> int:
    """The time (ms since the epoch) before which :meth:`SimStore.expire` removes docs."""
    if (older_than is None) == (before is None):
        raise InvalidConfigError("expire() takes one of 'older_than' (an age) and 'before' "
                                 "(a time in seconds since the epoch)")
    if before is not None:
        return F.at_ms(before, "before")
    return max(F.now_ms() - int(parse_duration(older_than, "older_than") * 1000), 0)
