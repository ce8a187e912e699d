"""The crawl command line: ``python -m tools.crawl site|spider [options]``; each has --help."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence

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
    return parser


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
