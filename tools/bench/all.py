"""``all``: every benchmark at default sizes, then the JSON, the Markdown tables and the plot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ._cli import common
from ._harness import peak_rss, reset_peak_rss, write_json
from ._render import DOCS_BENCH, DOCS_MD, SECTIONS, write_markdown, write_plot


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every benchmark at default sizes; then the JSON, the Markdown tables and the plot."""
    parser: argparse.ArgumentParser = args.parser
    sections: dict[str, Any] = {}
    for name in SECTIONS:
        argv = [name, "--seed", str(args.seed), "--reps", str(args.reps)]
        if args.large and name != "fingerprint":
            argv.append("--large")
        sub = parser.parse_args(argv)
        reset_peak_rss()
        result = sub.func(sub)
        result["argv"] = argv
        print(f"peak RSS of {name}: {peak_rss() / 2**20:.0f} MiB\n", flush=True)
        sections[name] = result
    payload = {
        "command": "all",
        "argv": ["-m", "tools.bench", *args.argv],
        "machine": args.machine,
        "sections": sections,
    }
    payload["extra"] = [json.loads(p.read_text()) for p in args.extra]
    write_json(args.out or DOCS_BENCH / "all.json", payload)
    if not args.no_docs:
        plot = write_plot(payload, DOCS_BENCH / "scaling.png")
        write_markdown(payload, args.markdown, plot)
    return payload


def add_arguments(al: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench all``."""
    common(al)
    al.add_argument("--large", action="store_true", help="add the 10M sizes everywhere")
    al.add_argument("--markdown", type=Path, default=DOCS_MD,
                    help="page whose generated block is rewritten (default %(default)s)")
    al.add_argument("--extra", type=Path, nargs="*", default=[],
                    help="result files of separate single sub-command runs (e.g. with --large) "
                         "to render after the tables of this run")
    al.add_argument("--no-docs", action="store_true",
                    help="write only the JSON, not the Markdown tables and the plot")
    al.set_defaults(out=None)
