"""What fork() needs to know of every open handle: the current pid and the live Envs.

``os.getpid()`` is a system call, so a fork hook keeps the current pid here (read on
every query's fast path). The registry of live environments serves two ends: in a
child every handle's lock is replaced, since the thread that may hold it in the
parent does not exist there (the child would wait on it forever); and a child that
opens a store its parent had open finds the inherited handle here to close it,
because LMDB refuses a second open of the same files in one process.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol


class Handle(Protocol):
    """What the registry reads and resets of an environment handle."""

    path: str
    pid: int
    env: Any
    closed: bool
    lock: Any


_PID = [os.getpid()]
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
ABANDONED: list[Any] = []  # environments a forked child must never close


def _after_fork_in_child() -> None:
    _PID[0] = os.getpid()
    for env in list(_LIVE):
        env.lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_pid() -> int:
    """This process's pid, without a system call."""
    return _PID[0]


def register(handle: Handle) -> None:
    """Track a handle for the fork hook and :func:`close_inherited` (weakly)."""
    _LIVE.add(handle)


def close_inherited(path: str) -> bool:
    """Close handles on path that this process inherited through fork; whether any was.

    A child unpickling a store (multiprocessing) still holds the parent's unused
    handle, and LMDB refuses to open the same files twice in one process.
    """
    real = os.path.realpath(path)
    closed = False
    for h in list(_LIVE):
        if h.env is not None and h.pid != os.getpid() and os.path.realpath(h.path) == real:
            env, h.env = h.env, None
            h.closed = True
            env.close()
            closed = True
    return closed
