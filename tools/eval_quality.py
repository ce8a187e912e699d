"""How well does "Hamming <= k" find "Jaccard >= t"? Exact all-pairs evaluation of simstore.

Corpus: real text found on this Debian machine, written by nobody on the team
(see tools/_corpus.py): /usr/share/doc/*/copyright, /usr/share/common-licenses/*,
LICENSE/COPYING/NOTICE files in the *.dist-info of the site-packages under
/root/.pyenv and /usr/lib/python3*, and a seeded subsample of
/usr/share/man/man1/*.gz (roff stripped crudely) filling up to --max-docs.
Documents with fewer than --min-tokens tokens and exact duplicates (identical
token sequences) are dropped. Missing sources are reported and skipped.

Truth: Jaccard similarity of word-3-shingle sets (tokens of simstore.tokens),
computed for ALL pairs as a sparse product X @ X.T of the doc x shingle matrix.

Predictor: Hamming distance <= k (k = 0..12) of 64-bit fingerprints from each
pipeline: simstore ngram 1..5 x weighting uniform/tf/logtf, the PyPI `simhash`
package over word 3-shingles (skipped with a warning if it does not import),
and simstore with an IDF table learnt on a held-out half of the corpus (scored
on the other half only, beside the same pipeline without IDF on that half).
Also: each simstore pipeline under several murmur3 seeds (to show the noise),
and the expected score of an ideal 64-bit simhash of the 3-shingle sets
(Hamming ~ Binomial(64, theta/pi)), the ceiling of the estimator.

Similarity mode (--part similarity, also in the default --part all; see
tools/_quality.py): simstore.find_similar at Jaccard thresholds 0.95, 0.9, 0.8
per sketch size (256..640 bits, 16 bands x 8 rows), with the rule "estimate >= t"
and "estimate >= t + 0.005", against datasketch MinHashLSH (128 perms, its own
candidates, MinHash.jaccard >= t) and the default simhash pipeline's best k,
over hash seeds 0..N-1; precision, recall, F1, stage-1 recall, candidates per
document, bytes per document, MB/s; and the sketch size the numbers support.

Exact rule (--part exact, its own run; see tools/_exact_quality.py): find_similar with
the texts (candidates widened near t, exact Jaccard decides) against the sketch rule and
datasketch MinHashLSH in the same run: precision, recall, candidate recall, seconds.

Run:  .venv/bin/python tools/eval_quality.py --json /tmp/quality.json
(needs scipy, from the [bench] extra, and datasketch for the peer; results in
docs/quality.md)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _corpus  # noqa: E402  (sibling helper, found through the path set above)
from _exact_quality import evaluate_exact  # noqa: E402  (sibling helper, as above)
from _quality import (  # noqa: E402  (sibling helper, as above)
    KS,
    THRESHOLDS,
    TRUTH_NGRAM,
    Truth,
    clean,
    evaluate_similarity,
    ideal_score,
    num,
    pair_jaccard,
    score,
    shingle_matrix,
    similar_pairs,
)
from _util import popcount  # noqa: E402  (sibling helper, as above)

import simstore  # noqa: E402
from simstore import FingerprintConfig, IdfTable  # noqa: E402

NGRAMS = (1, 2, 3, 4, 5)
WEIGHTINGS = ("uniform", "tf", "logtf")
CURRENT_DEFAULT = "simstore n=3 uniform"


# ---------------------------------------------------------------- fingerprints
def baseline_fingerprints(texts: list[str]) -> np.ndarray | None:
    """PyPI simhash over word 3-shingles (occurrences counted), or None if absent."""
    try:
        from simhash import Simhash
    except ImportError as exc:
        warnings.warn(
            f"baseline skipped: the PyPI 'simhash' package does not import ({exc})", stacklevel=2
        )
        return None
    out = np.empty(len(texts), dtype=np.uint64)
    for i, text in enumerate(texts):
        out[i] = Simhash(simstore.features(text, ngram=TRUTH_NGRAM), f=64).value
    return out


def timed(fn: Any, repeat: int) -> tuple[np.ndarray, list[float]]:
    """Result of fn() and the seconds of each run (first run is a warm-up if repeat > 1)."""
    result, times = None, []
    for _ in range(max(1, repeat) + (1 if repeat > 1 else 0)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, times[1:] if repeat > 1 else times


def idf_table(x: Any, train: np.ndarray, shingle_names: list[str], seed: int = 0) -> IdfTable:
    """Smoothed IDF learnt on the train documents: 1 + ln((N+1)/(df+1)).

    Only shingles seen in two or more train documents are stored; every other
    shingle gets the df = 1 weight (unseen and seen-once are alike).
    """
    df = np.asarray(x[train].sum(axis=0)).ravel()
    n = len(train)
    weights = 1.0 + np.log((n + 1) / (df + 1.0))
    keep = np.flatnonzero(df >= 2)
    table = {shingle_names[s]: float(weights[s]) for s in keep}
    return IdfTable(table, default=1.0 + math.log((n + 1) / 2.0), seed=seed)


# ---------------------------------------------------------------- seeds and errors
def seed_spread(
    texts: list[str],
    cfg: FingerprintConfig,
    first: dict[str, Any],
    truth: Truth,
    seeds: int,
    idf_for: Callable[[int], IdfTable] | None = None,
) -> dict[str, Any]:
    """Scores over murmur3 seeds 0..seeds-1: how much of a difference is luck of the hash.

    One seed is one draw of the hash; on a clustered corpus one draw moves whole clusters
    together, so single-seed F1 differences of a few hundredths mean little. For each
    threshold: the seed-mean F1 per k, the k maximizing it, and mean/sd of F1 at that k.
    Seeds are measured here, never chosen: simstore keeps seed 0.
    """
    curves = [first]
    for seed in range(1, seeds):
        seeded = FingerprintConfig(cfg.ngram, cfg.weighting, seed)
        idf = idf_for(seed) if idf_for else None
        curves.append(score(simstore.fingerprints(texts, seeded, idf=idf), truth))
    predicted = np.array([c["predicted"] for c in curves], dtype=np.float64)
    out: dict[str, Any] = {"seeds": seeds, "predicted_mean": clean(predicted.mean(axis=0))}
    for t in THRESHOLDS:
        f1 = np.array([c["by_threshold"][str(t)]["f1"] for c in curves], dtype=np.float64)
        k = int(np.argmax(f1.mean(axis=0)))
        at_k = {
            f"{m}_by_seed": [c["by_threshold"][str(t)][m][k] for c in curves]
            for m in ("precision", "recall")
        }
        out[str(t)] = {
            "k": k,
            "f1_mean": num(f1[:, k].mean()),
            "f1_sd": num(f1[:, k].std()),
            "f1_by_seed": clean(f1[:, k]),
            **at_k,
            "f1_mean_by_k": clean(f1.mean(axis=0)),
        }
    return out


def error_examples(
    fps: np.ndarray, truth: Truth, x: Any, names: list[str], t: float, k: int, most: int = 8
) -> dict[str, list[dict[str, Any]]]:
    """A few false negatives (J >= t, Hamming > k) and false positives (Hamming <= k, J < t)."""
    d = popcount(fps[truth.i] ^ fps[truth.j])
    pos = truth.jac >= t
    fn = np.flatnonzero(pos & (d > k))
    fn = fn[np.argsort(-d[fn], kind="stable")][:most]
    false_neg = [
        {
            "a": names[truth.i[e]],
            "b": names[truth.j[e]],
            "jaccard": round(float(truth.jac[e]), 4),
            "hamming": int(d[e]),
        }
        for e in fn
    ]
    positives = set(zip(truth.i[pos].tolist(), truth.j[pos].tolist(), strict=True))
    false_pos = []
    for a in range(len(fps)):
        near = np.flatnonzero(popcount(fps[a + 1 :] ^ fps[a]) <= k) + a + 1
        for b in near.tolist():
            if (a, b) not in positives:
                false_pos.append(
                    {
                        "a": names[a],
                        "b": names[b],
                        "jaccard": round(pair_jaccard(x, a, b), 4),
                        "hamming": int(popcount(fps[a] ^ fps[b])),
                    }
                )
        if len(false_pos) >= most:
            break
    return {"false_negatives": false_neg, "false_positives": false_pos[:most]}


# ---------------------------------------------------------------- report
NAME_WIDTH = 34


def summary_table(results: dict[str, dict[str, Any]]) -> str:
    """One line per pipeline: MB/s, best k with P/R/F1 per threshold, seed-mean F1 +- sd."""
    head = f"{'pipeline':<{NAME_WIDTH}}{'MB/s':>6}" + "".join(
        f" | J>={t:<4} k   P     R     F1  " for t in THRESHOLDS
    )
    seeded = any("seeds" in r for r in results.values())
    if seeded:
        head += " |" + "".join(f" J>={t:<4} k  F1 mean+-sd |" for t in THRESHOLDS)
    lines = [head, "-" * len(head)]
    for name, res in results.items():
        mbs = res.get("mb_per_s")
        row = f"{name:<{NAME_WIDTH}}" + (f"{mbs:>6.1f}" if mbs else f"{'-':>6}")
        for t in THRESHOLDS:
            b = res["score"]["by_threshold"][str(t)]["best"]
            row += f" | {b['k']:>9} {_fmt(b['precision'])} {_fmt(b['recall'])} {_fmt(b['f1'])}"
        if seeded:
            row += " |"
            for t in THRESHOLDS:
                sd = res.get("seeds", {}).get(str(t))
                row += (
                    f" {sd['k']:>9} {sd['f1_mean']:.3f}+-{sd['f1_sd']:.3f} |"
                    if sd
                    else f" {'':>9} {'':>11} |"
                )
        lines.append(row)
    return "\n".join(lines)


def k_table(name: str, res: dict[str, Any]) -> str:
    """Full k = 0..12 table of one pipeline (pred: pairs with Hamming <= k)."""
    sc = res["score"]
    head = f"{'k':>2} {'pred':>7}" + "".join(f" | J>={t:<4} P     R     F1" for t in THRESHOLDS)
    lines = [f"{name}: every k", head, "-" * len(head)]
    for k in KS:
        row = f"{k:>2} {sc['predicted'][k]:>7.0f}"
        for t in THRESHOLDS:
            bt = sc["by_threshold"][str(t)]
            row += f" | {_fmt(bt['precision'][k]):>10} {_fmt(bt['recall'][k])} {_fmt(bt['f1'][k])}"
        lines.append(row)
    return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "  -  " if v is None else f"{v:.3f}"


def _rank(res: dict[str, Any]) -> float:
    """Mean of the best F1 at J >= 0.95 and J >= 0.9 (seed-mean when measured)."""
    ts = ("0.95", "0.9")
    if "seeds" in res:
        return statistics.fmean(res["seeds"][t]["f1_mean"] or 0.0 for t in ts)
    return statistics.fmean(res["score"]["by_threshold"][t]["best"]["f1"] or 0.0 for t in ts)


# ---------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags; see --help."""
    parts = (__doc__ or "").split("\n\n")
    ap = argparse.ArgumentParser(
        prog="eval_quality.py",
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
            ["python", "tools/eval_quality.py"] + (argv if argv is not None else sys.argv[1:])
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


def run_simhash(
    corpus: _corpus.Corpus,
    truth: Truth,
    angles: np.ndarray,
    matrix3: tuple[Any, list[str]],
    nbytes: int,
    args: argparse.Namespace,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The Hamming <= k evaluation (only the default pipeline for --part similarity)."""
    only_default = args.part == "similarity"
    results: dict[str, dict[str, Any]] = {}
    fps_of: dict[str, np.ndarray] = {}
    for ngram in NGRAMS:
        for weighting in WEIGHTINGS:
            name = f"simstore n={ngram} {weighting}"
            if only_default and name != CURRENT_DEFAULT:
                continue
            cfg = FingerprintConfig(ngram=ngram, weighting=weighting)
            fps, times = timed(lambda c=cfg: simstore.fingerprints(corpus.texts, c), args.repeat)
            fps_of[name] = fps
            res: dict[str, Any] = {
                "ngram": ngram,
                "weighting": weighting,
                "seconds": times,
                "mb_per_s": nbytes / 1e6 / statistics.median(times),
                "score": score(fps, truth),
            }
            if args.hash_seeds > 1:
                res["seeds"] = seed_spread(corpus.texts, cfg, res["score"], truth, args.hash_seeds)
            results[name] = res
        log(f"simstore ngram={ngram} done")
    out: dict[str, Any] = {"ks": list(KS), "pipelines": results}
    if only_default:
        return out

    if not args.no_baseline:
        base, times = timed(lambda: baseline_fingerprints(corpus.texts), 1)
        if base is not None:
            name = "pypi simhash n=3 tf (baseline)"
            fps_of[name] = base
            results[name] = {
                "seconds": times,
                "mb_per_s": nbytes / 1e6 / times[0],
                "score": score(base, truth),
            }
        log("baseline done")
    results["ideal 64-bit simhash n=3 sets"] = {
        "score": ideal_score(truth, angles),
        "model": ideal_score.__doc__,
    }

    best_name = max(
        (k for k in results if k.startswith("simstore")), key=lambda k: _rank(results[k])
    )
    idf_results: dict[str, dict[str, Any]] = {}
    if not args.no_idf and len(corpus.texts) >= 4:
        idf_results = run_idf(corpus, truth, matrix3, best_name, args)
        log("IDF experiment done")
    examples = {}
    for t in (0.95, 0.9):
        k = results[best_name]["score"]["by_threshold"][str(t)]["best"]["k"]
        examples[str(t)] = {
            "k": k,
            **error_examples(fps_of[best_name], truth, matrix3[0], corpus.names, t, k),
        }

    print()
    print(
        "Best k per pipeline and threshold (predictor: Hamming <= k, k = 0..12; truth: "
        "word-3-shingle Jaccard >= t; all pairs)"
    )
    if args.hash_seeds > 1:
        print(
            f"right: k maximizing the mean F1 over murmur3 seeds 0..{args.hash_seeds - 1}, "
            "with that F1's mean +- sd"
        )
    print(summary_table(results))
    for name in dict.fromkeys([CURRENT_DEFAULT, best_name]):
        print()
        print(k_table(name, results[name]))
    if idf_results:
        print()
        print(
            "Held-out IDF: learnt on a seeded half of the corpus, scored on pairs within the "
            "other half only (both rows)"
        )
        print(summary_table(idf_results))
    print()
    print(f"best simstore pipeline (mean best F1 over J>=0.95 and J>=0.9): {best_name}")
    out.update(
        idf=idf_results,
        best_pipeline=best_name,
        error_examples={"pipeline": best_name, **examples},
    )
    return out


def run_idf(
    corpus: _corpus.Corpus,
    truth: Truth,
    matrix3: tuple[Any, list[str]],
    best_name: str,
    args: argparse.Namespace,
) -> dict[str, dict[str, Any]]:
    """IDF from a seeded random half; with and without IDF scored on the other half."""
    n = len(corpus.texts)
    train = np.sort(np.random.default_rng(args.seed).permutation(n)[: n // 2])
    test_mask = np.ones(n, dtype=bool)
    test_mask[train] = False
    test_truth = truth.within(test_mask)
    test_texts = [t for t, m in zip(corpus.texts, test_mask, strict=True) if m]
    test_bytes = sum(len(t.encode("utf-8")) for t in test_texts)
    matrices: dict[int, tuple[Any, list[str]]] = {TRUTH_NGRAM: matrix3}
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys([CURRENT_DEFAULT, "simstore n=3 tf", best_name]):
        ngram, weighting = (int(name.split()[1][2:]), name.split()[2])
        if ngram not in matrices:
            matrices[ngram] = shingle_matrix(corpus.tokens, ngram)
        xn, names = matrices[ngram]

        def idf_for(seed: int, xn: Any = xn, names: list[str] = names) -> IdfTable:
            return idf_table(xn, train, names, seed)

        cfg = FingerprintConfig(ngram=ngram, weighting=weighting)
        for label, make in ((f"{name} (test half)", None), (f"{name} +idf", idf_for)):
            idf = make(0) if make else None
            fps, times = timed(lambda c=cfg, w=idf: simstore.fingerprints(test_texts, c, idf=w), 1)
            res: dict[str, Any] = {
                "ngram": ngram,
                "weighting": weighting,
                "idf_entries": None if idf is None else len(idf.hashes),
                "mb_per_s": test_bytes / 1e6 / times[0],
                "score": score(fps, test_truth),
            }
            if args.hash_seeds > 1:
                res["seeds"] = seed_spread(
                    test_texts, cfg, res["score"], test_truth, args.hash_seeds, make
                )
            out[label] = res
    return out


if __name__ == "__main__":
    raise SystemExit(main())
