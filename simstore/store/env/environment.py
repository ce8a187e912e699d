"""A store's LMDB environment: paths, locks, fork and pickle, transactions, growth, errors.

Knows nothing of what the databases hold: the store binds its handles in an
``on_open(env, creating)`` callback, called after every (re)open, so a child
process after ``fork()`` or a rebuild gets fresh handles the same way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import lmdb

from ...exceptions import (
    CorruptStoreError,
    NotAStoreError,
    ReadOnlyError,
    StoreAccessError,
    StoreClosedError,
    StoreError,
    StoreInUseError,
)
from ..check.pages import check_open, meta_problems
from ..format import PAGE
from .create import MAX_DBS, create_aside
from .errors import translate
from .forks import FORK_WAIT, abandon, close_inherited, let_go, register
from .lockfile import StoreLock
from .readahead import HugeGrowth, advise_huge_pages, wants_readahead

T = TypeVar("T")

_MAX_GROWTHS = 40
class Env:
    """One open LMDB environment and the handle state around it.

    ``lock`` serializes calls on the handle; ``wtxn`` is the write transaction
    of an open :meth:`batch` (None otherwise); ``epoch`` changes whenever the
    map is grown, the environment reopened or a write transaction aborted (caches keyed
    on it go stale).
    """

    def __init__(
        self,
        path: str,
        *,
        readonly: bool,
        durable: bool,
        max_readers: int,
        map_size: int,
        on_open: Callable[[Any, bool], None],
        readahead: bool | None = None,
    ) -> None:
        self.path = path
        self.readahead = readahead  # None: as wants_readahead says at each open
        self.readonly = readonly
        self.durable = durable
        self.max_readers = max_readers
        self.map_size = map_size
        # A weak reference: the store owns its Env, and a cycle back to the store
        # would keep a dropped handle (and its files) open until the next gc run.
        self._on_open = weakref.WeakMethod(on_open)  # type: ignore[arg-type]
        self.lock = threading.RLock()
        self.env: Any = None
        self._growth: HugeGrowth | None = None
        self.wtxn: Any = None
        self.committed: Any = None  # the last write transaction this handle committed
        self._log: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
        self.closed = False
        self.quiet_at_fork = True  # set by the fork hook: no call in flight at the fork
        self.pid = 0
        self.epoch = 0
        self.store_lock = StoreLock(path, readonly)
        register(self)

    # --- opening and closing ---------------------------------------------------

    def open(self) -> None:
        """Open (or create) the environment and let the store bind its handles."""
        creating = self._check_path()
        if creating and self.readonly:
            raise NotAStoreError(
                f"no simstore store at {self.path!r}; a readonly open never creates one"
            )
        if creating:
            self._create_aside()
            creating = False
        try:
            env = self._lmdb_open(creating)
        except lmdb.Error as exc:
            damage = meta_problems(self.path)
            if damage:
                raise CorruptStoreError(
                    f"store {self.path!r} looks damaged: {damage[0]}; restore data.mdb from a copy"
                ) from exc
            raise translate(exc, self.path) from exc
        except OSError as exc:
            raise StoreAccessError(
                f"cannot {'create' if creating else 'open'} store {self.path!r}: "
                f"{exc.strerror or exc}; give a path this process may write, or open an "
                "existing store with readonly=True"
            ) from exc
        self.env = env
        self.pid = os.getpid()
        self.epoch += 1
        # a writer whose readers map in huge pages prepares its new pages for them
        self._growth = None if self.readonly or not env.flags()["readahead"] else \
            HugeGrowth(os.path.join(self.path, "data.mdb"))
        try:
            self._advise_map()
            self._check_file(env)
            if not self.store_lock.held:
                self.store_lock.take_shared(self)
            on_open = self._on_open()
            if on_open is None:
                raise StoreClosedError(f"store {self.path!r}: its SimStore is gone")
            on_open(env, creating)
        except BaseException:
            self.env = None
            self.store_lock.release()
            env.close()
            raise

    def _create_aside(self) -> None:
        on_open = self._on_open()
        if on_open is None:
            raise StoreClosedError(f"store {self.path!r}: its SimStore is gone")
        create_aside(self.path, self.map_size, self.max_readers, on_open)

    def _check_path(self) -> bool:
        """Whether the store must be created; NotAStoreError for foreign paths."""
        p = self.path
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

    def _lmdb_open(self, creating: bool) -> Any:
        """lmdb.open, closing a stale handle inherited through fork if one holds the files."""
        for attempt in range(2):
            try:
                return lmdb.open(
                    self.path,
                    map_size=self.map_size,
                    subdir=True,
                    readonly=self.readonly,
                    sync=self.durable,
                    metasync=self.durable,
                    max_dbs=MAX_DBS,
                    max_readers=self.max_readers,
                    lock=True,
                    create=creating,
                    readahead=self.readahead if self.readahead is not None
                    else wants_readahead(os.path.join(self.path, "data.mdb")),
                )
            except lmdb.Error as exc:
                # py-lmdb refuses a second open of one environment in a process with a
                # plain lmdb.Error (no class of its own): its text is all there is.
                if attempt or "already open in this process" not in str(exc):
                    raise
                if not close_inherited(self.path):
                    raise
        raise AssertionError("unreachable")

    def _check_file(self, env: Any) -> None:
        """Free reader slots of dead processes; refuse a file whose structure is damaged.

        LMDB maps data.mdb and trusts it: a truncated file would kill the
        process with SIGBUS, a damaged root or free-list page with an
        assertion. :func:`simstore.store.check.pages.check_open` reads what opening
        touches (meta pages, roots, the free list) as plain bytes first.
        """
        try:
            env.reader_check()
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc
        problems = check_open(env, self.path)
        if problems:
            raise CorruptStoreError(
                f"store {self.path!r} looks damaged: {problems[0]}; restore data.mdb from a "
                "copy (simstore-cli verify says more)"
            )

    def _drop(self, *, keep_lock: bool = False) -> None:
        """Forget the environment and its transactions (the caller closes it)."""
        self.wtxn = None
        self._log = None
        self.env = None
        self.epoch += 1
        if not keep_lock:
            self.store_lock.release()

    def reload(self) -> None:
        """Close and reopen the environment, re-reading everything from disk.

        The store lock stays held (and exclusive, inside :meth:`exclusive`).
        """
        env = self.env
        self._drop(keep_lock=True)
        if env is not None:
            env.close()
        self.open()

    def close(self) -> None:
        """Close (idempotent); an open batch is aborted."""
        with self.lock:
            if self.closed:
                return
            inherited = self.env is not None and self.pid != os.getpid()
            if self.wtxn is not None and not inherited:
                _abort(self.wtxn)
            self.closed = True
            env, in_batch = self.env, self.wtxn is not None
            self._drop()
            if env is None:
                return
            if not inherited:
                env.close()
            elif in_batch:  # the parent's write transaction: never ended from here
                abandon(env)
            else:
                let_go(self, env)

    def live(self) -> Any:
        """The lmdb environment; reopened in a forked child, refused once closed."""
        if self.closed:
            raise StoreClosedError(f"store {self.path!r} is closed; open a new SimStore")
        if os.getpid() != self.pid:
            # An LMDB environment must not be used across fork: the child opens its own,
            # after closing the inherited one if that is safe (see store/forks.py).
            in_batch = self.wtxn is not None
            old = self.env
            self._drop()  # our copy of the lock only: the parent keeps its own
            if in_batch:
                # Closing would abort the parent's write transaction from here (and
                # touch LMDB's write lock, which the parent holds): abandon it instead.
                abandon(old)
                self.closed = True
                raise StoreInUseError(
                    f"store {self.path!r}: this handle came through fork() while the parent "
                    "was inside batch(), which holds the write lock; open a new SimStore in "
                    "the child (or fork outside batch())"
                )
            let_go(self, old)
            if not self.quiet_at_fork:
                self.closed = True
                raise StoreInUseError(
                    f"store {self.path!r}: this handle came through fork() while another "
                    f"thread was inside a store call that lasted over {FORK_WAIT:g} s; LMDB "
                    "cannot reopen the store in this process: fork when no thread is inside "
                    "a store call, or start workers with the 'spawn' method"
                )
            self.open()
        return self.env

    def exclusive(self, what: str) -> Any:
        """A context: run a block only if no other handle (any process) has the store open."""
        return self.store_lock.exclusive(what)

    # --- transactions ------------------------------------------------------------

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Raw LMDB errors of a block become simstore errors with a hint."""
        try:
            yield
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc

    def begin(self, write: bool, need: int = 0) -> Any:
        """A new transaction, adopting a map another process grew; a write transaction's
        new pages (need bytes of them, or a few) prepared in huge pages first."""
        env = self.env
        for _ in range(_MAX_GROWTHS):
            try:
                txn = env.begin(write=write)
                if write and self._growth is not None:
                    try:
                        info = env.info()
                        self._growth.before_write((info["last_pgno"] + 1) * PAGE, need,
                                                  info["map_size"])
                    except BaseException:
                        txn.abort()
                        raise
                return txn
            except lmdb.MapResizedError:
                self.epoch += 1  # the map moves: pointers into it (run tables) go stale
                env.set_mapsize(0)
                self._advise_map()
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc
        raise StoreError(f"store {self.path!r}: the map kept being resized; try again")

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A short read transaction (or the open batch's write transaction)."""
        with self.lock:
            self.live()
            if self.wtxn is not None:
                yield self.wtxn
                return
            txn = self.begin(False)
            try:
                yield txn
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc
            finally:
                txn.abort()

    def check_writable(self) -> None:
        """ReadOnlyError for a handle opened with readonly=True."""
        if self.readonly:
            raise ReadOnlyError(
                f"store {self.path!r} was opened with readonly=True; open it without to write"
            )

    def retrying(self, attempt: Callable[[], T], on_full: Callable[[], None]) -> T:
        """THE grow-and-retry loop: run attempt(), calling on_full() after each MapFullError."""
        for _ in range(_MAX_GROWTHS):
            try:
                return attempt()
            except lmdb.MapFullError:
                on_full()
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc
        raise StoreError(f"store {self.path!r}: could not grow the map enough")

    def write(self, op: Callable[..., T], *args: Any, need: int = 0) -> T:
        """op(txn, *args) in a write transaction (the batch's, if open), growing the map.

        ``need``: bytes the op may add, so the map grows ahead of it.
        """
        with self.lock:
            self.live()
            self.check_writable()
            if self.wtxn is not None:
                assert self._log is not None
                self._log.append((op, args))
                return self.retrying(lambda: op(self.wtxn, *args), self._replay)

            def attempt() -> T:
                txn = self.begin(True, need)
                try:
                    result = op(txn, *args)
                    txn.commit()
                    self.committed = txn
                    return result
                except BaseException:
                    self._abort_write(txn)
                    raise

            self.maybe_grow(need)
            return self.retrying(attempt, self.grow)

    def _replay(self) -> None:
        """After MapFullError inside batch(): grow, restart the transaction, redo its ops.

        Ends with the batch's transaction holding every op so far; the op that
        filled the map is redone by the caller's retry.
        """
        assert self._log is not None
        log = self._log[:-1]

        def attempt() -> None:
            self._abort_write(self.wtxn)
            self.wtxn = None
            self.grow()
            self.wtxn = self.begin(True)
            for op, args in log:
                op(self.wtxn, *args)

        self.retrying(attempt, lambda: None)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One write transaction for a block: one commit at its end (see SimStore.batch)."""
        with self.lock:
            self.live()
            self.check_writable()
            if self.wtxn is not None:
                yield
                return
            self.maybe_grow()
            self.wtxn = self.begin(True)
            self._log = []
            try:
                yield
                self._log.append((_no_op, ()))
                self.retrying(lambda: self.wtxn.commit(), self._replay)
                self.committed = self.wtxn
            except BaseException:
                self._abort_write(self.wtxn)
                raise
            finally:
                self.wtxn = None
                self._log = None

    def _abort_write(self, txn: Any) -> None:
        """Abort a write transaction, and move the epoch on: what caches read through it
        is gone with it, and a later commit can name the same generations with other
        contents (a merge slice's next_gen is a count), so nothing read may be kept."""
        self.epoch += 1
        _abort(txn)

    def maybe_grow(self, need: int = 0) -> None:
        """Double the map ahead of time when it is over half used (or lacks `need` bytes)."""
        info = self.env.info()
        used = (info["last_pgno"] + 1) * PAGE
        size = info["map_size"]
        if used * 2 > size or used + need * 2 > size:
            self.grow(max(size * 2, used + need * 3))

    def grow(self, target: int = 0) -> None:
        """Enlarge the map to at least double (or target bytes)."""
        size = self.env.info()["map_size"]
        new = max(size * 2, target)
        new = -(-new // PAGE) * PAGE
        self.epoch += 1
        try:
            self.env.set_mapsize(new)
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc
        self._advise_map()

    def _advise_map(self) -> None:
        """With readahead, ask for the map in huge pages (see :mod:`.readahead`); again
        after each remap, which makes a new mapping."""
        env = self.env
        if env is not None and env.flags()["readahead"]:
            advise_huge_pages(os.path.join(self.path, "data.mdb"), env.info()["map_size"])

    def used_bytes(self) -> tuple[int, int]:
        """(map size, bytes of pages in use)."""
        info = self.env.info()
        return int(info["map_size"]), (int(info["last_pgno"]) + 1) * PAGE

    def readers(self) -> str:
        """LMDB's reader table as text (one line per reader slot in use)."""
        return str(self.live().readers())

    def last_txnid(self) -> int:
        """The id of the newest committed transaction."""
        return int(self.env.info()["last_txnid"])


def _no_op(txn: Any) -> None:
    """Stands in the replay log for the commit that filled the map."""


def _abort(txn: Any) -> None:
    """Abort a transaction on the way out of an error or a close.

    An abort can only fail when the environment is already gone; the caller is
    raising (or closing) anyway, so that failure has nothing to add.
    """
    try:
        txn.abort()
    except lmdb.Error:
        pass
