"""``expire``: removing the old part of a large store while crawlers query and add.

A fingerprint store of ``--n`` documents is bulk-loaded, the first ``--old`` of them
stamped 40 days ago, the rest now. ``--readers`` processes then query it back to back
(random stored fingerprints, the store's k) and one writer process adds a document per
durable commit, while this process runs ``store.expire(older_than="30d")``'s loop
itself: each removal commit of ``--batch`` documents is timed on its own. Reported:
every commit's time (median, p99, worst: the target is worst <= 100 ms), the whole
expiry's wall time, and the readers' and the writer's latencies during it against the
same processes before it (same run, same store).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore.store import reads as _reads, writes as _writes
from simstore.store.store import expiry_cutoff

from ._harness import DEFAULT_WORKDIR, Report, Stats, load_average, scratch_dir

DAY = 86400.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench expire``."""
    p.add_argument("--n", type=int, default=10_000_000, help="documents in the store")
    p.add_argument("--old", type=int, default=1_000_000, help="of them, stored 40 days ago")
    p.add_argument("--batch", type=int, default=1000, help="documents per removal commit")
    p.add_argument("--readers", type=int, default=1, help="querying processes meanwhile")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--seed", type=int, default=20261128)
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    p.add_argument("--out", type=Path, help="write the JSON result here")


def _reader(path: str, fps: np.ndarray, k: int, stop: Any, out: Any, phase: Any) -> None:
    """Query random stored fingerprints until stop; latencies (s) per phase to out."""
    store = simstore.SimStore(path, readonly=True)
    rng = np.random.default_rng(len(fps))
    lat: dict[int, list[float]] = {0: [], 1: []}
    while not stop.is_set():
        q = int(fps[rng.integers(len(fps))])
        t = time.perf_counter()
        store.query(q, k)
        lat[phase.value].append(time.perf_counter() - t)
    out.put(lat)


def _writer(path: str, stop: Any, out: Any, phase: Any) -> None:
    """One durable add per commit until stop; latencies (s) per phase to out."""
    store = simstore.SimStore(path)
    rng = np.random.default_rng(99)
    lat: dict[int, list[float]] = {0: [], 1: []}
    i = 0
    while not stop.is_set():
        t = time.perf_counter()
        store.add(f"new-{i}", int(rng.integers(0, 2**63)))
        lat[phase.value].append(time.perf_counter() - t)
        i += 1
        time.sleep(0.005)
    out.put(lat)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rep = Report("expire", {k: getattr(args, k) for k in ("n", "old", "batch", "readers", "k",
                                                         "seed")})
    rng = np.random.default_rng(args.seed)
    fps = rng.integers(0, 2**64 - 1, args.n, dtype=np.uint64, endpoint=True)
    now = time.time()
    with scratch_dir(args.workdir, "expire") as d:
        path = str(d / "store")
        t = time.perf_counter()
        with simstore.SimStore(path, k=args.k, expected_size=args.n, durable=False) as s:
            step = 1_000_000
            for a in range(0, args.n, step):
                b = min(a + step, args.n)
                old_end = min(max(args.old - a, 0), b - a)
                if old_end:
                    s.add_many(range(a, a + old_end), fps[a : a + old_end], at=now - 40 * DAY)
                if a + old_end < b:
                    s.add_many(range(a + old_end, b), fps[a + old_end : b], at=now)
            s.merge_levels()
        rep.note(f"built {args.n:,} docs in {time.perf_counter() - t:.1f} s")
        ctx = mp.get_context("spawn")
        stop, out, phase = ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
        procs = [ctx.Process(target=_reader, args=(path, fps, args.k, stop, out, phase))
                 for _ in range(args.readers)]
        procs.append(ctx.Process(target=_writer, args=(path, stop, out, phase)))
        for p in procs:
            p.start()
        time.sleep(5)  # before: the same processes without an expiry
        phase.value = 1
        commits: list[float] = []
        removed = 0
        started = time.perf_counter()
        with simstore.SimStore(path) as s:
            cutoff = expiry_cutoff("30d", None)
            start: bytes | None = b""
            while start is not None:
                with s._env.reading() as txn:
                    encs, start = _reads.stored_before(s._h, txn, cutoff, start, 64 * args.batch)
                for a in range(0, len(encs), args.batch):
                    t = time.perf_counter()
                    removed += s._write(_writes.expire, encs[a : a + args.batch], cutoff)
                    commits.append(time.perf_counter() - t)
            wall = time.perf_counter() - started
            left = len(s)
        stop.set()
        lats = [out.get() for _ in procs]
        for p in procs:
            p.join()
    rep.header()
    commit_stats = Stats.of(commits).scaled(1e3)
    rep.row("simstore expire commit", f"{args.batch} docs", commit_stats, "ms",
            removed=removed, commits=len(commits), wall_s=round(wall, 2), left=left)
    for name, group in (("reader query", lats[:-1]), ("writer durable add", lats[-1:])):
        for ph, label in ((0, "before"), (1, "during expiry")):
            sample = [x for g in group for x in g[ph]]
            if sample:
                rep.row(f"simstore {name}", label, Stats.of(sample).scaled(1e6), "us")
    rep.target("worst expire commit", commit_stats.max, 100.0, "<=", "ms")
    out_d = rep.to_dict()
    out_d["loadavg_end"] = load_average()
    return out_d
