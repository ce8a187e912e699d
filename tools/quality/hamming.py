"""The Hamming <= k evaluation: simstore's fingerprint pipelines (and peers) against the truth.

Every simstore pipeline (ngram 1..5 x weighting uniform/tf/logtf) scored at k = 0..12,
beside the PyPI ``simhash`` package and the ideal 64-bit simhash of the 3-shingle sets;
each pipeline again under several murmur3 seeds to show the noise; and a held-out IDF
experiment. The tables printed and the JSON written by ``python -m tools.quality``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import simstore
from simstore import FingerprintConfig, IdfTable

from .. import _corpus
from .._util import popcount
from .similarity import (
    KS,
    THRESHOLDS,
    TRUTH_NGRAM,
    Truth,
    clean,
    ideal_score,
    num,
    pair_jaccard,
    score,
    shingle_matrix,
)

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
