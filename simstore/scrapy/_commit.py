"""Group commit: pages checked by one worker thread, those queued meanwhile in one transaction.

A page's signature (C) and its ``add_if_new`` commit (an fsync when durable) would
stop every download while they run in the reactor thread. Here they run in one
worker thread per middleware, and every page that arrives while a transaction runs
goes into the next one: one ``add_if_new_many`` call, one commit, whatever the
number -- the same verdicts as one call per page in arrival order, and the
fsync is paid once per group, not once per page. An idle crawl pays no wait.
What a Scrapy coroutine may await -- an asyncio future or a Twisted Deferred --
is chosen in :func:`awaitable` only.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from twisted.internet.defer import Deferred

try:  # newer Scrapy: asyncio with or without a reactor
    from scrapy.utils.asyncio import is_asyncio_available
except ImportError:  # pragma: no cover - Scrapy without scrapy.utils.asyncio (2.13)
    from scrapy.utils.reactor import is_asyncio_reactor_installed as is_asyncio_available

from ..store import DocId
from ._gate import Verdict

T = TypeVar("T")
MAX_GROUP = 64  # pages per transaction at most
_STOP = object()

Decide = Callable[[Sequence[DocId], Sequence[str | None]], Sequence[Verdict | None]]


class Committer:
    """One thread running ``decide(ids, texts)`` over the pages queued, in arrival order."""

    def __init__(self, decide: Decide, max_group: int = MAX_GROUP) -> None:
        self._decide = decide
        self._max = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="simstore-commit", daemon=True)
        self._thread.start()

    def submit(self, doc_id: DocId, text: str | None) -> Future[Verdict | None]:
        """Queue a page (text None: answered 304); the future gets its verdict (None: the
        store failed)."""
        fut: Future[Verdict | None] = Future()
        self._queue.put((doc_id, text, fut))
        return fut

    def close(self) -> None:
        """Decide the pages queued, then stop the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _loop(self) -> None:
        stop = False
        while not stop:
            group = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stop = True
                    break
                group.append(item)
                if len(group) >= self._max:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if group:
                self._run(group)

    def _run(self, group: list[tuple[DocId, str | None, Future[Verdict | None]]]) -> None:
        try:
            verdicts = self._decide([g[0] for g in group], [g[1] for g in group])
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting pages, not lost
            for _, _, fut in group:
                fut.set_exception(exc)
            return
        for (_, _, fut), v in zip(group, verdicts, strict=True):
            fut.set_result(v)


def awaitable(fut: Future[T]) -> Awaitable[T]:
    """fut as something a Scrapy coroutine can await in its event loop."""
    if is_asyncio_available():
        return asyncio.wrap_future(fut)
    from twisted.internet import reactor

    d: Deferred[T] = Deferred()

    def fire(f: Future[T]) -> None:
        exc = f.exception()
        if exc is None:
            d.callback(f.result())
        else:
            d.errback(exc)

    fut.add_done_callback(lambda f: reactor.callFromThread(fire, f))  # type: ignore[attr-defined]
    return d
