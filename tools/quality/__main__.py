"""The quality command line: ``python -m tools.quality [options]`` (see --help)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from .. import _corpus
from .exact import evaluate_exact
from .hamming import CURRENT_DEFAULT, run_simhash
from .similarity import THRESHOLDS, evaluate_similarity, shingle_matrix, similar_pairs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags; see --help."""
    parts = (sys.modules[__package__].__doc__ or "").split("\n\n")
    ap = argparse.ArgumentParser(
        prog="python -m tools.quality",
        description="\n\n".join(parts[:6]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--max-docs",
        type=int,
        default=6000,
        help="documents kept at most; man pages fill up to it (default 6000)",
    )
    ap.add_argument(
        "--sources",
        default=",".join(_corpus.SOURCES),
        help=f"comma-separated subset of {','.join(_corpus.SOURCES)} (default: all)",
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the man-page subsample and of the IDF train/test split "
        "(default 0); not a hash seed",
    )
    ap.add_argument(
        "--min-tokens", type=int, default=20, help="drop documents with fewer tokens (default 20)"
    )
    ap.add_argument(
        "--hash-seeds",
        type=int,
        default=5,
        help="score every simstore pipeline (and the similarity mode, and datasketch's "
        "MinHash) under hash seeds 0..N-1 to show how much of a difference is luck "
        "(default 5; 1 = off); seeds are measured, never chosen",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed fingerprinting runs per simstore pipeline after one warm-up; "
        "the median is reported (default 3)",
    )
    ap.add_argument(
        "--keep-exact-duplicates",
        action="store_true",
        help="keep documents whose token sequence repeats an earlier one (dropped by default: "
        "they sit at Hamming 0 and inflate every score); for comparison with evaluations "
        "that keep them",
    )
    ap.add_argument(
        "--part",
        choices=("all", "simhash", "similarity", "exact"),
        default="all",
        help="simhash: the Hamming <= k evaluation only; similarity: simstore.find_similar "
        "against datasketch MinHashLSH and the default simhash pipeline only; exact: "
        "find_similar with texts (exact Jaccard) against the sketch rule and datasketch, "
        "with seconds (not part of all) (default all)",
    )
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the peers (the PyPI simhash baseline, datasketch MinHashLSH)",
    )
    ap.add_argument("--no-idf", action="store_true", help="skip the held-out IDF experiment")
    ap.add_argument("--json", metavar="PATH", help="write every number to PATH")
    args = ap.parse_args(argv)
    args.sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = set(args.sources) - set(_corpus.SOURCES)
    if unknown:
        ap.error(f"unknown source(s) {sorted(unknown)}; choose from {', '.join(_corpus.SOURCES)}")
    if args.max_docs < 2 or args.hash_seeds < 1 or args.repeat < 1:
        ap.error("--max-docs must be >= 2, --hash-seeds and --repeat >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the evaluation; print tables; optionally write JSON."""
    args = parse_args(argv)
    t_start = time.perf_counter()
    load_start, date = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S %z")

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    corpus = _corpus.load(
        args.sources, args.max_docs, args.seed, args.min_tokens, args.keep_exact_duplicates
    )
    n = len(corpus.texts)
    nbytes = sum(len(t.encode("utf-8")) for t in corpus.texts)
    print_corpus(corpus, nbytes)
    if n < 2:
        print("error: fewer than 2 documents found; nothing to evaluate", file=sys.stderr)
        return 1

    x, shingle_names = shingle_matrix(corpus.tokens)
    truth, angles = similar_pairs(x, min(THRESHOLDS))
    positives = {str(t): int((truth.jac >= t).sum()) for t in THRESHOLDS}
    print(
        f"truth: {n * (n - 1) // 2} pairs, {x.shape[1]} distinct 3-shingles; pairs with "
        + ", ".join(f"J>={t}: {c}" for t, c in positives.items())
    )
    log("ground truth done")

    report: dict[str, Any] = {
        "command": " ".join(
            ["python", "-m", "tools.quality"] + (argv if argv is not None else sys.argv[1:])
        ),
        "date": date,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "numpy": np.__version__,
        },
        "corpus": {
            "documents": n,
            "bytes": nbytes,
            "tokens": sum(len(t) for t in corpus.tokens),
            "distinct_3_shingles": int(x.shape[1]),
            "sources": corpus.stats,
            "notes": corpus.notes,
            "max_docs": args.max_docs,
            "seed": args.seed,
            "min_tokens": args.min_tokens,
        },
        "thresholds": list(THRESHOLDS),
        "positives": positives,
    }
    if args.part == "exact":
        report["exact"] = evaluate_exact(corpus.texts, truth, (x, shingle_names), nbytes,
                                         args.hash_seeds, not args.no_baseline, log)
    else:
        report.update(run_simhash(corpus, truth, angles, (x, shingle_names), nbytes, args, log))
    if args.part in ("all", "similarity"):
        default = {"name": CURRENT_DEFAULT, **report["pipelines"][CURRENT_DEFAULT]}
        report["similarity"] = evaluate_similarity(
            corpus.texts,
            truth,
            (x, shingle_names),
            default,
            nbytes,
            args.hash_seeds,
            not args.no_baseline,
            log,
        )
    report["seconds_total"] = round(time.perf_counter() - t_start, 1)
    report["load_average_1_5_15"] = {"start": load_start, "end": os.getloadavg()}
    log("finished")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


def print_corpus(corpus: _corpus.Corpus, nbytes: int) -> None:
    """Notes, size and per-source counts of the corpus."""
    for note in corpus.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(
        f"corpus: {len(corpus.texts)} documents, {nbytes / 1e6:.1f} MB, "
        f"{sum(len(t) for t in corpus.tokens)} tokens"
    )
    for src, st in corpus.stats.items():
        print(
            f"  {src:<10} found {st['found']:>6}  read {st['read']:>5}  short {st['short']:>4}"
            f"  exact-dup {st['duplicate']:>4}  unreadable {st['unreadable']:>3}"
            f"  kept {st['kept']:>5}"
        )



if __name__ == "__main__":
    raise SystemExit(main())
