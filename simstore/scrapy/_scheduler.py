"""Scheduler: Scrapy's scheduler on the store's shared, polite crawl frontier.

``SCHEDULER = "simstore.scrapy.Scheduler"`` with ``SIMSTORE_PATH``: the requests of every
``scrapy crawl`` process naming the store go into one frontier (:mod:`simstore.crawl`),
filtered by one seen set; each process takes the next request whose host may be asked
now, so politeness holds across processes: ``DOWNLOAD_DELAY`` and robots.txt's
``Crawl-delay`` (with ``ROBOTSTXT_OBEY``) space the requests to a host of all processes
together, ``CONCURRENT_REQUESTS_PER_DOMAIN`` bounds them, and a 429 or 503 blocks the
host for everyone (its ``Retry-After``, or a backoff), the request queued again without
spending a retry.

A request taken is leased for ``SIMSTORE_LEASE`` seconds (renewed while the process
works on it) and acknowledged once the engine is done with it (its callback's children
are in the queue first); a killed process's requests come back when their lease runs
out. Children are queued, finished requests acknowledged and the next ones taken in one
commit. With ``SIMSTORE_REVISIT = "adaptive"`` each fetched URL comes due again by what
changed, and a run queues the URLs due at its start. Requests are stored as JSON data;
one that cannot be (a callback that is not a spider method, objects in ``meta``) stays in
this process's memory and is counted.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import os
import socket
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from protego import Protego
from scrapy import signals
from scrapy.exceptions import DontCloseSpider
from scrapy.resolver import dnscache
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.httpobj import urlparse_cached

from ..crawl import (
    DROPPED,
    NO_ANSWER,
    Done,
    Frontier,
    PayloadError,
    Popped,
    Push,
    Taken,
    parse_crawl_delay,
)
from ..crawl.rules import NOT_MODIFIED, THROTTLE_STATUSES, parse_retry_after
from ..exceptions import SimstoreError
from ..store import SimStore
from ._dupefilter import DupeFilter, open_frontier
from ._gate import CHANGED, NEW, REFETCH_KEY, UNCHANGED
from ._requests import conditional, from_payload, host_of, to_payload
from ._settings import CrawlSettings, Refused, crawl_settings, logger, refusal, refuse
from ._stores import release

TICK = 0.25  # seconds between two looks at leases, children and other processes' work
FLUSH_AT = 256  # children queued in memory before they are written without waiting
KEPT = 4096  # entries of the Scheduler's notes on download slots, before pruning
STATS = "simstore/frontier/"
HOST_STATS = "simstore/hosts/"


def _errors(*names: str) -> tuple[type[BaseException], ...]:
    """The exception classes of these dotted names that this Scrapy and Twisted have."""
    import importlib

    out: list[type[BaseException]] = []
    for name in names:
        module, _, attr = name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        out.append(cls)
    return tuple(out)


# A download that ended in one of these got no answer from its host (no address, no
# connection, nothing before the timeout): the host's failure, not the request's
NO_ANSWER_ERRORS = _errors(
    "scrapy.exceptions.CannotResolveHostError",
    "scrapy.exceptions.DownloadConnectionRefusedError",
    "scrapy.exceptions.DownloadTimeoutError",
    "scrapy.exceptions.DownloadFailedError",
    "twisted.internet.error.ConnectError",
    "twisted.internet.error.DNSLookupError",
    "twisted.internet.error.TimeoutError",
    "twisted.internet.defer.TimeoutError",
    "twisted.web._newclient.ResponseNeverReceived",
    "builtins.ConnectionRefusedError",
    "builtins.TimeoutError",
)
START_CHECKED = "simstore_start_checked"  # meta of a start request once filtered
THROTTLED = "simstore_throttled"  # meta: 429/503 answers this request had (no retry spent)
FREE_THROTTLES = 8  # 429/503 answers per request that cost no retry
WAIT_QUIET = 1.0  # seconds without a take before the wait is explained
WAIT_LOG_EVERY = 10.0  # seconds between two lines explaining a wait


def _count_down(counter: Counter[str], key: str) -> None:
    """One fewer of key in counter; the key goes at zero (so ``in`` means "some")."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def filters(request: Any) -> bool:
    """Whether the seen set filters this request: unless ``dont_filter``, but a start
    request (``is_start_request``) is filtered the first time it is scheduled, since the
    frontier outlives the process; its retries and redirects are not."""
    meta = request.meta
    if meta.get("is_start_request") and not meta.get(START_CHECKED):
        meta[START_CHECKED] = True
        return True
    return not request.dont_filter


def engine_of(crawler: Any) -> Any:
    """The crawler's engine, or None before the crawl starts."""
    try:
        return crawler.engine
    except (AttributeError, RuntimeError):  # Scrapy >= 2.17 raises until it is set
        return None


def engine_slot(crawler: Any) -> Any:
    """Scrapy's engine slot: the one place its private ``_slot`` is read (its
    ``inprogress`` set is where a request stays until its callback's output is handled,
    and its ``nextcall`` wakes the engine)."""
    return getattr(engine_of(crawler), "_slot", None)


class _Held(NamedTuple):
    """A request this process took: its lease's key, its fingerprint (for revisits), its
    host in the frontier and (conditional revisits only) the payload it was taken as."""

    request: Any
    key: bytes
    fp: bytes | None
    host: str
    payload: bytes | None = None


class _Outcome(NamedTuple):
    """What came of a request taken: the fields of its :class:`Done`."""

    status: int | None = None
    digest: int = 0
    changed: bool | None = None
    latency: float | None = None
    again: bytes | None = None


_NOTHING = _Outcome()  # a request dropped before an answer: nothing to count


@dataclass
class _Job:
    """One commit of the Scheduler: what it carries, then what came of it."""

    n: int
    raw: list[tuple[Any, bytes, bool]]  # children: (request, fingerprint, only new)
    dones: list[Done | bytes]
    left: list[bytes]
    filtered: list[Any] = field(default_factory=list)
    memory: list[Any] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)  # those pushed, in order
    taken: Taken | None = None


class Scheduler:
    """Scrapy's BaseScheduler on a shared frontier of the store (see the module doc)."""

    def __init__(self, crawler: Any, store: SimStore, frontier: Frontier,
                 cfg: CrawlSettings) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.store = store
        self.frontier = frontier
        self.lease = cfg.lease
        self.revisit = cfg.revisit is not None
        self.conditional = self.revisit and cfg.conditional  # revisits as conditional GETs
        self.robots = cfg.politeness.robots
        self._takers = 1  # processes taking from the frontier at the last take
        self.politeness = cfg.politeness
        self._part = cfg.politeness.downloads(1)  # a host's downloads at once, here
        self.robots_max_age = cfg.robots_max_age  # a robots.txt another process read serves
        settings = crawler.settings
        self.agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        self.concurrency = max(1, settings.getint("CONCURRENT_REQUESTS", 16))
        self.batch = max(1, self.concurrency // 4)  # free slots worth one take's commit
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self.df = DupeFilter(None, frontier, settings.getbool("DUPEFILTER_DEBUG"),
                             fingerprinter=crawler.request_fingerprinter)
        self.spider: Any = None
        self._held: dict[int, _Held] = {}  # request id -> the request taken, and its lease
        self.per_ip = cfg.per_ip  # hosts grouped by address, as Scrapy's slots
        self._held_hosts: Counter[str] = Counter()  # the hosts of the requests held
        self._fresh = 0  # children waiting whose host this process holds no request of
        self._ready: list[Any] = []  # requests taken, not yet handed to the engine
        # requests handed out whose download is not over (request id -> host), per host:
        # at most self._part of a host's at once, whatever Scrapy's slots let through
        self._downloading: dict[int, str] = {}
        self._host_downloads: Counter[str] = Counter()
        self._pushes: list[tuple[Push, Any]] = []  # children not yet written
        self._outcomes: dict[int, _Outcome] = {}  # request id -> what came of it
        self.auto = cfg.politeness.auto is not None  # hosts' delays learnt from latencies
        self._undecodable: list[bytes] = []
        self._left_keys: list[bytes] = []  # leases whose download is over (slots to free)
        self._memory: list[tuple[int, int, Any]] = []  # unserializable: (-priority, n, req)
        self._count = itertools.count()
        self._warned = False
        self._waiting = False
        self._timer: Any = None
        self._renewed = time.monotonic()
        self._wait_logged = 0.0
        self._empty_since: float | None = None
        self._loop: Any = None
        self._taken = 0
        self._quiet_until = 0.0  # no take before (nothing was fetchable, nothing changed)
        # download slot key -> the Crawl-delay of its robots.txt read here
        self._crawl_delays: dict[str, float] = {}
        # host name -> the spider's own download slot its requests were queued under
        self._named_slots: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        """Open the frontier of the settings. A refused crawl (a bad setting here or in
        another simstore component, a store that cannot be opened) gets a scheduler that
        touches no store: the frontier stays as it was (see :mod:`._settings`)."""
        if refusal(crawler) is not None:
            return Refused(refusal(crawler))
        try:
            cfg = crawl_settings(crawler.settings, "simstore.scrapy.Scheduler")
            store, frontier = open_frontier(cfg)
        except SimstoreError as exc:
            refuse(crawler, exc)
            return Refused(refusal(crawler))
        obj = cls(crawler, store, frontier, cfg)
        connect = crawler.signals.connect
        connect(obj._idle, signal=signals.spider_idle)
        connect(obj._start_ticking, signal=signals.spider_opened)
        connect(obj._downloaded, signal=signals.response_downloaded)
        connect(obj._received, signal=signals.response_received)
        connect(obj._left, signal=signals.request_left_downloader)
        if obj.auto:
            connect(obj._unpace_slot, signal=signals.request_reached_downloader)
        return obj

    # --- BaseScheduler ------------------------------------------------------------------

    def open(self, spider: Any) -> None:
        """Note the spider; queue the revisits due now; say what the frontier holds."""
        self.spider = spider
        due = self.frontier.queue_due() if self.revisit else 0
        counts = self.frontier.counts()
        extra = {"spider": spider}
        if due:
            logger.info("simstore: %d URLs due for a revisit queued", due, extra=extra)
            self.stats.inc_value(STATS + "revisits_queued", due)
        if counts["queued"] or counts["leased"]:
            logger.info("simstore: resuming frontier %r of %s (%d requests queued, %d leased)",
                        self.frontier.name, self.store.path, counts["queued"],
                        counts["leased"], extra=extra)

    def _start_ticking(self, spider: Any = None) -> None:
        """Once the spider runs: renew leases, write children and watch other processes
        every TICK."""
        self._loop = create_looping_call(self._tick)
        self._loop.start(min(TICK, self.lease / 3), now=False)

    def close(self, reason: str) -> None:
        """Write the children, acknowledge what is done, give back the leases of what is
        not, let go of the store."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._timer is not None:
            self._timer.cancel()
        try:
            self._flush(0)
            undone = [held.key for held in self._held.values()]
            if undone:
                self.frontier.release(undone, self.owner)
                self.stats.inc_value(STATS + "released", len(undone))
            self._held.clear()
            self._held_hosts.clear()
            self._ready.clear()
            self._downloading.clear()
            self._host_downloads.clear()
            if self._memory:
                logger.warning("simstore: %d requests that cannot be stored were not crawled "
                               "(they lived in this process only)", len(self._memory),
                               extra={"spider": self.spider})
            if not self._taken and reason == "finished":
                logger.info("simstore: nothing queued or due in frontier %r of %s: the crawl "
                            "in this store is done (SIMSTORE_EXPIRE or SIMSTORE_REVISIT fetch "
                            "again; a new SIMSTORE_FRONTIER starts anew)", self.frontier.name,
                            self.store.path, extra={"spider": self.spider})
        finally:
            release(self.store)

    def has_pending_requests(self) -> bool:
        """Whether this process or another has work queued or leased (not this one's)."""
        if self._memory or self._ready or self._pushes:
            return True
        return self.frontier.pending() - len(self._held) > 0

    def enqueue_request(self, request: Any) -> bool:
        """Queue the request (written with the next take, or sooner when many wait) unless
        its fingerprint is seen by then; ``dont_filter`` requests are queued all the same,
        start requests filtered once (:func:`filters`). Nothing is encoded yet: most links
        of a crawl are seen, and are dropped by one read before the write."""
        self._pushes.append((request, self.df.fingerprint(request), filters(request)))
        if self._key(request) not in self._held_hosts:
            self._fresh += 1
        if len(self._pushes) >= FLUSH_AT:
            self._flush(0)
        return True

    def _encode(self, job: _Job) -> list[Push]:
        """The pushes of a job worth writing, encoded: those seen (by the store, one read
        for all, or earlier in the batch) go to ``job.filtered``; those that cannot be
        stored as data are marked seen and go to ``job.memory``."""
        check = [fp for _, fp, only_new in job.raw if only_new]
        seen = {fp for fp, was in zip(check, self.frontier.seen_many(check), strict=True)
                if was} if check else set()
        out = []
        for request, fp, only_new in job.raw:
            if only_new and fp in seen:
                job.filtered.append(request)
                continue
            seen.add(fp)
            try:
                payload = to_payload(request, self.spider)
            except (PayloadError, ValueError, TypeError, AttributeError):
                if self.frontier.seen_add_many([fp])[0] and only_new:
                    job.filtered.append(request)
                else:
                    job.memory.append(request)
                continue
            out.append(Push(request.priority, payload, fp, only_new, self._key(request)))
            job.requests.append(request)
        return out

    def next_request(self) -> Any:
        """The next request: this process's memory first, else one taken from the frontier
        (as many as the downloader has room for, in one commit with the children and
        acknowledgements waiting)."""
        if self._memory:
            request = heapq.heappop(self._memory)[2]
            self._dequeued("memory")
            return request
        if self._may_take():  # also when some are ready: it refills what is taken ahead
            self._flush(self._room())  # (before handing one: a request handed is not done)
        request = self._hand_ready()
        if request is None:
            self._waiting = True
            return None
        self._waiting = False
        self._dequeued("disk")
        return request

    def _hand_ready(self) -> Any:
        """The first request taken whose host this process downloads fewer than its part
        of (counted as downloading from now on), or None."""
        for i, request in enumerate(self._ready):
            host = self._where(request)
            if self._host_downloads[host] < self._part_of(host):
                del self._ready[i]
                self._downloading[id(request)] = host
                self._host_downloads[host] += 1
                return request
        return None

    def _can_hand(self) -> bool:
        """Whether a request taken may be handed to the engine now."""
        return any(self._host_downloads[h] < self._part_of(h)
                   for h in map(self._where, self._ready))

    def _part_of(self, host: str) -> int:
        """How many of host's requests this process downloads at once: its part of the
        host's concurrency (its own in ``DOWNLOAD_SLOTS``, else the crawl's)."""
        if not self.politeness.hosts:
            return self._part
        return self.politeness.for_host(host).downloads(self._takers)

    def _group(self, host: str) -> str:
        """The frontier's host for a URL's host name: the name itself, or with
        ``CONCURRENT_REQUESTS_PER_IP`` its address once Scrapy's DNS cache has it (as
        Scrapy's download slots: a name not yet resolved stays a host of its own)."""
        if not self.per_ip or not host:
            return host
        address = dnscache.get(host)
        return address if isinstance(address, str) and address else host

    def _key(self, request: Any) -> str:
        """The frontier's host of request: Scrapy's download slot key of it (its
        ``meta["download_slot"]``, else its host name, or with ``_PER_IP`` its address).
        A host name queued under a slot of the spider's own is noted (its robots.txt's
        Crawl-delay then holds for that slot)."""
        name = host_of(request)
        slot = request.meta.get("download_slot")
        if not isinstance(slot, str) or not slot:
            return self._group(name)
        if slot != name and slot != self._group(name):
            self._named_slots = _kept(self._named_slots, name, slot)
        return slot

    def _where(self, request: Any) -> str:
        """The frontier's host of request: the one it was taken from, if it was."""
        held = self._held.get(id(request))
        return held.host if held is not None else self._key(request)

    def _download_over(self, request: Any) -> str | None:
        """Count request's download as over (once); its host, if it was counted."""
        host = self._downloading.pop(id(request), None)
        if host is not None:
            _count_down(self._host_downloads, host)
        return host

    def __len__(self) -> int:
        """Requests queued in the frontier (all processes) and in this process."""
        return len(self.frontier) + len(self._memory) + len(self._ready) + len(self._pushes)

    # --- one commit: children, acknowledgements, takes --------------------------------------

    def _room(self) -> int:
        """Requests worth taking: the downloader's free slots and a batch more, taken ahead
        so that a slot freed is filled at once, never left idle for a take's commit."""
        active = len(getattr(getattr(engine_of(self.crawler), "downloader", None), "active", ()))
        return max(1, self.concurrency + self.batch - active - len(self._ready))

    def _may_take(self) -> bool:
        """Whether a take is worth a commit now: not for one or two free download slots
        while many requests are in flight (they come back in a batch), nor, after a take
        that left no host that may be asked now (all at their limits or waiting), before its wake
        or the next tick unless a batch of host slots was freed since, or of children
        queued of hosts this process holds no request of (a host it holds requests of
        stays at its limit), or anything at all when nothing is in flight here."""
        room = self._room()
        idle = room == self.concurrency + self.batch  # nothing in flight or taken here
        if room < self.batch and not idle:
            return False
        if time.time() < self._quiet_until:  # the last take left no host that may be asked
            need = 1 if idle else self.batch
            return (len(self._left_keys) >= need or self._fresh >= need
                    or (idle and self._any_done()))
        return True

    def _collect(self, n: int) -> _Job | None:
        """What the next commit carries: the children, the acknowledgements, the leases
        whose download is over, and a take of n (None when there is nothing to do)."""
        job = _Job(n, self._pushes, self._dones(), self._left_keys)
        self._pushes, self._left_keys, self._fresh = [], [], 0
        if not (n or job.raw or job.dones or job.left):
            return None
        return job

    def _run(self, job: _Job) -> _Job:
        """One commit: the job's pushes, acknowledgements, freed slots and take."""
        pushes = self._encode(job) if job.raw else []
        job.taken = self.frontier.take(job.n, self.lease, self.owner, push=pushes,
                                       done=job.dones, downloaded=job.left)
        return job

    def _flush(self, n: int) -> None:
        """Commit what waits (and take n), here in the event loop's thread: in a worker
        thread each py-lmdb call waits for the GIL while the loop parses pages
        (docs/bench/journal.md). A failed commit wrote nothing: what it carried goes
        into the next."""
        job = self._collect(n)
        if job is None:
            return
        try:
            self._run(job)
        except Exception as exc:  # noqa: BLE001 - the crawl goes on; the next commit retries
            logger.error("simstore: the frontier could not be written (%s); retried",
                         exc, extra={"spider": self.spider})
            self._requeue(job)
            return
        self._apply(job)

    def _requeue(self, job: _Job) -> None:
        """A job whose commit failed: nothing of it was written; it goes into the next."""
        self._pushes[:0] = job.raw
        self._undecodable[:0] = job.dones
        self._left_keys[:0] = job.left

    def _apply(self, job: _Job) -> None:
        """Count and hand out what a commit did (in the event loop's thread)."""
        taken = job.taken
        assert taken is not None
        self.stats.inc_value(STATS + "commits")
        if job.n and taken.takers != self._takers:
            self._fit_part(taken.takers)
        for request in job.filtered:
            self._filtered(request)
        for request in job.memory:
            self._keep_in_memory(request)
        for request, key in zip(job.requests, taken.pushed, strict=True):
            if key is None:
                self._filtered(request)
            elif key == DROPPED:  # its host is given up
                self.stats.inc_value(HOST_STATS + "given_up_requests")
            else:
                self.stats.inc_value(STATS + "enqueued")
                self.stats.inc_value("scheduler/enqueued/disk")
                self.stats.inc_value("scheduler/enqueued")
        if taken.reclaimed:
            self.stats.inc_value(STATS + "reclaimed", taken.reclaimed)
        for popped in taken.popped:
            self._hand_out(popped)
        if taken.popped:
            self._empty_since = None
        elif job.n:
            self._log_wait(taken.wake)
        if job.n and (len(taken.popped) < job.n or not taken.more):
            # no host may be asked now: the next take waits for freed slots, children or a wake
            self._wait(taken.wake)
            self._quiet_until = min(taken.wake or math.inf, time.time() + TICK)

    def _hand_out(self, popped: Popped) -> None:
        try:
            request = from_payload(popped.payload, self.spider)
        except Exception as exc:  # noqa: BLE001 - a payload of a changed spider: dropped
            logger.error("simstore: dropped a queued request that cannot be read back (%s)",
                         exc, extra={"spider": self.spider})
            self._undecodable.append(popped.key)
            self.stats.inc_value(STATS + "undecodable")
            return
        fp = self.df.fingerprint(request) if self.revisit else None  # only revisits need it
        host = popped.host or self._key(request)  # a record may have no name
        payload = popped.payload if self.conditional else None  # what a revisit asks anew
        self._held[id(request)] = _Held(request, popped.key, fp, host, payload)
        self._held_hosts[host] += 1
        self._ready.append(request)
        self._taken += 1

    def _dones(self) -> list[Done | bytes]:
        """The leased requests the engine is done with, with what came of each."""
        out: list[Done | bytes] = list(self._undecodable)
        self._undecodable.clear()
        if not self._held:
            return out
        busy = self._busy()
        ready = {id(r) for r in self._ready}
        for rid, (request, key, fp, host, _) in list(self._held.items()):
            if rid in ready or request in busy:
                continue
            del self._held[rid]
            self._download_over(request)  # one that never reached the downloader
            _count_down(self._held_hosts, host)
            o = self._outcomes.pop(rid, _NOTHING)
            out.append(Done(key, o.status, fp, o.changed, o.digest, o.latency, o.again))
        return out

    def _any_done(self) -> bool:
        """Whether a request this process holds is done (its ack may free its host)."""
        busy, ready = self._busy(), self._ready
        return any(held.request not in busy and held.request not in ready
                   for held in self._held.values())

    def _busy(self) -> Any:
        """The requests the engine still works on (their callbacks' output not handled)."""
        slot = engine_slot(self.crawler)
        return () if slot is None else slot.inprogress

    def _wait(self, wake: float | None) -> None:
        """Nothing may be taken now: wake the engine when the first waiting host may go."""
        if wake is None or self._timer is not None:
            return
        delay = max(0.0, wake - time.time()) + 0.001
        if delay < TICK:
            self._timer = call_later(delay, self._wake)

    def _wake(self) -> None:
        self._timer = None
        slot = engine_slot(self.crawler)
        if slot is not None:
            slot.nextcall.schedule()

    # --- what came of a request --------------------------------------------------------------

    def _downloaded(self, response: Any, request: Any, spider: Any = None) -> None:
        """Before the middlewares see an answer: a robots.txt sets its host's delay, a
        429/503 blocks its host for every process."""
        if self.auto:
            self._unpace_slot(request)
        try:
            if self.robots and urlparse_cached(request).path == "/robots.txt":
                self._robots(request, response)
            elif response.status in THROTTLE_STATUSES:
                self._throttled(request, response)
        except SimstoreError as exc:
            logger.error("simstore: host state not written (%s)", exc, extra={"spider": spider})

    def _robots(self, request: Any, response: Any) -> None:
        raw = None
        if response.status == 200:
            body = response.body.decode("utf-8", "replace")
            try:
                rp = Protego.parse(body)
                raw = rp.crawl_delay(self.agent)
            except Exception:  # noqa: BLE001 - a robots.txt that protego cannot read
                raw = None
            if raw is None and "crawl-delay" in body.lower():
                raw = parse_crawl_delay(_crawl_delay_line(body))
        url = urlparse_cached(request)
        keep = not 300 <= response.status < 400  # a redirect's answer is not the file
        name = host_of(request)
        delay, changed = self.frontier.robots_read(
            name, raw, origin=f"{url.scheme}://{url.netloc}" if keep else None,
            status=min(max(int(response.status), 0), 999), body=response.body)
        # its address's host and a slot of the spider's it is crawled in hold it too
        also = {self._group(name), self._named_slots.get(name, name)} - {name}
        for key in also:
            self.frontier.robots_read(key, raw)  # (for several names, the last read)
        for key in also | {self._key(request)}:
            self._pace_slot(key, delay)
        if changed:
            self.stats.inc_value(HOST_STATS + "crawl_delay_capped")
            logger.warning("simstore: %s asks a Crawl-delay of %r: %g s used (the cap is "
                           "SIMSTORE_MAX_HOST_DELAY)", name, raw, delay,
                           extra={"spider": self.spider})

    def _fit_part(self, takers: int) -> None:
        """Download at most this process's part of a host's concurrency at once (its
        share among the processes taking: together they ask a host no harder than one).
        Counted here, not left to Scrapy's download slots, which start every request
        queued in them at once on the asyncio reactor."""
        self._takers = takers
        part, self._part = self._part, self.politeness.downloads(takers)
        self.stats.set_value(STATS + "processes_taking", takers)
        if self._part > part and self._can_hand():
            self._wake()

    def _pace_slot(self, key: str, delay: float) -> None:
        """Space this process's own download slot ``key`` by a host's delay, unrandomized:
        the request that made Scrapy fetch robots.txt then waits the delay after it, and
        no request leaves later than the time the frontier gave it (the downloader's
        ``slots`` are what Scrapy's AutoThrottle tunes too)."""
        slot = self._slots().get(key)
        if slot is not None:
            slot.delay = max(slot.delay, delay)
            if self.auto:
                self._note_crawl_delay(key, delay)
            if hasattr(type(slot), "jitter"):  # Scrapy >= 2.19 (randomize_delay deprecated)
                slot.jitter = 0.0
            else:
                slot.randomize_delay = False

    def _unpace_slot(self, request: Any, spider: Any = None) -> None:
        """With AutoThrottle: this process's download slot of request goes back to the
        host's floor (its ``DOWNLOAD_DELAY`` or ``DOWNLOAD_SLOTS`` delay, its Crawl-delay
        read here) as a request reaches it and after each answer (once Scrapy's
        extension has set it). The frontier spaces a host's requests by what every
        process's answers taught it; a request the slot held after its take would leave
        with the next one, too close to it."""
        key, slot = self._slot(request)
        if slot is not None:
            slot.delay = max(self.politeness.for_host(key).delay,
                             self._crawl_delays.get(key, 0.0))

    def _note_crawl_delay(self, key: str, delay: float) -> None:
        """Remember slot key's Crawl-delay (for :meth:`_unpace_slot`), among the slots
        Scrapy still has (it drops idle ones; the frontier holds the delay all the same)."""
        self._crawl_delays = _kept(self._crawl_delays, key, delay, self._slots())

    def _slots(self) -> dict[str, Any]:
        """Scrapy's downloader's slots by key (empty before the crawl starts)."""
        return getattr(getattr(engine_of(self.crawler), "downloader", None), "slots", {})

    def _slot(self, request: Any) -> tuple[str, Any]:
        """This process's download slot of request (Scrapy's downloader): its key and the
        slot, or None."""
        key = self._key(request)
        return key, self._slots().get(key)

    def _throttled(self, request: Any, response: Any) -> None:
        host = self._where(request)
        wait = parse_retry_after(response.headers.get(b"Retry-After"), time.time())
        blocked, capped = self.frontier.throttle(host, wait, response.status)
        self.stats.inc_value(HOST_STATS + f"answers_{response.status}")
        self.stats.inc_value(HOST_STATS + "blocked_seconds", round(blocked, 3))
        if capped:
            self.stats.inc_value(HOST_STATS + "retry_after_capped")
        meta = request.meta
        if meta.get(THROTTLED, 0) < FREE_THROTTLES:  # RetryMiddleware adds one: no retry spent
            meta[THROTTLED] = meta.get(THROTTLED, 0) + 1
            meta["retry_times"] = meta.get("retry_times", 0) - 1
        logger.info("simstore: %s answered %d: blocked for every process for %.1f s", host,
                    response.status, blocked, extra={"spider": self.spider})
        self._give_back(host)

    def _left(self, request: Any, spider: Any = None) -> None:
        """A request's download is over (answered or failed): its host's slot is free for
        every process at the next commit, though its lease stays until its callback's
        requests are queued. A download that got no answer counts on its host."""
        # Scrapy's downloader sends this signal from the ``finally`` of its download: a
        # failure is the exception being raised there
        failure = sys.exc_info()[1]
        held = self._held.get(id(request))
        if held is not None:
            self._left_keys.append(held.key)
        if isinstance(failure, NO_ANSWER_ERRORS):
            self._no_answer(request, failure, held is not None)
        host = self._download_over(request)
        if host is not None and any(self._where(r) == host for r in self._ready):
            self._wake()  # a request of its host waits for this download's place

    def _no_answer(self, request: Any, failure: BaseException, held: bool) -> None:
        """Block the request's host for every process (the backoff; given up after
        ``SIMSTORE_HOST_MAX_FAILURES`` in a row); a revisit keeps its interval."""
        if held:
            self._outcomes[id(request)] = _Outcome(NO_ANSWER)
        host = self._where(request)
        self.stats.inc_value(HOST_STATS + "no_answer")
        try:
            blocked, dropped = self.frontier.failed(host)
        except SimstoreError as exc:
            logger.error("simstore: host state not written (%s)", exc,
                         extra={"spider": self.spider})
            return
        self._give_back(host)
        if dropped is None:
            logger.info("simstore: %s gave no answer (%s): blocked for every process for "
                        "%.1f s", host, type(failure).__name__, blocked,
                        extra={"spider": self.spider})
            return
        self.stats.inc_value(HOST_STATS + "given_up")
        self.stats.inc_value(HOST_STATS + "given_up_requests", dropped)
        logger.warning("simstore: %s gave no answer %d times in a row (last: %s): given up "
                       "for %.0f s, %d queued requests of it dropped", host,
                       self.politeness.max_failures, type(failure).__name__, blocked, dropped,
                       extra={"spider": self.spider})

    def _give_back(self, host: str) -> None:
        """Give the frontier back the requests of a host just blocked that this process
        took and has not handed out: they would leave inside the block."""
        keys, keep = [], []
        for request in self._ready:
            held = self._held.get(id(request)) if self._where(request) == host else None
            if held is None:
                keep.append(request)
                continue
            del self._held[id(request)]
            _count_down(self._held_hosts, host)
            keys.append(held.key)
        if not keys:
            return
        self._ready = keep
        try:
            self.frontier.release(keys, self.owner)
        except SimstoreError as exc:  # their leases run out: they come back then
            logger.error("simstore: requests not given back (%s)", exc,
                         extra={"spider": self.spider})
            return
        self.stats.inc_value(STATS + "given_back", len(keys))

    def _received(self, response: Any, request: Any, spider: Any = None) -> None:
        """An answer the engine got: its status (counted on its host), with AutoThrottle its
        latency, and for the revisit its digest, the middleware's verdict and (a page's
        answer, with ``SIMSTORE_REVISIT_CONDITIONAL``) the request that asks it again."""
        held = self._held.get(id(request))
        if held is None:
            return
        latency = _latency(request.meta) if self.auto else None
        if not self.revisit:
            self._outcomes[id(request)] = _Outcome(response.status, latency=latency)
            return
        if response.status == NOT_MODIFIED:
            self.stats.inc_value(STATS + "not_modified")
        verdict = request.meta.get("simstore")
        changed = {NEW: True, CHANGED: True, UNCHANGED: False}.get(verdict)
        digest = int.from_bytes(hashlib.blake2b(response.body, digest_size=8).digest(), "big")
        again = None
        if held.payload is not None:  # conditional revisits
            if response.status == 200:
                again = conditional(held.payload, response.headers)
            elif request.meta.get(REFETCH_KEY):  # not stored: asked whole next time
                again = conditional(held.payload, {})
        self._outcomes[id(request)] = _Outcome(response.status, digest, changed, latency, again)

    # --- leases and waits ---------------------------------------------------------------------

    def _tick(self) -> None:
        """Every TICK s: write waiting children and acknowledgements, renew leases (every
        third of the lease), and wake the engine while others may hold its work."""
        now = time.monotonic()
        self._quiet_until = 0.0
        if self._pushes or self._left_keys or (self._held and not self._ready):
            self._flush(0)
        if now - self._renewed >= self.lease / 3:
            self._renewed = now
            if self._held:
                self.frontier.renew([held.key for held in self._held.values()], self.lease,
                                    self.owner)
        if self._waiting:
            self._wake()

    def _idle(self, spider: Any = None) -> None:
        """Keep the spider open while other processes hold work that may come back."""
        if self.has_pending_requests():
            self._waiting = True
            raise DontCloseSpider

    def _log_wait(self, wake: float | None) -> None:
        """Say why nothing could be taken, once the wait has lasted WAIT_QUIET s, then every
        WAIT_LOG_EVERY s: leases other processes hold (a killed one's run out), or hosts
        that all wait (blocked, or on their delays)."""
        now = time.monotonic()
        if self._empty_since is None:
            self._empty_since = now
        if now - self._empty_since < WAIT_QUIET or now - self._wait_logged < WAIT_LOG_EVERY:
            return
        self._wait_logged = now
        others = [o for o in self.frontier.owners() if o["owner"] != self.owner]
        if wake is not None and not others:
            logger.info("simstore: every host with queued requests waits (its delay or a "
                        "429/503 block); the next may be asked at %s", _clock(wake),
                        extra={"spider": self.spider})
        for o in others:
            logger.info("simstore: waiting for %d requests leased by %s (oldest %.0f s ago%s)",
                        o["leases"], o["owner"], o["oldest_age"],
                        f", {o['expired']} expired: taken back now" if o["expired"] else "",
                        extra={"spider": self.spider})

    # --- counting ---------------------------------------------------------------------------

    def _dequeued(self, where: str) -> None:
        if where == "disk":
            self.stats.inc_value(STATS + "dequeued")
        self.stats.inc_value(f"scheduler/dequeued/{where}")
        self.stats.inc_value("scheduler/dequeued")

    def _keep_in_memory(self, request: Any) -> None:
        self.stats.inc_value(STATS + "unserializable")
        if not self._warned:
            self._warned = True
            logger.warning("simstore: request %s cannot be stored as data (its callback is "
                           "not a spider method, or its meta holds objects): kept in this "
                           "process's memory, not shared; no more such requests will be "
                           "logged", request, extra={"spider": self.spider})
        heapq.heappush(self._memory, (-request.priority, next(self._count), request))
        self.stats.inc_value("scheduler/enqueued/memory")
        self.stats.inc_value("scheduler/enqueued")

    def _filtered(self, request: Any) -> bool:
        if self.spider is not None:
            self.df.log(request, self.spider)
        self.stats.inc_value(STATS + "filtered")
        return False


def _kept(kept: dict[str, Any], key: str, value: Any, live: Any = ()) -> dict[str, Any]:
    """kept with key -> value, bounded: past KEPT entries, those whose key is not in
    ``live`` go, and if most stay, the older half (the frontier holds what they say)."""
    if len(kept) >= KEPT:
        kept = {k: v for k, v in kept.items() if k in live}
        if len(kept) >= KEPT // 2:
            kept = dict(list(kept.items())[len(kept) // 2:])
    kept[key] = value
    return kept


def _latency(meta: Any) -> float | None:
    """The download latency Scrapy measured for a request (seconds), unless its meta says
    AutoThrottle must not learn from it (``autothrottle_dont_adjust_delay``)."""
    if meta.get("autothrottle_dont_adjust_delay") is True:
        return None
    latency = meta.get("download_latency")
    ok = isinstance(latency, (int, float)) and not isinstance(latency, bool)
    return float(latency) if ok and 0 <= latency < math.inf else None


def _crawl_delay_line(body: str) -> str:
    """The value of the first Crawl-delay line of a robots.txt."""
    for line in body.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "crawl-delay":
            return value.split("#")[0]
    return ""


def _clock(when: float | None) -> str:
    return "-" if when is None else time.strftime("%H:%M:%S", time.localtime(when))
