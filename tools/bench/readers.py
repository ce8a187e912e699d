"""``readers``: many processes on one store: first answer, private memory, queries/s, writer.

One store of N random fingerprints is built once per revision (by that revision's code,
so in its format) and kept in ``--workdir`` between runs.
Then, for each reader count R, R fresh processes open it at the same moment; each
times its first answer (open + first query), runs ``--queries`` queries with planted
neighbours, and reports from ``/proc/self/smaps_rollup`` its private memory
(Private_Clean + Private_Dirty), proportional share (Pss) and anonymous memory
(RssAnon) growth over an opened empty store. Pages of the store's map that only one
process has touched count as Private_Clean: RssAnon is what a private copy costs.
With ``--writer`` one more process adds durably, 1,000 documents per commit, while
the readers run: adds/s and its worst commit; each round then runs on a fresh copy of
the store, so no round measures what an earlier one grew. ``--cold`` drops the page cache before
each round (root), so first answers are read from disk.

``--base REV`` runs every reader count a second time with REV's simstore (a git
worktree under ``--workdir``, its C module built in place) on a store of the same
fingerprints built by REV, so the two engines are measured in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._harness import REPO, git, load_average

READER = r'''
import json, os, sys, time
import numpy as np

def mem():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0].rstrip(":") in ("Pss", "Private_Clean", "Private_Dirty", "Rss"):
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                out["RssAnon"] = int(line.split()[1]) * 1024
    out["Private"] = out.pop("Private_Clean") + out.pop("Private_Dirty")
    return out

store_path, empty_path, qfile, go = sys.argv[1:5]
import simstore
from simstore import SimStore
qs = np.load(qfile).tolist()
e = SimStore(empty_path, readonly=True)
e.query(qs[0])
before = mem()
while not os.path.exists(go):
    time.sleep(0.001)
t0 = time.perf_counter()
s = SimStore(store_path, readonly=True)
first_hits = len(s.query(qs[0]))
first = time.perf_counter() - t0
lat = []
found = 0
for q in qs:
    a = time.perf_counter_ns()
    found += bool(s.query(q))
    lat.append(time.perf_counter_ns() - a)
wall = time.perf_counter() - t0
after = mem()
lat.sort()
print(json.dumps({
    "simstore_file": simstore.__file__, "first_s": first, "first_hits": first_hits,
    "found": found, "queries": len(qs), "p50_us": lat[len(lat) // 2] / 1e3,
    "p99_us": lat[int(len(lat) * 0.99)] / 1e3, "wall_s": wall,
    "grow": {k: after[k] - before[k] for k in after}, "after": after,
}))
'''

WRITER = r'''
import json, os, sys, time
import numpy as np
from simstore import SimStore
store_path, stop, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rng = np.random.default_rng(7)
s = SimStore(store_path)
times, n, i = [], 0, 0
end = time.perf_counter() + seconds
while time.perf_counter() < end and not os.path.exists(stop):
    fps = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64, endpoint=True)
    a = time.perf_counter()
    s.add_many([f"w{os.getpid()}-{i}-{j}" for j in range(1000)], fps)
    times.append(time.perf_counter() - a)
    n += 1000
    i += 1
total = sum(times)
times.sort()
print(json.dumps({"adds": n, "adds_per_s": n / total if total else 0.0,
                  "median_commit_ms": 1e3 * times[len(times) // 2] if times else 0.0,
                  "worst_commit_ms": 1e3 * times[-1] if times else 0.0}))
'''


def _queries(fps: np.ndarray, n: int, seed: int) -> np.ndarray:
    """n queries: stored fingerprints with 0..3 random bits flipped."""
    rng = np.random.default_rng(seed)
    qs = fps[rng.integers(0, len(fps), n)].copy()
    for i in range(n):
        for b in rng.choice(64, int(rng.integers(0, 4)), replace=False):
            qs[i] ^= np.uint64(1 << int(b))
    return qs


BUILD = r'''
import sys, time
import numpy as np
from simstore import SimStore
path, n, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fps = np.random.default_rng(seed).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
t0 = time.perf_counter()
with SimStore(path, k=k, expected_size=n) as s:
    for a in range(0, n, 5_000_000):
        s.add_many(range(a, min(a + 5_000_000, n)), fps[a : a + 5_000_000])
print(f"built {path} ({n:,} fingerprints, k={k}) in {time.perf_counter() - t0:.1f} s")
'''


# One write by the head's simstore: a store of an older format gets the head's (its
# first write brings it there), at the cost of one more document.
UPGRADE = r'''
import sys, time
from simstore import SimStore
t0 = time.perf_counter()
with SimStore(sys.argv[1]) as s:
    s.add("upgraded by its first write", 0x5EED)
    fmt = s.stats()["format_version"]
print(f"brought {sys.argv[1]} to format {fmt} by one add in {time.perf_counter() - t0:.1f} s")
'''


def _upgraded_copy(tree: Path, src: Path, path: Path) -> None:
    """path: a copy of the store src, brought to tree's format by one add (if missing)."""
    if path.exists():
        return
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", UPGRADE, str(tmp)], env=env, cwd=path.parent,
                         check=True, capture_output=True, text=True)
    tmp.rename(path)
    print(out.stdout.strip(), flush=True)


def _build(tree: Path, path: Path, n: int, k: int, seed: int) -> None:
    """The store at path, built by tree's simstore if missing (so it has tree's format)."""
    if path.exists():
        return
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", BUILD, str(path), str(n), str(k), str(seed)],
                         env=env, cwd=path.parent, check=True, capture_output=True, text=True)
    print(out.stdout.strip(), flush=True)


def _fps(n: int, seed: int) -> np.ndarray:
    """The fingerprints BUILD stores."""
    return np.random.default_rng(seed).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)


def _tree(rev: str, workdir: Path) -> Path:
    """A worktree of rev with its C module built in place."""
    tree = workdir / f"tree-{rev[:12]}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO,
                       check=True, capture_output=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                   check=True, capture_output=True)
    return tree


def _tree_rev(tree: Path) -> str:
    """The tree's short commit, plus a digest of its uncommitted changes to the package
    and C sources, if any: a store built by an edited checkout is not its commit's."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=tree, capture_output=True, text=True,
                              check=True).stdout
    rev = git("rev-parse", "--short", "HEAD").strip()
    diff = git("diff", "HEAD", "--", "simstore", "csrc")
    if diff:
        rev += "-wip" + hashlib.sha1(diff.encode()).hexdigest()[:8]
    return rev


def sides(args: argparse.Namespace, workdir: Path, build: bool = True
          ) -> dict[str, tuple[Path, Path]]:
    """side -> (source tree, store of --n fingerprints at --k built by that tree): the head
    (--head's worktree, else this checkout) and, with --base, the base."""
    upgrade = getattr(args, "upgrade_base", False)
    if upgrade and not args.base:
        raise SystemExit("--upgrade-base needs --base (the store to copy)")
    trees = {"head": _tree(args.head, workdir) if args.head else REPO}
    if args.base:
        trees["base"] = _tree(args.base, workdir)
    out = {}
    for side, tree in sorted(trees.items()):  # each side reads a store of its own format
        rev = _tree_rev(tree)
        store = workdir / f"store-{args.n}-k{args.k}-{rev}"
        if build and side == "head" and upgrade:
            store = workdir / f"store-{args.n}-k{args.k}-upgraded-{rev}"
            _upgraded_copy(tree, out["base"][1], store)
        elif build:
            _build(tree, store, args.n, args.k, args.seed)
        elif not store.exists():
            raise SystemExit(f"no store {store}: run `readers` with the same --n/--k first")
        out[side] = (tree, store)
    return {side: out[side] for side in trees}


def _round(tree: Path, store: Path, empty: Path, qfile: Path, readers: int, writer: float,
           workdir: Path) -> dict[str, Any]:
    """R readers (and maybe a writer) started together on the store; their reports."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    go = workdir / f"go-{os.getpid()}-{time.monotonic_ns()}"
    procs = [subprocess.Popen([sys.executable, "-c", READER, str(store), str(empty), str(qfile),
                               str(go)], env=env, stdout=subprocess.PIPE, text=True, cwd=workdir)
             for _ in range(readers)]
    wproc = None
    if writer:
        wproc = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(go) + ".stop",
                                  str(writer)], env=env, stdout=subprocess.PIPE, text=True,
                                 cwd=workdir)
    time.sleep(2.0 + 0.2 * readers)  # every reader imported and opened the empty store
    t0 = time.perf_counter()
    go.touch()
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - t0
    Path(str(go) + ".stop").touch()
    wout = json.loads(wproc.communicate()[0].strip().splitlines()[-1]) if wproc else None
    go.unlink()
    Path(str(go) + ".stop").unlink()
    for o in outs:
        if not Path(o["simstore_file"]).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"a reader imported {o['simstore_file']}, not {tree}'s simstore")
    mib = 1 << 20
    return {
        "readers": readers,
        "first_s_max": max(o["first_s"] for o in outs),
        "first_s_median": float(np.median([o["first_s"] for o in outs])),
        "private_mib_each_max": max(o["grow"]["Private"] for o in outs) / mib,
        "private_mib_sum": sum(o["grow"]["Private"] for o in outs) / mib,
        "rssanon_mib_each_max": max(o["grow"]["RssAnon"] for o in outs) / mib,
        "pss_mib_sum": sum(o["after"]["Pss"] for o in outs) / mib,
        "p50_us_median": float(np.median([o["p50_us"] for o in outs])),
        "p99_us_max": max(o["p99_us"] for o in outs),
        "queries_per_s": sum(o["queries"] for o in outs) / wall,
        "found": sum(o["found"] for o in outs), "queries": sum(o["queries"] for o in outs),
        "writer": wout,
    }


def drop_page_cache() -> None:
    """Empty the kernel's page cache (root only), so each round starts with the store cold."""
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        raise SystemExit(f"--cold needs root to drop the page cache: {exc}") from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """1, 4 and 16 reader processes (and a durable writer) on one store, head and base."""
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    load0 = load_average()
    trees, stores, empties = {}, {}, {}
    for side, (tree, store) in sides(args, workdir).items():
        trees[side], stores[side] = tree, store
        empties[side] = workdir / f"empty-{store.name.rsplit('-', 1)[1]}"
        _build(tree, empties[side], 1, args.k, args.seed)
    qfile = workdir / "queries.npy"
    np.save(qfile, _queries(_fps(args.n, args.seed), args.queries, args.seed + 1))
    for side, p in stores.items():
        size = (p / "data.mdb").stat().st_size
        print(f"  {side:<4} store {size / 2**30:.2f} GiB, {size / args.n:.1f} B a fingerprint",
              flush=True)
    rows = []
    for r in args.counts:
        for side, tree in trees.items():
            store = stores[side]
            if args.writer:  # the writer grows the store: every round gets a fresh copy
                store = workdir / f"work-{side}"
                shutil.rmtree(store, ignore_errors=True)
                shutil.copytree(stores[side], store)
            subprocess.run(["sync"], check=False)
            if args.cold:
                drop_page_cache()
            try:
                res = _round(tree, store, empties[side], qfile, r, args.writer, workdir)
            finally:
                if args.writer:
                    shutil.rmtree(store, ignore_errors=True)
            res["side"] = side
            rows.append(res)
            w = res["writer"]
            print(f"  {side:<4} R={r:<3} first max {res['first_s_max'] * 1e3:8.1f} ms  "
                  f"anon each max {res['rssanon_mib_each_max']:6.1f} MiB  "
                  f"private each max {res['private_mib_each_max']:7.1f} MiB  sum "
                  f"{res['private_mib_sum']:8.1f} MiB  Pss sum {res['pss_mib_sum']:8.1f} MiB  "
                  f"p50 {res['p50_us_median']:6.1f} us  {res['queries_per_s']:8.0f} q/s"
                  + (f"  writer {w['adds_per_s']:.0f} adds/s worst {w['worst_commit_ms']:.0f} ms"
                     if w else ""), flush=True)
    out = {
        "benchmark": "readers", "n": args.n, "k": args.k, "queries": args.queries,
        "writer_s": args.writer, "base": args.base, "cold": args.cold,
        "head_store_upgraded_from_base": args.upgrade_base,
        "commit": git("rev-parse", "HEAD"),
        "stores": {side: str(p) for side, p in stores.items()},
        "store_bytes": {side: (p / "data.mdb").stat().st_size for side, p in stores.items()},
        "head": args.head, "load_start": load0, "load_end": load_average(), "rows": rows,
        "command": " ".join(["python -m tools.bench", *args.argv]),
    }
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench readers``."""
    p.add_argument("--n", type=int, default=1_000_000, help="fingerprints in the store")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16],
                   help="reader counts, comma-separated (default 1,4,16)")
    p.add_argument("--queries", type=int, default=1000, help="queries per reader")
    p.add_argument("--writer", type=float, default=0.0,
                   help="seconds a durable writer adds 1,000 docs a commit (0: no writer)")
    p.add_argument("--head", help="run this revision's simstore as the head (a worktree), "
                   "not this checkout's")
    p.add_argument("--base", help="also run with this revision's simstore (its own store of "
                   "the same fingerprints)")
    p.add_argument("--upgrade-base", action="store_true",
                   help="the head's store is a copy of the base's brought to the head's "
                        "format by one add (not a build of its own: saves a 100M build)")
    p.add_argument("--cold", action="store_true",
                   help="drop the page cache before each round (root): first answers from disk")
    p.add_argument("--workdir", default=str(REPO / ".bench" / "readers"))
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--out", type=Path, help="write the JSON result here")
