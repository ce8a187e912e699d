"""Temporary outputs made safely, beside their destination, and swept up after a crash.

Every output (a kept corpus, a removed report, ``-o FILE``, an export, a compacted
store) is written under a random hidden name in its destination's folder and
renamed into place only when complete. The name is created with
``O_CREAT | O_EXCL | O_NOFOLLOW``: a file or symbolic link planted there by someone
else is never opened, so a run cannot be made to overwrite another file. The
writer holds an ``flock`` on its temporary while it lives; :func:`sweep` removes
the temporaries of a destination whose writer is gone (killed with ``kill -9``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import stat
import time
from typing import IO

from .exceptions import OutputPathError

_MARK = ".simstore-tmp-"
_DIR_LOCK = ".simstore-lock"
_YOUNG = 60.0  # seconds: a directory this new may be a live writer's, before its lock
_FLAGS = os.O_CREAT | os.O_EXCL | os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | \
    getattr(os, "O_CLOEXEC", 0)


def _prefix(path: str) -> tuple[str, str]:
    """(folder, the prefix of the temporaries' names) of a destination path."""
    folder, base = os.path.split(os.path.abspath(path))
    return folder, f".{base}{_MARK}"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _create_locked(name: str) -> int:
    fd = os.open(name, _FLAGS, 0o666)  # the umask applies
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def check_destination(path: str, what: str) -> str:
    """``path`` as an output: not a directory, in an existing folder; else OutputPathError
    naming ``what`` (the flag) and the path. Returns the folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputPathError(f"{what} {path!r} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise OutputPathError(f"{what} {path!r}: folder {folder!r} does not exist")
    return folder


class TempFile:
    """A new file under a random name beside ``path``; :meth:`commit` renames it onto path.

    ``what`` names the output in errors (a flag such as ``-o``); the destination is
    checked and the temporary created at once, before any work.
    """

    def __init__(self, path: str, what: str = "output") -> None:
        self.path = path
        folder = check_destination(path, what)
        sweep(path)
        _, prefix = _prefix(path)
        while True:
            self.tmp = os.path.join(folder, prefix + secrets.token_hex(8))
            try:
                fd = _create_locked(self.tmp)
            except FileExistsError:
                continue
            except OSError as exc:
                raise OutputPathError(f"{what} {path!r}: cannot write in folder {folder!r} "
                                      f"({exc.strerror or exc})") from None
            break
        self.file: IO[bytes] = os.fdopen(fd, "w+b", buffering=1 << 20)

    def commit(self) -> None:
        """Flush, fsync and rename into place (a symbolic link at path is replaced, not
        followed)."""
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise OutputPathError(f"cannot move the finished output to {self.path!r}: "
                                  f"{exc.strerror or exc}") from None
        self.file.close()  # the lock goes with the last descriptor

    def discard(self) -> None:
        """Remove the temporary (idempotent)."""
        try:
            os.unlink(self.tmp)
        except OSError:
            pass
        self.file.close()


def flush_dir(path: str) -> None:
    """fsync a directory (its entries: a file made or renamed in it); skipped where the
    OS refuses (some file systems cannot flush a directory; the entries stand anyway)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class TempDir:
    """A new directory under a random name beside ``path``, locked by a file inside."""

    def __init__(self, path: str) -> None:
        folder, prefix = _prefix(path)
        self.path = path
        self.tmp = os.path.join(folder, prefix + secrets.token_hex(8))
        os.mkdir(self.tmp, 0o777)
        self._fd = _create_locked(os.path.join(self.tmp, _DIR_LOCK))

    def commit(self) -> None:
        """Drop the lock file, flush the files and the directory, and rename it onto path
        (which must not exist), the rename flushed too: after a power loss path is absent
        or complete."""
        os.unlink(os.path.join(self.tmp, _DIR_LOCK))
        for name in os.listdir(self.tmp):
            entry = os.path.join(self.tmp, name)
            if os.path.isfile(entry) and not os.path.islink(entry):
                fd = os.open(entry, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        flush_dir(self.tmp)
        os.rename(self.tmp, self.path)
        flush_dir(os.path.dirname(os.path.abspath(self.path)))
        os.close(self._fd)

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            os.close(self._fd)
        except OSError:
            pass


def sweep(path: str) -> int:
    """Remove the temporaries of ``path`` left by dead writers (this user's only); how many.

    A temporary whose lock another process holds is in use and stays.
    """
    folder, prefix = _prefix(path)
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        full = os.path.join(folder, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if st.st_uid != os.geteuid():
            continue
        if stat.S_ISREG(st.st_mode):
            removed += _sweep_one(full, full, os.unlink, False)
        elif stat.S_ISDIR(st.st_mode):
            old = time.time() - st.st_mtime > _YOUNG
            removed += _sweep_one(os.path.join(full, _DIR_LOCK), full, shutil.rmtree, old)
    return removed


def _sweep_one(lock: str, victim: str, remove: object, old: bool) -> int:
    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        if not old:
            return 0
        try:  # a directory killed before its lock file was made is empty
            os.rmdir(victim)
            return 1
        except OSError:
            return 0
    except OSError:
        return 0
    try:
        if not _try_lock(fd):
            return 0
        try:
            remove(victim)  # type: ignore[operator]
        except OSError:
            return 0
        return 1
    finally:
        os.close(fd)
