"""A store's LMDB environment: paths, locks, fork and pickle, transactions, growth, errors.

Knows nothing of what the databases hold: each handle's store binds its database handles
in an ``on_open(env, creating)`` callback, called after every (re)open, so a child process
after ``fork()`` or a rebuild gets fresh handles the same way.

**One environment per store per process, shared** (:mod:`.shared`): every :class:`Env`
(one per ``SimStore``) on the same store files in this process joins one
:class:`~.shared.Shared`; a second ``SimStore(path)`` joins the open one, and the
environment closes with its last handle, closed or collected.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, TypeVar

import lmdb

from ...exceptions import (
    ReadOnlyError,
    StoreClosedError,
    StoreError,
    StoreInUseError,
)
from ..format import PAGE
from .durability import flush_after, refusal
from .errors import translate
from .group import write_grouped
from .shared import MAX_GROWTHS, OPEN, OPEN_LOCK, Shared, abort_quietly, file_id

T = TypeVar("T")


def _shared(name: str) -> property:
    """An attribute of the handle that lives in its :class:`Shared`."""

    def put(self: Env, value: Any) -> None:
        setattr(self.shared, name, value)

    # attrgetter reads it in C: queries read several of these (docs/bench/journal.md)
    return property(attrgetter(f"shared.{name}"), put, doc=f"The shared environment's ``{name}``.")


class Env:
    """One handle (one ``SimStore``) on a store's environment, shared in this process.

    Its own: whether it is closed, whether it may write and its durability (a mode of
    :mod:`.durability`); the rest (``env``, ``lock``, ``wtxn``, ``epoch``, ...) is the
    :class:`Shared` environment's. Inside one handle's :meth:`batch`, every handle on the
    store in this thread writes into that batch and reads what it wrote (other threads
    wait for its end, as they do for one handle).
    """

    env = _shared("env")
    lock = _shared("lock")
    wtxn = _shared("wtxn")
    committed = _shared("committed")
    epoch = _shared("epoch")
    pid = _shared("pid")
    quiet_at_fork = _shared("quiet_at_fork")
    store_lock = _shared("store_lock")
    _log = _shared("log")
    _growth = _shared("growth")

    def __init__(
        self,
        path: str,
        *,
        readonly: bool,
        durability: str,
        max_readers: int,
        map_size: int,
        on_open: Callable[[Any, bool], None],
        readahead: bool | None = None,
    ) -> None:
        self.path = path
        self.readahead = readahead
        self.readonly = readonly
        self.durability = durability
        self.max_readers = max_readers
        self.map_size = map_size
        # A weak reference: the store owns its Env, and a cycle back to the store
        # would keep a dropped handle (and its files) open until the next gc run.
        self._on_open = weakref.WeakMethod(on_open)  # type: ignore[arg-type]
        self.shared: Shared  # set by open()
        self.closed = False

    # --- opening and closing ---------------------------------------------------

    def on_open(self) -> Callable[[Any, bool], None]:
        """The store's callback binding its database handles."""
        on_open = self._on_open()
        if on_open is None:
            raise StoreClosedError(f"store {self.path!r}: its SimStore is gone")
        return on_open  # type: ignore[no-any-return]

    def bind(self, env: Any) -> None:
        """Let the store bind its handles to the (re)opened environment; a handle whose
        store is gone is skipped."""
        on_open = self._on_open()
        if on_open is not None:
            on_open(env, False)

    def open(self) -> None:
        """Open the store: join this process's open environment on the same files, or
        open (creating the store if need be) one of its own."""
        while True:
            with OPEN_LOCK:
                key = file_id(self.path)
                other = None if key is None else OPEN.get(key)
                if other is None or other.env is None or other.closed or other.pid != os.getpid():
                    shared = self.shared = Shared(self)
                    shared.handles.add(self)
                    shared.open(self)
                    if shared.key is not None:
                        OPEN[shared.key] = shared
                    return
            # joined outside OPEN_LOCK: the other's lock may be held long (a batch)
            if self._join(other):
                return

    def _join(self, shared: Shared) -> bool:
        """Share an environment this process has open; False if it closed meanwhile."""
        if shared.readonly and not self.readonly:
            raise StoreInUseError(
                f"store {self.path!r} is open with readonly=True in this process; close "
                "that SimStore first, or open this one with readonly=True too"
            )
        why = refusal(self.durability, shared.durability)
        if why is not None:
            raise StoreInUseError(f"store {self.path!r} {why}")
        with shared.lock:
            if shared.env is None or shared.closed or shared.pid != os.getpid():
                return False
            self.shared = shared
            self.on_open()(shared.env, False)
            shared.handles.add(self)
            return True

    def reload(self) -> None:
        """Close and reopen the environment, re-reading everything from disk.

        The store lock stays held (and exclusive, inside :meth:`exclusive`).
        """
        self.shared.reload()

    def close(self) -> None:
        """Close this handle (idempotent); the environment closes with its last handle
        (an open batch is then aborted)."""
        shared = self.shared
        with shared.lock:
            if self.closed:
                return
            self.closed = True
            shared.handles.discard(self)
            if not len(shared.handles):
                shared.close()

    def live(self) -> Any:
        """The lmdb environment; reopened in a forked child, refused once closed."""
        shared = self.shared
        if self.closed or shared.closed:
            raise StoreClosedError(f"store {self.path!r} is closed; open a new SimStore")
        if os.getpid() != shared.pid:
            shared.after_fork()
        return shared.env

    def exclusive(self, what: str) -> Any:
        """A context: run a block only if no other handle (any process) has the store open."""
        if len(self.shared.handles) > 1:
            raise StoreInUseError(
                f"store {self.path!r} is open in another SimStore of this process; {what} "
                "needs it alone: close the other handles and try again"
            )
        return self.store_lock.exclusive(what)

    def _commit_durably(self) -> None:
        """After a commit: flush its meta page when this handle wants more than the shared
        environment's flags give (a durable=True handle on one opened durable=False)."""
        if flush_after(self.durability, self.shared.durability):
            self.env.sync(True)

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
        for _ in range(MAX_GROWTHS):
            try:
                txn = env.begin(write=write)
                if write and self._growth is not None:
                    try:
                        info = env.info()
                        self._growth.before_write(
                            (info["last_pgno"] + 1) * PAGE, need, info["map_size"]
                        )
                    except BaseException:
                        txn.abort()
                        raise
                return txn
            except lmdb.MapResizedError:
                self.epoch += 1  # the map moves: pointers into it (run tables) go stale
                env.set_mapsize(0)
                self.shared.advise_map()
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
        for _ in range(MAX_GROWTHS):
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
                    self._commit_durably()
                    return result
                except BaseException:
                    self._abort_write(txn)
                    raise

            self.maybe_grow(need)
            return self.retrying(attempt, self.grow)

    def write_grouped(self, call: Callable[[Any], T], need: int = 0) -> T:
        """call(txn) in a write transaction (the batch's, if this thread has one open),
        committed together with the writes other threads of this process queued while
        they waited for the lock: one commit, one flush (:mod:`.group`)."""
        return write_grouped(self, call, need)

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
                self._commit_durably()
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
        abort_quietly(txn)

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
        self.shared.advise_map()

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
