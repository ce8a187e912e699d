"""``durability``: what each durability mode costs the calls that commit one at a time.

One process, stores on --workdir's file system, each call its own commit, timed on its
own (wall, perf_counter_ns), for each mode in turn and --rounds times over (A B C A B C,
so a drifting machine weighs on all alike):

- ``store.add(id, fp)`` and ``store.add_if_new(id, fp)`` (k = 3) of new fingerprints
  into a store of --n;
- the crawl frontier's ``push(priority, payload, fp)`` and ``pop(lease, owner, acks=[the
  previous key])`` (:class:`simstore.crawl.Frontier`), one entry a call (not on an
  unsafe store, which the frontier refuses);
- ``store.add`` from --threads threads at once, --calls in all: adds a second and the
  commits they took (group commit: the writes that wait for a commit share the next).

``unsafe`` is what ``durable=False`` did before it flushed data at commit (LMDB
``MDB_NOSYNC``); ``normal`` is ``durable=False`` (``MDB_NOMETASYNC``: one data flush a
commit); ``full`` is ``durable=True`` (data and meta page flushed). docs/durability.md
keeps the figures.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore.crawl import Frontier

from ._harness import DEFAULT_WORKDIR, Report, Stats, per_call_ns, scratch_dir

MODES = ("unsafe", "normal", "full")
_US = 1e-3  # ns -> us


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench durability``."""
    p.add_argument("--n", type=int, default=100_000, help="fingerprints in each store first")
    p.add_argument("--calls", type=int, default=500,
                   help="timed calls of each kind a round and mode (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="passes over the modes")
    p.add_argument("--modes", default=",".join(MODES), help=f"a subset of {MODES}")
    p.add_argument("--threads", type=int, default=8, help="threads adding at once")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores go: its file system's flush is what is timed")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _cases(store: simstore.SimStore, frontier: Frontier | None, rng: np.random.Generator,
           calls: int) -> dict[str, tuple[Callable[[Any], Any], list[Any]]]:
    """Each case's call and its arguments (new ids and fingerprints: nothing near stored)."""
    fps = [int(x) for x in rng.integers(0, 2**63, 3 * calls, dtype=np.int64)]
    base = int(rng.integers(2**40))
    last: list[bytes] = []

    def pop(_: Any) -> None:
        assert frontier is not None
        got = frontier.pop(60.0, "bench", acks=last[-1:])
        last[:] = [] if got is None else [got.key]

    cases: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "add(id, fp)": (lambda i: store.add(base + i, fps[i]), list(range(calls))),
        "add_if_new(id, fp)": (lambda i: store.add_if_new(base + i, fps[i]),
                               list(range(calls, 2 * calls))),
    }
    if frontier is not None:
        cases["frontier push"] = (lambda i: frontier.push(0, b"x" * 200, i.to_bytes(8, "big")),
                                  [base + i for i in range(calls)])
        cases["frontier pop + ack"] = (pop, list(range(calls)))
    return cases


def _threaded(store: simstore.SimStore, rng: np.random.Generator, calls: int,
              threads: int) -> tuple[float, int]:
    """calls adds split over threads adding at once: (seconds, commits)."""
    fps = [int(x) for x in rng.integers(0, 2**63, calls, dtype=np.int64)]
    base = int(rng.integers(2**40))
    share = [range(t, calls, threads) for t in range(threads)]
    workers = [threading.Thread(target=lambda r=r: [store.add(base + i, fps[i]) for i in r])
               for r in share]
    first = store._env.last_txnid()
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t0, store._env.last_txnid() - first


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every case under every mode, --rounds times; one row a (case, mode)."""
    modes = args.modes.split(",")
    rep = Report("durability", {k: getattr(args, k)
                                for k in ("n", "calls", "rounds", "threads", "seed")})
    rep.note(f"stores in {args.workdir}")
    rep.header()
    rng = np.random.default_rng(args.seed)
    samples: dict[tuple[str, str], list[np.ndarray]] = {}
    grouped: dict[str, list[tuple[float, int]]] = {}
    with scratch_dir(args.workdir, "durability") as d:
        for mode in modes:
            with simstore.SimStore(d / mode, k=3, expected_size=args.n, durable="unsafe") as s:
                s.add_many(range(args.n), rng.integers(0, 2**63, args.n, dtype=np.int64))
        for _ in range(args.rounds):
            for mode in modes:
                with simstore.SimStore(d / mode, durable=mode) as s:
                    frontier = None if mode == "unsafe" else Frontier(s)  # it refuses one
                    for case, (fn, xs) in _cases(s, frontier, rng, args.calls).items():
                        samples.setdefault((case, mode), []).append(per_call_ns(fn, xs))
                    grouped.setdefault(mode, []).append(
                        _threaded(s, rng, args.calls, args.threads))
    for (case, mode), runs in samples.items():
        stats = Stats.of(np.concatenate(runs)).scaled(_US)
        rep.row(case, f"durable={mode!r}", stats, "us", calls=sum(len(r) for r in runs))
    for mode, got in grouped.items():
        rates = [args.calls / sec for sec, _ in got]
        rep.row(f"add(id, fp), {args.threads} threads", f"durable={mode!r}",
                Stats.of(rates), "adds/s", commits_per_call=sum(c for _, c in got) / (
                    args.calls * len(got)))
    return rep.to_dict()
