"""The command line: ``python -m tools.bench COMMAND [options]``; each command has --help."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._harness import DEFAULT_WORKDIR, machine_info, peak_rss, reset_peak_rss, write_json
from ._peers import DEFAULT_PYBIND_DIR
from ._render import DOCS_MD
from .ab import cmd_ab
from .abq import add_parser as add_abq_parser
from .all import cmd_all
from .corpus import add_corpus_options, cmd_corpus
from .crawl import add_crawl_options, cmd_crawl
from .crawl_frontier import add_crawl_frontier_options, cmd_crawl_frontier
from .doclen import add_parser as add_doclen_parser
from .exact_store import add_parser as add_exact_store_parser
from .expire import add_parser as add_expire_parser
from .find_all import cmd_find_all
from .fingerprint import cmd_fingerprint
from .load import cmd_load
from .memlimit import add_parser as add_memlimit_parser
from .probe_ab import add_parser as add_probe_ab_parser
from .query import cmd_query
from .readers import add_parser as add_readers_parser
from .similarity import cmd_similarity
from .spark import add_parser as add_spark_parser
from .spark_cluster import add_parser as add_spark_cluster_parser
from .text import cmd_text
from .writes import add_parser as add_writes_parser

DESCRIPTION = "simstore benchmarks against peer libraries, measured in one process run."


def _positive(text: str) -> int:
    v = int(text.replace("_", ""))
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a valid count, must be > 0")
    return v


def _reps(text: str) -> int:
    v = int(text)
    if v < 3:
        raise argparse.ArgumentTypeError(f"{text} is not a valid repetition count, must be >= 3")
    return v


def _pair(kind: type, zero: bool = False) -> Any:
    """A parser of "LO,HI" (0 < LO <= HI; with zero, 0 <= LO) into a tuple of two kind."""
    def parse(text: str) -> tuple[Any, Any]:
        try:
            lo, hi = (kind(v.replace("_", "")) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a valid LO,HI pair") from None
        if not (0 <= lo if zero else 0 < lo) or lo > hi:
            raise argparse.ArgumentTypeError(
                f"{text} is not a valid range, must be {'0 <=' if zero else '0 <'} LO <= HI")
        return lo, hi
    return parse


def _sizes(text: str) -> list[int]:
    return [_positive(s) for s in text.split(",") if s]


def sized(sp: argparse.ArgumentParser, default: list[int], what: str) -> None:
    """The --sizes / --large / --workdir options shared by the size-driven sub-commands."""
    shown = ",".join(str(v) for v in default)
    sp.add_argument("--sizes", type=_sizes, default=default,
                    help=f"{what}, comma-separated (default {shown})")
    sp.add_argument("--large", action="store_true", help="also N = 10,000,000")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where scratch stores go (default %(default)s)")


def common(sp: argparse.ArgumentParser) -> None:
    """The --seed / --reps / --out options of every benchmark."""
    sp.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    sp.add_argument("--reps", type=_reps, default=3,
                    help="timed repetitions after one warm-up, >= 3 (default %(default)s)")
    sp.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _module_command(sub: Any, name: str, help_text: str, cmd: Any, add_options: Any) -> None:
    """A sub-command described by its module's docstring, its options from add_options."""
    p = sub.add_parser(name, help=help_text, description=sys.modules[cmd.__module__].__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p)
    p.set_defaults(func=cmd)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one sub-parser per benchmark."""
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description=DESCRIPTION,
        epilog="Each sub-command has --help. Results: Median / P90 / P99 / Max, never the mean.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fingerprint", help="text -> fingerprint throughput (MB/s, one thread)",
                       description=cmd_fingerprint.__doc__)
    common(f)
    f.add_argument("--docs", type=_positive, default=3000,
                   help="5 KB documents for simstore (default %(default)s)")
    f.add_argument("--doc-bytes", type=_positive, default=5000,
                   help="document size cap in UTF-8 bytes (default %(default)s)")
    f.add_argument("--peer-docs", type=_positive, default=200,
                   help="documents given to the PyPI simhash peer (default %(default)s)")
    f.add_argument("--reference-docs", type=_positive, default=40,
                   help="documents given to the pure-Python reference (default %(default)s)")
    f.set_defaults(func=cmd_fingerprint)

    tx = sub.add_parser("text", help="fingerprints, signatures of mixed-script text, 1-2 threads",
                        description=cmd_text.__doc__)
    common(tx)
    tx.add_argument("--docs", type=_positive, default=3000,
                    help="documents of 2-20 KB (default %(default)s)")
    tx.add_argument("--translated", type=float, default=0.67,
                    help="share of documents cut from gettext translations, the rest English "
                         "(default %(default)s)")
    tx.add_argument("--peer-docs", type=_positive, default=300,
                    help="documents per script given to the peers (default %(default)s)")
    tx.set_defaults(func=cmd_text)

    q = sub.add_parser("query", help="single-query latency (us) vs SimhashIndex, faiss, scans",
                       description=cmd_query.__doc__)
    common(q)
    sized(q, [100_000, 1_000_000], "store sizes N")
    q.add_argument("--ks", type=_sizes, default=[3, 5, 6, 8],
                   help="k values, one store planned per k (default 3,5,6,8; 5: store default)")
    q.add_argument("--lsh-max", type=int, default=100_000,
                   help="largest N given to datasketch MinHashLSH (default %(default)s)")
    q.add_argument("--queries", type=_positive, default=2000,
                   help="queries per repetition (default %(default)s)")
    q.add_argument("--scan-queries", type=_positive, default=100,
                   help="queries per repetition for the brute-force scans, and checked "
                        "against them for faiss (default %(default)s)")
    q.add_argument("--simhash-index-max", type=int, default=1_000_000,
                   help="cap on the random fps put in simhash.SimhashIndex, 0 = skip it "
                        "(default %(default)s)")
    q.set_defaults(func=cmd_query)

    ld = sub.add_parser("load", help="bulk load seconds + peak RSS; durable adds/s",
                        description=cmd_load.__doc__)
    common(ld)
    sized(ld, [1_000_000], "bulk load sizes N")
    ld.add_argument("--k", type=_positive, default=3, help="store k (default %(default)s)")
    ld.add_argument("--add-store-size", type=_positive, default=1_000_000,
                    help="fps in the store the adds go into (default %(default)s)")
    ld.add_argument("--add-batch", type=_positive, default=1000,
                    help="adds per commit (default %(default)s)")
    ld.add_argument("--add-batches", type=_positive, default=10,
                    help="commits per repetition (default %(default)s)")
    ld.set_defaults(func=cmd_load)

    fa = sub.add_parser("find-all", help="all pairs within k: simstore vs simhash-pybind, numpy",
                        description=cmd_find_all.__doc__)
    common(fa)
    sized(fa, [100_000, 1_000_000], "random-fp sizes N")
    fa.add_argument("--k", type=_positive, default=3, help="distance (default %(default)s)")
    fa.add_argument("--planted", type=int, default=1000,
                    help="near copies planted in each random case (default %(default)s)")
    fa.add_argument("--clustered", type=int, default=40_000,
                    help="size of the clustered case, 0 = none (default %(default)s)")
    fa.add_argument("--shared-bits", type=_positive, default=40,
                    help="top bits all clustered fps share (default %(default)s)")
    fa.add_argument("--pybind-dir", type=Path, default=DEFAULT_PYBIND_DIR,
                    help="where simhash-pybind is installed aside (default %(default)s)")
    fa.add_argument("--pybind-blocks", type=_positive, default=6,
                    help="simhash-pybind number_of_blocks, > k (default %(default)s)")
    fa.add_argument("--numpy-max-candidates", type=_positive, default=200_000_000,
                    help="skip the numpy block-permutation above this many candidate pairs "
                         "(default %(default)s)")
    fa.add_argument("--brute-max", type=_positive, default=50_000,
                    help="largest n for numpy brute force (default %(default)s)")
    fa.set_defaults(func=cmd_find_all)

    si = sub.add_parser("similarity", help="Jaccard signatures MB/s, similarity store, "
                                           "find_similar vs datasketch",
                        description=sys.modules[cmd_similarity.__module__].__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    common(si)
    si.add_argument("--docs", type=_positive, default=3000,
                    help="~5 KB English documents for the signature MB/s (default %(default)s)")
    si.add_argument("--doc-bytes", type=_positive, default=5000,
                    help="document size cap in UTF-8 bytes (default %(default)s)")
    si.add_argument("--peer-docs", type=_positive, default=500,
                    help="documents given to datasketch MinHash (default %(default)s)")
    si.add_argument("--n", type=_positive, default=1_000_000,
                    help="synthetic documents in the store and find_similar (default %(default)s)")
    si.add_argument("--features", type=_pair(int), default=(300, 1000),
                    help="LO,HI distinct feature hashes per synthetic document "
                         "(default 300,1000)")
    si.add_argument("--planted", type=int, default=10_000,
                    help="near-copy pairs among the N docs, true Jaccard 0.80..0.98, at most "
                         "N/4 (default %(default)s)")
    si.add_argument("--queries", type=_positive, default=2000,
                    help="similar() queries, each a near copy of a stored doc "
                         "(default %(default)s)")
    si.add_argument("--query-jaccard", type=_pair(float), default=(0.93, 0.98),
                    help="LO,HI true Jaccard of a query and its stored doc (default 0.93,0.98)")
    si.add_argument("--adds", type=_positive, default=2000,
                    help="timed add_if_new calls of new documents (default %(default)s)")
    si.add_argument("--lsh-max", type=int, default=100_000,
                    help="documents given to datasketch MinHashLSH, 0 = skip it; slow and "
                         "memory hungry (default %(default)s)")
    si.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where the scratch store goes (default %(default)s)")
    si.set_defaults(func=cmd_similarity)

    _module_command(sub, "corpus", "simstore-cli dedup-corpus end to end on a >= 1 GB JSONL "
                    "of real text (docs/s, MB/s, peak RSS)", cmd_corpus, add_corpus_options)
    _module_command(sub, "crawl", "Scrapy pages/s with and without NearDuplicateMiddleware on "
                    "a local site; peak memory", cmd_crawl, add_crawl_options)
    _module_command(sub, "crawl-frontier", "Scrapy pages/s of 1, 2, 4 processes sharing a "
                    "store's crawl frontier, scrapy-redis; request_seen vs RFPDupeFilter",
                    cmd_crawl_frontier, add_crawl_frontier_options)

    al = sub.add_parser("all", help="everything at default sizes; JSON, Markdown tables, plot",
                        description=cmd_all.__doc__)
    common(al)
    al.add_argument("--large", action="store_true", help="add the 10M sizes everywhere")
    al.add_argument("--markdown", type=Path, default=DOCS_MD,
                    help="page whose generated block is rewritten (default %(default)s)")
    al.add_argument("--extra", type=Path, nargs="*", default=[],
                    help="result files of separate single sub-command runs (e.g. with --large) "
                         "to render after the tables of this run")
    al.add_argument("--no-docs", action="store_true",
                    help="write only the JSON, not the Markdown tables and the plot")
    al.set_defaults(func=cmd_all, out=None)

    ab = sub.add_parser("ab", help="two revisions in one run: query, load, find_all; head/base",
                        description=sys.modules[cmd_ab.__module__].__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ab.add_argument("--base", required=True, help="base revision (any git commit-ish)")
    ab.add_argument("--head", default=None,
                    help="head revision (default: this checkout's working tree, as it is)")
    ab.add_argument("--ks", type=_sizes, default=[3, 5],
                    help="k values, one store each (default 3,5)")
    ab.add_argument("--n", type=_positive, default=200_000,
                    help="random fingerprints per store and for find_all (default %(default)s)")
    ab.add_argument("--queries", type=_positive, default=1000,
                    help="timed queries per store, each with a planted neighbour "
                         "(default %(default)s)")
    ab.add_argument("--repeat", type=_positive, default=5,
                    help="rounds, each one process per side, order alternating "
                         "(default %(default)s)")
    ab.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    ab.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    ab.set_defaults(func=cmd_ab)
    add_abq_parser(sub, _positive, _sizes)
    add_probe_ab_parser(sub, _positive)

    add_spark_parser(sub, common, _positive, _sizes, DEFAULT_WORKDIR)
    add_spark_cluster_parser(sub, common, _positive, _sizes, _pair, DEFAULT_WORKDIR)
    add_readers_parser(sub)
    add_memlimit_parser(sub)
    add_writes_parser(sub)
    add_exact_store_parser(sub)
    add_expire_parser(sub)
    add_doclen_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark sub-command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    args.parser = parser  # all runs the other sub-commands through it
    args.machine = machine_info()  # before the run: the commit whose code gets imported
    if args.command != "all":
        reset_peak_rss()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = args.func(args)
    if args.command != "all":
        result["argv"] = argv
        result["machine"] = args.machine
        print(f"peak RSS: {peak_rss() / 2**20:.0f} MiB", flush=True)
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
