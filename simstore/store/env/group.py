"""Group commit: the writes of threads waiting for a store's lock, in one commit.

A write that finds no queue and the environment's lock free writes at once (no one to
wait with: a single thread pays nothing). Otherwise it queues its request, waits while a
leader is committing (it may be taking the request), then takes the lock. The thread that gets the
lock with its request still queued leads: it takes every request queued by then
(GROUP_MAX at most, in arrival order), runs them in one write transaction as ``batch()``
does, commits once -- one flush for all, the durability each handle asked for -- hands
each its result and wakes their threads, which return without taking the lock.

Each call behaves as if alone: the requests run in queue order, each sees the writes of
those before it, and one whose operation raises is taken out of the group (which runs
again without it) and then runs alone, so its error, and only its error, reaches its
caller. A commit that fails (a full disk) fails every request in it: none was applied.
A thread inside ``batch()`` runs its own writes in its batch and takes no one else's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from .durability import flush_after

# The environment (.environment.Env) that calls in: named by its attributes only, since
# it imports this module.
Env = Any
T = TypeVar("T")
GROUP_MAX = 64  # requests one commit takes at most


class Request:
    """A write queued by one thread: ``call(txn)`` on ``env``'s store."""

    __slots__ = ("call", "env", "error", "need", "pid", "solo", "state", "value")

    def __init__(self, env: Env, call: Callable[[Any], Any], need: int) -> None:
        self.env, self.call, self.need = env, call, need
        self.pid = os.getpid()
        self.solo = False  # its operation raised in a group: it runs alone
        self.state = "queued"  # queued, taken (in a group under way), done
        self.value: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Any:
        """Its result, or its error raised."""
        if self.error is not None:
            raise self.error
        return self.value


def write_grouped(env: Env, call: Callable[[Any], T], need: int = 0) -> T:
    """call(txn) in a write transaction, committed with the writes other threads of this
    process queued meanwhile (see the module)."""
    env.check_writable()
    shared = env.shared
    if not shared.queue and env.lock.acquire(blocking=False):  # no one to wait with
        try:
            if shared.leading:  # this thread leads already (a write inside a batch)
                return env.write(call, need=need)
            shared.leading = True  # writes that come meanwhile wait for the next commit
            try:
                return env.write(call, need=need)
            finally:
                _led(shared)
        finally:
            env.lock.release()
    req = Request(env, call, need)
    with shared.queue_lock:
        shared.queue.append(req)
        while shared.leading and req.state != "done":  # a leader may take it: wait
            shared.waiting += 1
            shared.led.wait(1.0)
            shared.waiting -= 1
    if req.state == "done":
        return req.outcome()  # type: ignore[no-any-return]
    with env.lock:
        while req.state != "done":
            if env.wtxn is not None or req.solo:  # in a batch, or alone after a failure
                _take(env, [req])
                return env.write(call, need=need)
            _lead(env, req)
        return req.outcome()  # type: ignore[no-any-return]


def _lead(env: Env, mine: Request) -> None:
    """Commit the queued requests as their leader; wake their threads after."""
    shared = env.shared
    with shared.queue_lock:
        shared.leading = True
    try:
        _commit(env, _take(env, None), mine)
    finally:
        _led(shared)


def _led(shared: Any) -> None:
    """The leader is done: wake the threads waiting for it."""
    with shared.queue_lock:
        shared.leading = False
        if shared.waiting:
            shared.led.notify_all()


def _take(env: Env, only: list[Request] | None) -> list[Request]:
    """Take requests out of the queue: those of ``only``, or the first GROUP_MAX of this
    process that may be grouped (a request that came through fork has no thread here)."""
    shared = env.shared
    pid = os.getpid()
    with shared.queue_lock:
        if only is None:
            only = [r for r in shared.queue if r.pid == pid and not r.solo][:GROUP_MAX]
        shared.queue[:] = [r for r in shared.queue if r.pid == pid and r not in only]
    for r in only:
        r.state = "taken"
    return only


def _commit(env: Env, group: list[Request], mine: Request) -> None:
    """Run the group in one transaction and commit it. A request whose operation raises
    leaves the group, which runs again without it; it runs alone (``mine`` when this
    thread gets back, another thread's when that thread gets the lock)."""
    while len(group) > 1:
        current = None
        try:
            env.maybe_grow(sum(r.need for r in group))
            with env.batch():
                for r in group:
                    current = r
                    r.env.live()
                    r.value = env.write(r.call)
                current = None
        except Exception as exc:  # noqa: BLE001 - handed to the request it belongs to
            if current is None:  # the commit failed: nothing of the group was applied
                for r in group:
                    r.error, r.state = exc, "done"
                return
            current.solo, current.state = True, "queued"
            group = [r for r in group if r is not current]
            if current is not mine:
                with env.shared.queue_lock:
                    env.shared.queue.append(current)
            continue
        except BaseException:  # an interrupt of this thread: the others run themselves
            others = [r for r in group if r is not mine]
            for r in others:
                r.state = "queued"
            with env.shared.queue_lock:
                env.shared.queue[:0] = others
            raise
        _flush_for(env, group)
        for r in group:
            r.state = "done"
        return
    for r in group:  # one request: a plain write, whose error is its own
        try:
            r.env.live()
            r.value = env.write(r.call, need=r.need)
            _flush_for(env, group)
        except Exception as exc:  # noqa: BLE001 - handed to the request it belongs to
            r.error = exc
        except BaseException:
            if r is not mine:
                r.state = "queued"
                with env.shared.queue_lock:
                    env.shared.queue.insert(0, r)
            raise
        r.state = "done"


def _flush_for(env: Env, group: list[Request]) -> None:
    """Flush the meta page when a request's handle wants more than the commit gave (a
    durable=True handle's write committed by a durable=False one)."""
    mode = env.shared.durability
    if not flush_after(env.durability, mode) and any(
            flush_after(r.env.durability, mode) for r in group):
        env.env.sync(True)
