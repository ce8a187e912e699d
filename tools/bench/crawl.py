"""``crawl``: Scrapy crawls of a local site with and without simstore's NearDuplicateMiddleware.

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

from ..crawl.site import Site, serve
from ._harness import DEFAULT_WORKDIR, REPO, Report, Stats, load_average

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
    env = dict(os.environ, PYTHONPATH=str(REPO))
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Scrapy pages/s with and without NearDuplicateMiddleware on a local site; peak memory."""
    if args.reps < 3 or args.articles < 1:
        raise SystemExit("crawl: --reps must be >= 3 and --articles >= 1")
    rep = Report("crawl", {"articles": args.articles, "reps": args.reps, "seed": args.seed,
                           "page_kb": args.page_kb, "trap_cap": args.trap_cap})
    rep.note(f"load average before the runs: {load_average()}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-crawl-", dir=args.workdir) as tmp:
        rep.header()
        started = time.monotonic()
        for kb in args.page_kb:
            _overhead(args, rep, Path(tmp), kb)
        _traps(args, rep, Path(tmp))
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
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
