"""Stores and timed query blocks of one simstore revision, for ``python -m tools.bench abq``.

``abq`` copies this file and ``_ab_probe.py`` (whose fingerprints, queries and planted
neighbours it reuses, so both sides and ``ab`` see the same data) into a scratch
directory and runs it with PYTHONPATH set to the tree under test. Only the public API
every compared revision has is used.

``build DIR``: one store per k under DIR (N random fingerprints, then the planted
neighbours), the queries saved beside them; prints one JSON line. ``--grow BATCH`` adds the
N fingerprints in durable commits of BATCH (a store grown by a crawler's writes, its
levels merged as they go) instead of one bulk load; ``--merge-levels`` then merges its levels
into one (``store.merge_levels()``, where the revision has it).
``serve DIR``: opens those stores in this fresh process, queries each query once per k
(the warm-up; the copying engine reads its tables then) and prints one JSON line with
the planted neighbours found; then answers lines ``K LO HI`` on stdin with one JSON line
of the nanoseconds each of queries LO..HI-1 took at K, until ``quit`` (``--evict KIB``:
having read that much other memory before each, untimed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _ab_probe import build_store, planted, random_fps  # copied beside this file by abq

import simstore
from simstore import SimStore


def grow_store(path: Path, fps: np.ndarray, near: np.ndarray, k: int, batch: int,
               merge: bool = False) -> tuple[SimStore, float]:
    """build_store's store (the same ids and expected size), added batch docs a durable
    commit; the store, open, and the seconds its N fingerprints took."""
    n, nq = len(fps), len(near)
    store = SimStore(str(path), k=k, expected_size=n + nq)
    t0 = time.perf_counter()
    for lo in range(0, n, batch):
        store.add_many(range(lo, min(n, lo + batch)), fps[lo:lo + batch])
    load_s = time.perf_counter() - t0
    store.add_many(range(n, n + nq), near)
    if merge and hasattr(store, "merge_levels"):
        store.merge_levels()
    return store, load_s


def build(d: Path, n: int, nq: int, ks: list[int], seed: int, grow: int = 0,
          merge: bool = False) -> dict[str, object]:
    """The stores of one side, as ``_ab_probe`` builds them (or grown, grow docs a
    commit); load seconds per k."""
    rng = np.random.default_rng(seed)
    fps = random_fps(rng, n)
    queries = random_fps(rng, nq)
    np.save(d / "queries.npy", queries)
    load = {}
    for k in ks:
        near = planted(np.random.default_rng([seed, k]), queries, k)
        if grow:
            store, load[str(k)] = grow_store(d / f"k{k}", fps, near, k, grow, merge)
        else:
            store, load[str(k)] = build_store(d / f"k{k}", fps, near, k)
        store.close()
    return {"simstore_file": simstore.__file__, "load_s": load}


def serve(d: Path, n: int, ks: list[int], evict_kib: int = 0) -> None:
    """Warm up, report, then time the blocks asked for on stdin (reading evict_kib KiB of
    other memory before each query, untimed, when asked to)."""
    qs = [int(q) for q in np.load(d / "queries.npy")]
    stores = {k: SimStore(str(d / f"k{k}")) for k in ks}
    found = {str(k): sum(n + i in {m.doc_id for m in stores[k].query(q)}
                         for i, q in enumerate(qs)) for k in ks}
    print(json.dumps({"simstore_file": simstore.__file__, "found": found}), flush=True)
    clock = time.perf_counter_ns
    other = np.ones(evict_kib * 128, dtype=np.uint64) if evict_kib else None
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        k, lo, hi = (int(v) for v in line.split())
        query = stores[k].query
        ns = []
        for q in qs[lo:hi]:
            if other is not None:
                other.sum()
            t = clock()
            query(q)
            ns.append(clock() - t)
        print(json.dumps(ns), flush=True)
    for store in stores.values():
        store.close()


def main() -> None:
    """Parse the options abq passes and run the mode."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("build", "serve"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--ks", type=str, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evict", type=int, default=0)
    ap.add_argument("--grow", type=int, default=0)
    ap.add_argument("--merge-levels", action="store_true")
    args = ap.parse_args()
    ks = [int(x) for x in args.ks.split(",")]
    if args.mode == "build":
        args.dir.mkdir(parents=True, exist_ok=True)
        print(json.dumps(build(args.dir, args.n, args.queries, ks, args.seed, args.grow,
                               args.merge_levels)))
    else:
        serve(args.dir, args.n, ks, args.evict)


if __name__ == "__main__":
    main()
