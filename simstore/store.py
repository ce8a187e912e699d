"""The persistent near-duplicate index: ``SimStore``, a thin face over its seams.

- :mod:`simstore._format`: the on-disk format (records, ids, metadata);
- :mod:`simstore._env`: the LMDB environment (locks, fork, transactions, growth, errors);
- :mod:`simstore._tables`: the permutation tables (probe plan, search with the C
  tail verifier, bulk fill, checks);
- :mod:`simstore._maintenance`: verify, rebuild, compact, all-pairs over a store.

Every read is one short transaction, so no old snapshot pins pages while a
crawler runs for days.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from . import _core, _maintenance
from . import _format as F
from ._env import PAGE, Env, current_pid
from ._format import MAX_DOC_ID_BYTES, DocId
from ._tables import PUT_CHUNK, Tables, put_sorted
from ._validate import (
    MAX_FP,
    MAX_K,
    as_fingerprint_array,
    check_expected_size,
    check_fingerprint,
    check_int,
    check_k,
)
from .exceptions import (
    ConfigMismatchError,
    CorruptStoreError,
    FormatVersionError,
    InvalidConfigError,
    LayoutMismatchError,
    NotAStoreError,
    SimstoreTypeError,
    StoreError,
)
from .fingerprinting import DEFAULT_CONFIG, FingerprintConfig, fingerprints
from .layout import Layout, plan

__all__ = ["DEFAULT_EXPECTED_SIZE", "DEFAULT_K", "MAX_DOC_ID_BYTES", "DocId", "Match", "SimStore"]

# Best F1 for Jaccard >= 0.9 in docs/quality.md; k = 3 serves Jaccard >= 0.95 and is ~4x faster.
DEFAULT_K = 5
DEFAULT_EXPECTED_SIZE = 1_000_000
_MIN_MAP_SIZE = 1 << 26
_READ_CHUNK = 10_000
_QUERY_CHUNK = 256


class Match(NamedTuple):
    """One stored document within the query distance."""

    doc_id: DocId
    fingerprint: int
    distance: int


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

    ``durable=True`` (default): a returned write is on disk. ``durable=False``
    skips the fsyncs (LMDB ``sync=False, metasync=False``): an OS crash or power
    loss may lose the last commits, but never corrupts the store; process
    crashes lose nothing. ``readonly=True`` never writes and refuses writes
    with :class:`ReadOnlyError`.

    Many processes may open one store; writes are serialized by LMDB. A
    handle is usable from several threads (calls are serialized). After
    ``os.fork()`` the child reopens the environment on first use; pickling
    reopens by path, so a store can be passed to multiprocessing workers.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        k: int | None = None,
        expected_size: int | None = None,
        config: FingerprintConfig | None = None,
        readonly: bool = False,
        durable: bool = True,
        map_size: int | None = None,
        max_readers: int = 512,
    ) -> None:
        try:
            spath = os.fspath(path)
        except TypeError:
            raise SimstoreTypeError(
                f"'path' must be a str or os.PathLike (got {type(path).__name__})"
            ) from None
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
        self._want_config = config
        self._expected_size = size
        self._map_size = map_size
        plan_k = DEFAULT_K if self._want_k is None else self._want_k
        self._layout: Layout = plan(plan_k, size).layout
        self._config: FingerprintConfig = config or DEFAULT_CONFIG
        self._scan_cache: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None
        self._env = Env(
            spath,
            readonly=bool(readonly),
            durable=bool(durable),
            max_readers=max_readers,
            map_size=map_size or _initial_map_size(self._layout, size),
            on_open=self._on_open,
        )
        self._env.open()

    # --- opening: metadata and handles --------------------------------------------

    def _on_open(self, env: Any, creating: bool) -> None:
        """Create or check the metadata, then bind the databases (every (re)open)."""
        if creating and self._create(env):
            return
        with self._env.translated():
            txn = env.begin(write=False)
            try:
                layout, config = self._read_meta(env, txn)
            finally:
                txn.abort()
            # Handles opened inside a read transaction die with it: open them on their own.
            self._bind(env, None, layout, config, create=False)

    def _create(self, env: Any) -> bool:
        """Write a new store's databases and metadata; False if another process won."""
        with self._env.translated():
            txn = env.begin(write=True)
            try:
                if txn.get(b"meta") is not None:
                    return False
                meta = env.open_db(b"meta", txn=txn)
                txn.put(b"format", F.to_json(F.format_meta()), db=meta)
                txn.put(b"layout", F.to_json(self._layout.to_dict()), db=meta)
                txn.put(b"fingerprint", F.to_json(self._config.to_dict()), db=meta)
                self._bind(env, txn, self._layout, self._config, create=True)
                txn.commit()
                txn = None
            finally:
                if txn is not None:
                    txn.abort()
        return True

    def _read_meta(self, env: Any, txn: Any) -> tuple[Layout, FingerprintConfig]:
        """The recorded layout and config, checked against what the caller asked for."""
        path = self._env.path
        if txn.get(b"meta") is None:
            raise NotAStoreError(
                f"{path!r} holds an LMDB environment that is not a simstore store "
                "(no 'meta' database)"
            )
        meta = env.open_db(b"meta", txn=txn, create=False)
        fmt = F.from_json(txn.get(b"format", db=meta), "format")
        if not F.is_known_format(fmt):
            raise FormatVersionError(
                f"store {path!r} has format {fmt!r}; this simstore reads simstore format "
                f"version {F.FORMAT_VERSION} (upgrade simstore or rebuild)"
            )
        layout = Layout.from_dict(F.from_json(txn.get(b"layout", db=meta), "layout"))
        config = FingerprintConfig.from_dict(
            F.from_json(txn.get(b"fingerprint", db=meta), "fingerprint")
        )
        if self._want_k is not None and self._want_k != layout.max_k:
            raise LayoutMismatchError(
                f"store {path!r} was built for k <= {layout.max_k}, not k={self._want_k}; "
                f"open it without k (or with k={layout.max_k}), or build a new store for "
                "the other k"
            )
        if self._want_config is not None and self._want_config != config:
            raise ConfigMismatchError(
                f"store {path!r} holds fingerprints of {config.scheme}, not "
                f"{self._want_config.scheme}; open it without config or with the same one"
            )
        return layout, config

    def _bind(
        self, env: Any, txn: Any, layout: Layout, config: FingerprintConfig, *, create: bool
    ) -> None:
        self._layout = layout
        self._config = config
        self._meta = env.open_db(b"meta", txn=txn, create=create)
        self._docs = env.open_db(b"docs", txn=txn, create=create)
        self._ids = env.open_db(b"ids", txn=txn, create=create)
        self._tables = Tables(env, txn, layout, create=create)

    def _handles(self) -> tuple[Any, Any, Any, Tables]:
        """The current (docs, ids, meta, tables) handles, renewed on every reopen."""
        return self._docs, self._ids, self._meta, self._tables

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

    transaction = batch

    # --- writes ----------------------------------------------------------------------

    def add(self, doc_id: DocId, fp: int) -> None:
        """Store doc_id with fingerprint fp; an existing doc_id gets the new fingerprint."""
        enc = F.encode_id(doc_id)
        self._env.write(self._op_add, F.id_key(enc), enc, check_fingerprint(fp))

    def add_many(self, doc_ids: Iterable[DocId], fps: Any) -> None:
        """Store many docs in one transaction; a doc_id given twice keeps its last fp.

        The fast path for bulk loads: each table gets its permuted keys sorted
        (appended in key order when the table is empty). Int ids (a range, an
        int array or a list of ints) are encoded with numpy, not one by one.
        """
        arr = as_fingerprint_array(fps)
        ints = F.int_id_array(doc_ids)
        ids: Any = ints if ints is not None else F.doc_ids_list(doc_ids)
        if len(ids) != len(arr):
            raise InvalidConfigError(
                f"'doc_ids' and 'fps' must have the same length (got {len(ids)} and {len(arr)})"
            )
        if ints is not None:
            _, last_rev = np.unique(ints[::-1], return_index=True)
            if len(last_rev) != len(ints):
                keep = np.sort(len(ints) - 1 - last_rev)
                ints, arr = ints[keep], arr[keep]
            ids = ints
        else:
            encs = [F.encode_id(d) for d in ids]
            last = {F.id_key(enc): i for i, enc in enumerate(encs)}
            kept = sorted(last.values())
            if len(kept) != len(encs):
                encs = [encs[i] for i in kept]
                arr = arr[np.asarray(kept, dtype=np.int64)]
            ids = encs
        if len(ids):
            need = len(ids) * (len(self._layout.tables) * 40 + 64)
            self._env.write(self._op_add_many, ids, arr, need=need)

    def remove(self, doc_id: DocId) -> bool:
        """Delete doc_id; True if it was stored, False if not (never raises KeyError)."""
        enc = F.encode_id(doc_id)
        return bool(self._env.write(self._op_remove, F.id_key(enc), enc))

    def remove_many(self, doc_ids: Iterable[DocId]) -> int:
        """Delete many docs in one transaction; returns how many were stored."""
        encs = [F.encode_id(d) for d in F.doc_ids_list(doc_ids)]
        return int(self._env.write(self._op_remove_many, encs))

    def add_if_new(self, doc_id: DocId, fp: int, k: int | None = None) -> list[Match]:
        """The crawler's call: near-duplicates already stored, storing the doc only if none.

        In ONE write transaction (so atomic across processes): find every
        stored doc within k (default: the store's k) of fp; if there is none,
        store (doc_id, fp) and return []; otherwise store nothing and return
        the matches. A doc_id already stored counts like any other doc: an
        unchanged recrawl returns its own old entry and keeps it; a recrawl
        that moved more than k away from everything replaces its fingerprint.
        """
        enc = F.encode_id(doc_id)
        q = check_fingerprint(fp)
        kk = self._k_arg(k)
        return self._env.write(self._op_add_if_new, F.id_key(enc), enc, q, kk)

    def _op_add(self, txn: Any, idkey: bytes, enc: bytes, fp: int) -> None:
        old = txn.get(idkey, db=self._ids)
        if old is not None:
            old_fp, old_enc = F.parse_record(txn.get(old, db=self._docs))
            if old_enc != enc:
                raise CorruptStoreError(F.collision_message(self.path))
            if old_fp == fp:
                return
            self._tables.unindex(txn, old, old_fp)
            iid = bytes(old)
        else:
            iid = F.iid_bytes(self._next_iid(txn))
            txn.put(idkey, iid, db=self._ids)
        txn.put(iid, F.record(fp, enc), db=self._docs)
        self._tables.index(txn, iid, fp)

    def _next_iid(self, txn: Any) -> int:
        cur = txn.cursor(self._docs)
        return int.from_bytes(cur.key(), "big") + 1 if cur.last() else 0

    def _op_remove(self, txn: Any, idkey: bytes, enc: bytes) -> bool:
        iid = txn.get(idkey, db=self._ids)
        if iid is None:
            return False
        fp, old_enc = F.parse_record(txn.get(iid, db=self._docs))
        if old_enc != enc:
            return False  # a digest collision: the stored doc is another id
        iid = bytes(iid)
        self._tables.unindex(txn, iid, fp)
        txn.delete(iid, db=self._docs)
        txn.delete(idkey, db=self._ids)
        return True

    def _op_remove_many(self, txn: Any, encs: list[bytes]) -> int:
        return sum(self._op_remove(txn, F.id_key(e), e) for e in encs)

    def _op_add_if_new(self, txn: Any, idkey: bytes, enc: bytes, fp: int, k: int) -> list[Match]:
        found = self._search(txn, fp, k)
        if not found:
            self._op_add(txn, idkey, enc, fp)
        return found

    def _op_add_many(self, txn: Any, ids: Any, fps: np.ndarray) -> None:
        """Add distinct ids (encoded bytes, or an int64 array of int ids) with their fps."""
        n = len(ids)
        ints = isinstance(ids, np.ndarray)
        if ints:
            id_order = F.int_id_order(ids)
        else:
            idkeys = [F.id_key(e) for e in ids]
            id_order = np.asarray(sorted(range(n), key=idkeys.__getitem__), dtype=np.int64)

        def id_keys(pos: np.ndarray) -> list[bytes]:
            return F.int_encodings(ids[pos]) if ints else [idkeys[i] for i in pos.tolist()]

        is_new = np.ones(n, dtype=bool)
        if txn.stat(self._ids)["entries"]:
            # Which ids are stored already: lookups in key order, one cursor.
            cur = txn.cursor(self._ids)
            for a in range(0, n, PUT_CHUNK):
                pos = id_order[a : a + PUT_CHUNK]
                for i, key in zip(pos.tolist(), id_keys(pos), strict=True):
                    if cur.set_key(key):
                        is_new[i] = False
            old = np.flatnonzero(~is_new)
            for i in old.tolist():
                enc = F.encode_id(int(ids[i])) if ints else ids[i]
                self._op_add(txn, F.id_key(enc), enc, int(fps[i]))
            if len(old) == n:
                return
        new = np.flatnonzero(is_new)
        first = self._next_iid(txn)
        iids = np.zeros(n, dtype=np.uint64)
        iids[new] = np.arange(first, first + len(new), dtype=np.uint64)
        rows = F.iid_rows(iids)

        def write_docs_and_ids() -> None:
            # docs: records in internal-id (= input) order, appended
            prefix = F.record_prefixes(fps)
            cur = txn.cursor(self._docs)
            for a in range(0, len(new), PUT_CHUNK):
                pos = new[a : a + PUT_CHUNK]
                if ints:
                    recs = F.int_encodings(ids[pos], prefix[pos])
                else:
                    pre = prefix[pos].view(f"V{prefix.shape[1]}").ravel().tolist()
                    recs = [p + ids[i] for p, i in zip(pre, pos.tolist(), strict=True)]
                put_sorted(cur, rows[pos].tolist(), recs, append=True)
            # ids: encoded id -> internal id, in key order
            new_order = id_order[is_new[id_order]]
            cur = txn.cursor(self._ids)
            append = txn.stat(self._ids)["entries"] == 0
            for a in range(0, len(new_order), PUT_CHUNK):
                pos = new_order[a : a + PUT_CHUNK]
                append = put_sorted(cur, id_keys(pos), rows[pos].tolist(), append=append)

        sub = fps[new] if len(new) != n else fps
        self._tables.fill(txn, sub, iids[new], before=write_docs_and_ids)

    # --- reads -------------------------------------------------------------------------

    def _k_arg(self, k: int | None) -> int:
        return self._layout.max_k if k is None else check_k(k)

    def query(self, fp: int, k: int | None = None) -> list[Match]:
        """Every stored doc within Hamming distance k of fp, exactly.

        Sorted by distance, then insertion order. k defaults to the store's k;
        any k <= the store's k uses the tables; a larger k (up to 64) is
        answered exactly too, by a C scan of all stored fingerprints (O(n)).
        """
        q = fp if type(fp) is int and 0 <= fp <= MAX_FP else check_fingerprint(fp)
        if k is None:
            kk = self._layout.max_k
        else:
            kk = k if type(k) is int and 0 <= k <= 64 else check_k(k)
        env = self._env
        with env.lock:
            if env.wtxn is not None or env.closed or current_pid() != env.pid:
                with env.reading() as txn:
                    return self._search(txn, q, kk)
            # The fast path: a fresh read transaction, no fork or batch to handle.
            with env.translated():
                txn = env.begin(False)
                try:
                    return self._search(txn, q, kk)
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

    def _search(self, txn: Any, q: int, k: int) -> list[Match]:
        """Every doc within k of q (k <= the layout's k uses the tables)."""
        if k > self._layout.max_k:
            return self._scan(txn, q, k)
        rows = self._tables.search(txn, q, k)
        return self._matches(txn, rows) if rows else []

    def _matches(self, txn: Any, rows: list[Any]) -> list[Match]:
        """Matches of (distance, internal id, ...) rows, by distance then insertion order."""
        rows.sort()
        get = txn.get
        docs = self._docs
        out = []
        for row in rows:
            rec = get(row[1], db=docs)
            if rec is None:
                raise CorruptStoreError(
                    f"store {self.path!r}: a table names a doc the docs database lacks"
                )
            doc_id, fp = F.record_match(rec)
            out.append(Match(doc_id, fp, row[0]))
        return out

    def _scan(self, txn: Any, q: int, k: int) -> list[Match]:
        """Exact answer for k above the layout's k: popcount over every stored fingerprint."""
        iids, fps = self._all_fps(txn)
        idx, dist = _core.hamming_within(q, fps, k)
        rows = [
            (d, F.iid_bytes(int(iids[i])), int(fps[i]))
            for i, d in zip(idx.tolist(), dist.tolist(), strict=True)
        ]
        return self._matches(txn, rows)

    def _all_fps(self, txn: Any) -> tuple[np.ndarray, np.ndarray]:
        """(internal ids, fingerprints) of every doc in internal order, cached per snapshot."""
        env = self._env
        tag = (env.epoch, txn.id())
        # Only committed snapshots may be cached: a write transaction's id is the
        # next commit's, so its (pre-write or aborted) view would pass for that snapshot.
        cacheable = txn is not env.wtxn and tag[1] <= env.last_txnid()
        if cacheable and self._scan_cache is not None and self._scan_cache[0] == tag:
            return self._scan_cache[1], self._scan_cache[2]
        cols = F.walk_docs(txn.cursor(self._docs).iternext(), with_ids=False)
        if cacheable:
            self._scan_cache = (tag, cols.iids, cols.fps)
        return cols.iids, cols.fps

    def get(self, doc_id: DocId, default: Any = None) -> int | None:
        """The fingerprint stored for doc_id, or default (None)."""
        enc = F.encode_id(doc_id)
        with self._env.reading() as txn:
            found = self._lookup(txn, enc)
        return default if found is None else found[1]

    def _lookup(self, txn: Any, enc: bytes) -> tuple[bytes, int] | None:
        iid = txn.get(F.id_key(enc), db=self._ids)
        if iid is None:
            return None
        fp, stored = F.parse_record(txn.get(iid, db=self._docs))
        if stored != enc:
            return None
        return bytes(iid), fp

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
            return int(txn.stat(self._docs)["entries"])

    def items(self) -> Iterator[tuple[DocId, int]]:
        """(doc_id, fingerprint) in insertion order, read in short transactions.

        Writes made while iterating may or may not be seen.
        """
        after: bytes | None = None
        while True:
            with self._env.reading() as txn:
                cur = txn.cursor(self._docs)
                ok = cur.set_range(after) if after is not None else cur.first()
                if ok and after is not None and cur.key() == after:
                    ok = cur.next()
                chunk: list[tuple[DocId, int]] = []
                while ok and len(chunk) < _READ_CHUNK:
                    key, val = cur.item()
                    fp, enc = F.parse_record(val)
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
            cols = F.walk_docs(txn.cursor(self._docs).iternext())
        assert cols.encs is not None
        return [F.decode_id(e) for e in cols.encs], cols.fps

    def stats(self) -> dict[str, Any]:
        """Size, layout and scheme of the store, as plain JSON-able values."""
        with self._env.reading() as txn:
            count = int(txn.stat(self._docs)["entries"])
            map_size, used = self._env.used_bytes()
        lay = self._layout
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
            "format_version": F.FORMAT_VERSION,
        }

    def fingerprints(self) -> np.ndarray:
        """Every stored fingerprint (uint64) in insertion order, for batch searches."""
        with self._env.reading() as txn:
            return self._all_fps(txn)[1].copy()

    def doc_ids(self) -> list[DocId]:
        """Every stored doc id in insertion order (the order of :meth:`fingerprints`)."""
        return self.snapshot()[0]

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
    def readonly(self) -> bool:
        """Whether this handle refuses writes."""
        return self._env.readonly

    def sync(self) -> None:
        """Flush to disk now (useful with durable=False)."""
        with self._env.lock, self._env.translated():
            self._env.live().sync(True)

    def close(self) -> None:
        """Close the handle (idempotent); later calls raise StoreClosedError."""
        self._scan_cache = None
        self._env.close()

    # --- whole-store operations (simstore._maintenance) -----------------------------------

    def verify(self) -> list[str]:
        """Every broken invariant, as sentences; [] when the store is sound.

        Checks each doc is in every permutation table exactly once, no table
        or ids entry is an orphan, and records and metadata parse.
        """
        with self._env.reading() as txn:
            return _maintenance.verify(txn, self._docs, self._ids, self._tables)

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
            _maintenance.rebuild(env, self._handles, new_k, size)
            env.reload()  # re-read layout and handles from disk
        return self.stats()

    def compact(self, dest: str | os.PathLike[str]) -> None:
        """Write a compacted copy to a new directory (complete or absent, never half)."""
        _maintenance.compact(self._env, dest)

    def pairs(self, k: int | None = None) -> Iterator[tuple[DocId, DocId, int]]:
        """Every pair of stored docs within k (default: the store's k), with the distance."""
        return _maintenance.pairs(self.snapshot, self._k_arg(k))

    def clusters(self, k: int | None = None) -> list[list[DocId]]:
        """Connected groups (size >= 2) of docs within k of each other."""
        return _maintenance.clusters(self.snapshot, self._k_arg(k))

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
             self._map_size, env.max_readers),
        )

    def __repr__(self) -> str:
        env = self._env
        state = "closed" if env.closed else ("readonly" if env.readonly else "open")
        return f"SimStore({env.path!r}, k={self.k}, {state})"


def _reopen(
    path: str, k: int, config: FingerprintConfig, readonly: bool, durable: bool,
    map_size: int | None, max_readers: int,
) -> SimStore:
    return SimStore(
        path, k=k, config=config, readonly=readonly, durable=durable,
        map_size=map_size, max_readers=max_readers,
    )


def _initial_map_size(layout: Layout, expected_size: int) -> int:
    est = plan(layout.max_k, expected_size).bytes_per_fingerprint * max(expected_size, 1) // 4
    size = max(_MIN_MAP_SIZE, est)
    return -(-size // PAGE) * PAGE
