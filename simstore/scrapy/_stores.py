"""One open SimStore per store path per process, shared by every component that names it.

LMDB opens an environment once per process, so the middleware, the pipeline, the
scheduler and the dupefilter of one crawl cannot each open ``SIMSTORE_PATH``: the
first opens (or creates) it here, the others get the same handle, and the last to
let go closes it. Framework-free (no Scrapy here).
"""

from __future__ import annotations

import os
import threading

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


def acquire(path: str | os.PathLike[str], *, k: int | None = None,
            durable: bool = False) -> SimStore:
    """The process's handle on the store at path, opened (or created) by the first caller:
    later callers share it whatever their k and durable say. Pair with :func:`release`."""
    spath = os.fspath(path)
    key = (os.getpid(), os.path.realpath(spath))
    with _LOCK:
        held = _OPEN.get(key)
        if held is not None and not held[0]._env.closed:
            held[1] += 1
            return held[0]
        store = _open(spath, k, durable)
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
