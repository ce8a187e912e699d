"""The crawl command line: ``python -m tools.crawl site|spider|polite [options]``; each has
--help."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .._util import checkout_env
from .site import Site, serve


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per tool: ``site`` and ``spider``."""
    parser = argparse.ArgumentParser(prog="python -m tools.crawl",
                                     description=sys.modules[__package__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("site", help="serve the local test site on 127.0.0.1 until Ctrl-C",
                       description=sys.modules[Site.__module__].__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--articles", type=int, default=36, help="articles (default %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="RNG seed (default %(default)s)")
    p.add_argument("--no-trap", action="store_true", help="calendar of one year only")
    p.set_defaults(func=_site)
    p = sub.add_parser("spider", help="crawl a site with the test spider (scrapy runspider)",
                       description="Crawl from the start URLs with the spider of the crawl "
                       "tests, one JSON line per page to --record; its exit code.")
    p.add_argument("start", nargs="+", help="start URLs")
    p.add_argument("--record", default="pages.jsonl", help="one JSON line per page "
                   "(default %(default)s)")
    p.add_argument("--stats", default="", help="write the crawl's stats here as JSON")
    p.add_argument("--store", default=None,
                   help="crawl through NearDuplicateMiddleware with this store")
    p.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting (repeat for more)")
    p.set_defaults(func=_spider)
    _polite_parser(sub)
    _unreachable_parser(sub)
    return parser


def _unreachable_parser(sub: argparse._SubParsersAction) -> None:
    from . import unreachable

    p = sub.add_parser("unreachable", help="a host that gives no answer: how often plain "
                       "Scrapy and the Scheduler knock", description=unreachable.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=20, help="pages of the live host "
                   "(default %(default)s)")
    p.add_argument("--dead", type=int, default=40, help="URLs of the dead host "
                   "(default %(default)s)")
    p.add_argument("--mode", choices=unreachable.MODES, default="refuse",
                   help="the dead host refuses connections or never answers (default "
                   "%(default)s)")
    p.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting for both runs (repeat for more)")
    p.set_defaults(func=_unreachable)


def _unreachable(args: argparse.Namespace) -> int:
    import os

    from . import unreachable

    load = os.getloadavg()[0]
    rows = unreachable.run(args.pages, args.dead,
                           dict(s.split("=", 1) for s in args.settings), args.mode)
    print(json.dumps({"load_before": round(load, 2), "load_after":
                      round(os.getloadavg()[0], 2), "runs": rows}, indent=1))
    return 0


def _polite_parser(sub: argparse._SubParsersAction) -> None:
    from . import polite

    d = polite.Options()
    p = sub.add_parser("polite", help="a polite crawl of a local web of many hosts, measured",
                       description=polite.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--procs", type=int, default=d.procs, help="crawl processes (default "
                   "%(default)s)")
    p.add_argument("--hosts", type=int, default=d.hosts, help="hosts, 127.0.0.2 on "
                   "(default %(default)s)")
    p.add_argument("--pages", type=int, default=d.pages, help="pages per host (default "
                   "%(default)s)")
    p.add_argument("--delay", default=d.delay, help="robots.txt Crawl-delay, sent as given "
                   "(default %(default)s; try banana, 1e9, -1)")
    p.add_argument("--retry-after", type=float, default=d.retry_after,
                   help="seconds of Retry-After the limited hosts give (default %(default)s)")
    p.add_argument("--retry-as", choices=("seconds", "date"), default=d.retry_as,
                   help="Retry-After as seconds or as an HTTP date (default %(default)s)")
    p.add_argument("--limited", type=int, default=d.limited, help="hosts that answer "
                   "--limit-status when asked too fast (default %(default)s)")
    p.add_argument("--limit-status", type=int, choices=(429, 503), default=d.limit_status,
                   help="their answer (default %(default)s)")
    p.add_argument("--limit-gap", type=float, default=None,
                   help="the gap the limited hosts enforce, seconds (default: the crawl "
                   "delay; larger: even a polite crawler meets Retry-After)")
    p.add_argument("--scheduler", choices=polite.SCHEDULERS, default=d.scheduler,
                   help="the shared frontier (default %(default)s)")
    p.add_argument("--store", type=Path, default=None,
                   help="the simstore store (default: a new one in the work directory)")
    p.add_argument("--work", type=Path, default=None,
                   help="keep the processes' logs, records and stats here (default: a "
                   "temporary directory, removed)")
    p.add_argument("--kill-one", action="store_true",
                   help="SIGKILL one process when half the pages are fetched, start another")
    p.add_argument("--revisit", action="store_true", help="crawl with SIMSTORE_REVISIT="
                   "adaptive, then rounds of: wait, change 20%% of the pages (the same ones "
                   "each round; 5%% go 404/410 in the first), crawl again")
    p.add_argument("--revisit-rounds", type=int, default=d.revisit_rounds,
                   help="revisit rounds after the first crawl (default %(default)s)")
    p.add_argument("--revisit-min", type=float, default=d.revisit_min,
                   help="SIMSTORE_REVISIT_MIN and the wait between rounds, seconds (default: "
                   "2 x pages x delay + 10)")
    p.add_argument("--timeout", type=float, default=0.0, help="seconds a crawl may take "
                   "(default: 60 + 4 x pages x delay, at most 1800)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed (default %(default)s)")
    p.add_argument("--latency", type=float, default=d.latency, help="seconds each answer "
                   "takes at the hosts (default %(default)s); the figures then say how many "
                   "requests each host answered at once")
    p.add_argument("--gap", type=float, default=None, help="seconds the gaps are held "
                   "against (default: the Crawl-delay; e.g. a DOWNLOAD_DELAY set with -s)")
    p.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting for every process (repeat for more)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=_polite)


def _polite(args: argparse.Namespace) -> int:
    from . import polite
    from .politeness import render

    opts = polite.Options(
        procs=args.procs, hosts=args.hosts, pages=args.pages, delay=args.delay,
        retry_after=args.retry_after, limited=args.limited, limit_status=args.limit_status,
        retry_as=args.retry_as, limit_gap=args.limit_gap, scheduler=args.scheduler,
        store=args.store,
        kill_one=args.kill_one, revisit=args.revisit, revisit_rounds=args.revisit_rounds,
        revisit_min=args.revisit_min, timeout=args.timeout, seed=args.seed,
        latency=args.latency, gap=args.gap, settings=dict(s.split("=", 1) for s in args.settings))
    result = polite.run(opts, args.work)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    print(f"{opts.scheduler}: {opts.procs} processes, {opts.hosts} hosts x {opts.pages} pages, "
          f"delay {opts.delay}; load {result['load_before']} -> {result['load_after']}")
    for name in ["crawl"] + [k for k in result if k.startswith("revisit ")]:
        if name in result:
            print(f"-- {name}")
            print(render(result[name]))
            for p in result[name]["processes"]:
                print(f"  {p['agent']}: {p['end']}, exit {p['exit']}, finish "
                      f"{p.get('finish_reason', '-')}, retries given up "
                      f"{p.get('retry_max_reached', '-')}, errors {p.get('errors', '-')}")
    return 0


def _site(args: argparse.Namespace) -> int:
    with serve(Site(args.articles, args.seed, trap=not args.no_trap)) as (url, _):
        print(f"serving {url}/ (Ctrl-C stops)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


def _spider(args: argparse.Namespace) -> int:
    from .spider import MIDDLEWARE, command  # Scrapy only when a crawl runs

    settings = dict(s.split("=", 1) for s in args.settings)
    if args.store:
        settings |= {"SIMSTORE_PATH": args.store, "DOWNLOADER_MIDDLEWARES": MIDDLEWARE}
    cmd = command(args.start, args.record, args.stats, settings)
    return subprocess.run(cmd, env=checkout_env(), check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Run one crawl tool; returns its exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
