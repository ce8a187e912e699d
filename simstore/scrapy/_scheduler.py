"""Scheduler: Scrapy's scheduler on the store's shared crawl frontier.

``SCHEDULER = "simstore.scrapy.Scheduler"`` with ``SIMSTORE_PATH``: the requests of
every ``scrapy crawl`` process on the machine naming the store go into one queue
(:class:`simstore.store.frontier.Frontier`), filtered by one seen set, and each
process takes the next from it. A request taken is leased to its process for
``SIMSTORE_LEASE`` seconds (default 60; renewed every third of it while the process
works on it) and acknowledged only once the engine is done with it: its response's
callback output all scheduled (so its child requests are in the queue first), or its
failure handled, or its redirect or retry scheduled. A process killed before that
leaves the lease to expire, and another process (or a rerun) takes the request
again: a kill loses no request. A rerun into the same store resumes its frontier.

The filter and the queue are one transaction per request: a request is never
marked seen without being queued. Requests that cannot be serialized (a callback
that is not a spider method) stay in this process's memory, as with Scrapy's disk
queues, and are counted. The order is by priority, first in first out within one.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import pickle
import socket
import time
import uuid
from typing import Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, DontCloseSpider
from scrapy.utils.request import request_from_dict

try:  # Scrapy >= 2.14: asyncio's looping call where asyncio runs without a reactor
    from scrapy.utils.asyncio import create_looping_call
except ImportError:  # pragma: no cover - Scrapy 2.13
    from twisted.internet.task import LoopingCall as create_looping_call

from ..exceptions import SimstoreError, SimstoreValueError
from ..store import SimStore
from ..store.frontier import Frontier
from ._dupefilter import DupeFilter, logger, open_frontier
from ._stores import release

DEFAULT_LEASE = 60.0
POLL = 0.1  # seconds between looks at the frontier while other processes hold its work
PAYLOAD_PICKLE = b"\x01"  # payload = this byte + pickle (protocol 5) of Request.to_dict
STATS = "simstore/frontier/"
REFUSED = "simstore_refused"  # the finish reason of a crawl whose settings were refused
START_CHECKED = "simstore_start_checked"  # meta of a start request once filtered


def lease_setting(settings: Any) -> float:
    """SIMSTORE_LEASE in seconds (default 60): a finite number > 0."""
    raw = settings.get("SIMSTORE_LEASE")
    if raw is None or raw == "":
        return DEFAULT_LEASE
    try:
        lease = float(raw)
    except (TypeError, ValueError):
        lease = math.nan
    if not (lease > 0 and math.isfinite(lease)):
        raise SimstoreValueError(
            f"setting SIMSTORE_LEASE must be a number of seconds > 0 (got {raw!r})")
    return lease


def filters(request: Any) -> bool:
    """Whether the seen set filters this request: unless ``dont_filter``, but a start
    request (``is_start_request``) is filtered the first time it is scheduled, since the
    frontier outlives the process: every crawler naming the same start URL, and every
    rerun, would fetch it again. Its retries and redirects (copies carrying START_CHECKED
    in their meta) are not."""
    meta = request.meta
    if meta.get("is_start_request") and not meta.get(START_CHECKED):
        meta[START_CHECKED] = True
        return True
    return not request.dont_filter


def encode(request: Any, spider: Any) -> bytes | None:
    """The payload of a request, or None if it cannot be serialized."""
    try:
        return PAYLOAD_PICKLE + pickle.dumps(request.to_dict(spider=spider),
                                             protocol=5)
    except (ValueError, TypeError, AttributeError, pickle.PicklingError):
        return None


def decode(payload: bytes, spider: Any) -> Any:
    """The request of a payload (ValueError when it is not one this version wrote)."""
    if payload[:1] != PAYLOAD_PICKLE:
        raise ValueError(f"unknown payload kind {payload[:1]!r}")
    return request_from_dict(pickle.loads(payload[1:]), spider=spider)


class _Refused:
    """The scheduler of a crawl whose settings or store were refused: open() says why and
    closes the spider."""

    def __init__(self, error: SimstoreError) -> None:
        self.error = error

    def spider_opened(self, spider: Any = None) -> None:
        logger.error("simstore: %s", self.error, extra={"spider": spider})
        raise CloseSpider(REFUSED)

    def close(self, reason: str) -> None:
        pass

    def has_pending_requests(self) -> bool:
        return False

    def enqueue_request(self, request: Any) -> bool:
        return False

    def next_request(self) -> None:
        return None

    def __len__(self) -> int:
        return 0


class Scheduler:
    """Scrapy's BaseScheduler on a shared frontier of the store (see the module doc)."""

    def __init__(self, crawler: Any, store: SimStore, frontier: Frontier,
                 lease: float) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.store = store
        self.frontier = frontier
        self.lease = lease
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self.df = DupeFilter(None, frontier, crawler.request_fingerprinter, crawler.stats,
                             crawler.settings.getbool("DUPEFILTER_DEBUG"))
        self.spider: Any = None
        self._held: dict[int, tuple[Any, bytes]] = {}  # id(request) -> (request, lease key)
        self._memory: list[tuple[int, int, Any]] = []  # unserializable: (-priority, n, req)
        self._count = itertools.count()
        self._warned = False
        self._waiting = False
        self._renewed = time.monotonic()
        self._loop: Any = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        """Open the frontier SIMSTORE_FRONTIER of SIMSTORE_PATH; SIMSTORE_LEASE checked.

        A bad setting or a store that cannot be opened ends the crawl at start with one
        ERROR line saying why and the finish reason ``simstore_refused``: Scrapy builds
        its scheduler where an exception would end the crawl in errors of its own.
        """
        try:
            lease = lease_setting(crawler.settings)
            store, frontier = open_frontier(crawler.settings, "simstore.scrapy.Scheduler")
        except SimstoreError as exc:
            refused = _Refused(exc)
            crawler.signals.connect(refused.spider_opened, signal=signals.spider_opened)
            return refused
        obj = cls(crawler, store, frontier, lease)
        crawler.signals.connect(obj._idle, signal=signals.spider_idle)
        crawler.signals.connect(obj._start_ticking, signal=signals.spider_opened)
        return obj

    # --- BaseScheduler ------------------------------------------------------------------

    def open(self, spider: Any) -> None:
        """Note the spider (requests are read back with its methods as callbacks)."""
        self.spider = spider
        n = len(self.frontier)
        if n:
            logger.info("simstore: resuming frontier %r of %s (%d requests queued)",
                        self.frontier.name, self.store.path, n, extra={"spider": spider})

    def _start_ticking(self, spider: Any = None) -> None:
        """Once the spider runs: renew leases and watch for work other processes give back."""
        self._loop = create_looping_call(self._tick)
        self._loop.start(min(POLL, self.lease / 3), now=False)

    def close(self, reason: str) -> None:
        """Acknowledge what is done, give back the leases of what is not, let go of the store."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        try:
            done = self._done()
            self.frontier.ack([k for _, k in done], self.owner)
            undone = [k for _, (_, k) in self._held.items()]
            if undone:
                self.frontier.release(undone, self.owner)
                self.stats.inc_value(STATS + "released", len(undone))
            self._held.clear()
            if self._memory:
                logger.warning("simstore: %d requests that cannot be serialized were not "
                               "crawled (they lived in this process only)", len(self._memory),
                               extra={"spider": self.spider})
        finally:
            release(self.store)

    def has_pending_requests(self) -> bool:
        """Whether this process or another has work queued or leased (not this one's)."""
        return bool(self._memory) or self.frontier.pending(self.owner) > 0

    def enqueue_request(self, request: Any) -> bool:
        """Queue the request unless its fingerprint was seen (by any process), adding it to
        the seen set: one commit. ``dont_filter`` requests are queued all the same (and
        marked seen); start requests are filtered even so, once (see :func:`filters`)."""
        fp = self.df.fingerprint(request)
        only_new = filters(request)
        if only_new and self.frontier.seen_contains(fp):  # most links: a read, no commit
            return self._filtered(request)
        payload = encode(request, self.spider)
        if payload is None:
            if self.frontier.seen_add_many([fp])[0] and only_new:
                return self._filtered(request)
            self._unserializable(request)
            heapq.heappush(self._memory, (-request.priority, next(self._count), request))
            self.stats.inc_value("scheduler/enqueued/memory")
        else:
            if self.frontier.push(request.priority, payload, fp, only_new=only_new) is None:
                return self._filtered(request)
            self.stats.inc_value(STATS + "enqueued")
            self.stats.inc_value("scheduler/enqueued/disk")
        self.stats.inc_value("scheduler/enqueued")
        return True

    def next_request(self) -> Any:
        """The next request: this process's memory first, else the frontier's first, leased
        (acknowledging, in the same commit, the requests the engine is done with)."""
        if self._memory:
            request = heapq.heappop(self._memory)[2]
            self.stats.inc_value("scheduler/dequeued/memory")
            self.stats.inc_value("scheduler/dequeued")
            return request
        for _ in range(100):  # undecodable entries are dropped; a bound on the loop
            done = self._done()
            before = self.frontier.reclaimed
            popped = self.frontier.pop(self.lease, self.owner, [k for _, k in done])
            for rid, _ in done:
                del self._held[rid]
            if self.frontier.reclaimed > before:
                self.stats.inc_value(STATS + "reclaimed", self.frontier.reclaimed - before)
            if popped is None:
                self._waiting = True
                return None
            try:
                request = decode(popped.payload, self.spider)
            except Exception as exc:  # noqa: BLE001 - a payload of a changed spider; dropped
                logger.error("simstore: dropped a queued request that cannot be read back "
                             "(%s)", exc, extra={"spider": self.spider})
                self.frontier.ack([popped.key], self.owner)
                self.stats.inc_value(STATS + "undecodable")
                continue
            self._waiting = False
            self._held[id(request)] = (request, popped.key)
            self.stats.inc_value(STATS + "dequeued")
            self.stats.inc_value("scheduler/dequeued/disk")
            self.stats.inc_value("scheduler/dequeued")
            return request
        return None

    def __len__(self) -> int:
        """Requests queued in the frontier (all processes) and in this process's memory."""
        return len(self.frontier) + len(self._memory)

    # --- leases -------------------------------------------------------------------------

    def _done(self) -> list[tuple[int, bytes]]:
        """(id, key) of the leased requests the engine is done with.

        The engine keeps a request in its slot's ``inprogress`` set from its download to
        the end of its callback's output (children scheduled, items through the
        pipelines) or of its failure's handling: the one place that covers responses,
        errors, ignored requests and redirects alike (no signal marks that end).
        """
        if not self._held:
            return []
        busy = self.crawler.engine._slot.inprogress
        return [(rid, key) for rid, (req, key) in self._held.items() if req not in busy]

    def _tick(self) -> None:
        """Every POLL s: acknowledge and renew leases (every third of the lease), and wake
        the engine while it waits for work other processes hold."""
        now = time.monotonic()
        if now - self._renewed >= self.lease / 3:
            self._renewed = now
            done = self._done()
            if done:
                self.frontier.ack([k for _, k in done], self.owner)
                for rid, _ in done:
                    del self._held[rid]
            if self._held:
                self.frontier.renew([k for _, k in self._held.values()], self.lease,
                                    self.owner)
        if self._waiting:
            slot = self.crawler.engine._slot
            if slot is not None:
                slot.nextcall.schedule()

    def _idle(self, spider: Any = None) -> None:
        """Keep the spider open while other processes hold work that may come back."""
        if self.frontier.pending(self.owner) > 0:
            self._waiting = True
            raise DontCloseSpider

    def _filtered(self, request: Any) -> bool:
        self.df.log(request, self.spider)
        self.stats.inc_value(STATS + "filtered")
        return False

    def _unserializable(self, request: Any) -> None:
        self.stats.inc_value(STATS + "unserializable")
        if not self._warned:
            self._warned = True
            logger.warning("simstore: request %s cannot be serialized (its callback is not a "
                           "spider method?): kept in this process's memory, not shared; no "
                           "more such requests will be logged", request,
                           extra={"spider": self.spider})
