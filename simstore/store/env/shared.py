"""One open LMDB environment of a store in this process, shared by its handles.

LMDB must never open one environment twice in a process (its locks belong to the process
and the file), so every handle (:class:`~.environment.Env`) on the same store files joins
one :class:`Shared`: the lmdb environment, the lock that serializes calls, the open batch,
the map epoch and the store lock file. ``OPEN`` finds it by the data file's identity; it
refers to its handles only weakly, so a dropped handle is freed at once and the last one
closes the environment.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import lmdb

from ...exceptions import CorruptStoreError, NotAStoreError, StoreAccessError, StoreInUseError
from ..check.pages import check_open, meta_problems
from .create import MAX_DBS, create_aside
from .durability import lmdb_flags
from .errors import translate
from .forks import FORK_WAIT, abandon, close_inherited, let_go, register
from .lockfile import StoreLock, refuse_links
from .readahead import HugeGrowth, advise_huge_pages, wants_readahead


class Handle(Protocol):
    """What the shared environment needs of a handle (:class:`~.environment.Env`): its
    options, the callback binding its store's databases, and a way to rebind them."""

    path: str
    readonly: bool
    durability: str
    max_readers: int
    map_size: int
    readahead: bool | None

    def on_open(self) -> Callable[[Any, bool], None]: ...

    def bind(self, env: Any) -> None: ...


MAX_GROWTHS = 40

# The open environments of this process by the identity of their data file, so a second
# handle on the same files joins the first (weakly: the handles keep them alive).
OPEN: weakref.WeakValueDictionary[tuple[int, int], Shared] = weakref.WeakValueDictionary()
OPEN_LOCK = threading.Lock()


def file_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a store's data file, or None when there is none yet."""
    try:
        st = os.stat(os.path.join(path, "data.mdb"))
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


class Shared:
    """One open LMDB environment of a store in this process, and the state every handle
    on it shares.

    ``lock`` serializes calls on the store's handles in this process; ``wtxn`` is the
    write transaction of an open batch (None otherwise); ``epoch`` changes whenever the
    map is grown, the environment reopened or a write transaction aborted (caches keyed
    on it go stale). ``handles``: the open handles on it (weakly).
    """

    def __init__(self, first: Handle) -> None:
        """The environment first (its first handle) opens, with first's options: a handle
        joining it later has its own readonly and durability, the rest is this one's."""
        # readahead None: as wants_readahead says at each open
        self.path, self.readonly, self.durability = first.path, first.readonly, first.durability
        self.max_readers, self.map_size, self.readahead = (
            first.max_readers, first.map_size, first.readahead)
        self.lock = threading.RLock()
        self.env: Any = None
        self.growth: HugeGrowth | None = None
        self.wtxn: Any = None
        self.committed: Any = None  # the last write transaction committed here
        self.log: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
        self.closed = False
        self.quiet_at_fork = True  # set by the fork hook: no call in flight at the fork
        self.pid = 0
        self.epoch = 0
        self.key: tuple[int, int] | None = None
        self.handles: weakref.WeakSet[Handle] = weakref.WeakSet()
        self._new_queue()
        self.store_lock = StoreLock(self.path, self.readonly)
        register(self)

    def _new_queue(self) -> None:
        """An empty queue of the writes of threads waiting for the lock, committed together
        by the next writer to hold it (:mod:`.group`); guarded by queue_lock."""
        self.queue: list[Any] = []
        self.queue_lock = threading.Lock()
        self.leading = False  # a thread is committing queued writes
        self.led = threading.Condition(self.queue_lock)  # notified when it is done
        self.waiting = 0  # threads waiting on led

    def open(self, first: Handle | None = None) -> None:
        """Open (or, for its first handle, create) the environment; bind every handle."""
        creating = first is not None and self._check_path()
        if creating and self.readonly:
            raise NotAStoreError(
                f"no simstore store at {self.path!r}; a readonly open never creates one"
            )
        if creating:
            assert first is not None
            create_aside(self.path, self.map_size, self.max_readers, first.on_open())
        refuse_links(self.path)
        try:
            env = self._lmdb_open()
        except lmdb.Error as exc:
            damage = meta_problems(self.path)
            if damage:
                raise CorruptStoreError(
                    f"store {self.path!r} looks damaged: {damage[0]}; restore data.mdb from a copy"
                ) from exc
            raise translate(exc, self.path) from exc
        except OSError as exc:
            raise StoreAccessError(
                f"cannot open store {self.path!r}: {exc.strerror or exc}; give a path this "
                "process may write, or open an existing store with readonly=True"
            ) from exc
        self.env = env
        self.pid = os.getpid()
        self.epoch += 1
        # a writer whose readers map in huge pages prepares its new pages for them
        self.growth = (
            None
            if self.readonly or not env.flags()["readahead"]
            else HugeGrowth(os.path.join(self.path, "data.mdb"))
        )
        try:
            self.advise_map()
            self._check_file(env)
            if not self.store_lock.held:
                self.store_lock.take_shared(self)
            if first is not None:
                first.on_open()(env, False)
            else:
                for handle in list(self.handles):
                    handle.bind(env)
        except BaseException:
            self.env = None
            self.store_lock.release()
            env.close()
            raise
        self.key = file_id(self.path)

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

    def _lmdb_open(self) -> Any:
        """lmdb.open, closing a stale handle inherited through fork if one holds the files."""
        for attempt in range(2):
            try:
                return lmdb.open(
                    self.path,
                    map_size=self.map_size,
                    subdir=True,
                    readonly=self.readonly,
                    **lmdb_flags(self.durability),
                    max_dbs=MAX_DBS,
                    max_readers=self.max_readers,
                    lock=True,
                    create=False,
                    readahead=self.readahead
                    if self.readahead is not None
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

    def drop(self, *, keep_lock: bool = False) -> None:
        """Forget the environment and its transactions (the caller closes it)."""
        self.wtxn = None
        self.log = None
        self.env = None
        self.epoch += 1
        if not keep_lock:
            self.store_lock.release()

    def reload(self) -> None:
        """Close and reopen the environment, re-reading everything from disk; every
        handle binds again. The store lock stays held (and exclusive, inside
        :meth:`Env.exclusive`)."""
        env = self.env
        self.drop(keep_lock=True)
        if env is not None:
            env.close()
        self.open()

    def close(self) -> None:
        """Close the environment (idempotent); an open batch is aborted."""
        if self.closed:
            return
        inherited = self.env is not None and self.pid != os.getpid()
        if self.wtxn is not None and not inherited:
            abort_quietly(self.wtxn)
        self.closed = True
        env, in_batch = self.env, self.wtxn is not None
        self.drop()
        if env is None:
            return
        if not inherited:
            env.close()
        elif in_batch:  # the parent's write transaction: never ended from here
            abandon(env)
        else:
            let_go(self, env)

    def after_fork(self) -> None:
        """In a forked child: let go of the parent's environment and open one of this
        process (or refuse, when that cannot be done safely)."""
        # An LMDB environment must not be used across fork: the child opens its own,
        # after closing the inherited one if that is safe (see env/forks.py).
        self._new_queue()  # the parent's queued writes have no thread here
        in_batch = self.wtxn is not None
        old = self.env
        self.drop()  # our copy of the lock only: the parent keeps its own
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

    def advise_map(self) -> None:
        """With readahead, ask for the map in huge pages (see :mod:`.readahead`); again
        after each remap, which makes a new mapping."""
        env = self.env
        if env is not None and env.flags()["readahead"]:
            advise_huge_pages(os.path.join(self.path, "data.mdb"), env.info()["map_size"])


def abort_quietly(txn: Any) -> None:
    """Abort a transaction on the way out of an error or a close.

    An abort can only fail when the environment is already gone; the caller is
    raising (or closing) anyway, so that failure has nothing to add.
    """
    try:
        txn.abort()
    except lmdb.Error:
        pass
