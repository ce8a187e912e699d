"""``bulk-memory``: peak memory of a bulk load, ``add_many`` batch by batch into a sized store.

N random 64-bit fingerprints (numpy ``default_rng``, seeded) are made up front -- the
array a user holds -- and loaded with ``add_many(range(lo, hi), fps[lo:hi])`` in
``--batch`` batches into ``SimStore(path, k=k, expected_size=N)`` (durable default).
A background thread reads ``/proc/self/status`` every ``--interval`` seconds: VmRSS,
RssAnon (heap), RssFile (the pages of mapped files the process touched, the store's
included) and VmHWM (the kernel's exact peak, reset before the load, so per batch the
peak so far); it keeps the peak of each overall and per batch (samples miss peaks
shorter than the interval; VmHWM does not). Target: peak RSS (VmHWM), the caller's arrays
included, <= 4 GiB. The scratch store goes at the end.
Run: ``python -m tools.bench bulk-memory --n 100_000_000 --out result.json``.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._cli import positive
from ._harness import DEFAULT_WORKDIR, Report, reset_peak_rss, scratch_dir

GiB = 1 << 30
MiB = 1 << 20
FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")
TARGET_GIB = 4.0  # the ceiling for the whole process during a 100M load


def status_kb() -> dict[str, int]:
    """The FIELDS of /proc/self/status, in KiB."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in FIELDS:
                out[name] = int(rest.split()[0])
    return out


class Sampler:
    """A thread keeping the peak of each field, overall and per batch (the caller sets
    ``batch``)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.batch = -1
        self.peak = dict.fromkeys(FIELDS, 0)
        self.per_batch: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        """Read the fields once and raise the peaks."""
        now = status_kb()
        mine = self.per_batch.setdefault(self.batch, dict.fromkeys(FIELDS, 0))
        for name, kb in now.items():
            self.peak[name] = max(self.peak[name], kb)
            mine[name] = max(mine[name], kb)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def proc_loadavg() -> str:
    """/proc/loadavg as the kernel writes it."""
    return Path("/proc/loadavg").read_text().strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load N fingerprints batch by batch; peak VmRSS, RssAnon, RssFile overall and per batch."""
    from simstore.store import SimStore

    n, b = args.n, args.batch
    load_before = proc_loadavg()
    print(f"/proc/loadavg before: {load_before}", flush=True)
    rep = Report("bulk-memory", {"n": n, "batch": b, "k": args.k, "seed": args.seed,
                                 "interval_s": args.interval})
    rep.note("fps: N uint64 from default_rng, made before the load and held by the caller; "
             "ids: range(lo, hi) per batch; RSS peaks sampled from /proc/self/status "
             f"every {args.interval} s, VmHWM is the kernel's exact peak")
    fps = np.random.default_rng([args.seed, n]).integers(
        0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    caller = fps.nbytes
    rep.header()
    with scratch_dir(args.workdir, "bulk-memory") as d:
        reset_peak_rss()
        batch_s: list[float] = []
        with Sampler(args.interval) as smp:
            t0 = time.perf_counter()
            store = SimStore(d / "store", k=args.k, expected_size=n)
            for i, lo in enumerate(range(0, n, b)):
                smp.batch = i
                t1 = time.perf_counter()
                hi = min(n, lo + b)
                store.add_many(range(lo, hi), fps[lo:hi])
                batch_s.append(time.perf_counter() - t1)
                smp.sample()
                got = smp.per_batch[i]
                print(f"  batch {i:3d}: {batch_s[-1]:6.1f} s  "
                      + "  ".join(f"{f}={got[f] / 1024:7.0f}" for f in FIELDS) + " MiB",
                      flush=True)
            smp.batch = len(batch_s)
            store.close()
            secs = time.perf_counter() - t0
        disk = sum(p.stat().st_size for p in (d / "store").rglob("*") if p.is_file()) \
            if (d / "store").exists() else 0
    peak = {f: kb * 1024 for f, kb in smp.peak.items()}
    rep.set_meta(n=n, k=args.k, batch=b)
    rep.row("simstore add_many (bulk load)", f"N={n:,} batch={b:,}", None, "s",
            seconds=round(secs, 1), fps_per_s=round(n / secs),
            batch_s_max=round(max(batch_s), 1))
    for f in FIELDS:
        rep.row(f"peak {f}", f"N={n:,} batch={b:,}", None, "MiB",
                mib=round(peak[f] / MiB, 1))
    rep.row("caller's arrays (fps)", f"N={n:,}", None, "MiB", mib=round(caller / MiB, 1))
    rep.row("store files", f"N={n:,}", None, "MiB", mib=round(disk / MiB, 1))
    rep.row("peak per batch", f"N={n:,} batch={b:,}", None, "MiB",
            batches=[{"batch": i, "seconds": round(batch_s[i], 2) if 0 <= i < len(batch_s)
                      else None, **{f: round(v / 1024, 1) for f, v in got.items()}}
                     for i, got in sorted(smp.per_batch.items())])
    rep.target("peak RSS incl. caller arrays", max(peak["VmHWM"], peak["VmRSS"]) / GiB,
               TARGET_GIB, "<=", "GiB")
    load_after = proc_loadavg()
    print(f"/proc/loadavg after: {load_after}", flush=True)
    out = rep.to_dict()
    out["proc_loadavg"] = {"before": load_before, "after": load_after}
    return out


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench bulk-memory``."""
    sp.add_argument("--n", type=positive, default=100_000_000,
                    help="fingerprints loaded, and the store's expected_size (default %(default)s)")
    sp.add_argument("--batch", type=positive, default=5_000_000,
                    help="fingerprints per add_many call (default %(default)s)")
    sp.add_argument("--k", type=positive, default=3, help="store k (default %(default)s)")
    sp.add_argument("--interval", type=float, default=0.5,
                    help="seconds between RSS samples (default %(default)s)")
    sp.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where the scratch store goes (default %(default)s)")
    sp.add_argument("--out", type=Path, default=None, help="write the JSON result here")
