"""The persistent near-duplicate index: ``SimStore``, a thin face over its seams.

The seams are the modules of :mod:`simstore.store` (format, env, schema, the run-table
engine, writes, reads, maintenance); the face validates and delegates. One class, read
whole: opening, transactions, writes, queries, the dict-like reads, the similarity calls
and the whole-store operations (stats, verify, rebuild, compact, pairs, clusters).

Every read is one short transaction, so no old snapshot pins pages while a
crawler runs for days.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import lmdb
import numpy as np

from .._validate import (
    MAX_FP,
    as_fingerprint_array,
    check_durable,
    check_expected_size,
    check_fingerprint,
    check_int,
    check_k,
    check_path,
    check_seconds,
    parse_duration,
)
from ..exceptions import (
    InvalidConfigError,
    NotSimilarityStoreError,
    SimstoreTypeError,
    StoreError,
)
from ..native.core import MAX_K
from ..search.layout import Layout, Plan, plan
from ..search.similar import DEFAULT_THRESHOLD, check_threshold, similar_pairs_arrays
from ..text.fingerprinting import (
    DEFAULT_CONFIG,
    SIGNATURE_CONFIG,
    FingerprintConfig,
    fingerprint,
    fingerprints,
)
from ..text.jaccard import ShingleSets
from ..text.minhash import Signature, Signatures, signature, signatures
from . import (
    dedup_many as _dedup_bulk,
    format as F,
    inputs as _inputs,
    maintenance as _maintenance,
    reads as _reads,
    schema as _schema,
    shingles as _shingles,
    writes as _writes,
)
from .dedup_many import Recrawl
from .env import Env, NamedDatabases, current_pid, translate
from .format import MAX_DOC_ID_BYTES, PAGE, DocId, decode_id
from .maintenance import layout_fit
from .reads import Match, SimilarMatch
from .upgrade import upgrade

__all__ = [
    "DEFAULT_EXPECTED_SIZE", "DEFAULT_K", "MAX_DOC_ID_BYTES", "DocId", "Match", "Recrawl",
    "SimilarMatch", "SimStore", "upgrade",
]

# Best F1 for Jaccard >= 0.9 in docs/quality.md; k = 3 serves Jaccard >= 0.95 and is ~4x faster.
DEFAULT_K = 5
DEFAULT_EXPECTED_SIZE = 1_000_000
_MIN_MAP_SIZE = 1 << 26
_MAX_INITIAL_MAP = 1 << 36
_MAX_MAP = 1 << 62  # map_size: LMDB takes no more (and no machine maps as much)
_MAX_READERS = 1 << 20  # max_readers: 64 bytes each in lock.mdb
_QUERY_CHUNK = 256
_READ_CHUNK = 10_000  # docs read per transaction by items()


class SimStore:
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

    ``durable=True`` (default): a returned write is on disk, whatever crashes.
    ``durable=False`` flushes the data at each commit but not the meta page that
    names it (LMDB ``MDB_NOMETASYNC``): an OS crash or power loss may undo the last
    commit, never corrupts the store. ``durable="unsafe"`` flushes nothing (LMDB
    ``MDB_NOSYNC``): an OS crash may corrupt the store; for throwaway stores only
    (:attr:`durability` names the mode; docs/durability.md). A process crash loses
    nothing in any mode. ``readonly=True`` never writes and refuses writes
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
        durable: bool | str = True,
        map_size: int | None = None,
        max_readers: int = 512,
        exact: bool | None = None,
        readahead: bool | None = None,
    ) -> None:
        spath = check_path(path, "path")
        max_readers = check_int(max_readers, "max_readers", 1, _MAX_READERS)
        self._want_k = None if k is None else check_k(k, "k", MAX_K)
        size = (
            DEFAULT_EXPECTED_SIZE if expected_size is None else check_expected_size(expected_size)
        )
        if config is not None and not isinstance(config, FingerprintConfig):
            raise SimstoreTypeError(
                f"'config' must be a FingerprintConfig (got {type(config).__name__})"
            )
        if map_size is not None:
            map_size = check_int(map_size, "map_size", PAGE, _MAX_MAP)
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
            durability=check_durable(durable),
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
        """op(txn, handles, *args) in a write transaction, with the handles of the live env,
        committed with the writes other threads queued meanwhile (group commit: one
        flush for all, each call's result its own; see env/group.py).

        (After fork the environment is reopened first, and the handles with it.)
        """
        out = self._env.write_grouped(lambda txn: op(txn, self._h, *args), need=need)
        self._repay()
        return out

    def _repay(self) -> None:
        """After a commit outside batch(): the merging a bulk write left owed, in commits
        of their own (each as crash-safe as any: a killed process leaves the merge to the
        next writes), so the pages it frees are reused as it goes."""
        env = self._env
        if not self._h.tables.owes():  # the lock spared: threads writing together queue
            return
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
        self._write(_writes.add, enc, q, extra, when, need=_inputs.set_bytes(extra))

    def touch(self, doc_id: DocId, *, at: float | None = None) -> bool:
        """Give a stored doc a new time of storage (default: now), its content unchanged:
        a recrawl that found it the same. Whether it was stored."""
        enc = F.encode_id(doc_id)
        return bool(self._write(_writes.touch, enc, F.at_ms(at)))

    def touch_many(self, doc_ids: Iterable[DocId], *, at: float | None = None) -> list[bool]:
        """:meth:`touch` of each doc in ONE transaction (one commit): whether each was
        stored."""
        encs = [F.encode_id(d) for d in F.doc_ids_list(doc_ids)]
        when = F.at_ms(at)
        if not encs:
            return []
        return self._write(lambda txn, h: [_writes.touch(txn, h, e, when) for e in encs])  # type: ignore[no-any-return]

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
        start: bytes | None = b""
        while start is not None:
            with env.reading() as txn:
                encs, start = _reads.stored_before(self._h, txn, cutoff, start, 64 * n)
            for a in range(0, len(encs), n):
                removed += int(self._write(_writes.expire, encs[a : a + n], cutoff))
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
            if isinstance(fp, Signature):
                sketch, bands = fp.sketch, fp.bands
            else:
                sketch, bands = None, _writes.keys_array(extra[1])
            return self._write(  # type: ignore[no-any-return]
                self._op_add_if_similar, enc, q, extra, sketch, bands, t, query, when, after,
                need=_inputs.set_bytes(extra))
        if threshold is not None:
            raise InvalidConfigError(
                "'threshold' needs a similarity store, a Signature and no k; give k for a "
                "Hamming check"
            )
        kk = self._k_arg(k)
        return self._write(  # type: ignore[no-any-return]
            self._op_add_if_new, enc, q, extra, kk, when, after)

    def _op_add_if_similar(self, txn: Any, h: _schema.Handles, *args: Any) -> list[Any]:
        # a transaction of its own has written nothing before the lookup: the records can
        # be read where LMDB maps them (never in a batch, whose writes the map lacks)
        return _writes.add_if_similar(txn, h, *args, in_map=txn is not self._env.wtxn)

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
        docs, rule, need = self._bulk_args(F.doc_ids_list(doc_ids), fps, k, threshold, at,
                                           since)
        if not docs.encs:
            return []
        return self._write(_dedup_bulk.add_if_new_many, docs, rule, need=need)  # type: ignore[no-any-return]

    def _bulk_args(self, ids: list[DocId], fps: Any, k: int | None, threshold: float | None,
                   at: float | None, since: float | None
                   ) -> tuple[_dedup_bulk.Docs, _dedup_bulk.Rule, int]:
        """add_if_new_many's arguments checked: the docs, the rule, the bytes to grow by."""
        when, after = F.at_ms(at), _since_ms(since)
        encs = [F.encode_id(d) for d in ids]
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
        docs = _dedup_bulk.Docs(encs, cols.fps, cols.sketches, cols.bands, cols.sets)
        return docs, rule, _inputs.bytes_needed(self._h, cols)

    def recrawl_many(
        self,
        doc_ids: Iterable[DocId],
        fps: Any,
        k: int | None = None,
        *,
        threshold: float | None = None,
        at: float | None = None,
        since: float | None = None,
    ) -> list[Recrawl]:
        """A crawler's group of pages in ONE write transaction: :meth:`add_if_new_many`,
        with what a recrawl needs to tell an unchanged page from a changed one.

        Per doc, a :class:`Recrawl`: ``found``, exactly what ``add_if_new_many(doc_ids,
        fps, k, threshold=threshold, at=at, since=since)`` returns for it; ``known``,
        whether its id was stored before the call; ``near_own`` (False without ``since``),
        whether the version stored under its id before the call, however old, is near it
        by the same rule (as ``similar`` or ``query`` without ``since`` would name it).
        Then every doc whose ``found`` names its own id (unchanged: nothing stored) gets
        the time of storage ``at`` (default now), as :meth:`touch` gives it. The store is
        left as those calls in that order leave it, in one commit (one flush): other
        processes see all of it or none.
        """
        ids = F.doc_ids_list(doc_ids)
        docs, rule, need = self._bulk_args(ids, fps, k, threshold, at, since)
        if not ids:
            return []
        return self._write(self._op_recrawl, ids, docs, rule, need=need)  # type: ignore[no-any-return]

    def _op_recrawl(self, txn: Any, h: _schema.Handles, ids: list[DocId],
                    docs: _dedup_bulk.Docs, rule: _dedup_bulk.Rule) -> list[Recrawl]:
        stored = h.idx.find_many(txn, docs.encs)
        known = [enc in stored for enc in docs.encs]
        in_map = txn is not self._env.wtxn  # nothing written yet, unless in a batch
        own = [was and rule.since is not None and
               any(m.doc_id == d for m in self._near(txn, docs, j, rule, in_map))
               for j, (d, was) in enumerate(zip(ids, known, strict=True))]
        found = _dedup_bulk.add_if_new_many(txn, h, docs, rule)
        assert rule.at is not None
        for d, enc, f in zip(ids, docs.encs, found, strict=True):
            if any(m.doc_id == d for m in f):
                _writes.touch(txn, h, enc, rule.at)
        return [Recrawl(*row) for row in zip(found, known, own, strict=True)]

    def _near(self, txn: Any, docs: _dedup_bulk.Docs, j: int, rule: _dedup_bulk.Rule,
              in_map: bool) -> list[Any]:
        """Every stored doc near doc j of docs by rule, however old (``similar`` or
        ``query`` without ``since``, read in txn)."""
        fp = int(docs.fps[j])
        if rule.k is not None:
            return self._search(txn, fp, rule.k)
        assert docs.sketches is not None and docs.bands is not None
        assert rule.threshold is not None
        if docs.sets is not None:
            keys = _writes.extra_of(docs.sketches[j], docs.bands[j])[1]
            return _shingles.similar(self._h, txn, fp, docs.sets.take([j]),
                                     _writes.keys_array(keys), rule.threshold)
        return _reads.similar(self._h, txn, fp, docs.sketches[j], docs.bands[j],
                              rule.threshold, in_map=in_map)

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
            # The fast path: a fresh read transaction, no fork or batch to handle; worth
            # its lines (docs/bench/ab-readpath.json: env.reading() costs queries ~1/5).
            txn = env.begin(False)
            try:
                return self._search(txn, q, kk)
            except lmdb.Error as exc:
                raise translate(exc, env.path) from exc
            finally:
                txn.abort()

    def _read(self, fn: Any) -> Any:
        """fn(txn) in a fresh read transaction, as :meth:`query` reads (which inlines this:
        one call more is a measurable share of a query, docs/bench/journal.md)."""
        env = self._env
        with env.lock:
            if env.wtxn is not None or env.closed or current_pid() != env.pid:
                with env.reading() as txn:
                    return fn(txn)
            txn = env.begin(False)
            try:
                return fn(txn)
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
        return fingerprint(text, self._config)

    def fingerprint_texts(self, texts: Iterable[str]) -> np.ndarray:
        """Fingerprints (uint64) of many texts under this store's recorded config."""
        return fingerprints(texts, self._config)

    # --- dict-like reads: one short read transaction each ------------------------------

    def get(self, doc_id: DocId, default: Any = None) -> int | None:
        """The fingerprint stored for doc_id, or default (None)."""
        enc = F.encode_id(doc_id)
        with self._env.reading() as txn:
            found = self._lookup(txn, enc)
        return default if found is None else found[1]

    def _lookup(self, txn: Any, enc: bytes) -> tuple[bytes, int] | None:
        found = self._h.idx.find(txn, enc)
        if found is None:
            return None
        return found[0], self._h.codec.parse(found[1])[0]

    def __getitem__(self, doc_id: DocId) -> int:
        """The fingerprint of doc_id; KeyError if it is not stored."""
        fp = self.get(doc_id)
        if fp is None:
            raise KeyError(doc_id)
        return fp

    def __delitem__(self, doc_id: DocId) -> None:
        """Delete doc_id; KeyError if it is not stored."""
        if not self.remove(doc_id):
            raise KeyError(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        """Whether doc_id is stored (False for values that cannot be doc ids)."""
        try:
            enc = F.encode_id(doc_id)
        except (TypeError, ValueError):
            return False
        with self._env.reading() as txn:
            return self._lookup(txn, enc) is not None

    def __len__(self) -> int:
        """Number of stored docs."""
        with self._env.reading() as txn:
            return int(txn.stat(self._h.docs)["entries"])

    def items(self) -> Iterator[tuple[DocId, int]]:
        """(doc_id, fingerprint) in insertion order, read in short transactions.

        Writes made while iterating may or may not be seen.
        """
        after: bytes | None = None
        while True:
            with self._env.reading() as txn:
                cur = self._h.docs_guard.cursor(txn, self._h.docs, after or b"",
                                                records=_READ_CHUNK + 1)
                ok = cur.set_range(after) if after is not None else cur.first()
                if ok and after is not None and cur.key() == after:
                    ok = cur.next()
                chunk: list[tuple[DocId, int]] = []
                while ok and len(chunk) < _READ_CHUNK:
                    key, val = cur.item()
                    fp, enc = self._h.codec.parse(val)
                    chunk.append((F.decode_id(enc), fp))
                    after = bytes(key)
                    ok = cur.next()
            yield from chunk
            if not ok:
                return

    def __iter__(self) -> Iterator[DocId]:
        """Doc ids in insertion order (see :meth:`items`)."""
        return (doc_id for doc_id, _ in self.items())

    def snapshot(self) -> tuple[list[DocId], np.ndarray]:
        """All doc ids and their fingerprints (uint64) from one consistent read."""
        with self._env.reading() as txn:
            cols = self._h.codec.walk(self._h.docs_guard.cursor(txn, self._h.docs).iternext())
        assert cols.encs is not None
        return [F.decode_id(e) for e in cols.encs], cols.fps

    def fingerprints(self) -> np.ndarray:
        """Every stored fingerprint (uint64) in insertion order, for batch searches."""
        with self._env.reading() as txn:
            return self._scanner.all_fps(self._h, txn)[1].copy()

    def doc_ids(self) -> list[DocId]:
        """Every stored doc id in insertion order (the order of :meth:`fingerprints`)."""
        return self.snapshot()[0]

    # --- similarity: a store created with a signature config ---------------------------

    def signature(self, text: str) -> Signature:
        """The signature of a text under this store's recorded config (a similarity store)."""
        return signature(text, self._similarity_config())

    def signatures(self, texts: Iterable[str]) -> Signatures:
        """Signatures of many texts under this store's recorded config."""
        return signatures(texts, self._similarity_config())

    def _similarity_config(self) -> FingerprintConfig:
        if self._h.bands is None:
            raise NotSimilarityStoreError(
                f"store {self.path!r} holds fingerprints only ({self._config.scheme}); "
                "similarity needs a store created with a signature config, e.g. "
                "SimStore(path, config=simstore.SIGNATURE_CONFIG), and the documents indexed "
                "again with signatures"
            )
        return self._config

    def similar(
        self, item: str | Signature | tuple[Signature, ShingleSets],
        threshold: float = DEFAULT_THRESHOLD, *, since: float | None = None,
    ) -> list[SimilarMatch]:
        """Stored docs whose estimated Jaccard with a text (or Signature) is >= threshold.

        Candidates share a MinHash band key with it; each is checked by its
        stored sketch. Best first: Jaccard descending, then insertion order.

        In an exact store (``exact=True``) a text, or a ``(Signature, ShingleSets)``
        pair of :func:`simstore.signatures_and_sets`, is checked by the exact Jaccard
        of the shingle sets instead, and each match's ``jaccard`` is that exact
        value; a bare Signature (no set) falls back to the sketch estimate.
        ``since``: only docs stored at or after this time (seconds since the epoch).
        """
        self._similarity_config()
        t = check_threshold(threshold)
        after = None if since is None else F.at_ms(since, "since")
        if self._h.exact and (isinstance(item, str) or isinstance(item, tuple)):
            fp, extra, query = _inputs.exact_item(self._h, item, "item", encode=False)
            assert extra is not None
            with self._env.reading() as txn:
                return _shingles.similar(self._h, txn, fp, query,
                                         _writes.keys_array(extra[1]), t, after)
        sig = self.signature(item) if isinstance(item, str) else item
        if not isinstance(sig, Signature):
            raise SimstoreTypeError(
                f"'item' must be a str or a Signature (got {type(item).__name__})"
            )
        h, env = self._h, self._env
        fp = _inputs.query_signature(h, sig)
        return self._read(  # type: ignore[no-any-return]
            lambda txn: _reads.similar(h, txn, fp, sig.sketch, sig.bands, t, after,
                                       in_map=txn is not env.wtxn))

    def similar_pairs(
        self, threshold: float = DEFAULT_THRESHOLD
    ) -> Iterator[tuple[DocId, DocId, float]]:
        """Every pair of stored docs by :func:`simstore.find_similar`'s rule, with the Jaccard."""
        self._similarity_config()
        t = check_threshold(threshold)
        with self._env.reading() as txn:
            cols = self._h.codec.walk(self._h.docs_guard.cursor(txn, self._h.docs).iternext(),
                                     with_sketches=True)
        assert cols.encs is not None
        found = similar_pairs_arrays(cols.sketches, cols.bands, t)
        ids = [decode_id(e) for e in cols.encs]
        for i, j, s in zip(found.i.tolist(), found.j.tolist(), found.jaccard.tolist(),
                           strict=True):
            yield ids[i], ids[j], s

    # --- the whole store: one transaction each, or a child process --------------------

    def stats(self) -> dict[str, Any]:
        """Size, layout and scheme of the store, as plain JSON-able values; ``levels``:
        the ids each sorted level of the tables spans, oldest first (a query probes
        each). ``query_cost_us`` and ``replanned_cost_us``:
        the planner's model of a query on this layout and on one planned for the store's
        size; ``rebuild_advised`` when the store has outgrown its layout so far that
        ``rebuild()`` (which plans for the size) would make queries much faster."""
        with self._env.reading() as txn:
            count = int(txn.stat(self._h.docs)["entries"])
            map_size, used = self._env.used_bytes()
            levels = self._h.tables.levels(txn)
        lay = self._layout
        cost, replanned, advised = layout_fit(lay, count)
        return {
            "path": self.path,
            "count": count,
            "k": lay.max_k,
            "tables": len(lay.tables),
            "blocks": len(lay.blocks),
            "header_bits": [lay.header_bits(t) for t in range(len(lay.tables))],
            "radius": lay.radius,
            "fingerprint": self._config.to_dict(),
            "map_size": map_size,
            "used_bytes": used,
            "format_version": self._h.format_version,
            "table_engine": self._h.tables.name,
            "similarity": self._config.has_signature,
            "sketch_bytes": 8 * self._h.codec.sketch_words,
            "band_key_bytes": 4 * self._h.codec.nbands,
            "exact": self._h.exact,
            "bytes_per_doc": used // count if count else None,
            "levels": levels,
            "query_cost_us": round(cost, 1),
            "replanned_cost_us": round(replanned, 1),
            "rebuild_advised": advised,
        }

    def verify(self, timeout: float | None = None) -> list[str]:
        """Every broken invariant, as sentences; [] when the store is sound.

        Checks the file's structure (as plain bytes), then that each doc is in
        every permutation and band table exactly once, no table or ids entry
        is an orphan, and records and metadata parse. Runs in a child process:
        a damaged file that would make LMDB abort is reported, never kills the
        caller. ``timeout``: seconds of the checker's CPU time (wall time where the
        system does not tell) before it is stopped with VerifyTimeoutError; by default
        they grow with the store's file (120 s + 1 s per 4 MB).
        """
        limit = None if timeout is None else check_seconds(timeout, "timeout")
        with self._env.reading() as txn:
            return _maintenance.verify(txn, self._h, timeout=limit)

    def rebuild(self, k: int | None = None, expected_size: int | None = None) -> dict[str, Any]:
        """Re-derive every table (and the ids map) from the docs table: new k, or repair.

        One atomic transaction: a crash leaves the old layout or the new one,
        complete. Refused with StoreInUseError while another handle (in any
        process) has the store open. Returns :meth:`stats`.
        """
        env = self._env
        if env.wtxn is not None:
            raise StoreError("rebuild() cannot run inside batch(); call it outside")
        env.check_writable()
        new_k = self.k if k is None else check_k(k, "k", MAX_K)
        size = None if expected_size is None else check_expected_size(expected_size)
        with env.lock, env.exclusive("rebuild"):
            env.live()
            self._want_k = None  # from now on the layout on disk is the one to read back
            _maintenance.rebuild(env, lambda: self._h, new_k, size)
            env.reload()  # re-read layout and handles from disk
        return self.stats()

    def merge_levels(self) -> int:
        """Merge every level of the tables into one, now: queries then probe one level, as
        after a bulk load, where a store grown by writes keeps a few (each probed: at
        10M, k = 8 in ~120 µs instead of ~30). The merge writes do, begun at once and
        done in bounded commits of their own; readers and other writers go on meanwhile,
        and a kill leaves it to later writes. Returns the commits it took (0: one level or
        none already)."""
        if self._env.wtxn is not None:
            raise StoreError("merge_levels() cannot run inside batch(); call it outside")
        commits, began = 0, False
        while True:
            # a merge already under way (of the newest levels, say) is finished first, then
            # the one of every level begun; once begun, none again (writers may go on
            # adding levels: this call ends)
            spent, now = self._write(_writes.merge_all, not began)
            if not spent:
                return commits
            commits += 1
            began = began or now

    def compact(self, dest: str | bytes | os.PathLike[str]) -> None:
        """Write a compacted copy to a new directory (complete or absent, never half)."""
        _maintenance.compact(self._env, dest)

    def pairs(self, k: int | None = None) -> Iterator[tuple[DocId, DocId, int]]:
        """Every pair of stored docs within k (default: the store's k), with the distance."""
        return _maintenance.pairs(self.snapshot, self._k_arg(k))

    def clusters(self, k: int | None = None) -> list[list[DocId]]:
        """Connected groups (size >= 2) of docs within k of each other."""
        return _maintenance.clusters(self.snapshot, self._k_arg(k))

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
    def closed(self) -> bool:
        """Whether this handle was closed."""
        return bool(self._env.closed)

    @property
    def readonly(self) -> bool:
        """Whether this handle refuses writes."""
        return self._env.readonly

    def databases(self, names: Sequence[bytes], what: str,
                  setup: Callable[[Any, list[Any], Callable[[bytes], Any]], None] | None = None,
                  ) -> NamedDatabases:
        """The door to named databases beside the index (``crawl.*``, ``corpus.*``):
        opened in a commit of their own, renewed after every reopen (see
        :class:`~simstore.store.env.named.NamedDatabases`). ``what`` names them in errors."""
        return NamedDatabases(self._env, names, what, setup)

    @property
    def durability(self) -> str:
        """What an OS crash may do to this handle's commits: ``"full"`` (nothing:
        ``durable=True``), ``"normal"`` (undo the last one: ``durable=False``) or
        ``"unsafe"`` (corrupt the store); a caller that must survive one refuses
        ``"unsafe"``."""
        return self._env.durability

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
            (env.path, self._layout.max_k, self._config, env.readonly, env.durability,
             self._map_size, env.max_readers, self._h.exact, env.readahead),
        )

    def __repr__(self) -> str:
        env = self._env
        state = "closed" if env.closed else ("readonly" if env.readonly else "open")
        return f"SimStore({env.path!r}, k={self.k}, {state})"


def _reopen(
    path: str, k: int, config: FingerprintConfig, readonly: bool, durable: bool | str,
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
    age_ms = parse_duration(older_than, "older_than") * 1000  # may overflow to inf
    now = F.now_ms()
    return 0 if age_ms >= now else now - int(age_ms)  # older than the epoch: nothing is
