"""The command line: ``python -m tools.bench COMMAND [options]``; each command has --help.

A benchmark is a module of this package with a docstring (its first paragraph, after the
``name``:, is the command's help line), ``add_arguments(parser)`` and ``run(args) -> dict``
(the JSON result); :data:`COMMANDS` registers it with one line. The harness here does what
every command shares: warnings shown, peak RSS reset and printed, the argv and the machine
added to the result, the JSON written to ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

from ._harness import machine_info, peak_rss, reset_peak_rss, write_json

DESCRIPTION = "simstore benchmarks against peer libraries, measured in one process run."

# command -> module of tools.bench; one line registers a benchmark
COMMANDS: dict[str, str] = {
    "fingerprint": "fingerprint",
    "text": "text",
    "query": "query",
    "load": "load",
    "find-all": "find_all",
    "similarity": "similarity",
    "corpus": "corpus",
    "corpus-memory": "corpus_memory",
    "crawl": "crawl",
    "crawl-frontier": "crawl_frontier",
    "all": "all",
    "ab": "ab",
    "abq": "abq",
    "probe-ab": "probe_ab",
    "spark": "spark",
    "spark-cluster": "spark_cluster",
    "readers": "readers",
    "memlimit": "memlimit",
    "writes": "writes",
    "exact-store": "exact_store",
    "expire": "expire",
    "doclen": "doclen",
    "datatrove": "datatrove",
    "single": "single",
    "bulk-memory": "bulk_memory",
    "durability": "durability",
    "record-cost": "record_cost",
    "frontier-hosts": "frontier_hosts",
    "scheduler-cpu": "scheduler_cpu",
}


def summary(module: ModuleType) -> str:
    """A command's help line: its module docstring's first paragraph, without ``name``:."""
    first = " ".join((module.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "")
    name, sep, rest = first.partition(": ")
    return (rest if sep and " " not in name else first).rstrip(".")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one sub-parser per registered benchmark."""
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description=DESCRIPTION,
        epilog="Each sub-command has --help. Results: Median / P90 / P99 / Max, never the mean.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f".{module_name}", __package__)
        sp = sub.add_parser(name, help=summary(module), description=module.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sp)
        sp.set_defaults(func=module.run)
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
