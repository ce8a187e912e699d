"""The persistent near-duplicate index: fingerprints in block-permuted LMDB tables.

On disk a store is one LMDB environment (a directory) with named databases:

- ``meta``: JSON values: ``format`` ({"format": "simstore", "version": 1}),
  ``layout`` (:meth:`Layout.to_dict`), ``fingerprint``
  (:meth:`FingerprintConfig.to_dict`).
- ``docs``: internal id (8-byte big-endian, assigned in insertion order) ->
  record: 1 format byte (1), the fingerprint (8 bytes big-endian), the
  encoded doc id. Later record formats may append fields (e.g. a MinHash
  sketch); readers dispatch on the first byte.
- ``ids``: encoded doc id -> internal id. An encoded id is a type tag
  (``s`` + UTF-8 for str, ``i`` + signed big-endian bytes for int); one
  longer than LMDB's 511-byte key limit is keyed as ``h`` + its 32-byte
  blake2b digest, the full id being checked against the docs record.
- ``t00``, ``t01``, ...: one table per permutation of :mod:`simstore.layout`,
  ``dupsort``/``dupfixed``: key = permuted fingerprint (8 bytes big-endian),
  values = internal ids of every doc with that fingerprint.

A query permutes the fingerprint for every table in one C call, range-scans
each table for every header value within the layout's radius, checks the
tail bits with popcount (in C when there are more than a few candidates)
and only then reads the matching docs. Every read is one short transaction,
so no old snapshot pins pages while a crawler runs for days.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import combinations
from typing import Any, NamedTuple, Union

import lmdb
import numpy as np

from . import _core, _maintenance
from ._validate import as_fingerprint_array, check_fingerprint, check_k
from .exceptions import (
    ConfigMismatchError,
    CorruptStoreError,
    FormatVersionError,
    InvalidConfigError,
    InvalidDocIdError,
    LayoutMismatchError,
    NotAStoreError,
    ReadOnlyError,
    SimstoreTypeError,
    StoreAccessError,
    StoreClosedError,
    StoreError,
    StoreInUseError,
)
from .fingerprinting import DEFAULT_CONFIG, FingerprintConfig
from .layout import PLAN_MAX_K, Layout, plan

DocId = Union[str, int]  # noqa: UP007 - a runtime alias, kept valid on Python 3.10

FORMAT_VERSION = 1
RECORD_VERSION = 1
# Best F1 for Jaccard >= 0.9 in docs/quality.md; k = 3 serves Jaccard >= 0.95 and is ~4x faster.
DEFAULT_K = 5
DEFAULT_EXPECTED_SIZE = 1_000_000
MAX_DOC_ID_BYTES = 1 << 16
_MAX_KEY_BYTES = 511
_MAX_DBS = 64
_MIN_MAP_SIZE = 1 << 26
_PAGE = 4096
_READ_CHUNK = 10_000
_QUERY_CHUNK = 256
_MAX_GROWTHS = 40
_PUT_CHUNK = 1 << 19  # rows turned into bytes objects at a time (bounds memory)
_PIPELINE_MIN = 100_000  # docs from which add_many sorts tables in a thread
_MAX_FP = (1 << 64) - 1
_RECORD_TAG = bytes((RECORD_VERSION,))
_PAST_END = b"\xff" * 9  # sorts after every 8-byte key
# os.getpid() is a system call: a fork hook keeps the current pid here instead.
_PID = [os.getpid()]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))
_LOCK_FILE = "simstore.lock"


class Match(NamedTuple):
    """One stored document within the query distance."""

    doc_id: DocId
    fingerprint: int
    distance: int


# --- doc ids and records -------------------------------------------------


def _encode_id(doc_id: Any) -> bytes:
    """Type-tagged bytes of a doc id; refuses what a store cannot give back exactly."""
    if isinstance(doc_id, str):
        if not doc_id:
            raise InvalidDocIdError("a doc id must be a non-empty str or an int (got '')")
        payload = doc_id.encode("utf-8", "surrogatepass")
        tag = b"s"
    elif isinstance(doc_id, (int, np.integer)) and not isinstance(doc_id, (bool, np.bool_)):
        x = int(doc_id)
        nbytes = (x.bit_length() + 8) // 8
        if nbytes > MAX_DOC_ID_BYTES:
            raise InvalidDocIdError(
                f"an int doc id must fit in {MAX_DOC_ID_BYTES} bytes (got {nbytes} bytes)"
            )
        payload = x.to_bytes(nbytes, "big", signed=True)
        tag = b"i"
    else:
        raise SimstoreTypeError(
            f"a doc id must be a str or an int (got {type(doc_id).__name__})"
        )
    if len(payload) > MAX_DOC_ID_BYTES:
        raise InvalidDocIdError(
            f"a doc id must be at most {MAX_DOC_ID_BYTES} bytes as UTF-8 (got {len(payload)})"
        )
    return tag + payload


def _decode_id(enc: bytes) -> DocId:
    tag, payload = enc[:1], enc[1:]
    if tag == b"s":
        return bytes(payload).decode("utf-8", "surrogatepass")
    if tag == b"i":
        return int.from_bytes(payload, "big", signed=True)
    raise CorruptStoreError(f"a docs record holds an id with unknown type tag {bytes(tag)!r}")


def _id_key(enc: bytes) -> bytes:
    """The ``ids`` key of an encoded id: itself, or a digest when over the key limit."""
    if len(enc) <= _MAX_KEY_BYTES:
        return enc
    return b"h" + hashlib.blake2b(enc, digest_size=32).digest()


def _record(fp: int, enc: bytes) -> bytes:
    return bytes((RECORD_VERSION,)) + fp.to_bytes(8, "big") + enc


def _parse_record(rec: bytes) -> tuple[int, bytes]:
    """(fingerprint, encoded id) of a docs record of any known format version."""
    if not rec or rec[0] != RECORD_VERSION:
        raise CorruptStoreError(
            f"a docs record has format {rec[:1]!r}; this simstore reads format {RECORD_VERSION}"
        )
    return int.from_bytes(rec[1:9], "big"), bytes(rec[9:])


def _doc_ids_arg(doc_ids: Any) -> list[Any]:
    if isinstance(doc_ids, (str, bytes)) or not isinstance(doc_ids, Iterable):
        raise SimstoreTypeError(
            f"'doc_ids' must be an iterable of str or int ids (got {type(doc_ids).__name__})"
        )
    return doc_ids.tolist() if isinstance(doc_ids, np.ndarray) else list(doc_ids)


_INT64_MIN = -(1 << 63)


def _int_id_array(doc_ids: Any) -> np.ndarray | None:
    """int64 array of doc ids when all are ints (range, int array, list of ints), else None."""
    if isinstance(doc_ids, range):
        if not doc_ids:
            return np.empty(0, dtype=np.int64)
        lo, hi = min(doc_ids[0], doc_ids[-1]), max(doc_ids[0], doc_ids[-1])
        if lo <= _INT64_MIN or hi >= 1 << 63:
            return None
        return np.arange(doc_ids.start, doc_ids.stop, doc_ids.step, dtype=np.int64)
    if isinstance(doc_ids, np.ndarray):
        if doc_ids.ndim != 1 or doc_ids.dtype.kind not in "iu":
            return None
        if doc_ids.dtype.kind == "u" and len(doc_ids) and doc_ids.max() >= 1 << 63:
            return None
        arr = doc_ids.astype(np.int64)
    elif isinstance(doc_ids, (list, tuple)) and all(type(x) is int for x in doc_ids):
        try:
            arr = np.array(doc_ids, dtype=np.int64)
        except OverflowError:
            return None
    else:
        return None
    if len(arr) and arr.min() == _INT64_MIN:
        return None
    return arr


def _int_id_lengths(xs: np.ndarray) -> np.ndarray:
    """Payload bytes of each int id's encoding: (bit_length(|x|) + 8) // 8, as _encode_id."""
    mag = np.abs(xs).view(np.uint64)
    nbytes = np.ones(len(xs), dtype=np.int64)
    for size in range(1, 8):
        nbytes += mag >= np.uint64(1 << (8 * size - 1))
    return nbytes


def _int_encodings(xs: np.ndarray, prefix: np.ndarray | None = None) -> list[bytes]:
    """_encode_id of each int64 id, each after its row of prefix bytes if given."""
    nbytes = _int_id_lengths(xs)
    be = xs.astype(">i8").view(np.uint8).reshape(len(xs), 8)
    width = 0 if prefix is None else prefix.shape[1]
    sizes = np.unique(nbytes).tolist()
    out = None if len(sizes) == 1 else np.empty(len(xs), dtype=object)
    for size in sizes:
        sel = np.flatnonzero(nbytes == size) if out is not None else slice(None)
        rows = np.empty((len(be[sel]), width + 1 + size), dtype=np.uint8)
        if prefix is not None:
            rows[:, :width] = prefix[sel]
        rows[:, width] = ord("i")
        rows[:, width + 1 :] = be[sel, 8 - size :]
        encoded = rows.view(f"V{width + 1 + size}").ravel().tolist()
        if out is None:
            return encoded
        out[sel] = encoded
    return [] if out is None else out.tolist()


def _int_id_order(xs: np.ndarray) -> np.ndarray:
    """Positions of int ids sorted as LMDB sorts their encodings (bytes, shorter first)."""
    nbytes = _int_id_lengths(xs)
    left = xs.view(np.uint64) << ((8 - nbytes) * 8).astype(np.uint64)
    return np.lexsort((nbytes, left))


def _put_rows(cur: Any, keys: list[bytes], values: list[bytes], *, append: bool) -> bool:
    """putmulti of rows in key order; whether appending still works for the next rows.

    An append that LMDB refuses (a row not after the database's end) is
    redone as ordinary puts, which skip rows already written.
    """
    if append:
        consumed, added = cur.putmulti(zip(keys, values, strict=False), append=True)
        if added == len(keys):
            return True
    cur.putmulti(zip(keys, values, strict=False))
    return False


# --- the store -------------------------------------------------------------


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
            self._path = os.fspath(path)
        except TypeError:
            raise SimstoreTypeError(
                f"'path' must be a str or os.PathLike (got {type(path).__name__})"
            ) from None
        if isinstance(max_readers, bool) or not isinstance(max_readers, int) or max_readers < 1:
            raise InvalidConfigError(f"'max_readers' must be an int >= 1 (got {max_readers!r})")
        if k is not None:
            k = check_k(k, "k", PLAN_MAX_K)
        if expected_size is not None and (
            isinstance(expected_size, bool)
            or not isinstance(expected_size, (int, np.integer))
            or expected_size < 0
        ):
            raise InvalidConfigError(f"'expected_size' must be an int >= 0 (got {expected_size!r})")
        if config is not None and not isinstance(config, FingerprintConfig):
            raise SimstoreTypeError(
                f"'config' must be a FingerprintConfig (got {type(config).__name__})"
            )
        if map_size is not None and (not isinstance(map_size, int) or map_size < _PAGE):
            raise InvalidConfigError(f"'map_size' must be an int >= {_PAGE} (got {map_size!r})")
        self._want_k = k
        self._expected_size = DEFAULT_EXPECTED_SIZE if expected_size is None else int(expected_size)
        self._want_config = config
        self._readonly = bool(readonly)
        self._durable = bool(durable)
        self._map_size = map_size
        self._max_readers = int(max_readers)
        self._lock = threading.RLock()
        self._env: Any = None
        self._wtxn: Any = None
        self._log: list[tuple[Any, tuple[Any, ...]]] | None = None
        self._scan_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        self._closed = False
        self._lockfd: int | None = None
        self._open()

    # --- opening ---------------------------------------------------------

    def _open(self) -> None:
        creating = self._check_path()
        if creating and self._readonly:
            raise NotAStoreError(
                f"no simstore store at {self._path!r}; a readonly open never creates one"
            )
        plan_k = DEFAULT_K if self._want_k is None else self._want_k
        initial = self._map_size or _initial_map_size(plan_k, self._expected_size)
        try:
            env = self._open_env(initial, creating)
        except lmdb.Error as exc:
            raise _translate(exc, self._path) from exc
        except OSError as exc:
            raise StoreAccessError(
                f"cannot {'create' if creating else 'open'} store {self._path!r}: "
                f"{exc.strerror or exc}; give a path this process may write, or open an "
                "existing store with readonly=True"
            ) from exc
        self._env = env
        self._pid = os.getpid()
        try:
            self._check_env(env)
            self._take_shared_lock()
            if creating and self._create(env):
                return
            self._load(env)
        except BaseException:
            self._env = None
            self._release_lock()
            env.close()
            raise

    def _check_env(self, env: Any) -> None:
        """Free reader slots of dead processes; refuse a data file shorter than its pages.

        LMDB maps data.mdb and trusts it: a truncated file would kill the
        process with SIGBUS on the first read past its end.
        """
        try:
            env.reader_check()
            need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        except lmdb.Error as exc:
            raise _translate(exc, self._path) from exc
        size = os.path.getsize(os.path.join(self._path, "data.mdb"))
        if 0 < size < need:
            raise CorruptStoreError(
                f"store {self._path!r} looks damaged: data.mdb has {size} bytes but its pages "
                f"reach {need} bytes (truncated); restore it from a copy"
            )

    def _take_shared_lock(self) -> None:
        """Hold a shared flock on <store>/simstore.lock while open (see _exclusive)."""
        path = os.path.join(self._path, _LOCK_FILE)
        try:
            if self._readonly:
                fd = os.open(path, os.O_RDONLY)
            else:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            return  # a read-only open of a store whose lock file is gone: nothing to share
        except OSError as exc:
            if self._readonly:
                return
            raise StoreError(f"store {self._path!r}: cannot open its lock file: {exc}") from exc
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._lockfd = fd

    def _release_lock(self) -> None:
        fd, self._lockfd = self._lockfd, None
        if fd is not None:
            os.close(fd)

    @contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        """Run a block only if no other handle (any process) has the store open."""
        fd = self._lockfd
        if fd is None:
            raise StoreError(f"store {self._path!r}: {what} needs a writable store lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH)
            raise StoreInUseError(
                f"store {self._path!r} is open in another process; {what} needs it alone: "
                "stop the other readers and writers and try again"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_SH)

    def _reload(self) -> None:
        """Close and reopen the environment, re-reading layout and handles from disk."""
        env, self._env = self._env, None
        self._wtxn = None
        self._log = None
        self._scan_cache = None
        self._release_lock()
        if env is not None:
            env.close()
        self._open()

    def _open_env(self, initial: int, creating: bool) -> Any:
        """lmdb.open, closing a stale handle inherited through fork if one holds the files."""
        for attempt in range(2):
            try:
                return self._lmdb_open(initial, creating)
            except lmdb.Error as exc:
                if attempt or "already open in this process" not in str(exc):
                    raise
                if not _close_inherited(self._path):
                    raise
        raise AssertionError("unreachable")

    def _lmdb_open(self, initial: int, creating: bool) -> Any:
        return lmdb.open(
            self._path,
            map_size=initial,
            subdir=True,
            readonly=self._readonly,
            sync=self._durable,
            metasync=self._durable,
            max_dbs=_MAX_DBS,
            max_readers=self._max_readers,
            lock=True,
            create=creating,
        )

    def _check_path(self) -> bool:
        """Whether the store must be created; NotAStoreError for foreign paths."""
        p = self._path
        if not os.path.exists(p):
            return True
        if not os.path.isdir(p):
            raise NotAStoreError(
                f"{p!r} is a file; a simstore store is a directory (give a new or empty one)"
            )
        entries = os.listdir(p)
        if "data.mdb" in entries:
            return False
        if entries:
            raise NotAStoreError(
                f"{p!r} is a non-empty directory holding no simstore store (no data.mdb); "
                "give a new or empty directory"
            )
        return True

    def _create(self, env: Any) -> bool:
        """Write a new store's databases and metadata; False if another process won."""
        k = DEFAULT_K if self._want_k is None else self._want_k
        layout = plan(k, self._expected_size).layout
        config = self._want_config or DEFAULT_CONFIG
        txn = env.begin(write=True)
        try:
            if txn.get(b"meta") is not None:
                txn.abort()
                return False
            meta = env.open_db(b"meta", txn=txn)
            txn.put(b"format", _json({"format": "simstore", "version": FORMAT_VERSION}), db=meta)
            txn.put(b"layout", _json(layout.to_dict()), db=meta)
            txn.put(b"fingerprint", _json(config.to_dict()), db=meta)
            self._bind(env, txn, layout, config, create=True)
            txn.commit()
        except lmdb.Error as exc:
            txn.abort()
            raise _translate(exc, self._path) from exc
        return True

    def _load(self, env: Any) -> None:
        txn = env.begin(write=False)
        try:
            if txn.get(b"meta") is None:
                raise NotAStoreError(
                    f"{self._path!r} holds an LMDB environment that is not a simstore store "
                    "(no 'meta' database)"
                )
            meta = env.open_db(b"meta", txn=txn, create=False)
            fmt = _unjson(txn.get(b"format", db=meta), "format")
            if fmt.get("format") != "simstore" or fmt.get("version") != FORMAT_VERSION:
                raise FormatVersionError(
                    f"store {self._path!r} has format {fmt!r}; this simstore reads "
                    f"simstore format version {FORMAT_VERSION} (upgrade simstore or rebuild)"
                )
            layout = Layout.from_dict(_unjson(txn.get(b"layout", db=meta), "layout"))
            config = FingerprintConfig.from_dict(
                _unjson(txn.get(b"fingerprint", db=meta), "fingerprint")
            )
            if self._want_k is not None and self._want_k != layout.max_k:
                raise LayoutMismatchError(
                    f"store {self._path!r} was built for k <= {layout.max_k}, not "
                    f"k={self._want_k}; open it without k (or with k={layout.max_k}), or build "
                    "a new store for the other k"
                )
            if self._want_config is not None and self._want_config != config:
                raise ConfigMismatchError(
                    f"store {self._path!r} holds fingerprints of {config.scheme}, not "
                    f"{self._want_config.scheme}; open it without config or with the same one"
                )
        except lmdb.Error as exc:
            raise _translate(exc, self._path) from exc
        finally:
            txn.abort()
        try:
            # Handles opened inside a read transaction die with it: open them on their own.
            self._bind(env, None, layout, config, create=False)
        except lmdb.Error as exc:
            raise _translate(exc, self._path) from exc

    def _bind(
        self, env: Any, txn: Any, layout: Layout, config: FingerprintConfig, *, create: bool
    ) -> None:
        """Open the named databases and precompute the query plan of a layout."""
        self._layout = layout
        self._config = config
        self._meta = env.open_db(b"meta", txn=txn, create=create)
        self._docs = env.open_db(b"docs", txn=txn, create=create)
        self._ids = env.open_db(b"ids", txn=txn, create=create)
        self._tables = [
            env.open_db(b"t%02d" % t, txn=txn, create=create, dupsort=True, dupfixed=True)
            for t in range(len(layout.tables))
        ]
        specs = [layout.shifts(t) for t in range(len(layout.tables))]
        self._specs: tuple[bytes, bytes, bytes] = (
            b"".join(s[0] for s in specs),
            b"".join(s[1] for s in specs),
            b"".join(s[2] for s in specs),
        )
        tails = [64 - layout.header_bits(t) for t in range(len(layout.tables))]
        masks = [_probe_masks(64 - tail, layout.radius, tail) for tail in tails]
        self._ranges = _core.query_ranges_fn(*self._specs, bytes(tails), masks)
        # Per table: (index of its permuted query, db, first and past-last index
        # of its (lo, hi) range keys) in the tuple self._ranges returns.
        plan_rows = []
        pos = len(tails)
        for t, db in enumerate(self._tables):
            plan_rows.append((t, db, pos, pos + 2 * len(masks[t])))
            pos += 2 * len(masks[t])
        self._probe_plan = tuple(plan_rows)

    # --- handles, transactions, errors ------------------------------------

    def _live_env(self) -> Any:
        if self._closed:
            raise StoreClosedError(f"store {self._path!r} is closed; open a new SimStore")
        if os.getpid() != self._pid:
            # An LMDB environment must not be used across fork: reopen in the child.
            in_batch = self._wtxn is not None
            old, self._env = self._env, None
            self._wtxn = None
            self._log = None
            self._scan_cache = None
            self._release_lock()  # our copy only: the parent keeps its lock
            old.close()
            if in_batch:
                # The parent holds LMDB's write lock until its batch ends; a child
                # writing through this handle could wait on it forever.
                self._closed = True
                raise StoreInUseError(
                    f"store {self._path!r}: this handle came through fork() while the parent "
                    "was inside batch(), which holds the write lock; open a new SimStore in "
                    "the child (or fork outside batch())"
                )
            self._open()
        return self._env

    def _begin(self, write: bool) -> Any:
        env = self._env
        for _ in range(_MAX_GROWTHS):
            try:
                return env.begin(write=write)
            except lmdb.MapResizedError:
                env.set_mapsize(0)  # another process grew the map: adopt its size
        raise StoreError(f"store {self._path!r}: the map kept being resized; try again")

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        """A short read transaction (or the open batch's write transaction)."""
        with self._lock:
            self._live_env()
            if self._wtxn is not None:
                yield self._wtxn
                return
            try:
                txn = self._begin(False)
            except lmdb.Error as exc:
                raise _translate(exc, self._path) from exc
            try:
                yield txn
            except lmdb.Error as exc:
                raise _translate(exc, self._path) from exc
            finally:
                txn.abort()

    def _check_writable(self) -> None:
        if self._readonly:
            raise ReadOnlyError(
                f"store {self._path!r} was opened with readonly=True; open it without to write"
            )

    def _write(self, op: Any, *args: Any) -> Any:
        """Run op(txn, *args) in a write transaction, growing the map as needed."""
        with self._lock:
            self._live_env()
            self._check_writable()
            if self._wtxn is not None:
                assert self._log is not None
                try:
                    result = op(self._wtxn, *args)
                except lmdb.MapFullError:
                    self._log.append((op, args))
                    return self._replay()
                except lmdb.Error as exc:
                    raise _translate(exc, self._path) from exc
                self._log.append((op, args))
                return result
            for _ in range(_MAX_GROWTHS):
                self._maybe_grow()
                try:
                    txn = self._begin(True)
                except lmdb.Error as exc:
                    raise _translate(exc, self._path) from exc
                try:
                    result = op(txn, *args)
                    txn.commit()
                    return result
                except lmdb.MapFullError:
                    _abort(txn)
                    self._grow()
                except lmdb.Error as exc:
                    _abort(txn)
                    raise _translate(exc, self._path) from exc
                except BaseException:
                    _abort(txn)
                    raise
            raise StoreError(f"store {self._path!r}: could not grow the map enough")

    def _replay(self) -> Any:
        """After MapFullError inside batch(): grow, restart the transaction, redo its ops."""
        assert self._log is not None
        result = None
        for _ in range(_MAX_GROWTHS):
            _abort(self._wtxn)
            self._wtxn = None
            self._grow()
            self._wtxn = self._begin(True)
            try:
                for op, args in self._log:
                    result = op(self._wtxn, *args)
                return result
            except lmdb.MapFullError:
                continue
        raise StoreError(f"store {self._path!r}: could not grow the map enough")

    def _maybe_grow(self, need: int = 0) -> None:
        """Double the map ahead of time when it is over half used (or lacks `need` bytes)."""
        info = self._env.info()
        used = (info["last_pgno"] + 1) * _PAGE
        size = info["map_size"]
        if used * 2 > size or used + need * 2 > size:
            self._grow(max(size * 2, used + need * 3))

    def _grow(self, target: int = 0) -> None:
        size = self._env.info()["map_size"]
        new = max(size * 2, target)
        new = -(-new // _PAGE) * _PAGE
        self._scan_cache = None
        try:
            self._env.set_mapsize(new)
        except lmdb.Error as exc:
            raise _translate(exc, self._path) from exc

    @contextmanager
    def batch(self) -> Iterator[SimStore]:
        """Group writes into one transaction: one commit (one fsync) at the end.

        Reads inside the block see its writes; an exception aborts them all.
        The handle is held by this thread for the block (other threads wait);
        other processes see nothing until the commit. Nested blocks join the
        outer one.
        """
        with self._lock:
            self._live_env()
            self._check_writable()
            if self._wtxn is not None:
                yield self
                return
            self._maybe_grow()
            try:
                self._wtxn = self._begin(True)
            except lmdb.Error as exc:
                raise _translate(exc, self._path) from exc
            self._log = []
            try:
                yield self
                for _ in range(_MAX_GROWTHS):
                    try:
                        self._wtxn.commit()
                        break
                    except lmdb.MapFullError:
                        self._replay()
            except lmdb.Error as exc:
                _abort(self._wtxn)
                raise _translate(exc, self._path) from exc
            except BaseException:
                _abort(self._wtxn)
                raise
            finally:
                self._wtxn = None
                self._log = None

    transaction = batch

    # --- writes ------------------------------------------------------------

    def add(self, doc_id: DocId, fp: int) -> None:
        """Store doc_id with fingerprint fp; an existing doc_id gets the new fingerprint."""
        enc = _encode_id(doc_id)
        self._write(self._op_add, _id_key(enc), enc, check_fingerprint(fp))

    def add_many(self, doc_ids: Iterable[DocId], fps: Any) -> None:
        """Store many docs in one transaction; a doc_id given twice keeps its last fp.

        The fast path for bulk loads: each table gets its permuted keys sorted
        (appended in key order when the table is empty). Int ids (a range, an
        int array or a list of ints) are encoded with numpy, not one by one.
        """
        arr = as_fingerprint_array(fps)
        ints = _int_id_array(doc_ids)
        ids: Any = ints if ints is not None else _doc_ids_arg(doc_ids)
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
            encs = [_encode_id(d) for d in ids]
            last: dict[bytes, int] = {}
            for i, enc in enumerate(encs):
                last[_id_key(enc)] = i
            kept = sorted(last.values())
            if len(kept) != len(encs):
                encs = [encs[i] for i in kept]
                arr = arr[np.asarray(kept, dtype=np.int64)]
            ids = encs
        if not len(ids):
            return
        with self._lock:
            self._live_env()
            self._check_writable()
            if self._wtxn is None:
                self._maybe_grow(len(ids) * (len(self._tables) * 40 + 64))
            self._write(self._op_add_many, ids, arr)

    def remove(self, doc_id: DocId) -> bool:
        """Delete doc_id; True if it was stored, False if not (never raises KeyError)."""
        enc = _encode_id(doc_id)
        return bool(self._write(self._op_remove, _id_key(enc), enc))

    def remove_many(self, doc_ids: Iterable[DocId]) -> int:
        """Delete many docs in one transaction; returns how many were stored."""
        encs = [_encode_id(d) for d in _doc_ids_arg(doc_ids)]
        return int(self._write(self._op_remove_many, encs))

    def add_if_new(self, doc_id: DocId, fp: int, k: int | None = None) -> list[Match]:
        """The crawler's call: near-duplicates already stored, storing the doc only if none.

        In ONE write transaction (so atomic across processes): find every
        stored doc within k (default: the store's k) of fp; if there is none,
        store (doc_id, fp) and return []; otherwise store nothing and return
        the matches. A doc_id already stored counts like any other doc: an
        unchanged recrawl returns its own old entry and keeps it; a recrawl
        that moved more than k away from everything replaces its fingerprint.
        """
        enc = _encode_id(doc_id)
        q = check_fingerprint(fp)
        kk = self._k_arg(k)
        return self._write(self._op_add_if_new, _id_key(enc), enc, q, kk)  # type: ignore[no-any-return]

    def _op_add(self, txn: Any, idkey: bytes, enc: bytes, fp: int) -> None:
        old = txn.get(idkey, db=self._ids)
        if old is not None:
            old_fp, old_enc = _parse_record(txn.get(old, db=self._docs))
            if old_enc != enc:
                raise CorruptStoreError(_collision(self._path))
            if old_fp == fp:
                return
            self._unindex(txn, old, old_fp)
            iid = bytes(old)
        else:
            iid = self._next_iid(txn)
            txn.put(idkey, iid, db=self._ids)
        txn.put(iid, _record(fp, enc), db=self._docs)
        keys = _core.permute_tables(fp, len(self._tables), *self._specs)
        for db, key in zip(self._tables, keys, strict=False):
            txn.put(key.to_bytes(8, "big"), iid, db=db, dupdata=True)

    def _unindex(self, txn: Any, iid: bytes, fp: int) -> None:
        keys = _core.permute_tables(fp, len(self._tables), *self._specs)
        for db, key in zip(self._tables, keys, strict=False):
            txn.delete(key.to_bytes(8, "big"), iid, db=db)

    def _next_iid(self, txn: Any) -> bytes:
        cur = txn.cursor(self._docs)
        n = int.from_bytes(cur.key(), "big") + 1 if cur.last() else 0
        return n.to_bytes(8, "big")

    def _op_remove(self, txn: Any, idkey: bytes, enc: bytes) -> bool:
        iid = txn.get(idkey, db=self._ids)
        if iid is None:
            return False
        fp, old_enc = _parse_record(txn.get(iid, db=self._docs))
        if old_enc != enc:
            return False  # a digest collision: the stored doc is another id
        iid = bytes(iid)
        self._unindex(txn, iid, fp)
        txn.delete(iid, db=self._docs)
        txn.delete(idkey, db=self._ids)
        return True

    def _op_remove_many(self, txn: Any, encs: list[bytes]) -> int:
        return sum(self._op_remove(txn, _id_key(e), e) for e in encs)

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
            id_order = _int_id_order(ids)
        else:
            idkeys = [_id_key(e) for e in ids]
            id_order = np.asarray(sorted(range(n), key=idkeys.__getitem__), dtype=np.int64)

        def id_keys(pos: np.ndarray) -> list[bytes]:
            return _int_encodings(ids[pos]) if ints else [idkeys[i] for i in pos.tolist()]

        is_new = np.ones(n, dtype=bool)
        if txn.stat(self._ids)["entries"]:
            # Which ids are stored already: lookups in key order, one cursor.
            cur = txn.cursor(self._ids)
            for a in range(0, n, _PUT_CHUNK):
                pos = id_order[a : a + _PUT_CHUNK]
                for i, key in zip(pos.tolist(), id_keys(pos), strict=False):
                    if cur.set_key(key):
                        is_new[i] = False
            old = np.flatnonzero(~is_new)
            for i in old.tolist():
                enc = _encode_id(int(ids[i])) if ints else ids[i]
                self._op_add(txn, _id_key(enc), enc, int(fps[i]))
            if len(old) == n:
                return
        new = np.flatnonzero(is_new)
        first = int.from_bytes(self._next_iid(txn), "big")
        iids = np.zeros(n, dtype=np.uint64)
        iids[new] = np.arange(first, first + len(new), dtype=np.uint64)
        iid_rows = iids.astype(">u8").view("V8")
        sub = fps[new] if len(new) != n else fps
        sub_iids = iids[new] if len(new) != n else iids
        pipelined = len(new) >= _PIPELINE_MIN
        # Large loads sort table t + 1 in a thread (C, without the GIL) while
        # the docs, the ids and table t are written.
        with ThreadPoolExecutor(1) as sorter, ThreadPoolExecutor(1) as chunker:
            ahead = sorter.submit(self._sorted_table, 0, sub, sub_iids) if pipelined else None
            # docs: records in internal-id (= input) order, appended
            prefix = np.empty((n, 9), dtype=np.uint8)
            prefix[:, 0] = RECORD_VERSION
            prefix[:, 1:] = fps.astype(">u8").view(np.uint8).reshape(n, 8)
            cur = txn.cursor(self._docs)
            for a in range(0, len(new), _PUT_CHUNK):
                pos = new[a : a + _PUT_CHUNK]
                if ints:
                    recs = _int_encodings(ids[pos], prefix[pos])
                else:
                    pre = prefix[pos].view("V9").ravel().tolist()
                    recs = [p + ids[i] for p, i in zip(pre, pos.tolist(), strict=False)]
                _put_rows(cur, iid_rows[pos].tolist(), recs, append=True)
            del prefix
            # ids: encoded id -> internal id, in key order
            new_order = id_order[is_new[id_order]]
            cur = txn.cursor(self._ids)
            append = txn.stat(self._ids)["entries"] == 0
            for a in range(0, len(new_order), _PUT_CHUNK):
                pos = new_order[a : a + _PUT_CHUNK]
                _put_rows(cur, id_keys(pos), iid_rows[pos].tolist(), append=append)
            del iids, iid_rows, new_order
            if ahead is None:
                for t, db in enumerate(self._tables):
                    self._fill_table(txn, t, db, sub, sub_iids)
                return
            for t, db in enumerate(self._tables):
                rows = ahead.result()
                if t + 1 < len(self._tables):
                    ahead = sorter.submit(self._sorted_table, t + 1, sub, sub_iids)
                self._put_table(txn, db, *rows, pool=chunker)
                del rows

    def _fill_table(self, txn: Any, t: int, db: Any, fps: np.ndarray, iids: np.ndarray) -> None:
        """Insert (permuted fp, internal id) for every doc into table t, in key order.

        An empty table is filled by appends (pages fill ~100%); shared by
        add_many and rebuild.
        """
        self._put_table(txn, db, *self._sorted_table(t, fps, iids))

    def _sorted_table(
        self, t: int, fps: np.ndarray, iids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Table t's rows (permuted keys, ids; uint64) in key order, ids ascending under a key."""
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        iids = np.ascontiguousarray(iids, dtype=np.uint64)
        if len(iids) > 1 and not bool((iids[1:] > iids[:-1]).all()):
            order = np.argsort(iids, kind="stable")  # the C sort keeps id order per key
            fps, iids = fps[order], iids[order]
        return _core.sort_table(fps, iids, *self._layout.shifts(t))

    def _put_table(
        self, txn: Any, db: Any, keys: np.ndarray, vals: np.ndarray, pool: Any = None
    ) -> None:
        """Write sorted table rows in chunks, appending while the table allows it.

        With a thread pool, the next chunk's bytes objects are made while
        LMDB writes this one (py-lmdb releases the GIL as it writes).
        """
        def rows(a: int) -> tuple[list[bytes], list[bytes]]:
            b = a + _PUT_CHUNK
            return (
                keys[a:b].astype(">u8").view("V8").tolist(),
                vals[a:b].astype(">u8").view("V8").tolist(),
            )

        cur = txn.cursor(db)
        append = txn.stat(db)["entries"] == 0
        starts = range(0, len(keys), _PUT_CHUNK)
        ahead = pool.submit(rows, 0) if pool is not None and starts else None
        for a in starts:
            if ahead is None:
                kl, vl = rows(a)
            else:
                kl, vl = ahead.result()
                if a + _PUT_CHUNK < len(keys):
                    ahead = pool.submit(rows, a + _PUT_CHUNK)
            append = _put_rows(cur, kl, vl, append=append)
            del kl, vl

    # --- reads ---------------------------------------------------------------

    def _k_arg(self, k: int | None) -> int:
        return self._layout.max_k if k is None else check_k(k)

    def query(self, fp: int, k: int | None = None) -> list[Match]:
        """Every stored doc within Hamming distance k of fp, exactly.

        Sorted by distance, then insertion order. k defaults to the store's k;
        any k <= the store's k uses the tables; a larger k (up to 64) is
        answered exactly too, by a C scan of all stored fingerprints (O(n)).
        """
        q = fp if type(fp) is int and 0 <= fp <= _MAX_FP else check_fingerprint(fp)
        if k is None:
            kk = self._layout.max_k
        else:
            kk = k if type(k) is int and 0 <= k <= 64 else check_k(k)
        lock = self._lock
        lock.acquire()
        try:
            if self._wtxn is not None or self._closed or _PID[0] != self._pid:
                with self._reading() as txn:
                    return self._search(txn, q, kk)
            try:
                try:
                    txn = self._env.begin()
                except lmdb.MapResizedError:
                    txn = self._begin(False)
                try:
                    return self._search(txn, q, kk)
                finally:
                    txn.abort()
            except lmdb.Error as exc:
                raise _translate(exc, self._path) from exc
        finally:
            lock.release()

    def query_many(self, fps: Any, k: int | None = None) -> list[list[Match]]:
        """:meth:`query` for each fingerprint (a uint64 array or an iterable of ints)."""
        arr = as_fingerprint_array(fps)
        kk = self._k_arg(k)
        out: list[list[Match]] = []
        qs = arr.tolist()
        for start in range(0, len(qs), _QUERY_CHUNK):
            with self._reading() as txn:
                out.extend(self._search(txn, q, kk) for q in qs[start : start + _QUERY_CHUNK])
        return out

    def _search(self, txn: Any, q: int, k: int) -> list[Match]:
        """Every doc within k of q (k <= the layout's k uses the tables)."""
        if k > self._layout.max_k:
            return self._scan(txn, q, k)
        ranges = self._ranges(q)
        cursor = txn.cursor
        # The first (smallest) internal id under a key names its fingerprint:
        # docs with one fingerprint share one id list in every table.
        seen: set[bytes] = set()
        rows: list[tuple[int, bytes]] = []
        for t, db, start, stop in self._probe_plan:
            cur = cursor(db)
            if stop - start == 2:  # one range (radius 0): the common case, kept lean
                if not cur.set_range(ranges[start]):
                    continue
                at = cur.key()
                if at > ranges[start + 1]:
                    continue
            at = None  # the key the cursor is on; _PAST_END once it ran off the table
            for j in range(start, stop, 2):
                if at is None or at < ranges[j]:
                    if not cur.set_range(ranges[j]):
                        break
                    at = cur.key()
                hi = ranges[j + 1]
                while at <= hi:
                    first = cur.value()
                    if first not in seen:
                        seen.add(first)
                        d = (int.from_bytes(at, "big") ^ ranges[t]).bit_count()
                        if d <= k:
                            rows.append((d, first))
                            for _ in range(cur.count() - 1):
                                cur.next_dup()
                                rows.append((d, cur.value()))
                    at = cur.key() if cur.next_nodup() else _PAST_END
        if not rows:
            return []
        return self._matches(txn, rows)

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
                    f"store {self._path!r}: a table names a doc the docs database lacks"
                )
            if rec[:1] != _RECORD_TAG:
                _parse_record(rec)  # raises with the reason
            out.append(Match(_decode_id(rec[9:]), int.from_bytes(rec[1:9], "big"), row[0]))
        return out

    def _scan(self, txn: Any, q: int, k: int) -> list[Match]:
        """Exact answer for k above the layout's k: popcount over every stored fingerprint."""
        iids, fps = self._all_fps(txn)
        idx, dist = _core.hamming_within(q, fps, k)
        rows = [
            (d, int(iids[i]).to_bytes(8, "big"), int(fps[i]))
            for i, d in zip(idx.tolist(), dist.tolist(), strict=False)
        ]
        return self._matches(txn, rows)

    def _all_fps(self, txn: Any) -> tuple[np.ndarray, np.ndarray]:
        """(internal ids, fingerprints) of every doc in internal order, cached per snapshot."""
        tid = txn.id()
        # Only committed snapshots may be cached: a write transaction's id is the
        # next commit's, so its (pre-write or aborted) view would pass for that snapshot.
        cacheable = txn is not self._wtxn and tid <= self._env.info()["last_txnid"]
        if cacheable and self._scan_cache is not None and self._scan_cache[0] == tid:
            return self._scan_cache[1], self._scan_cache[2]
        keys = []
        fpb = []
        for key, val in txn.cursor(self._docs).iternext():
            keys.append(key)
            fpb.append(val[1:9])
        iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        fps = np.frombuffer(b"".join(fpb), dtype=">u8").astype(np.uint64)
        if cacheable:
            self._scan_cache = (tid, iids, fps)
        return iids, fps

    def get(self, doc_id: DocId, default: Any = None) -> int | None:
        """The fingerprint stored for doc_id, or default (None)."""
        enc = _encode_id(doc_id)
        with self._reading() as txn:
            found = self._lookup(txn, enc)
        return default if found is None else found[1]

    def _lookup(self, txn: Any, enc: bytes) -> tuple[bytes, int] | None:
        iid = txn.get(_id_key(enc), db=self._ids)
        if iid is None:
            return None
        fp, stored = _parse_record(txn.get(iid, db=self._docs))
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
            enc = _encode_id(doc_id)
        except (TypeError, ValueError):
            return False
        with self._reading() as txn:
            return self._lookup(txn, enc) is not None

    def __len__(self) -> int:
        """Number of stored docs."""
        with self._reading() as txn:
            return int(txn.stat(self._docs)["entries"])

    def items(self) -> Iterator[tuple[DocId, int]]:
        """(doc_id, fingerprint) in insertion order, read in short transactions.

        Writes made while iterating may or may not be seen.
        """
        after: bytes | None = None
        while True:
            with self._reading() as txn:
                cur = txn.cursor(self._docs)
                ok = cur.set_range(after) if after is not None else cur.first()
                if ok and after is not None and cur.key() == after:
                    ok = cur.next()
                chunk: list[tuple[DocId, int]] = []
                while ok and len(chunk) < _READ_CHUNK:
                    key, val = cur.item()
                    fp, enc = _parse_record(val)
                    chunk.append((_decode_id(enc), fp))
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
        with self._reading() as txn:
            ids = []
            fpb = []
            for val in txn.cursor(self._docs).iternext(keys=False, values=True):
                ids.append(_decode_id(val[9:]))
                fpb.append(val[1:9])
        return ids, np.frombuffer(b"".join(fpb), dtype=">u8").astype(np.uint64)

    def stats(self) -> dict[str, Any]:
        """Size, layout and scheme of the store, as plain JSON-able values."""
        with self._reading() as txn:
            count = int(txn.stat(self._docs)["entries"])
            info = self._env.info()
        lay = self._layout
        return {
            "path": self._path,
            "count": count,
            "k": lay.max_k,
            "tables": len(lay.tables),
            "blocks": len(lay.blocks),
            "header_bits": [lay.header_bits(t) for t in range(len(lay.tables))],
            "radius": lay.radius,
            "fingerprint": self._config.to_dict(),
            "map_size": int(info["map_size"]),
            "used_bytes": (int(info["last_pgno"]) + 1) * _PAGE,
            "format_version": FORMAT_VERSION,
        }

    def fingerprints(self) -> np.ndarray:
        """Every stored fingerprint (uint64) in insertion order, for batch searches."""
        with self._reading() as txn:
            return self._all_fps(txn)[1].copy()

    def doc_ids(self) -> list[DocId]:
        """Every stored doc id in insertion order (the order of :meth:`fingerprints`)."""
        return self.snapshot()[0]

    # --- properties and lifecycle --------------------------------------------

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._path

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
        return self._readonly

    def sync(self) -> None:
        """Flush to disk now (useful with durable=False)."""
        with self._lock:
            try:
                self._live_env().sync(True)
            except lmdb.Error as exc:
                raise _translate(exc, self._path) from exc

    def close(self) -> None:
        """Close the handle (idempotent); later calls raise StoreClosedError."""
        with self._lock:
            if self._closed:
                return
            if self._wtxn is not None:
                _abort(self._wtxn)
                self._wtxn = None
            self._closed = True
            env, self._env = self._env, None
            self._scan_cache = None
            self._release_lock()
            if env is not None:
                env.close()

    # --- whole-store operations (simstore._maintenance) ----------------------

    def verify(self) -> list[str]:
        """Every broken invariant, as sentences; [] when the store is sound.

        Checks each doc is in every permutation table exactly once, no table
        or ids entry is an orphan, and records and metadata parse.
        """
        return _maintenance.verify(self)

    def rebuild(self, k: int | None = None, expected_size: int | None = None) -> dict[str, Any]:
        """Re-derive every table (and the ids map) from the docs table: new k, or repair.

        One atomic transaction: a crash leaves the old layout or the new one,
        complete. Refused with StoreInUseError while another handle (in any
        process) has the store open. Returns :meth:`stats`.
        """
        if self._wtxn is not None:
            raise StoreError("rebuild() cannot run inside batch(); call it outside")
        return _maintenance.rebuild(self, k, expected_size)

    def compact(self, dest: str | os.PathLike[str]) -> None:
        """Write a compacted copy to a new directory (complete or absent, never half)."""
        _maintenance.compact(self, dest)

    def pairs(self, k: int | None = None) -> Iterator[tuple[DocId, DocId, int]]:
        """Every pair of stored docs within k (default: the store's k), with the distance."""
        return _maintenance.pairs(self, k)

    def clusters(self, k: int | None = None) -> list[list[DocId]]:
        """Connected groups (size >= 2) of docs within k of each other."""
        return _maintenance.clusters(self, k)

    def __enter__(self) -> SimStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle by path and options: the receiver opens the store itself."""
        return (
            _reopen,
            (self._path, self._layout.max_k, self._config, self._readonly, self._durable,
             self._map_size, self._max_readers),
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("readonly" if self._readonly else "open")
        return f"SimStore({self._path!r}, k={self.k}, {state})"


def _reopen(
    path: str, k: int, config: FingerprintConfig, readonly: bool, durable: bool,
    map_size: int | None, max_readers: int,
) -> SimStore:
    return SimStore(
        path, k=k, config=config, readonly=readonly, durable=durable,
        map_size=map_size, max_readers=max_readers,
    )


# --- helpers ---------------------------------------------------------------


def _close_inherited(path: str) -> bool:
    """Close handles on path that a forked child inherited from its parent.

    LMDB refuses a second open of the same files in one process, and a child
    unpickling a store (multiprocessing) still holds the parent's unused
    handle. Such handles are found through the garbage collector rather than
    a module-level registry; this runs only on that error path.
    """
    import gc

    real = os.path.realpath(path)
    closed = False
    for obj in gc.get_objects():
        if (
            isinstance(obj, SimStore)
            and obj._env is not None
            and obj._pid != os.getpid()
            and os.path.realpath(obj._path) == real
        ):
            env, obj._env = obj._env, None
            obj._closed = True
            env.close()
            closed = True
    return closed


def _probe_masks(header_bits: int, radius: int, tail: int) -> list[int]:
    """XOR masks (already shifted to the header's position) of weight <= radius."""
    out = []
    for r in range(min(radius, header_bits) + 1):
        for bits in combinations(range(header_bits), r):
            m = 0
            for b in bits:
                m |= 1 << b
            out.append(m << tail)
    return out


def _initial_map_size(k: int, expected_size: int) -> int:
    est = plan(k, expected_size).bytes_per_fingerprint * max(expected_size, 1) // 4
    size = max(_MIN_MAP_SIZE, est)
    return -(-size // _PAGE) * _PAGE


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _unjson(raw: bytes | None, name: str) -> dict[str, Any]:
    if raw is None:
        raise CorruptStoreError(f"the store's metadata lacks {name!r}")
    try:
        value = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptStoreError(f"the store's metadata {name!r} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptStoreError(f"the store's metadata {name!r} is not a JSON object")
    return value


def _abort(txn: Any) -> None:
    try:
        txn.abort()
    except lmdb.Error:
        pass


def _collision(path: str) -> str:
    return (
        f"store {path!r}: two doc ids longer than {_MAX_KEY_BYTES} bytes share a blake2b "
        "digest; please report this"
    )


def _translate(exc: lmdb.Error, path: str) -> StoreError:
    """A simstore error, with a hint, for a raw LMDB error."""
    text = str(exc)
    if "already open in this process" in text:
        return StoreInUseError(
            f"store {path!r} is already open in this process; LMDB allows one handle "
            "per process, so reuse the open SimStore (or close it first)"
        )
    if "Read-only file system" in text or "Permission denied" in text:
        return StoreAccessError(
            f"store {path!r} cannot be written here ({text}); give a path this process may "
            "write, or open the store with readonly=True"
        )
    if isinstance(exc, lmdb.ReadonlyError):
        return ReadOnlyError(f"store {path!r} is read-only here: {text}")
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
                        lmdb.VersionMismatchError, lmdb.BadDbiError)):
        return CorruptStoreError(
            f"store {path!r} looks damaged or was written by an incompatible LMDB: {text}"
        )
    if isinstance(exc, lmdb.ReadersFullError):
        return StoreError(
            f"store {path!r}: too many concurrent readers ({text}); open it with a larger "
            "max_readers (first process to open sets it) or end stale processes"
        )
    if isinstance(exc, (lmdb.DiskError, lmdb.TlsFullError)):
        return StoreError(f"store {path!r}: LMDB failed ({text}); check free disk space")
    return StoreError(f"store {path!r}: LMDB error: {text}")
