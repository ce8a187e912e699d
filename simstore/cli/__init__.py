"""simstore-cli: build, query, deduplicate, check and rebuild stores from the shell.

Every command is ``main([...])``-callable (the tests call it in-process).
Exit codes: 0 success, 1 failure (bad data, damaged store, ...), 2 usage error,
130 interrupted. Errors are one line on stderr saying what is wrong and what to do.

One module per concern: ``_parser`` (options, help, examples), ``_common``
(output, errors, argument types), ``_tsv`` (the TSV id codec), ``_admin``
(init, plan, stats, verify, rebuild, merge-levels, compact), ``_search`` (query, dedup,
export, fingerprint), ``_load`` (add, index, dedup-corpus, over
:mod:`simstore.corpus`), ``_spark`` (spark-dedup; pyspark imported when it runs).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..corpus import MissingDependencyError
from ..exceptions import SimstoreError
from ._common import PROG, CliError, Out, UsageError, warn_low_threshold
from ._parser import build_parser

__all__ = ["main", "build_parser"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run simstore-cli; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "sketch_bits", None):
        args.similarity = True
    warn_low_threshold(args)
    out = Out(as_json=bool(getattr(args, "json", False)),
              int_fps=bool(getattr(args, "int_fps", False)),
              path=getattr(args, "output", None) if args.command != "dedup-corpus" else None)
    ok = False
    try:
        out.open()  # -o FILE is checked (and its temporary made) before any work
        code = int(args.func(args, out))
        ok = code == 0
        return code
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{PROG} {args.command}: error: {parser.explain(args.command, exc)}",
              file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
    except (CliError, SimstoreError, MissingDependencyError, OSError) as exc:
        print(f"{PROG} {args.command}: error: {parser.explain(args.command, exc)}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        out.close(ok)
