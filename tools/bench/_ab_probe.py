"""One measurement of one simstore revision, for ``python -m tools.bench ab``.

``ab`` copies this file into a scratch directory and runs it in a fresh process
whose PYTHONPATH is the tree under test, so ``import simstore`` gets that tree's
package. It is standalone (numpy and simstore only) and uses only the public API
every compared revision has: ``SimStore(path, k=..., expected_size=...)``,
``add_many``, ``query``, ``find_all``. It prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore import SimStore, find_all

U64 = np.uint64


def random_fps(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct uniformly random 64-bit fingerprints."""
    out = np.unique(rng.integers(0, 2**64 - 1, size=n, dtype=U64, endpoint=True))
    while len(out) < n:
        extra = rng.integers(0, 2**64 - 1, size=n - len(out), dtype=U64, endpoint=True)
        out = np.unique(np.concatenate([out, extra]))
    return rng.permutation(out[:n])


def planted(rng: np.random.Generator, queries: np.ndarray, k: int) -> np.ndarray:
    """One neighbour per query, at a random distance 1..k."""
    out = queries.copy()
    for i, d in enumerate(rng.integers(1, k + 1, size=len(queries))):
        mask = 0
        for b in rng.choice(64, size=int(d), replace=False):
            mask |= 1 << int(b)
        out[i] ^= U64(mask)
    return out


SINGLE = 200  # durable single calls timed per store


def build_store(path: Path, fps: np.ndarray, near: np.ndarray, k: int
                ) -> tuple[SimStore, float]:
    """A new store planned for k: fps bulk loaded (ids 0..N-1), then the planted
    neighbours (ids N..); the store, open, and the bulk load's seconds."""
    n, nq = len(fps), len(near)
    store = SimStore(str(path), k=k, expected_size=n + nq)
    t0 = time.perf_counter()
    store.add_many(range(n), fps)
    load_s = time.perf_counter() - t0
    store.add_many(range(n, n + nq), near)
    return store, load_s


def measure_k(fps: np.ndarray, queries: np.ndarray, near: np.ndarray, k: int,
              workdir: Path) -> dict[str, Any]:
    """Bulk load N fps into a new store planned for k, add the planted ones, time queries."""
    n, nq = len(fps), len(queries)
    d = Path(tempfile.mkdtemp(prefix=f"ab-k{k}-", dir=workdir))
    try:
        store, load_s = build_store(d / "store", fps, near, k)
        qs = [int(q) for q in queries]
        for q in qs[: max(1, nq // 10)]:
            store.query(q)
        ns = np.empty(nq, dtype=np.int64)
        clock = time.perf_counter_ns
        for i, q in enumerate(qs):
            t = clock()
            store.query(q)
            ns[i] = clock() - t
        found = sum(n + i in {m.doc_id for m in store.query(q)} for i, q in enumerate(qs))
        single = single_calls(store, np.random.default_rng([k, n]))
        store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    p50, p90, p99 = np.percentile(ns / 1e3, [50, 90, 99])
    return {"load_s": load_s, "p50_us": float(p50), "p90_us": float(p90),
            "p99_us": float(p99), "recall": found, "queries": nq, **single}


def single_calls(store: SimStore, rng: np.random.Generator) -> dict[str, float]:
    """Median ms of SINGLE durable add() calls, then SINGLE add_if_new() calls, of new ids."""
    fps = random_fps(rng, 2 * SINGLE).tolist()
    out = {}
    clock = time.perf_counter_ns
    for name, call in (("add", store.add), ("add_if_new", store.add_if_new)):
        ns = np.empty(SINGLE, dtype=np.int64)
        for i in range(SINGLE):
            fp = fps.pop()
            t = clock()
            call(f"{name}-{i}", fp)
            ns[i] = clock() - t
        out[f"{name}_ms"] = float(np.median(ns) / 1e6)
    return out


def main() -> None:
    """Parse the options ab passes, measure, print JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--queries", type=int, required=True)
    ap.add_argument("--ks", type=str, default="3,5")
    ap.add_argument("--find-all-k", type=int, default=3)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workdir", type=Path, required=True)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    fps = random_fps(rng, args.n)
    queries = random_fps(rng, args.queries)
    out: dict[str, Any] = {"simstore_file": simstore.__file__, "k": {}}
    for k in (int(x) for x in args.ks.split(",")):
        near = planted(np.random.default_rng([args.seed, k]), queries, k)
        out["k"][str(k)] = measure_k(fps, queries, near, k, args.workdir)
    find_all(fps[: max(2, args.n // 10)], args.find_all_k)
    t0 = time.perf_counter()
    res = find_all(fps, args.find_all_k)
    out["find_all_s"] = time.perf_counter() - t0
    out["find_all_pairs"] = len(res.i) if hasattr(res, "i") else len(res)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
