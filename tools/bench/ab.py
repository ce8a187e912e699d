"""``ab``: a "no slowdown" check of two revisions measured in the same run.

The base revision (and the head, if given) is checked out with ``git worktree add
--detach`` under ``.bench/ab/``; without ``--head`` the head is this checkout itself.
Each tree's C module is built in it, then fresh processes, alternating base and head
round after round, import their own tree's ``simstore`` (PYTHONPATH) and run
``_ab_probe.py``. Medians over the rounds are compared as head / base.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._cli import positive, sizes
from ._harness import REPO, git, load_average

AB_DIR = REPO / ".bench" / "ab"
PROBE = Path(__file__).with_name("_ab_probe.py")


def metrics(ks: tuple[int, ...]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(key in the summary, label, unit, how to read it from one probe result) per metric."""
    return [
        *((f"query_k{k}_{p}", f"query k={k} {p}", "us", ("k", str(k), f"{p}_us"))
          for k in ks for p in ("p50", "p90", "p99")),
        *((f"load_k{k}_s", f"bulk load k={k}", "s", ("k", str(k), "load_s")) for k in ks),
        ("find_all_s", "find_all k=3", "s", ("find_all_s",)),
        *((f"{c}_k{k}_ms", f"durable {c} k={k}", "ms", ("k", str(k), f"{c}_ms"))
          for k in ks for c in ("add", "add_if_new")),
    ]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run cmd in cwd; its stdout, or SystemExit with its stderr if it fails."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)} in {cwd}\n"
                         f"{proc.stderr.strip()[-3000:]}")
    return proc.stdout


def resolve(rev: str) -> str:
    """The full commit id of rev, or SystemExit."""
    sha = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if not sha:
        raise SystemExit(f"{rev!r} is not a commit of {REPO}")
    return sha


def add_worktree(sha: str, path: Path) -> Path:
    """A detached checkout of sha at path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _run(["git", "worktree", "add", "--detach", str(path), sha], REPO)
    return path


def remove_worktree(path: Path) -> str | None:
    """Remove a worktree made by add_worktree; a message if that failed."""
    proc = subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO,
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else f"could not remove {path}: {proc.stderr.strip()}"


def clean_up(made: list[Path], run_dir: Path) -> list[str]:
    """Remove the worktrees made and the run's scratch directory; messages of failures."""
    notes = [msg for msg in map(remove_worktree, made) if msg]
    shutil.rmtree(run_dir, ignore_errors=True)
    return notes


def build(tree: Path) -> None:
    """Build the tree's C module in place.

    A worktree of ours is built with ``setup.py build_ext --inplace``. This
    checkout may have the module loaded in other processes, so it is built with
    ``tools/dev_build.sh`` (build aside, then an atomic rename into place).
    """
    print(f"building the C module in {tree}", flush=True)
    if tree == REPO:
        _run(["bash", str(REPO / "tools" / "dev_build.sh")], REPO,
             env={**os.environ, "PY": sys.executable})
    else:
        _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], tree)


def probe(tree: Path, script: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One measurement in a fresh process that imports tree's simstore."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(script), "--n", str(args.n), "--queries", str(args.queries),
           "--ks", ",".join(map(str, args.ks)), "--seed", str(args.seed), "--workdir", str(workdir)]
    out = json.loads(_run(cmd, workdir, env).strip().splitlines()[-1])
    imported = Path(out["simstore_file"]).resolve()
    if not imported.is_relative_to(tree.resolve()):
        raise SystemExit(f"the probe for {tree} imported simstore from {imported}")
    return out


def _pick(result: dict[str, Any], path: tuple[str, ...]) -> float:
    v: Any = result
    for key in path:
        v = v[key]
    return float(v)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Query p50/p90/p99 (--ks, default 3 and 5), bulk load and find_all of two revisions,
    head / base."""
    load_start = load_average()
    base_sha = resolve(args.base)
    head_sha = resolve(args.head) if args.head else None
    run_dir = AB_DIR / f"run-{os.getpid()}"
    trees: dict[str, Path] = {}
    made: list[Path] = []
    notes: list[str] = []
    runs: list[dict[str, Any]] = []
    print(f"== ab ==  base {args.base} ({base_sha[:12]}), head "
          f"{args.head or 'working tree'} ({(head_sha or git('rev-parse', 'HEAD') or '?')[:12]})"
          f"  n={args.n:,} queries={args.queries} rounds={args.repeat}", flush=True)
    try:
        trees["base"] = add_worktree(base_sha, run_dir / "trees" / "base")
        made.append(trees["base"])
        if head_sha:
            trees["head"] = add_worktree(head_sha, run_dir / "trees" / "head")
            made.append(trees["head"])
        else:
            trees["head"] = REPO
        for tree in trees.values():
            build(tree)
        script = run_dir / "probe" / "probe.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROBE, script)
        workdir = run_dir / "stores"
        workdir.mkdir(parents=True, exist_ok=True)
        for r in range(args.repeat):
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for side in order:
                t0 = time.perf_counter()
                res = probe(trees[side], script, args, workdir)
                res.update(round=r + 1, side=side, seconds=round(time.perf_counter() - t0, 1))
                runs.append(res)
                print(f"  round {r + 1} {side:<4} " + "  ".join(
                    f"{m[0]}={_pick(res, m[3]):.4g}" for m in metrics(tuple(args.ks)))
                    + f"  ({res['seconds']} s)",
                    flush=True)
    finally:
        notes += clean_up(made, run_dir)
    summary = {}
    print(f"  {'metric':<22} {'unit':<5} {'base median':>12} {'head median':>12} {'head/base':>10}")
    for key, label, unit, path in metrics(tuple(args.ks)):
        med = {side: float(np.median([_pick(x, path) for x in runs if x["side"] == side]))
               for side in ("base", "head")}
        ratio = med["head"] / med["base"] if med["base"] else float("nan")
        summary[key] = {"label": label, "unit": unit, **med, "ratio": ratio}
        print(f"  {label:<22} {unit:<5} {med['base']:12.4g} {med['head']:12.4g} {ratio:10.3f}")
    for side in ("base", "head"):
        recall = {f"k={k}": sorted({x["k"][str(k)]["recall"] for x in runs if x["side"] == side})
                  for k in args.ks}
        if any(v != [args.queries] for v in recall.values()):
            notes.append(f"{side}: planted neighbours found {recall} of {args.queries}")
    pairs = {x["side"]: x["find_all_pairs"] for x in runs}
    if len(set(pairs.values())) > 1:
        notes.append(f"find_all pair counts differ: {pairs}")
    load_end = load_average()
    shown = [" ".join(f"{v:.2f}" for v in x) for x in (load_start, load_end)]
    print(f"  load average (1, 5, 15 min): start {shown[0]}, end {shown[1]}", flush=True)
    for note in notes:
        print(f"  note: {note}", flush=True)
    return {
        "command": "ab",
        "params": {"n": args.n, "queries": args.queries, "repeat": args.repeat,
                   "seed": args.seed, "ks": list(args.ks), "find_all_k": 3},
        "base": {"rev": args.base, "commit": base_sha, "tree": str(trees.get("base"))},
        "head": {"rev": args.head, "commit": head_sha or git("rev-parse", "HEAD"),
                 "tree": str(trees.get("head")),
                 "working_tree": head_sha is None,
                 "dirty_package": head_sha is None and bool(
                     git("status", "--porcelain", "--", "simstore", "csrc"))},
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "summary": summary,
        "runs": runs,
        "notes": notes,
    }


def add_arguments(ab: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench ab``."""
    ab.add_argument("--base", required=True, help="base revision (any git commit-ish)")
    ab.add_argument("--head", default=None,
                    help="head revision (default: this checkout's working tree, as it is)")
    ab.add_argument("--ks", type=sizes, default=[3, 5],
                    help="k values, one store each (default 3,5)")
    ab.add_argument("--n", type=positive, default=200_000,
                    help="random fingerprints per store and for find_all (default %(default)s)")
    ab.add_argument("--queries", type=positive, default=1000,
                    help="timed queries per store, each with a planted neighbour "
                         "(default %(default)s)")
    ab.add_argument("--repeat", type=positive, default=5,
                    help="rounds, each one process per side, order alternating "
                         "(default %(default)s)")
    ab.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    ab.add_argument("--out", type=Path, default=None, help="write the JSON result here")
