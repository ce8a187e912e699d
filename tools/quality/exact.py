"""The exact rule (find_similar with texts) against brute-force exact Jaccard: recall and speed.

Per hash seed s (default config shape: 640 sketch bits, 16 bands x 8 rows, seed s):

- sketch only: ``signatures`` then ``find_similar(sigs, t)`` (the default path);
- exact: ``signatures_and_sets(texts, cfg)`` (the same signatures and the shingle sets in one
  pass over the text), then ``find_similar(sigs, t, texts=sets)`` (candidates widened near t,
  exact Jaccard decides); ``signatures`` + ``shingle_sets`` (two passes) also timed;
- datasketch MinHashLSH (128 perms, its own b x r for t) + ``MinHash.jaccard >= t``, from
  ``similarity.score_minhash`` in the same run (MinHash.bulk from the distinct utf-8
  shingles: tokenizing not counted, which favours it).

Precision is 1 by construction (checked); recall equals the candidates' recall. Every exact
value returned is compared with the truth's (the sparse-matrix Jaccard of the shingle strings):
they differ only on a 64-bit hash collision. Seconds are medians over the seeds, one core.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

import simstore
from simstore import FingerprintConfig
from simstore.search import exact

from .similarity import (
    THRESHOLDS,
    TRUTH_NGRAM,
    Truth,
    _codes,
    _true_codes,
    doc_shingles,
    num,
    prf,
    score_minhash,
    summarize,
)

SKETCH_BITS, BANDS, ROWS = 640, 16, 8


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def score_exact(texts: list[str], truth: Truth, seeds: int, log: Any) -> dict[str, Any]:
    """Per seed and t: P/R/F1 of the sketch rule and of the exact rule; their seconds."""
    n = len(texts)
    true = _true_codes(truth, n)
    truth_jac = dict(zip(_codes(truth.i, truth.j, n).tolist(), truth.jac.tolist(), strict=True))
    per_seed = []
    for seed in range(seeds):
        cfg = FingerprintConfig(ngram=TRUTH_NGRAM, seed=seed, sketch_bits=SKETCH_BITS,
                                bands=BANDS, rows=ROWS)
        sigs, sig_s = _timed(lambda cfg=cfg: simstore.signatures(texts, cfg))
        sets, sets_s = _timed(lambda cfg=cfg: simstore.shingle_sets(texts, cfg))
        (both, both_sets), both_s = _timed(
            lambda cfg=cfg: simstore.signatures_and_sets(texts, cfg))
        assert np.array_equal(both.bands, sigs.bands) and np.array_equal(both_sets.hashes,
                                                                          sets.hashes)
        row: dict[str, Any] = {"signatures_seconds": sig_s, "shingle_sets_seconds": sets_s,
                               "signatures_and_sets_seconds": both_s,
                               "shingle_bytes_per_doc": sets.nbytes / n}
        for t in THRESHOLDS:
            sk, sk_s = _timed(lambda t=t, sigs=sigs: simstore.find_similar(sigs, t))
            ex, ex_s = _timed(lambda t=t, sigs=sigs, sets=sets:
                              simstore.find_similar(sigs, t, texts=sets))
            ci, cj = exact.candidate_pairs(sigs, sets, t)
            codes = _codes(ex.i, ex.j, n)
            diff = [abs(truth_jac.get(c, -1.0) - v)
                    for c, v in zip(codes.tolist(), ex.jaccard.tolist(), strict=True)]
            row[str(t)] = {
                "sketch": prf(_codes(sk.i, sk.j, n), true[t]),
                "exact": prf(codes, true[t]),
                "candidate_recall": float(np.isin(true[t], _codes(ci, cj, n)).mean()),
                "candidates_per_doc": 2 * len(ci) / n,
                "max_abs_diff_from_truth": max(diff, default=0.0),
                "sketch_find_seconds": sk_s,
                "exact_find_seconds": ex_s,
            }
        per_seed.append(row)
        log(f"exact seed {seed} done")
    out = summarize(per_seed)
    out["config"] = {"sketch_bits": SKETCH_BITS, "bands": BANDS, "rows": ROWS,
                     "target_miss": exact.TARGET_MISS, "extra_bands": exact.EXTRA_BANDS,
                     "extra_rows": {str(t): exact.extra_rows(t) for t in THRESHOLDS}}
    return out


def _median(s: dict[str, Any]) -> float:
    return float(statistics.median(s["by_seed"]))


def speed_rows(res: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    """Median seconds per t: sketch path, exact path (one pass; two passes), datasketch."""
    sig, both = _median(res["signatures_seconds"]), _median(res["signatures_and_sets_seconds"])
    two = sig + _median(res["shingle_sets_seconds"])
    out: dict[str, Any] = {}
    for t in THRESHOLDS:
        r = res[str(t)]
        sketch = sig + _median(r["sketch_find_seconds"])
        exact_total = both + _median(r["exact_find_seconds"])
        row = {"sketch_seconds": num(sketch), "exact_seconds": num(exact_total),
               "exact_over_sketch": num(exact_total / sketch),
               "exact_two_passes_seconds": num(two + _median(r["exact_find_seconds"]))}
        if peer is not None:
            bulk = float(statistics.median(peer["seconds"]))
            ds = bulk + _median(peer[str(t)]["lsh_seconds"])
            row["datasketch_seconds"] = num(ds)
        out[str(t)] = row
    return out


def _ms(s: dict[str, Any], digits: int = 3) -> str:
    return f"{s['mean']:.{digits}f} ± {s['sd']:.{digits}f}"


def markdown(res: dict[str, Any], peer: dict[str, Any] | None, speed: dict[str, Any]) -> str:
    """One row per t: F1 (P, R) of sketch, exact and datasketch; seconds of each."""
    lines = [
        "| t | sketch only: P / R / F1 | exact: P / R / F1 | candidate recall | "
        "candidates/doc | datasketch: P / R / F1 | seconds sketch / exact / datasketch |",
        "| ---: | --- | --- | --- | ---: | --- | --- |",
    ]
    for t in THRESHOLDS:
        r, sp = res[str(t)], speed[str(t)]
        sk, ex = r["sketch"], r["exact"]
        ds = "–"
        ds_s = "–"
        if peer is not None:
            v = peer[str(t)]["verified"]
            ds = f"{_ms(v['precision'])} / {_ms(v['recall'])} / {_ms(v['f1'])}"
            ds_s = f"{sp['datasketch_seconds']:.2f}"
        lines.append(
            f"| {t} | {_ms(sk['precision'])} / {_ms(sk['recall'])} / {_ms(sk['f1'])} "
            f"| {_ms(ex['precision'])} / {_ms(ex['recall'])} / {_ms(ex['f1'])} "
            f"| {_ms(r['candidate_recall'])} | {_ms(r['candidates_per_doc'], 1)} | {ds} "
            f"| {sp['sketch_seconds']:.2f} / {sp['exact_seconds']:.2f} / {ds_s} |"
        )
    return "\n".join(lines)


def evaluate_exact(texts: list[str], truth: Truth, matrix3: tuple[Any, list[str]], nbytes: int,
                   seeds: int, peers: bool, log: Any) -> dict[str, Any]:
    """The exact rule vs the sketch rule vs datasketch over the hash seeds: printed, returned."""
    res = score_exact(texts, truth, seeds, log)
    peer = score_minhash(doc_shingles(*matrix3), truth, seeds, nbytes, log) if peers else None
    speed = speed_rows(res, peer)
    print()
    print(f"Exact rule (find_similar with texts) vs sketch only vs datasketch MinHashLSH; "
          f"mean ± sd (ddof 1) over hash seeds 0..{seeds - 1}; seconds: medians")
    print(markdown(res, peer, speed))
    return {"seeds": seeds, "simstore": res, "datasketch": peer, "speed": speed}
