"""``frontier-hosts``: a crawl frontier at web scale, most hosts waiting on their delay.

One process, one store on --workdir's file system, :class:`simstore.crawl.Frontier` on a
simulated clock that moves ``--step`` seconds a take (so the same run means the same
schedule on any machine):

1. **fill**: ``--urls`` requests over ``--hosts`` hosts (URL i on host i mod H, a
   fingerprint each, JSON payloads of ~60 bytes), ``--batch`` a commit; pushes/s.
2. **warm-up**: H single takes, each acknowledged: the politeness delay is 0.9 x H x
   step, so from then on about 90 % of the hosts wait on their delay (an index by next
   allowed time, not a scan, keeps a take short) and 10 % are ready.
3. **take**: ``--takes`` timed ``take(1)`` calls (the ack of each untimed), then as many
   timed ``take(1, done=[previous])`` (ack + take, one commit): p50 / p90 / p99 / max,
   for ``durable=False`` (a data flush a commit) and ``durable=True`` (data and meta
   page flushed; a frontier refuses ``"unsafe"``). Target: p99 of a take <= 1 ms.
   Each take is also split in two: its transaction's work (the reads and writes of the
   take, timed around ``Txn.take``) and the rest (LMDB's commit and its flush), so a
   figure of the index's work is apart from what the disk's flush costs; run with
   ``--workdir /dev/shm`` (tmpfs: a flush costs nothing) to see a take without a disk.
   Then ``--takes`` rewrites of one 4 KiB page of a file beside the store, each followed
   by ``fdatasync``: the floor of any commit that survives an OS crash on that disk.
4. **memory**: RSS and RssAnon (the process's private memory; LMDB's pages are
   file-backed) after the fill, the warm-up and each timed phase: flat means the
   takes keep nothing per request or host.

``--profile`` prints cProfile's top functions over the timed takes of the last mode.
``--pages N`` then runs N more ack + take(1) commits (``durable=False``) under ``strace``
attached to this process and counts the 4 KiB pages each commit writes before its
``fdatasync``: what a take costs the disk, apart from how fast the disk is today.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore.crawl import Done, Frontier, Politeness, Push
from simstore.crawl.payload import encode
from simstore.crawl.transaction import Txn

from ._cli import positive
from ._harness import DEFAULT_WORKDIR, Report, Stats, current_rss, du_bytes, scratch_dir

_US = 1e6  # s -> us
LEASE = 3600.0  # seconds: no lease runs out during the bench


class _Clock:
    """The simulated clock: moves by step at each take."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _rss_anon() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench frontier-hosts``."""
    p.add_argument("--urls", type=positive, default=10_000_000, help="requests queued (U)")
    p.add_argument("--hosts", type=positive, default=100_000, help="hosts they spread over (H)")
    p.add_argument("--takes", type=positive, default=20_000,
                   help="timed takes of each kind and mode (default %(default)s)")
    p.add_argument("--batch", type=positive, default=10_000, help="pushes a commit in the fill")
    p.add_argument("--step", type=float, default=0.001,
                   help="simulated seconds between two takes (default %(default)s)")
    p.add_argument("--modes", default="normal,full",
                   help="durability modes timed, in turn: normal (durable=False), full (True)")
    p.add_argument("--profile", action="store_true", help="cProfile the last mode's takes")
    p.add_argument("--pages", type=positive, default=None,
                   help="then count the pages of this many ack + take(1) commits (strace)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the store goes (removed after)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _fill(f: Frontier, urls: int, hosts: int, batch: int) -> float:
    """Queue the requests; seconds it took."""
    t0 = time.perf_counter()
    for start in range(0, urls, batch):
        items = []
        for i in range(start, min(start + batch, urls)):
            h = i % hosts
            items.append(Push(0, encode({"url": f"http://h{h}.example/p/{i}", "m": "GET"}),
                              i.to_bytes(8, "big"), True, f"h{h}.example"))
        f.push_many(items)
    return time.perf_counter() - t0


@contextmanager
def _work_times() -> Iterator[list[int]]:
    """The ns each ``Txn.take`` runs (a take's work inside its transaction, before the
    commit), appended to the list yielded while the block runs."""
    times: list[int] = []
    plain = Txn.take
    ns = time.perf_counter_ns

    def timed(self: Txn, *args: Any) -> Any:
        t0 = ns()
        try:
            return plain(self, *args)
        finally:
            times.append(ns() - t0)

    Txn.take = timed  # type: ignore[method-assign]
    try:
        yield times
    finally:
        Txn.take = plain  # type: ignore[method-assign]


def _takes(f: Frontier, clock: _Clock, step: float, n: int, cycle: bool
           ) -> tuple[np.ndarray, int]:
    """n timed takes (cycle: each acknowledges the previous one in its commit);
    wall ns of each and how many came back empty."""
    out = np.empty(n, dtype=np.int64)
    empty = 0
    last: list[Done | bytes] = []
    ns = time.perf_counter_ns
    for i in range(n):
        clock.t += step
        if cycle:
            t0 = ns()
            got = f.take(1, LEASE, "bench", done=last)
            out[i] = ns() - t0
        else:
            t0 = ns()
            got = f.take(1, LEASE, "bench")
            out[i] = ns() - t0
            if got.popped:
                f.ack([Done(got.popped[0].key, 200)], "bench")
        last = [Done(p.key, 200) for p in got.popped]
        empty += not got.popped
    if last:
        f.ack(last, "bench")
    return out, empty


def _flush_floor(d: Path, n: int) -> np.ndarray:
    """ns of n rewrites of one 4 KiB page of a file in d, each followed by its data flush:
    the least any commit that survives an OS crash pays on this file system (LMDB's
    ``NOMETASYNC`` commit writes its pages, then flushes them once)."""
    path = d / "flush-floor"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, bytes(4096 * 256), 0)
        os.fdatasync(fd)
        page = os.urandom(4096)
        out = np.empty(n, dtype=np.int64)
        ns = time.perf_counter_ns
        for i in range(n):
            t0 = ns()
            os.pwrite(fd, page, 4096 * (i % 256))
            os.fdatasync(fd)
            out[i] = ns() - t0
    finally:
        os.close(fd)
        path.unlink()
    return out


_WRITE = re.compile(r"^\d+\s+pwritev?\d*\(.*\)\s+=\s+(\d+)$")


def _commit_pages(f: Frontier, clock: _Clock, step: float, n: int, d: Path
                  ) -> np.ndarray | None:
    """Pages (bytes / 4 KiB) written before each data flush over n ack + take(1)
    commits, seen by strace attached to this process; None without strace."""
    if shutil.which("strace") is None:
        return None
    log = d / "commit-pages.strace"
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-p", str(os.getpid()), "-o", str(log),
                               "-e", "trace=pwrite64,pwritev,pwritev2,fdatasync,fsync"])
    try:
        time.sleep(1.0)  # attached
        _takes(f, clock, step, n, cycle=True)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait()
    pages, written = [], 0
    for line in log.read_text().splitlines():
        if m := _WRITE.match(line):
            written += int(m.group(1))
        elif "sync(" in line:
            pages.append(written / 4096)
            written = 0
    log.unlink()
    return np.array(pages[1:])  # the first may have begun before strace was attached


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fill, warm up, then the timed takes in each mode; one row a (case, mode)."""
    U, H = args.urls, args.hosts
    rep = Report("frontier-hosts", {"urls": U, "hosts": H, "takes": args.takes,
                                    "step": args.step, "batch": args.batch})
    rep.note(f"store in {args.workdir}; simulated clock, {args.step:g} s a take")
    delay = 0.9 * H * args.step
    polite = Politeness(delay=delay, margin=0.0)
    clock = _Clock(1_000_000.0)
    mem: dict[str, tuple[int, int]] = {"start": (current_rss(), _rss_anon())}
    rep.header()
    with scratch_dir(args.workdir, "frontier-hosts") as d:
        with simstore.SimStore(d / "s", durable=False) as s:
            f = Frontier(s, clock=clock, politeness=polite)
            secs = _fill(f, U, H, args.batch)
            rep.row("push_many", f"fill {args.batch}/commit", None, "",
                    pushes_per_s=U / secs, seconds=secs)
            mem["filled"] = (current_rss(), _rss_anon())
            _, empty = _takes(f, clock, args.step, H, cycle=False)
            mem["warm"] = (current_rss(), _rss_anon())
            st = f.status(hosts=0)
            waiting = sum(1 for h in f.hosts() if h["next_allowed"]
                          and h["next_allowed"] > clock.t and h["queued"])
            rep.note(f"after warm-up: {st['queued']} queued, {waiting} of {H} hosts waiting "
                     f"on their delay ({delay:g} s), {empty} empty takes")
        store_bytes = du_bytes(d)[0]
        profiler = None
        for mode in args.modes.split(","):
            with simstore.SimStore(d / "s", durable=mode == "full") as s:
                f = Frontier(s, clock=clock, politeness=polite)
                if args.profile and mode == args.modes.split(",")[-1]:
                    profiler = cProfile.Profile()
                    profiler.enable()
                for cycle, case in ((False, "take(1)"), (True, "ack+take(1)")):
                    with _work_times() as work:
                        ns, empty = _takes(f, clock, args.step, args.takes, cycle)
                    stats = Stats.of(ns / 1e3)
                    rep.row(case, f"durable={mode!r}", stats, "us", empty=empty)
                    if not cycle:
                        rep.target(f"p99 take, durable={mode!r}", stats.p99, 1000, "<=", "us")
                    inside = np.array(work[-len(ns):]) / 1e3
                    work_stats = Stats.of(inside)
                    rep.row(f"{case}: its work", f"durable={mode!r}", work_stats, "us")
                    if not cycle:
                        rep.target(f"p99 take's work, durable={mode!r}", work_stats.p99,
                                   1000, "<=", "us")
                    rep.row(f"{case}: commit + flush", f"durable={mode!r}",
                            Stats.of(ns / 1e3 - inside), "us")
                    mem[f"{mode} {case}"] = (current_rss(), _rss_anon())
                if profiler is not None:
                    profiler.disable()
        if args.pages:
            with simstore.SimStore(d / "s", durable=False) as s:
                f = Frontier(s, clock=clock, politeness=polite)
                pages = _commit_pages(f, clock, args.step, args.pages, d)
            if pages is None:
                rep.note("no strace: pages a commit not counted")
            else:
                rep.row("ack+take(1): 4 KiB pages written a commit", "durable='normal'",
                        Stats.of(pages), "pages")
        # the same run's floor: a take's commit cannot flush faster than the disk does
        rep.row("write + fdatasync of one 4 KiB page", "the file system's floor",
                Stats.of(_flush_floor(d, args.takes) / 1e3), "us")
    for what, (rss, anon) in mem.items():
        rep.note(f"memory {what}: RSS {rss / 2**20:.0f} MiB, RssAnon {anon / 2**20:.0f} MiB")
    rep.note(f"store on disk: {store_bytes / 2**20:.0f} MiB")
    rep.meta = {}
    out = rep.to_dict()
    out["memory"] = {k: {"rss": v[0], "rss_anon": v[1]} for k, v in mem.items()}
    if profiler is not None:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(25)
        print(buf.getvalue())
        out["profile"] = buf.getvalue()
    return out
