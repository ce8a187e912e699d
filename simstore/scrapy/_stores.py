"""One open SimStore per store path per process, shared by every component that names it.

LMDB opens an environment once per process, so the middleware, the pipeline, the
scheduler and the dupefilter of one crawl cannot each open ``SIMSTORE_PATH``: the
first opens (or creates) it here, the others get the same handle, and the last to
let go closes it. Framework-free (no Scrapy here).

A crawl store holds request headers and cookies, and what other processes read back as
requests: one created here is private (0700, files 0600, or stricter by the umask),
and one owned by another user or writable by group or others is refused unless
``allow_shared``.
"""

from __future__ import annotations

import os
import stat
import threading

from ..exceptions import StoreAccessError
from ..store import DEFAULT_K, SimStore
from ..text.fingerprinting import DEFAULT_CONFIG, SIGNATURE_CONFIG

_LOCK = threading.Lock()
_OPEN: dict[tuple[int, str], list] = {}  # (pid, real path) -> [store, holders]


def _is_store(path: str) -> bool:
    """Whether path holds something already (a store, or files SimStore will refuse)."""
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except (FileNotFoundError, NotADirectoryError):
        return os.path.lexists(path) and not os.path.isdir(path)


def _open(path: str, k: int | None, durable: bool) -> SimStore:
    """Open the store at path; a new one is a similarity store, or with k a fingerprint
    store serving at least the default k."""
    if _is_store(path):
        return SimStore(path, durable=durable)
    if k is None:
        return SimStore(path, durable=durable, config=SIGNATURE_CONFIG)
    return SimStore(path, durable=durable, config=DEFAULT_CONFIG, k=max(k, DEFAULT_K))


def check_owner(path: str, allow_shared: bool) -> None:
    """StoreAccessError when the store at path (its folder or a file in it) belongs to
    another user or may be written by group or others, unless allow_shared."""
    if allow_shared:
        return
    me = os.geteuid()
    for p in (path, os.path.join(path, "data.mdb")):
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_uid != me:
            why = f"{p} belongs to user {st.st_uid}, not to this process's user {me}"
        elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            why = f"{p} may be written by group or others (mode {stat.S_IMODE(st.st_mode):o})"
        else:
            continue
        raise StoreAccessError(
            f"store {path!r} refused: {why}, and a crawl reads back what others write there; "
            "set SIMSTORE_ALLOW_SHARED_STORE = True to open it anyway")


def _make_private(path: str) -> None:
    """Restrict a store this process just created to its user (0700 / 0600, or stricter
    by the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o700 & ~umask)
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_file(follow_symlinks=False):
                os.chmod(entry.path, 0o600 & ~umask)


def acquire(path: str | os.PathLike[str], *, k: int | None = None,
            durable: bool = False, allow_shared: bool = True) -> SimStore:
    """The process's handle on the store at path, opened (or created, private) by the first
    caller: later callers share it whatever their k and durable say. Refused when not
    ``allow_shared`` and another user owns it or others may write it (:func:`check_owner`).
    Pair with :func:`release`."""
    spath = os.fspath(path)
    key = (os.getpid(), os.path.realpath(spath))
    check_owner(spath, allow_shared)
    with _LOCK:
        held = _OPEN.get(key)
        if held is not None and not held[0].closed:
            held[1] += 1
            return held[0]
        new = not _is_store(spath)
        store = _open(spath, k, durable)
        if new:
            _make_private(spath)
        _OPEN[key] = [store, 1]
        return store


def release(store: SimStore) -> None:
    """Let go of a handle from :func:`acquire`; the last holder closes it."""
    with _LOCK:
        for key, held in list(_OPEN.items()):
            if held[0] is store:
                held[1] -= 1
                if held[1] > 0:
                    return
                del _OPEN[key]
                break
    store.close()
