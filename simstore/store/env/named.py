"""The door to named databases beside the index (``crawl.*``, ``corpus.*``).

A room that keeps records of its own in a store's LMDB environment (the crawl frontier,
the corpus decisions) asks for its databases here instead of reaching into the
environment: :class:`NamedDatabases` opens them (creating them) in a commit of its own,
opens them again after every reopen of the environment (a fork, a close and reopen:
LMDB's handles live as long as the environment), runs read and write operations on
them under the environment's lock, and turns LMDB's "too many databases" into one
:class:`~simstore.exceptions.StoreError` that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import lmdb

from ...exceptions import StoreError
from .environment import Env

T = TypeVar("T")


class NamedDatabases:
    """Handles on the databases ``names`` of one environment, renewed after each reopen.

    ``setup(txn, handles, open_db)`` runs in the commit that opens them (each reopen
    too): the place to write or check a version record, or to upgrade records in place
    (``open_db(name)`` opens another named database in that transaction). Operations
    get ``(txn, handles, *args)``, handles in the order of ``names``.
    """

    def __init__(self, env: Env, names: Sequence[bytes], what: str,
                 setup: Callable[[Any, list[Any], Callable[[bytes], Any]], None] | None = None
                 ) -> None:
        self._env = env
        self.names = [bytes(n) for n in names]
        self.what = what
        self._setup = setup
        self._live: Any = None
        self._handles: list[Any] = []
        with env.lock:
            self.handles()

    @property
    def path(self) -> str:
        """The store's path (for messages)."""
        return self._env.path

    def handles(self) -> list[Any]:
        """The handles, opened in a commit of their own when the environment was (re)opened
        since. The caller holds the environment's lock (or none is needed: the constructor)."""
        env = self._env
        live = env.live()
        if self._live is live:
            return self._handles
        if env.wtxn is not None:  # handles opened inside a batch would die if it aborted
            raise StoreError(f"store {env.path!r}: open {self.what} outside batch()")
        self._handles = env.write(self._open, live)
        self._live = live
        return self._handles

    def _open(self, txn: Any, live: Any) -> list[Any]:
        try:
            handles = [live.open_db(n, txn=txn, create=True) for n in self.names]
        except lmdb.DbsFullError as exc:
            raise StoreError(
                f"store {self._env.path!r}: no room for {self.what} (LMDB's limit of named "
                "databases in one store)") from exc
        if self._setup is not None:
            self._setup(txn, handles, lambda name: live.open_db(name, txn=txn, create=True))
        return handles

    def write(self, op: Callable[..., T], *args: Any) -> T:
        """op(txn, handles, *args) in one write transaction (the open batch's, if any).
        op may run more than once (the map grows and the transaction is redone): it
        keeps its state in the transaction, and reads the clock inside it."""
        env = self._env
        with env.lock:
            handles = self.handles()
            return env.write(op, handles, *args)

    def read(self, op: Callable[..., T], *args: Any) -> T:
        """op(txn, handles, *args) in a short read transaction."""
        env = self._env
        with env.lock:
            handles = self.handles()
            with env.reading() as txn:
                return op(txn, handles, *args)
