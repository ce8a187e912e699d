"""``writes``: a durable writer's sustained adds (and removes) on a large store.

One store of N random fingerprints is built once per revision (by that revision's code,
so in its format, see ``readers``) and copied fresh for every run. A writer process then
commits ``--adds`` new documents, 1,000 per durable commit; with ``--removes`` each
commit (one ``batch()``) also removes as many of the store's first documents (or, with
``--pick random``, as many live ones anywhere), so the store keeps its size while its
tables churn. It reports adds/s over the commits' time,
the median, 99th percentile and worst commit, and the store's file size, disk blocks and used pages
per live fingerprint before and after; with ``--trace N`` the file's pages and the pages in
use every N commits, with ``--queries N`` the p50 of 200 queries (outside the commits'
time; ``similar()`` in a similarity store, ``--ids sig``) and the run tables' level
count every N commits, and ``--set`` changes a constant
of the writer's simstore for an experiment (a trace of churn under another stale share
or run size).

``--base REV`` runs the same writes with REV's simstore on its own copy of a store of the
same fingerprints, alternating head and base ``--rounds`` times, so both are measured in
the same run on the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ._harness import REPO, git, load_average
from .readers import sides

# A crawler's kind of id: a URL whose host jumps about with its number (a frontier
# interleaves thousands of hosts), so a commit's ids land all over the ids table.
URL_ID = 'lambda i: f"https://site{i * 7919 % 50021}.example.org/page/{i:x}"'

# Random signatures (int ids): merges and probes cost as many as real ones, hits aside.
SIGS = r'''
def SIGS(g, n):
    cfg = simstore.SIGNATURE_CONFIG
    return simstore.Signatures(cfg, *(
        g.integers(0, 2**64 - 1, shape, dtype=np.uint64, endpoint=True)
        for shape in (n, (n, cfg.sketch_bits // 64), (n, cfg.bands))))
'''

WRITER = r'''
import json, os, sys, time
import numpy as np
import simstore
from simstore import SimStore
path, adds, removes, per = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", 1000
kind = sys.argv[4]
rng = np.random.default_rng(int(os.environ.get("BENCH_WSEED", "7")))
pick = os.environ.get("BENCH_PICK", "oldest")
import importlib
for name, value in json.loads(os.environ.get("BENCH_SET", "{}")).items():
    mod, attr = name.rsplit(".", 1)  # e.g. merges.STALE_SHARE: a constant of simstore.store
    mod = importlib.import_module("simstore.store." + mod)
    if not hasattr(mod, attr):
        raise SystemExit(f"--set: simstore.store.{name} does not exist in this tree")
    setattr(mod, attr, value)
every = int(os.environ.get("BENCH_TRACE", "0"))
qevery = int(os.environ.get("BENCH_QUERIES", "0"))
URL = ''' + URL_ID + SIGS + r'''
QS = [int(x) for x in np.random.default_rng(8).integers(0, 2**64 - 1, 200, dtype=np.uint64,
                                                         endpoint=True)]
if kind == "sig":
    QS = list(SIGS(np.random.default_rng(8), 200))

def size(s):
    st = s.stats()
    data = os.stat(os.path.join(path, "data.mdb"))
    return {"file_bytes": data.st_size, "disk_bytes": data.st_blocks * 512,
            "used_bytes": st["used_bytes"], "live": len(s)}

s = SimStore(path)
before = size(s)
n0 = len(s)
live = np.arange(n0 if pick == "random" else 0, dtype=np.int64)  # live docs (--pick random)
times, trace, queried = [], [], []

def db_pages(env, txn):
    """Pages (branch, leaf and overflow) of each named database."""
    out = {}
    for name in [k for k, _ in txn.cursor()]:
        st = txn.stat(env.open_db(name, txn=txn, create=False))
        out[name.decode()] = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
    return out

def pages():
    """(file pages, pages in some database) now."""
    env = s._env.env
    with env.begin() as txn:
        used = sum(db_pages(env, txn).values())
    return env.info()["last_pgno"] + 1, used
for i in range(adds // per):
    fps = SIGS(rng, per) if kind == "sig" else \
        rng.integers(0, 2**64 - 1, per, dtype=np.uint64, endpoint=True)
    if kind in ("int", "sig"):  # the pristine store's kind of id, numbered on after its own
        ids = range(n0 + i * per, n0 + (i + 1) * per)
    elif kind == "url":  # likewise, its URLs numbered on
        ids = [URL(j) for j in range(n0 + i * per, n0 + (i + 1) * per)]
    else:
        ids = [f"w{i}-{j}" for j in range(per)]
    if pick == "random":  # as many live docs anywhere in the store, the new ones after
        at = rng.choice(len(live), per, replace=False)
        nums = live[at].tolist()
        live = np.concatenate([np.delete(live, at), np.arange(n0 + i * per, n0 + (i + 1) * per)])
    else:
        nums = range(i * per, (i + 1) * per)
    gone = [URL(j) for j in nums] if kind == "url" else nums
    a = time.perf_counter()
    if removes:
        with s.batch():
            s.add_many(ids, fps)
            s.remove_many(gone)
    else:
        s.add_many(ids, fps)
    times.append(time.perf_counter() - a)
    if every and (i % every == 0 or i == adds // per - 1):
        trace.append([i + 1, *pages()])
    if qevery and (i % qevery == 0 or i == adds // per - 1):
        ns = []
        for q in QS:
            b = time.perf_counter_ns()
            s.similar(q, 0.9) if kind == "sig" else s.query(q)
            ns.append(time.perf_counter_ns() - b)
        levels = s.stats().get("levels")  # None before the stats had them
        queried.append([i + 1, sorted(ns)[len(ns) // 2] / 1e3,
                        None if levels is None else len(levels)])
after = size(s)
problems = s.verify() if os.environ.get("BENCH_VERIFY") else None
s.close()

def breakdown():
    """Bytes per live fingerprint of each database, and of the file's pages in no database."""
    import lmdb
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=256)
    with env.begin() as txn:
        named = db_pages(env, txn)
        main = txn.stat()
    psize = main["psize"]
    out = {name: n * psize / after["live"] for name, n in named.items()}
    used = sum(named.values()) + main["branch_pages"] + main["leaf_pages"] \
        + main["overflow_pages"] + 2
    out["unused"] = (env.info()["last_pgno"] + 1 - used) * psize / after["live"]
    env.close()
    return out

t = sorted(times)
print(json.dumps({
    "adds": len(t) * per, "adds_per_s": len(t) * per / sum(t),
    "median_commit_ms": 1e3 * t[len(t) // 2], "p99_commit_ms": 1e3 * t[int(len(t) * 0.99)],
    "worst_commit_ms": 1e3 * t[-1], "over_100ms": sum(x > 0.1 for x in t),
    "before": before, "after": after, "verify": problems, "b_per_fp_by_db": breakdown(),
    "simstore_file": simstore.__file__, "trace": trace, "queried": queried,
}))
'''

BUILD_URLS = r'''
import sys, time
import numpy as np
from simstore import SimStore
path, n, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
URL = ''' + URL_ID + r'''
fps = np.random.default_rng(seed).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
t0 = time.perf_counter()
with SimStore(path, k=k, expected_size=n) as s:
    for a in range(0, n, 1_000_000):
        s.add_many([URL(i) for i in range(a, min(a + 1_000_000, n))], fps[a : a + 1_000_000])
print(f"built {path} ({n:,} fingerprints with URL ids, k={k}) in {time.perf_counter() - t0:.1f} s")
'''


BUILD_SIGS = r'''
import sys, time
import numpy as np
import simstore
''' + SIGS + r'''
path, n, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
g = np.random.default_rng(seed)
t0 = time.perf_counter()
with simstore.SimStore(path, k=k, config=simstore.SIGNATURE_CONFIG, expected_size=n) as s:
    for a in range(0, n, 1_000_000):
        s.add_many(range(a, min(a + 1_000_000, n)), SIGS(g, min(a + 1_000_000, n) - a))
print(f"built {path} ({n:,} random signatures, k={k}) in {time.perf_counter() - t0:.1f} s")
'''


def _own_store(tree: Path, int_store: Path, args: argparse.Namespace) -> Path:
    """The pristine store of --n fingerprints with URL ids (--ids url), or of --n random
    signatures with int ids (--ids sig), built by tree's simstore."""
    path = int_store.with_name(int_store.name.replace(f"-k{args.k}-", f"-k{args.k}-{args.ids}-"))
    if not path.exists():
        env = {**os.environ, "PYTHONPATH": str(tree)}
        build = BUILD_URLS if args.ids == "url" else BUILD_SIGS
        out = subprocess.run([sys.executable, "-c", build, str(path), str(args.n),
                              str(args.k), str(args.seed)], env=env, cwd=path.parent,
                             check=True, capture_output=True, text=True)
        print(out.stdout.strip(), flush=True)
    return path


def _run(tree: Path, pristine: Path, work: Path, adds: int, removes: bool,
         verify: bool, ids: str, trace: int = 0, sets: dict[str, int] | None = None,
         queries: int = 0, pick: str = "oldest", wseed: int = 7) -> dict[str, Any]:
    """The writer on a fresh copy of the pristine store; its report."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work)
    subprocess.run(["sync"], check=False)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if verify:
        env["BENCH_VERIFY"] = "1"
    env["BENCH_TRACE"], env["BENCH_SET"] = str(trace), json.dumps(sets or {})
    env["BENCH_QUERIES"] = str(queries)
    env["BENCH_PICK"], env["BENCH_WSEED"] = pick, str(wseed)
    out = subprocess.run([sys.executable, "-c", WRITER, str(work), str(adds),
                          "1" if removes else "0", ids], env=env, cwd=work.parent,
                         capture_output=True, text=True)
    if out.returncode:
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit(f"the writer failed:\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(res.pop("simstore_file")).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the writer did not import {tree}'s simstore")
    shutil.rmtree(work)
    for key in ("before", "after"):
        res[key]["file_b_per_fp"] = res[key]["file_bytes"] / max(res[key]["live"], 1)
        # the blocks on disk: a writer's file runs past its pages by a hole of room for
        # its next writes, prepared in huge pages (simstore.store.env.readahead.HugeGrowth)
        res[key]["disk_b_per_fp"] = res[key].get("disk_bytes", res[key]["file_bytes"]) / \
            max(res[key]["live"], 1)
        res[key]["used_b_per_fp"] = res[key]["used_bytes"] / max(res[key]["live"], 1)
    res["used_growth"] = res["after"]["used_b_per_fp"] / res["before"]["used_b_per_fp"] - 1
    res["file_growth"] = res["after"]["file_b_per_fp"] / res["before"]["file_b_per_fp"] - 1
    res["disk_growth"] = res["after"]["disk_b_per_fp"] / res["before"]["disk_b_per_fp"] - 1
    return res


def _sets(items: list[str]) -> dict[str, int]:
    """--set MODULE.NAME=INT items as a dict, checked."""
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if "." not in name or not value.lstrip("-").isdigit():
            raise SystemExit(f"--set takes MODULE.NAME=INT (got {item!r})")
        out[name] = int(value)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Sustained durable writes on an N store, head and base alternating."""
    sets = _sets(args.set)  # refused before any store is built
    if args.trace < 0 or args.queries < 0:
        raise SystemExit("--trace and --queries take a count of commits >= 0 "
                         f"(got {args.trace}, {args.queries})")
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    load0 = load_average()
    pairs = sides(args, workdir)
    if args.ids in ("url", "sig"):
        pairs = {side: (tree, _own_store(tree, store, args)) for side, (tree, store) in
                 pairs.items()}
    rows = []
    for r in range(args.rounds):
        for side, (tree, store) in pairs.items():
            res = _run(tree, store, workdir / f"work-{side}", args.adds, args.removes,
                       args.verify, args.ids, args.trace, sets, args.queries, args.pick,
                       args.writer_seed)
            res.update(side=side, round=r)
            rows.append(res)
            print(f"  {side:<4} round {r}: {res['adds_per_s']:9.0f} adds/s  commit p50 "
                  f"{res['median_commit_ms']:6.1f} p99 {res['p99_commit_ms']:7.1f} worst "
                  f"{res['worst_commit_ms']:8.1f} ms ({res['over_100ms']} over 100 ms)  "
                  f"used/fp {res['before']['used_b_per_fp']:.0f} -> "
                  f"{res['after']['used_b_per_fp']:.0f} B  file/fp "
                  f"{res['before']['file_b_per_fp']:.0f} -> {res['after']['file_b_per_fp']:.0f} B"
                  f"  disk/fp {res['before']['disk_b_per_fp']:.0f} -> "
                  f"{res['after']['disk_b_per_fp']:.0f} B"
                  + (f"  verify {res['verify']}" if args.verify else ""), flush=True)
            if res["trace"]:
                fp = [row[1] for row in res["trace"]]
                print(f"       file pages {fp[0]} -> {fp[-1]} (most {max(fp)}), in use "
                      f"{res['trace'][-1][2]} at the end", flush=True)
            if res["queried"]:
                p50s = [row[1] for row in res["queried"]]
                lv = [row[2] for row in res["queried"] if row[2] is not None]
                print(f"       query p50 between commits: median {sorted(p50s)[len(p50s) // 2]:.1f}"
                      f" us, worst {max(p50s):.1f} us"
                      + (f"; levels at most {max(lv)}" if lv else ""), flush=True)
            print("       B per fp by database: " + ", ".join(
                f"{db} {b:.1f}" for db, b in res["b_per_fp_by_db"].items()), flush=True)
    return {
        "benchmark": "writes", "n": args.n, "k": args.k, "adds": args.adds,
        "removes": args.removes, "ids": args.ids, "base": args.base, "head": args.head,
        "trace_every": args.trace, "queries_every": args.queries, "set": sets,
        "pick": args.pick, "writer_seed": args.writer_seed,
        "commit": git("rev-parse", "HEAD"),
        "load_start": load0, "load_end": load_average(), "rows": rows,
        "command": " ".join(["python -m tools.bench", *args.argv]),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench writes``."""
    p.add_argument("--n", type=int, default=1_000_000, help="fingerprints in the store")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--adds", type=int, default=300_000, help="documents added, 1,000 a commit")
    p.add_argument("--removes", action="store_true",
                   help="each commit also removes 1,000 of the store's documents (--pick)")
    p.add_argument("--pick", choices=("oldest", "random"), default="oldest",
                   help="which documents --removes takes: the oldest (a crawl's expiry) or "
                   "any live ones at random")
    p.add_argument("--writer-seed", type=int, default=7,
                   help="the writer's fingerprints (and --pick random's choices)")
    p.add_argument("--ids", choices=("str", "int", "url", "sig"), default="str",
                   help="the added documents' ids: str ('w12-345', longer than the store's "
                   "own int ids, so records and id keys grow too), int (numbered on after "
                   "the store's, like for like) or url (a store built with URL ids of "
                   "hosts all over the key order, and more of them: like for like) or sig (a "
                   "similarity store of random signatures with int ids; adds signatures, "
                   "--queries times similar(sig, 0.9))")
    p.add_argument("--rounds", type=int, default=1, help="head/base alternations")
    p.add_argument("--verify", action="store_true", help="verify() the store after each run")
    p.add_argument("--trace", type=int, default=0, metavar="N",
                   help="record the file's pages and the pages in use every N commits")
    p.add_argument("--queries", type=int, default=0, metavar="N",
                   help="every N commits, time 200 queries (their p50) and count the levels")
    p.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT",
                   help="set a constant of simstore.store in the writer (both sides), e.g. "
                   "merges.STALE_SHARE=8 or runs.RUN_ENTRIES=5117; repeatable")
    p.add_argument("--head", help="run this revision's simstore as the head (a worktree)")
    p.add_argument("--base", help="also run with this revision's simstore")
    p.add_argument("--workdir", default=str(REPO / ".bench" / "readers"))
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--out", type=Path, help="write the JSON result here")
