"""``exact-store``: what an exact store (``SimStore(path, exact=True)``) costs beside a
sketch-only similarity store of the same documents: disk bytes per document, similar() latency.

Two parts, both run on one thread, durable=False:

1. Real text: ``--docs`` English documents (tools/_corpus, at most ``--doc-bytes``
   each) put in a similarity store and in an exact store (``add_many``), their
   du bytes per document and the shingles database's share (LMDB pages), the
   set codes' bytes per distinct shingle, and ``similar(text, 0.9)`` of each
   store for ``--text-queries`` of the texts (text processing included).
2. Synthetic at ``--n``: documents are sets of random 64-bit hashes whose sizes
   are drawn from part 1's real set sizes; both stores are filled ``--chunk``
   documents per ``add_many``; ``--queries`` near copies (not stored) of stored
   documents, true Jaccard uniform in ``--query-jaccard``, are asked
   ``similar(query, 0.9)``: by Signature on the sketch store, by (Signature,
   ShingleSets) on the exact store (so both times are the store's work, not the
   text's). Errors are counted against the planted pairs' true Jaccard (a near
   copy replaces r of m hashes: J = (m - r) / (m + r) exactly).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore.native import jaccard as _sets
from simstore.text.jaccard import ShingleSets

from .. import _corpus
from ._harness import (
    DEFAULT_WORKDIR,
    Report,
    Stats,
    du_bytes,
    scratch_dir,
)
from .query import latency_row
from .similarity import CFG, db_bytes, load_note, near_copy, sign

THRESHOLD = 0.9


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench exact-store``."""
    p.add_argument("--docs", type=int, default=3000, help="real English documents (part 1)")
    p.add_argument("--doc-bytes", type=int, default=5000, help="their size cap in UTF-8 bytes")
    p.add_argument("--text-queries", type=int, default=500, help="similar(text) calls, part 1")
    p.add_argument("--n", type=int, default=1_000_000, help="synthetic documents (part 2)")
    p.add_argument("--chunk", type=int, default=50_000, help="documents per add_many call")
    p.add_argument("--queries", type=int, default=2000, help="similar() queries (part 2)")
    p.add_argument("--query-jaccard", type=float, nargs=2, default=(0.80, 0.98),
                   metavar=("LO", "HI"), help="true Jaccard of a query and its stored doc")
    p.add_argument("--reps", type=int, default=3, help="timed passes over the queries")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    p.add_argument("--out", type=Path, help="write the JSON result here")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both parts (see the module docstring); the JSON report."""
    keys = ("docs", "doc_bytes", "text_queries", "n", "chunk", "queries", "query_jaccard",
            "reps", "seed")
    rep = Report("exact-store", {**{k: getattr(args, k) for k in keys}, "scheme": CFG.scheme,
                                 "threshold": THRESHOLD})
    load_note(rep, "start")
    head: dict[str, Any] = {}
    sizes = real_text(rep, args, head)
    synthetic(rep, args, sizes, head)
    load_note(rep, "end")
    out = rep.to_dict()
    out["headline"] = head
    return out


def _stores(d: Path, n: int) -> tuple[simstore.SimStore, simstore.SimStore]:
    return (simstore.SimStore(d / "sketch", config=CFG, durable=False, expected_size=n),
            simstore.SimStore(d / "exact", exact=True, durable=False, expected_size=n))


def shingles_bytes(path: Path) -> int:
    """Bytes of the pages of a closed exact store's shingles database."""
    import lmdb

    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=256)
    try:
        with env.begin() as txn:
            st = txn.stat(env.open_db(b"shingles", txn=txn, create=False))
    finally:
        env.close()
    return (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * st["psize"]


def _size_rows(rep: Report, case: str, d: Path, n: int, head: dict[str, Any], key: str) -> None:
    """du and per-database bytes per doc of both (closed) stores."""
    per: dict[str, float] = {}
    for name in ("sketch", "exact"):
        alloc, apparent = du_bytes(d / name)
        dbs = {k: round(v / n, 1) for k, v in db_bytes(d / name).items()}
        if name == "exact":
            dbs["shingles"] = round(shingles_bytes(d / name) / n, 1)
        rep.row(f"simstore {name} store size", case, None, "B/doc",
                du_bytes_per_doc=round(alloc / n, 1),
                apparent_bytes_per_doc=round(apparent / n, 1), **dbs)
        per[name] = alloc / n
    head[key] = {"sketch_du_bytes_per_doc": per["sketch"], "exact_du_bytes_per_doc": per["exact"],
                 "exact_extra_bytes_per_doc": per["exact"] - per["sketch"]}


# --------------------------------------------------------------------------- 1. real text


def real_text(rep: Report, args: argparse.Namespace, head: dict[str, Any]) -> np.ndarray:
    """Part 1; returns the real documents' set sizes (part 2 draws from them)."""
    texts = _corpus.english_documents(args.docs, args.doc_bytes, args.seed)
    n = len(texts)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    sigs, sets = simstore.signatures_and_sets(texts, CFG)
    sizes = sets.sizes
    codes = _sets.encode_sets(sets.hashes, sets.offsets)[1]
    code_bytes = np.diff(codes)
    case = f"{n:,} English docs"
    rep.note(f"{case}: {text_bytes / n:,.0f} B of text per doc; distinct shingles per doc: "
             f"median {int(np.median(sizes))}, p90 {int(np.percentile(sizes, 90))}, "
             f"mean {sizes.mean():.0f}")
    rep.header()
    rep.row("set codes (Golomb-Rice gaps)", case, Stats.of(code_bytes), "B/doc",
            bytes_per_shingle=round(float(code_bytes.sum() / sizes.sum()), 3),
            raw_u64_bytes_per_doc=round(8 * float(sizes.mean()), 1),
            text_bytes_per_doc=round(text_bytes / n, 1))
    head["real_code_bytes_per_doc"] = float(code_bytes.mean())
    head["real_code_bytes_per_shingle"] = float(code_bytes.sum() / sizes.sum())
    head["real_text_bytes_per_doc"] = text_bytes / n
    with scratch_dir(args.workdir, "exact-store") as d:
        sketch, exact = _stores(d, n)
        sketch.add_many(range(n), sigs)
        exact.add_many(range(n), (sigs, sets))
        sketch.close()
        exact.close()
        _size_rows(rep, case, d, n, head, "real")
        sketch, exact = simstore.SimStore(d / "sketch"), simstore.SimStore(d / "exact")
        qs = texts[: args.text_queries]
        for name, store in (("sketch", sketch), ("exact", exact)):
            st = latency_row(rep, f"simstore {name} store similar(text, 0.9)", case,
                             lambda q, s=store: s.similar(q, THRESHOLD), qs, args.reps)
            head[f"real_{name}_similar_text_us"] = st.median
        sketch.close()
        exact.close()
    return sizes


# --------------------------------------------------------------------------- 2. synthetic


def _random_sets(rng: np.random.Generator, sizes: np.ndarray) -> ShingleSets:
    off = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    h = rng.integers(0, 2**64 - 1, int(off[-1]), dtype=np.uint64, endpoint=True)
    parts = [np.unique(h[off[i] : off[i + 1]]) for i in range(len(sizes))]
    off2 = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=off2[1:])
    return ShingleSets(np.concatenate(parts), off2)


def synthetic(rep: Report, args: argparse.Namespace, real_sizes: np.ndarray,
              head: dict[str, Any]) -> None:
    """Part 2 (see the module docstring)."""
    n = args.n
    rng = np.random.default_rng([args.seed, n])
    sizes = rng.choice(real_sizes, n)
    qbase = np.sort(rng.choice(n, min(args.queries, n), replace=False))
    qwant = rng.uniform(*args.query_jaccard, len(qbase))
    case = f"N={n:,}"
    rep.set_meta(n=n)
    q_sets: list[np.ndarray] = []
    q_true = np.empty(len(qbase))
    with scratch_dir(args.workdir, "exact-store") as d:
        sketch, exact = _stores(d, n)
        t_sketch = t_exact = 0.0
        t0 = time.perf_counter()
        for start in range(0, n, args.chunk):
            stop = min(n, start + args.chunk)
            sets = _random_sets(rng, sizes[start:stop])
            lo, hi = np.searchsorted(qbase, [start, stop])
            for q in range(lo, hi):
                qh, q_true[q] = near_copy(rng, sets[int(qbase[q]) - start], qwant[q])
                q_sets.append(np.sort(qh))
            sigs = simstore.Signatures(CFG, *sign(sets.hashes, sets.offsets))
            a = time.perf_counter()
            sketch.add_many(range(start, stop), sigs)
            b = time.perf_counter()
            exact.add_many(range(start, stop), (sigs, sets))
            t_sketch += b - a
            t_exact += time.perf_counter() - b
        rep.note(f"{case}: generated, signed and stored in {time.perf_counter() - t0:.0f} s; "
                 f"add_many ({args.chunk:,} docs a call): sketch store {t_sketch:.1f} s, "
                 f"exact store {t_exact:.1f} s")
        sketch.close()
        exact.close()
        _size_rows(rep, case, d, n, head, "synthetic")
        head.update(sketch_add_many_s=t_sketch, exact_add_many_s=t_exact)
        sketch, exact = simstore.SimStore(d / "sketch"), simstore.SimStore(d / "exact")
        qoff = np.zeros(len(q_sets) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in q_sets], out=qoff[1:])
        qss = ShingleSets(np.concatenate(q_sets), qoff)
        qsig = simstore.Signatures(CFG, *sign(qss.hashes, qss.offsets))
        pairs = [(qsig[i], qss.take([i])) for i in range(len(qss))]
        want = q_true >= THRESHOLD
        for name, store, items in (("sketch", sketch, list(qsig)), ("exact", exact, pairs)):
            found = np.array([int(qbase[i]) in {m.doc_id for m in store.similar(x, THRESHOLD)}
                              for i, x in enumerate(items)])
            st = latency_row(
                rep, f"simstore {name} store similar(query, 0.9)", case,
                lambda q, s=store: s.similar(q, THRESHOLD), items, args.reps,
                true_pairs=int(want.sum()), found=int((found & want).sum()),
                false_positives=int((found & ~want).sum()),
                false_negatives=int((~found & want).sum()))
            head[f"{name}_similar_us"] = st.median
            head[f"{name}_false_positives"] = int((found & ~want).sum())
            head[f"{name}_false_negatives"] = int((~found & want).sum())
        sketch.close()
        exact.close()

