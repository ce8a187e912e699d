"""Ground truth, scores, and the similarity-mode evaluation of ``python -m tools.quality``.

Truth: the exact Jaccard similarity of word-3-shingle sets (``simstore.features``
with ngram=3, distinct) for all pairs. Scored here, under hash seeds 0..N-1:

- simstore similarity mode: ``simstore.find_similar(sigs, t + offset)`` for every
  sketch size of SKETCH_BITS (bands x rows = BANDS x ROWS) and offset of OFFSETS;
- datasketch ``MinHashLSH(threshold=t, num_perm=NUM_PERM)`` over the same distinct
  shingles (utf-8), candidates from its own index, kept when ``MinHash.jaccard >= t``.

Both report precision, recall and F1 of the predicted pairs against the true pairs,
stage-1 recall (true pairs that are candidates at all) and candidates per document.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import simstore
from simstore import FingerprintConfig

from .._util import popcount

THRESHOLDS = (0.95, 0.9, 0.8)
KS = tuple(range(13))
TRUTH_NGRAM = 3
ANGLE_BINS = 4096
BLOCK = 512
SKETCH_BITS = (256, 384, 512, 640)
OFFSETS = (0.0, 0.005)
BANDS, ROWS = 16, 8
NUM_PERM = 128


# ---------------------------------------------------------------- ground truth
@dataclass
class Truth:
    """Pairs with Jaccard >= min(THRESHOLDS)."""

    i: np.ndarray
    j: np.ndarray
    jac: np.ndarray
    angle: np.ndarray  # theta/pi of the binary shingle vectors

    def within(self, members: np.ndarray) -> Truth:
        """The pairs with both ends in members (a boolean mask), renumbered within it."""
        keep = members[self.i] & members[self.j]
        remap = np.cumsum(members) - 1
        return Truth(remap[self.i[keep]], remap[self.j[keep]], self.jac[keep], self.angle[keep])


def shingle_matrix(token_lists: list[list[str]], n: int = TRUTH_NGRAM) -> tuple[Any, list[str]]:
    """Binary doc x shingle CSR matrix (shingles as in simstore.features), shingle texts."""
    import scipy.sparse as sp

    ids: dict[str, int] = {}
    indices: list[int] = []
    indptr = [0]
    for toks in token_lists:
        if len(toks) < n:
            shingles = {" ".join(toks)}
        else:
            shingles = {" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1)}
        indices.extend([ids.setdefault(s, len(ids)) for s in shingles])
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.int32)
    shape = (len(token_lists), len(ids))
    return sp.csr_matrix((data, np.array(indices), np.array(indptr)), shape=shape), list(ids)


def similar_pairs(x: Any, t_min: float) -> tuple[Truth, np.ndarray]:
    """All pairs i < j with Jaccard >= t_min, exactly, in row blocks; and an angle histogram.

    The histogram counts ALL pairs by theta/pi of their binary shingle vectors
    (cos theta = |A&B| / sqrt(|A||B|)), ANGLE_BINS bins over [0, 0.5], for the ideal model.
    """
    xt = x.T.tocsr()
    sizes = np.diff(x.indptr).astype(np.int64)
    out_i, out_j, out_s, out_c = [], [], [], []
    angles = np.zeros(ANGLE_BINS, dtype=np.int64)
    for a in range(0, x.shape[0], BLOCK):
        prod = (x[a : a + BLOCK] @ xt).tocoo()
        rows = prod.row.astype(np.int64) + a
        cols = prod.col.astype(np.int64)
        upper = cols > rows
        rows, cols, inter = rows[upper], cols[upper], prod.data[upper].astype(np.int64)
        jac = inter / (sizes[rows] + sizes[cols] - inter)
        cos = np.minimum(inter / np.sqrt(sizes[rows] * sizes[cols]), 1.0)
        frac = np.arccos(cos) / np.pi
        angles += np.bincount(
            np.minimum((frac * 2 * ANGLE_BINS).astype(np.int64), ANGLE_BINS - 1),
            minlength=ANGLE_BINS,
        )
        hit = jac >= t_min
        out_i.append(rows[hit])
        out_j.append(cols[hit])
        out_s.append(jac[hit])
        out_c.append(frac[hit])
    n = x.shape[0]
    angles[-1] += n * (n - 1) // 2 - angles.sum()  # disjoint pairs: theta = pi/2
    truth = Truth(*(np.concatenate(v) for v in (out_i, out_j, out_s, out_c)))
    return truth, angles


def pair_jaccard(x: Any, i: int, j: int) -> float:
    """Jaccard of one pair (for examples of errors)."""
    a = set(x.indices[x.indptr[i] : x.indptr[i + 1]])
    b = set(x.indices[x.indptr[j] : x.indptr[j + 1]])
    return len(a & b) / len(a | b)


def num(v: float) -> float | None:
    """v rounded for JSON, None when not finite."""
    return None if not math.isfinite(v) else round(float(v), 4)


def clean(a: Any) -> list[float | None]:
    """num() of every element."""
    return [num(v) for v in a]


# ---------------------------------------------------------------- pair scoring
def _codes(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """One int64 per pair i < j."""
    return np.asarray(i, dtype=np.int64) * n + np.asarray(j, dtype=np.int64)


def prf(predicted: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Precision, recall and F1 of predicted pair codes against true pair codes."""
    tp = int(np.isin(predicted, true).sum())
    return {
        "predicted": len(predicted),
        "tp": tp,
        "precision": tp / len(predicted) if len(predicted) else math.nan,
        "recall": tp / len(true) if len(true) else math.nan,
        "f1": 2 * tp / (len(predicted) + len(true)) if tp else 0.0,
    }


def _true_codes(truth: Truth, n: int) -> dict[float, np.ndarray]:
    return {t: _codes(truth.i[truth.jac >= t], truth.j[truth.jac >= t], n) for t in THRESHOLDS}


def spread(values: list[float]) -> dict[str, Any]:
    """Mean and sample sd (ddof = 1) of per-seed values, and the values."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": num(statistics.fmean(values)), "sd": num(sd), "by_seed": clean(values)}


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """{t: {metric: spread}} and top-level spreads from per-seed dicts of the same shape."""
    out: dict[str, Any] = {}
    for key, first in per_seed[0].items():
        if isinstance(first, dict):
            out[key] = summarize([s[key] for s in per_seed])
        else:
            out[key] = spread([float(s[key]) for s in per_seed])
    return out


# ---------------------------------------------------------------- Hamming <= k
def hamming_histogram(fps: np.ndarray) -> np.ndarray:
    """Counts of all pairs i < j by Hamming distance 0..64."""
    hist = np.zeros(65, dtype=np.int64)
    n = len(fps)
    for a in range(0, n, BLOCK):
        rows = fps[a : a + BLOCK]
        d = popcount(rows[:, None] ^ fps[None, a:])
        upper = np.arange(d.shape[1])[None, :] > np.arange(d.shape[0])[:, None]
        hist += np.bincount(d[upper].ravel(), minlength=65)
    return hist


def metrics(
    predicted: np.ndarray, tp: dict[float, np.ndarray], positives: dict[float, int]
) -> dict[str, Any]:
    """P/R/F1 for every k and threshold from predicted and true-positive counts per k."""
    result: dict[str, Any] = {"predicted": clean(predicted), "by_threshold": {}}
    for t in THRESHOLDS:
        npos, hits = positives[t], tp[t]
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(predicted > 0, hits / np.maximum(predicted, 1e-300), np.nan)
            r = hits / npos if npos else np.full(len(KS), np.nan)
            f1 = np.where(hits > 0, 2 * hits / (predicted + npos), 0.0)
        best = int(np.argmax(f1))
        result["by_threshold"][str(t)] = {
            "positives": npos,
            "tp": clean(hits),
            "precision": clean(p),
            "recall": clean(r),
            "f1": clean(f1),
            "best": {
                "k": best,
                "precision": num(p[best]),
                "recall": num(r[best]),
                "f1": num(f1[best]),
            },
        }
    return result


def score(fps: np.ndarray, truth: Truth) -> dict[str, Any]:
    """Observed P/R/F1 of Hamming <= k over all pairs of fps."""
    predicted = np.cumsum(hamming_histogram(fps))[: len(KS)]
    d = popcount(fps[truth.i] ^ fps[truth.j])
    tp, positives = {}, {}
    for t in THRESHOLDS:
        pos = d[truth.jac >= t]
        positives[t] = len(pos)
        tp[t] = np.array([(pos <= k).sum() for k in KS], dtype=np.float64)
    return metrics(predicted.astype(np.float64), tp, positives)


def ideal_score(truth: Truth, angles: np.ndarray) -> dict[str, Any]:
    """Expected P/R/F1 of an ideal 64-bit simhash of the binary 3-shingle vectors.

    Model: the Hamming distance of a pair is Binomial(64, theta/pi) (independent random
    hyperplanes), theta the angle between the two shingle sets. No 64-bit fingerprint of
    these sets does better on average; it is the ceiling of the estimator, not of this code.
    """
    from scipy.stats import binom

    ks = np.array(KS)[:, None]
    centres = (np.arange(ANGLE_BINS) + 0.5) / (2 * ANGLE_BINS)
    predicted = binom.cdf(ks, 64, centres[None, :]) @ angles
    tp, positives = {}, {}
    for t in THRESHOLDS:
        frac = truth.angle[truth.jac >= t]
        positives[t] = len(frac)
        tp[t] = binom.cdf(ks, 64, frac[None, :]).sum(axis=1)
    return metrics(predicted, tp, positives)


# ---------------------------------------------------------------- simstore
def band_candidate_pairs(keys32: np.ndarray) -> int:
    """Distinct pairs of documents sharing a 32-bit key in at least one band."""
    import scipy.sparse as sp

    n, nb = keys32.shape
    cols = (np.arange(nb, dtype=np.uint64)[None, :] << np.uint64(32)) | keys32.astype(np.uint64)
    _, inverse = np.unique(cols.ravel(), return_inverse=True)
    inverse = inverse.ravel()
    x = sp.csr_matrix(
        (np.ones(n * nb, dtype=np.int32), inverse, np.arange(0, n * nb + 1, nb)),
        shape=(n, int(inverse.max()) + 1 if n else 0),
    )
    return int(((x @ x.T).nnz - n) // 2)


def score_simstore(
    texts: list[str], truth: Truth, seeds: int, nbytes: int, log: Any
) -> dict[str, Any]:
    """simstore.find_similar per sketch size, offset and threshold, under seeds 0..seeds-1.

    One find_similar call per (size, seed) at the lowest threshold, then its pairs
    filtered by estimate >= t + offset: the same pairs as find_similar(sigs, t + offset),
    since the rule is "shares a band key AND estimate >= threshold".
    """
    n = len(texts)
    true = _true_codes(truth, n)
    t_low = min(THRESHOLDS)
    out: dict[str, Any] = {}
    for bits in SKETCH_BITS:
        per_seed, seconds = [], []
        for seed in range(seeds):
            cfg = FingerprintConfig(
                ngram=TRUTH_NGRAM, seed=seed, sketch_bits=bits, bands=BANDS, rows=ROWS
            )
            t0 = time.perf_counter()
            sigs = simstore.signatures(texts, cfg)
            seconds.append(time.perf_counter() - t0)
            keys32 = (sigs.bands & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            found = simstore.find_similar(sigs, t_low)
            codes = _codes(found.i, found.j, n)
            shared = (keys32[truth.i] == keys32[truth.j]).any(axis=1)
            est = simstore.sketch_jaccard(sigs.sketches[truth.i], sigs.sketches[truth.j])
            err = est - truth.jac
            row: dict[str, Any] = {
                "candidates_per_doc": 2 * band_candidate_pairs(keys32) / n,
                "estimate_error_mean": float(err.mean()),
                "estimate_error_sd": float(err.std()),
            }
            for t in THRESHOLDS:
                pos = truth.jac >= t
                row[str(t)] = {"stage1_recall": float(shared[pos].mean())}
                for off in OFFSETS:
                    row[str(t)][f"offset {off}"] = prf(codes[found.jaccard >= t + off], true[t])
            per_seed.append(row)
        out[str(bits)] = {
            "sketch_bits": bits,
            "bands": BANDS,
            "rows": ROWS,
            "bytes_per_doc": bits // 8 + 4 * BANDS,
            "seconds": [round(s, 3) for s in seconds],
            "mb_per_s": num(nbytes / 1e6 / statistics.median(seconds)),
            **summarize(per_seed),
        }
        log(f"similarity sketch_bits={bits} done")
    return out


# ---------------------------------------------------------------- datasketch
def score_minhash(
    shingles: list[list[bytes]], truth: Truth, seeds: int, nbytes: int, log: Any
) -> dict[str, Any] | None:
    """datasketch MinHashLSH(threshold=t, num_perm=NUM_PERM), MinHash.jaccard >= t; or None."""
    try:
        import datasketch as ds
    except ImportError as exc:
        warnings.warn(f"peer skipped: datasketch does not import ({exc})", stacklevel=2)
        return None
    n = len(shingles)
    true = _true_codes(truth, n)
    per_seed, seconds, params = [], [], {}
    for seed in range(seeds):
        t0 = time.perf_counter()
        mhs = ds.MinHash.bulk(shingles, num_perm=NUM_PERM, seed=seed)
        seconds.append(time.perf_counter() - t0)
        row: dict[str, Any] = {}
        for t in THRESHOLDS:
            t_lsh = time.perf_counter()
            lsh = ds.MinHashLSH(threshold=t, num_perm=NUM_PERM)
            params[str(t)] = {"b": lsh.b, "r": lsh.r}
            with lsh.insertion_session() as session:
                for k, m in enumerate(mhs):
                    session.insert(k, m)
            ci, cj = [], []
            for a, m in enumerate(mhs):
                later = [b for b in lsh.query(m) if b > a]
                ci.extend([a] * len(later))
                cj.extend(later)
            cand = _codes(np.array(ci, dtype=np.int64), np.array(cj, dtype=np.int64), n)
            keep = np.array(
                [mhs[a].jaccard(mhs[b]) >= t for a, b in zip(ci, cj, strict=True)], dtype=bool
            )
            lsh_seconds = time.perf_counter() - t_lsh
            row[str(t)] = {
                "lsh_seconds": lsh_seconds,
                "stage1_recall": float(np.isin(true[t], cand).mean()),
                "candidates_per_doc": 2 * len(cand) / n,
                "verified": prf(cand[keep], true[t]),
            }
        per_seed.append(row)
        log(f"datasketch seed {seed} done")
    return {
        "version": ds.__version__,
        "num_perm": NUM_PERM,
        "lsh_params": params,
        "bytes_per_doc": NUM_PERM * 8,
        "seconds": [round(s, 3) for s in seconds],
        "mb_per_s": num(nbytes / 1e6 / statistics.median(seconds)),
        **summarize(per_seed),
    }


def doc_shingles(x: Any, names: list[str]) -> list[list[bytes]]:
    """Each document's distinct shingles (rows of the truth matrix), utf-8."""
    encoded = [s.encode("utf-8") for s in names]
    return [
        [encoded[k] for k in x.indices[x.indptr[d] : x.indptr[d + 1]]] for d in range(x.shape[0])
    ]


# ---------------------------------------------------------------- choice and report
def choose(sim: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    """The smallest sketch (and its better offset) within noise of the best F1 at every t.

    Within noise: best mean F1 - mean F1 <= sqrt(sd_best^2 + sd^2) (one sd of the
    difference of two single-seed draws). Also required: mean F1 > the peer's at every t.
    Between the two offsets of the chosen size: the higher F1 averaged over thresholds.
    """
    f1 = {
        (int(bits), off): {t: res[str(t)][f"offset {off}"]["f1"] for t in THRESHOLDS}
        for bits, res in sim.items()
        for off in OFFSETS
    }
    best = {t: max(f1.values(), key=lambda v, t=t: v[t]["mean"])[t] for t in THRESHOLDS}
    passing = []
    for cfg, by_t in f1.items():
        ok = all(
            best[t]["mean"] - by_t[t]["mean"] <= math.hypot(best[t]["sd"], by_t[t]["sd"])
            and (peer is None or by_t[t]["mean"] > peer[str(t)]["verified"]["f1"]["mean"])
            for t in THRESHOLDS
        )
        if ok:
            passing.append(cfg)
    if not passing:
        return {"choice": None, "passing": [], "rule": choose.__doc__}
    bits = min(b for b, _ in passing)
    off = max(
        (o for b, o in passing if b == bits),
        key=lambda o: statistics.fmean(f1[(bits, o)][t]["mean"] for t in THRESHOLDS),
    )
    return {
        "choice": {"sketch_bits": bits, "offset": off},
        "passing": [{"sketch_bits": b, "offset": o} for b, o in sorted(passing)],
        "best_f1": {str(t): best[t] for t in THRESHOLDS},
        "rule": choose.__doc__,
    }


def _ms(s: dict[str, Any], digits: int = 3) -> str:
    return f"{s['mean']:.{digits}f} ± {s['sd']:.{digits}f}"


def markdown_table(
    sim: dict[str, Any], peer: dict[str, Any] | None, simhash: dict[str, Any]
) -> str:
    """One Markdown row per method and threshold: P, R, F1, stage-1 recall, candidates/doc."""
    head = (
        "| method | bytes/doc | MB/s | t | precision | recall | F1 | stage-1 recall "
        "| candidates/doc |\n| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for bits, res in sim.items():
        for off in OFFSETS:
            for t in THRESHOLDS:
                r, m = res[str(t)], res[str(t)][f"offset {off}"]
                lines.append(
                    f"| simstore {bits} bits, Ĵ ≥ t{f' + {off}' if off else ''} "
                    f"| {res['bytes_per_doc']} | {res['mb_per_s']:.1f} | {t} | "
                    f"{_ms(m['precision'])} | {_ms(m['recall'])} | {_ms(m['f1'])} | "
                    f"{_ms(r['stage1_recall'])} | {_ms(res['candidates_per_doc'], 1)} |"
                )
    if peer is not None:
        for t in THRESHOLDS:
            r = peer[str(t)]
            lsh = peer["lsh_params"][str(t)]
            lines.append(
                f"| datasketch MinHashLSH (b={lsh['b']}, r={lsh['r']}) + MinHash.jaccard ≥ t "
                f"| {peer['bytes_per_doc']} | {peer['mb_per_s']:.1f} | {t} | "
                f"{_ms(r['verified']['precision'])} | {_ms(r['verified']['recall'])} | "
                f"{_ms(r['verified']['f1'])} | {_ms(r['stage1_recall'])} | "
                f"{_ms(r['candidates_per_doc'], 1)} |"
            )
    for t in THRESHOLDS:
        r = simhash[str(t)]
        lines.append(
            f"| simhash only, Hamming ≤ {r['k']} | 8 | {simhash['mb_per_s']:.1f} | {t} | "
            f"{_ms(r['precision'])} | {_ms(r['recall'])} | {_ms(r['f1'])} | – | – |"
        )
    return "\n".join(lines)


def evaluate_similarity(
    texts: list[str],
    truth: Truth,
    matrix3: tuple[Any, list[str]],
    default: dict[str, Any],
    nbytes: int,
    seeds: int,
    peers: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Similarity mode vs datasketch vs the default simhash pipeline, over the hash seeds."""
    sim = score_simstore(texts, truth, seeds, nbytes, log)
    peer = None
    if peers:
        shingles = doc_shingles(*matrix3)
        peer = score_minhash(shingles, truth, seeds, nbytes, log)
    simhash: dict[str, Any] = {"pipeline": default["name"], "mb_per_s": default["mb_per_s"]}
    for t in THRESHOLDS:
        if "seeds" in default:
            sd = default["seeds"][str(t)]
            by_seed = {m: sd[f"{m}_by_seed"] for m in ("precision", "recall", "f1")}
            k = sd["k"]
        else:
            best = default["score"]["by_threshold"][str(t)]["best"]
            k, by_seed = best["k"], {m: [best[m]] for m in ("precision", "recall", "f1")}
        simhash[str(t)] = {"k": k, **{m: spread(v) for m, v in by_seed.items()}}
    choice = choose(sim, peer)
    print()
    print(
        f"Similarity mode (find_similar, bands x rows = {BANDS} x {ROWS}) "
        f"vs datasketch MinHashLSH vs simhash only; mean ± sd (ddof 1) over hash seeds "
        f"0..{seeds - 1}; truth: word-3-shingle Jaccard >= t, all pairs"
    )
    print(markdown_table(sim, peer, simhash))
    print()
    print(f"choice: {choice['choice']} (passing: {choice['passing']})")
    return {
        "seeds": seeds,
        "sketch_bits": list(SKETCH_BITS),
        "offsets": list(OFFSETS),
        "bytes_per_doc_counted": (
            "simstore: sketch_bits/8 + 4*bands (odd sketch + 32-bit band keys as a store "
            "keeps them; the 8-byte fingerprint not counted); datasketch: num_perm*8 "
            "(MinHash.hashvalues, uint64; its LSH band keys not counted); simhash: 8"
        ),
        "mb_per_s_counted": (
            "corpus bytes / median seconds over seeds; simstore.signatures from text "
            "(tokenizing and shingling included); datasketch MinHash.bulk from the distinct "
            "utf-8 shingles (tokenizing and shingling NOT included)"
        ),
        "simstore": sim,
        "datasketch": peer,
        "simhash": simhash,
        "choice": choice,
    }
