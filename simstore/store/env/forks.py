"""What fork() needs to know of every open handle: the current pid and the live Envs.

``os.getpid()`` is a system call, so a fork hook keeps the current pid here (read on
every query's fast path). The registry of live environments serves three ends:

- before a fork, each handle's lock is taken (waiting up to FORK_WAIT seconds in
  all for calls in flight on other threads), so no thread is inside LMDB at the
  fork. py-lmdb cannot close, in the child, an environment that a vanished thread
  was using (it waits forever for that use to end), and it refuses a second open
  of the same files in one process: so a child can open its own environment only
  when the inherited one was quiet at the fork. One that was not is abandoned
  (never touched) and its handle refuses use with StoreInUseError, never a hang.
- in a child every handle's lock is replaced, since the thread that may hold it in
  the parent does not exist there (the child would wait on it forever);
- a child that opens a store its parent had open finds the inherited handle here
  to close it, because LMDB refuses a second open of the same files in one process.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from typing import Any, Protocol


class Handle(Protocol):
    """What the registry reads and resets of an environment handle."""

    path: str
    pid: int
    env: Any
    closed: bool
    lock: Any
    quiet_at_fork: bool


FORK_WAIT = 10.0  # seconds fork() waits, in all, for store calls in flight on other threads
_PID = [os.getpid()]
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
ABANDONED: list[Any] = []  # environments a forked child must never close


def abandon(env: Any) -> None:
    """Leave an environment inherited through fork() open, unused, and never freed.

    Closing it in the child (or freeing it, at the child's exit) would end the
    transactions that the parent's threads had open at the fork from here: abort a
    write transaction, unlock LMDB's writer mutex that a parent thread holds, clear
    the parent's reader slots. The child waits or corrupts; it must not touch them.
    """
    ABANDONED.append(env)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(env))  # survives interpreter shutdown


_HELD: list[Any] = []  # locks taken before a fork, released after it in the parent


def _before_fork() -> None:
    deadline = time.monotonic() + FORK_WAIT
    pid = os.getpid()
    for h in list(_LIVE):
        if h.env is None or h.pid != pid:
            continue  # closed, or inherited and never used here: nothing in flight
        lock = h.lock
        h.quiet_at_fork = lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if h.quiet_at_fork:
            _HELD.append(lock)


def _after_fork_in_parent() -> None:
    while _HELD:
        _HELD.pop().release()


def _after_fork_in_child() -> None:
    _PID[0] = os.getpid()
    _HELD.clear()
    for env in list(_LIVE):
        env.lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def current_pid() -> int:
    """This process's pid, without a system call."""
    return _PID[0]


def register(handle: Handle) -> None:
    """Track a handle for the fork hook and :func:`close_inherited` (weakly)."""
    _LIVE.add(handle)


def let_go(handle: Handle, env: Any) -> None:
    """Close an environment this process inherited through fork() if it was quiet at the
    fork (no call in flight on another thread), else abandon it."""
    if handle.quiet_at_fork:
        env.close()
    else:
        abandon(env)


def close_inherited(path: str) -> bool:
    """Close handles on path that this process inherited through fork; whether any was
    (a handle busy at the fork is abandoned instead, and the files stay refused).

    A child unpickling a store (multiprocessing) still holds the parent's unused
    handle, and LMDB refuses to open the same files twice in one process.
    """
    real = os.path.realpath(path)
    closed = False
    for h in list(_LIVE):
        if h.env is not None and h.pid != os.getpid() and os.path.realpath(h.path) == real:
            env, h.env = h.env, None
            h.closed = True
            let_go(h, env)
            closed = closed or h.quiet_at_fork
    return closed
