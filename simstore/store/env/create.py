"""Creating a store: all or nothing, aside in a sibling directory, then renamed into place."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Callable
from typing import Any

import lmdb

from ..._files import flush_dir
from ...exceptions import StoreAccessError
from .errors import translate

MAX_DBS = 64
_MIN_FREE = 4 << 20  # bytes a new store needs free (lock file, first pages)


def create_aside(
    path: str, map_size: int, max_readers: int, on_open: Callable[[Any, bool], None]
) -> None:
    """Create the store at path: on_open(env, True) writes it in a sibling directory.

    The rename is flushed too, so a power loss after the first durable commit
    cannot lose the store's name. A failed create (no space, no memory for the
    map, a kill) leaves no half store at the path, at most a hidden
    ``.NAME.creating-*`` sibling after a kill. Another process creating the same
    store at the same time wins the rename or loses it; the loser then opens the
    winner's store.
    """
    target = os.path.abspath(path)
    parent, base = os.path.split(target)
    try:
        free = os.statvfs(parent)
    except OSError as exc:
        raise StoreAccessError(
            f"cannot create store {path!r}: {exc.strerror or exc} (its parent directory "
            "must exist)"
        ) from exc
    if free.f_bavail * free.f_frsize < _MIN_FREE:
        raise StoreAccessError(
            f"cannot create store {path!r}: the filesystem has less than "
            f"{_MIN_FREE >> 20} MiB free; free some space or choose another path"
        )
    tmp = os.path.join(parent, f".{base}.creating-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(tmp, 0o777)
    except OSError as exc:
        raise StoreAccessError(
            f"cannot create store {path!r}: {exc.strerror or exc}; give a path this "
            "process may write"
        ) from exc
    try:
        try:
            env = lmdb.open(
                tmp, map_size=map_size, subdir=True, max_dbs=MAX_DBS,
                max_readers=max_readers, lock=True, create=True,
            )
        except lmdb.Error as exc:
            raise translate(exc, path) from exc
        try:
            on_open(env, True)
        except lmdb.Error as exc:
            raise translate(exc, path) from exc
        finally:
            env.close()
        try:
            os.rename(tmp, target)  # replaces a missing path or an empty directory
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise StoreAccessError(
                    f"cannot create store {path!r}: {exc.strerror or exc}"
                ) from exc
            # another process created the store first: the caller opens theirs
        flush_dir(parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

