"""``load``: bulk load seconds and peak RSS; durable batched adds into a full store."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ._cli import common, positive, sized
from ._data import build_store, open_store, random_fps
from ._harness import Report, Stats, current_rss, peak_rss, reset_peak_rss, scratch_dir


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Bulk load (add_many into an empty store) and durable batched adds into a full store."""
    sizes = args.sizes + ([10_000_000] if args.large else [])
    rep = Report("load", {"sizes": sizes, "k": args.k, "add_store_size": args.add_store_size,
                          "add_batch": args.add_batch, "add_batches": args.add_batches,
                          "reps": args.reps, "seed": args.seed,
                          "peak_rss_reset": reset_peak_rss()})
    rep.note("load = open a new durable store + add_many(range(N), fps) + close; "
             "peak RSS = whole-process VmHWM during the rep (includes the input arrays)")
    rep.header()
    for n in sizes:
        rng = np.random.default_rng([args.seed, n, 1])
        fps = random_fps(rng, n)
        rep.set_meta(n=n, k=args.k)

        def load(m: int, n: int = n, fps: np.ndarray = fps) -> tuple[float, int, int]:
            with scratch_dir(args.workdir, f"load-{n}") as d:
                reset_peak_rss()
                base_rss = current_rss()
                t0 = time.perf_counter()
                store = open_store(d / "store", args.k, m)
                store.add_many(range(m), fps[:m])
                store.close()
                secs = time.perf_counter() - t0
                return secs, peak_rss() - base_rss, peak_rss()

        load(max(1, n // 10))
        runs = [load(n) for _ in range(args.reps)]
        secs = [r[0] for r in runs]
        peak = max(r[2] for r in runs)
        rep.row("simstore add_many (bulk load)", f"N={n:,} k={args.k}", Stats.of(secs), "s",
                fps_per_s=round(n / float(np.median(secs))), peak_rss_mb=round(peak / 2**20, 1),
                rss_growth_mb=round(max(r[1] for r in runs) / 2**20, 1))
        if n == 10_000_000:
            rep.target("bulk load of 10M", float(np.median(secs)), 30, "<=", "s")
            rep.target("peak RSS of 10M load", peak / 2**30, 2, "<=", "GiB")
    if 10_000_000 not in sizes:
        rep.note("the 10M load targets (<= 30 s, <= 2 GB) need --large; not measured here")
        rep.target("bulk load of 10M", None, 30, "<=", "s")
        rep.target("peak RSS of 10M load", None, 2, "<=", "GiB")
    add_rate(rep, args)
    return rep.to_dict()


def add_rate(rep: Report, args: argparse.Namespace) -> None:
    """Durable adds, add_batch per ``with store.batch()`` commit, into a store of add_store_size."""
    n, b = args.add_store_size, args.add_batch
    total = b * (args.add_batches * args.reps + 1)
    rng = np.random.default_rng([args.seed, n, 2])
    rep.set_meta(n=n, k=args.k)
    fps = random_fps(rng, n + total)
    with scratch_dir(args.workdir, "add") as d:
        store, _ = build_store(d / "store", args.k, fps[:n])
        next_id = n

        def one_batch() -> float:
            nonlocal next_id
            t0 = time.perf_counter()
            with store.batch():
                for i in range(next_id, next_id + b):
                    store.add(i, int(fps[i]))
            next_id += b
            return time.perf_counter() - t0

        one_batch()
        rates, lat = [], []
        for _ in range(args.reps):
            times = [one_batch() for _ in range(args.add_batches)]
            lat.extend(times)
            rates.append(b * len(times) / sum(times))
        store.close()
    rate = float(np.median(rates))
    rep.row(f"simstore add, {b}/commit (durable)", f"into N={n:,} k={args.k}",
            Stats.of(lat).scaled(1e3), "ms/commit", adds_per_s=round(rate),
            commits=len(lat))
    if n >= 1_000_000:
        rep.target(f"durable adds into a {n:,} store (k={args.k})", rate, 20_000, ">=", "adds/s")
    else:
        rep.target("durable adds into a 1M store", None, 20_000, ">=", "adds/s")


def add_arguments(ld: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench load``."""
    common(ld)
    sized(ld, [1_000_000], "bulk load sizes N")
    ld.add_argument("--k", type=positive, default=3, help="store k (default %(default)s)")
    ld.add_argument("--add-store-size", type=positive, default=1_000_000,
                    help="fps in the store the adds go into (default %(default)s)")
    ld.add_argument("--add-batch", type=positive, default=1000,
                    help="adds per commit (default %(default)s)")
    ld.add_argument("--add-batches", type=positive, default=10,
                    help="commits per repetition (default %(default)s)")
