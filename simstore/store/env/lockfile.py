"""The store lock file: a shared flock held by every open handle, exclusive for rebuilds.

``<store>/simstore.lock`` tells whether any other handle, in any process, has the store
open: every open holds a shared lock on it, and a whole-store operation (``rebuild``)
runs only if it can take the lock exclusively. The lock goes with the handle: a handle
dropped without ``close()`` still lets go of it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from ...exceptions import StoreAccessError, StoreError, StoreInUseError

LOCK_FILE = "simstore.lock"
# every file a store keeps in its directory: LMDB's two (it opens both with O_CREAT, and
# cannot be told not to follow a link) and the lock file
STORE_FILES = ("data.mdb", "lock.mdb", LOCK_FILE)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def refuse_links(path: str) -> None:
    """StoreAccessError if a file of the store at path is a symbolic link: opening it
    would write (or create) whatever file the link names."""
    for name in STORE_FILES:
        if os.path.islink(os.path.join(path, name)):
            raise StoreAccessError(
                f"store {path!r}: {name} is a symbolic link; simstore never follows a link "
                "inside a store (it could create or overwrite the file it names): remove "
                "the link, or give the directory where the store's files really are"
            )


class StoreLock:
    """The shared lock one handle holds on its store's lock file (none until taken)."""

    def __init__(self, path: str, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take_shared(self, owner: object) -> None:
        """Hold a shared flock on the lock file until :meth:`release` or owner's end.

        A read-only handle on a store whose lock file it cannot open goes without:
        it never needs :meth:`exclusive`.
        """
        refuse_links(self.path)
        path = os.path.join(self.path, LOCK_FILE)
        try:
            if self.readonly:
                fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
            else:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
        except FileNotFoundError:
            return  # a read-only open of a store whose lock file is gone: nothing to share
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a link planted since refuse_links looked
                refuse_links(self.path)
            if self.readonly:
                return
            raise StoreAccessError(
                f"store {self.path!r}: cannot open its lock file: {exc.strerror or exc}"
            ) from exc
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._fd = fd
        self._finalizer = weakref.finalize(owner, os.close, fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        fin, self._finalizer = self._finalizer, None
        if fin is not None:
            fin.detach()
        if fd is not None:
            os.close(fd)

    @contextmanager
    def exclusive(self, what: str) -> Iterator[None]:
        """Run a block only if no other handle (any process) has the store open."""
        fd = self._fd
        if fd is None:
            raise StoreError(f"store {self.path!r}: {what} needs a writable store lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH)
            raise StoreInUseError(
                f"store {self.path!r} is open in another handle (another process, or another "
                f"SimStore of this one); {what} needs it alone: close the other readers and "
                "writers and try again"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_SH)
