"""``abq``: query latency of two revisions, interleaved in short blocks and paired.

``ab`` times each side's 1,000 queries in one stretch of about 40 ms, minutes apart from
the other side's; this VM has phases of seconds in which memory-bound queries run up to
twice as slow, so a round's p50 at 10M k = 8 is whichever phase it fell in. ``abq``
builds one set of stores per side once (the same data as ``ab``), then runs both sides
at once as two fresh serving processes with their stores open and warm, and asks them in
turn for the same block of queries, alternating which goes first. Adjacent blocks share
the machine's phase, so each pair's ratio of medians (head / base) is compared like with
like; the summary gives the median of those ratios with its quartiles, beside the pooled
percentiles of every timed query. ``--rounds`` starts the serving processes afresh;
``--cold`` drops the page cache before each round, so the stores are read in from the disk
(as after a reboot) instead of lying in the page cache as their build wrote them;
``--grow BATCH`` builds them by durable commits of BATCH documents, as a crawler's store
grows, instead of one bulk load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import numpy as np

from ._cli import positive, sizes
from ._harness import REPO, git, load_average
from .ab import AB_DIR, PROBE, _run, add_worktree, build, clean_up, resolve

SERVE = Path(__file__).with_name("_ab_serve.py")
SIDES = ("base", "head")
KEPT = REPO / ".bench" / "abq-stores"
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


class Server:
    """One side's serving process: its stores open, answering block requests."""

    def __init__(self, script: Path, tree: Path, store_dir: Path, args: argparse.Namespace):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "serve", str(store_dir), "--n", str(args.n),
             "--ks", ",".join(map(str, args.ks)), "--evict", str(args.evict)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = json.loads(self._line())
        imported = Path(self.ready["simstore_file"]).resolve()
        if not imported.is_relative_to(tree.resolve()):
            self.close()
            raise SystemExit(f"the server for {tree} imported simstore from {imported}")

    def _line(self) -> str:
        out: IO[str] = self.proc.stdout  # type: ignore[assignment]
        line = out.readline()
        if not line:
            raise SystemExit(f"a serving process ended early (exit {self.proc.wait()})")
        return line

    def block(self, k: int, lo: int, hi: int) -> list[int]:
        """Nanoseconds of each of queries lo..hi-1 at k."""
        self.proc.stdin.write(f"{k} {lo} {hi}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self._line())

    def close(self) -> None:
        """Ask the process to quit and wait for it."""
        try:
            self.proc.stdin.write("quit\n")  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)
        self.proc.stdout.close()  # type: ignore[union-attr]


def summarize(times: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Pooled percentiles per side (µs) and the paired block ratios head / base."""
    out: dict[str, Any] = {}
    for side in SIDES:
        us = np.concatenate([np.asarray(b, dtype=np.float64) for b in times[side]]) / 1e3
        p50, p90, p99 = np.percentile(us, [50, 90, 99])
        out[side] = {"p50_us": float(p50), "p90_us": float(p90), "p99_us": float(p99),
                     "queries": int(us.size)}
    ratios = np.array([np.median(h) / np.median(b)
                       for h, b in zip(times["head"], times["base"], strict=True)])
    q1, med, q3 = np.percentile(ratios, [25, 50, 75])
    out["pooled_p50_ratio"] = out["head"]["p50_us"] / out["base"]["p50_us"]
    out["pair_ratio"] = {"median": float(med), "q1": float(q1), "q3": float(q3),
                         "pairs": int(ratios.size)}
    return out


def drop_page_cache() -> None:
    """Write dirty pages out and drop the clean ones from the page cache (root only), so
    the serving processes read their stores in from the disk."""
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
    except OSError as exc:
        raise SystemExit(f"--cold needs root to drop the page cache: {exc}") from None


def store_dir(args: argparse.Namespace, sha: str | None, run_dir: Path, side: str) -> Path:
    """Where one side's stores go: kept under .bench/abq-stores by commit and data with
    --keep-stores (a working tree's never), else in the run's scratch directory."""
    if not args.keep_stores or sha is None:
        return run_dir / "stores" / side
    ks = "-".join(map(str, args.ks))
    grown = (f"-g{args.grow}" if args.grow else "") + ("-m" if args.merge_levels else "")
    return KEPT / f"{sha[:12]}-n{args.n}-q{args.queries}-k{ks}-s{args.seed}{grown}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved, paired query latency of base and head at each k."""
    if args.cold and not os.access(DROP_CACHES, os.W_OK):
        raise SystemExit(f"--cold drops the page cache: it needs {DROP_CACHES} writable (root)")
    load_start = load_average()
    shas = {"base": resolve(args.base), "head": resolve(args.head) if args.head else None}
    if args.merge_levels and not args.grow:
        raise SystemExit("--merge-levels merges a grown store's levels: give --grow too")
    if args.evict < 0 or args.grow < 0:
        raise SystemExit(f"--evict and --grow are 0 or more (got {args.evict}, {args.grow})")
    if args.head_stores and not args.keep_stores:
        raise SystemExit("--head-stores reads kept stores: give --keep-stores too")
    reused = resolve(args.head_stores) if args.head_stores else None
    if reused and not (store_dir(args, reused, AB_DIR, "head") / "built.json").exists():
        raise SystemExit(f"--head-stores {args.head_stores}: no stores of it kept with "
                         "this data (--keep-stores, the same --n --queries --ks --seed)")
    run_dir = AB_DIR / f"abq-{os.getpid()}"
    trees: dict[str, Path] = {}
    made: list[Path] = []
    notes: list[str] = []
    built: dict[str, Any] = {}
    ready: list[dict[str, Any]] = []
    times: dict[int, dict[str, list[list[int]]]] = {k: {s: [] for s in SIDES} for k in args.ks}
    print(f"== abq ==  base {args.base} ({shas['base'][:12]}), head "
          f"{args.head or 'working tree'}  n={args.n:,} ks={args.ks} rounds={args.rounds} "
          f"blocks={args.blocks} of {args.block}", flush=True)
    try:
        for side in SIDES:
            sha = shas[side]
            if sha is None:
                trees[side] = REPO
            else:
                trees[side] = add_worktree(sha, run_dir / "trees" / side)
                made.append(trees[side])
            build(trees[side])
        scripts = run_dir / "scripts"
        scripts.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROBE, scripts / "_ab_probe.py")
        script = scripts / "serve.py"
        shutil.copyfile(SERVE, script)
        stores = {}
        for side in SIDES:
            stores[side] = store_dir(args, reused if side == "head" and reused else shas[side],
                                     run_dir, side)
            done = stores[side] / "built.json"
            if done.exists():
                print(f"  {side}'s stores kept from an earlier run: {stores[side]}", flush=True)
                built[side] = json.loads(done.read_text())
                continue
            print(f"  building {side}'s stores", flush=True)
            shutil.rmtree(stores[side], ignore_errors=True)
            cmd = [sys.executable, str(script), "build", str(stores[side]),
                   "--n", str(args.n), "--queries", str(args.queries),
                   "--ks", ",".join(map(str, args.ks)), "--seed", str(args.seed),
                   "--grow", str(args.grow)] + (["--merge-levels"] if args.merge_levels else [])
            out = _run(cmd, scripts, {**os.environ, "PYTHONPATH": str(trees[side])})
            built[side] = json.loads(out.strip().splitlines()[-1])
            if args.keep_stores:
                done.write_text(json.dumps(built[side]))
        for r in range(args.rounds):
            if args.cold:
                drop_page_cache()
            servers = {s: Server(script, trees[s], stores[s], args) for s in SIDES}
            try:
                ready.append({s: servers[s].ready["found"] for s in SIDES})
                for b in range(args.blocks):
                    lo = (b * args.block) % args.queries
                    hi = min(lo + args.block, args.queries)
                    for k in args.ks:
                        order = SIDES if (b + r) % 2 == 0 else SIDES[::-1]
                        for side in order:
                            times[k][side].append(servers[side].block(k, lo, hi))
            finally:
                for server in servers.values():
                    server.close()
            last = {k: summarize({s: v[s][-args.blocks:] for s in SIDES}) for k, v in times.items()}
            shown = "  ".join(f"k={k} {v['pair_ratio']['median']:.3f}" for k, v in last.items())
            print(f"  round {r + 1}: median pair ratio head/base {shown}", flush=True)
    finally:
        notes += clean_up(made, run_dir)
    summary = {str(k): summarize(times[k]) for k in args.ks}
    print(f"  {'k':>3} {'base p50':>9} {'head p50':>9} {'pooled':>7} {'pairs: q1':>10} "
          f"{'median':>7} {'q3':>6}  (µs; head/base)")
    for k, s in summary.items():
        pr = s["pair_ratio"]
        print(f"  {k:>3} {s['base']['p50_us']:9.2f} {s['head']['p50_us']:9.2f} "
              f"{s['pooled_p50_ratio']:7.3f} {pr['q1']:10.3f} {pr['median']:7.3f} {pr['q3']:6.3f}")
    for i, found in enumerate(ready):
        for side, f in found.items():
            if any(v != args.queries for v in f.values()):
                notes.append(f"round {i + 1} {side}: planted neighbours found {f} of "
                             f"{args.queries}")
    load_end = load_average()
    print(f"  load average (1, 5, 15 min): start {' '.join(f'{v:.2f}' for v in load_start)}, "
          f"end {' '.join(f'{v:.2f}' for v in load_end)}", flush=True)
    for note in notes:
        print(f"  note: {note}", flush=True)
    return {
        "command": "abq",
        "params": {"n": args.n, "queries": args.queries, "ks": list(args.ks), "cold": args.cold,
                   "rounds": args.rounds, "blocks": args.blocks, "block": args.block,
                   "seed": args.seed, "evict_kib": args.evict,
                   "grow_batch": args.grow, "merge_levels": args.merge_levels},
        "base": {"rev": args.base, "commit": shas["base"]},
        "head": {"rev": args.head, "commit": shas["head"] or git("rev-parse", "HEAD"),
                 "working_tree": shas["head"] is None, "stores_of": reused,
                 "dirty_package": shas["head"] is None and bool(
                     git("status", "--porcelain", "--", "simstore", "csrc"))},
        "built": built,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "summary": summary,
        "blocks": {str(k): {s: [float(np.median(b)) / 1e3 for b in v[s]] for s in SIDES}
                   for k, v in times.items()},
        "notes": notes,
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench abq``."""
    p.add_argument("--base", required=True, help="base revision (any git commit-ish)")
    p.add_argument("--head", default=None,
                   help="head revision (default: this checkout's working tree, as it is)")
    p.add_argument("--ks", type=sizes, default=[3, 5, 8], help="k values (default 3,5,8)")
    p.add_argument("--n", type=positive, default=1_000_000,
                   help="random fingerprints per store (default %(default)s)")
    p.add_argument("--queries", type=positive, default=1000,
                   help="queries, each with a planted neighbour (default %(default)s)")
    p.add_argument("--block", type=positive, default=100,
                   help="queries a block, one block a side in turn (default %(default)s)")
    p.add_argument("--blocks", type=positive, default=50,
                   help="blocks a side per k and round (default %(default)s)")
    p.add_argument("--rounds", type=positive, default=3,
                   help="fresh serving processes this many times (default %(default)s)")
    p.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    p.add_argument("--cold", action="store_true",
                   help="drop the page cache before each round's serving processes start "
                        "(root), so their warm-up reads the stores in from the disk")
    p.add_argument("--keep-stores", action="store_true",
                   help=f"keep a committed revision's stores under {KEPT.relative_to(REPO)} "
                        "and reuse them in later runs with the same data")
    p.add_argument("--evict", type=int, default=0, metavar="KIB",
                   help="each serving process reads this many KiB of other memory before "
                        "each query (not timed), as a crawler's other work between its "
                        "queries would")
    p.add_argument("--grow", type=int, default=0, metavar="BATCH",
                   help="build each store by adding its fingerprints BATCH a durable commit "
                        "(a store a crawler grew, its levels merged as it went) instead of "
                        "one bulk load")
    p.add_argument("--merge-levels", action="store_true",
                   help="with --grow: then merge each store's levels into one "
                        "(store.merge_levels(), on a side whose revision has it)")
    p.add_argument("--head-stores", default=None, metavar="REV",
                   help="the head queries the stores kept for REV (an earlier commit that "
                        "writes stores the same way) instead of building its own; with "
                        "--keep-stores")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
