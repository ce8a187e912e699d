"""``probe-ab``: the C probe of other revisions against this checkout's, in one process.

Builds the C core of each revision named (its ``csrc/`` as committed) as a module of its
own under ``.bench/probe-ab/``, opens one store with this checkout's simstore, warms it
up, and calls each module's ``ss_probe`` on the same run sets (the same pages of the
map) for the same queries, in alternating blocks: every variant meets the machine's
phases alike, and only the C differs. The answers must be identical. Reports each
variant's median block p50 and the median (quartiles) of its blocks' ratios to this
checkout's. A revision whose run-set, run or plan structs differ from this checkout's
is refused (its ss_probe would misread them). ``--no-spans`` adds this checkout's C on
the plan without probe spans (``native.probe.span_masks``) as a variant; ``--evict KIB``
reads that much other memory before each timed call, so each starts with the caches a
process's other work left.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._cli import positive
from ._harness import REPO, git, load_average

WORK = REPO / ".bench" / "probe-ab"
STRUCTS = ("ss_run", "ss_runset", "ss_probe_plan", "ss_need")


def _cdef(header: str) -> str:
    return header.split("/* CDEF-BEGIN */", 1)[1].split("/* CDEF-END */", 1)[0]


def _structs(cdef: str) -> dict[str, str]:
    """The typedef'd struct bodies of a cdef, by name, whitespace-normalized."""
    out = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(\w+);", cdef, re.S):
        out[name] = " ".join(re.sub(r"/\*.*?\*/", "", body, flags=re.S).split())
    return out


def build_variant(rev: str, sha: str, name: str) -> Any:
    """Build the csrc of rev (commit sha) as module ``name`` (under WORK) and import it."""
    from cffi import FFI

    tree = WORK / sha[:12]
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", sha, "csrc", "simstore"], cwd=REPO,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    src = tree / "csrc"
    header = (src / "simstore.h").read_text()
    mine = _structs(_cdef((REPO / "csrc" / "simstore.h").read_text()))
    theirs = _structs(_cdef(header))
    for struct in STRUCTS:
        if mine.get(struct) != theirs.get(struct):
            raise SystemExit(f"{rev}: struct {struct} differs from this checkout's; its "
                             "ss_probe cannot read these run sets")
    spec = importlib.util.spec_from_file_location(f"{name}_gen", src / "gen_unicode.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.write(src / "unicode_tables.h")  # as the revision's build generates it
    sources = sorted(p.name for p in src.glob("*.c"))
    ffi = FFI()
    ffi.cdef(_cdef(header))
    ffi.set_source(name, '#include "simstore.h"', sources=[str(src / s) for s in sources],
                   include_dirs=[str(src)], libraries=["m"],
                   extra_compile_args=["-O3", "-std=c99", "-fno-strict-aliasing"])
    print(f"building {rev} ({sha[:12]}) as {name}", flush=True)
    built = ffi.compile(tmpdir=str(WORK / "modules"))
    # imported from its file, in this process: the variants must probe the same mapped pages
    spec = importlib.util.spec_from_file_location(name, built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Alternating blocks of ss_probe calls of each variant on one store."""
    from simstore import SimStore
    from simstore.native.core import ffi as my_ffi, lib as my_lib

    if args.evict < 0:
        raise SystemExit(f"--evict is KiB to read, 0 or more (got {args.evict})")
    if not args.rev and not args.no_spans:
        raise SystemExit("nothing to compare: give --rev REV or --no-spans")
    shas = {rev: git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}") for rev in args.rev}
    bad = [rev for rev, sha in shas.items() if not sha]
    if bad:
        raise SystemExit(f"--rev: not a commit: {', '.join(bad)}")
    load_start = load_average()
    store = SimStore(args.store, readonly=True)
    k = args.k if args.k is not None else store.k
    if not 0 <= k <= store.k:
        store.close()
        raise SystemExit(f"--k must be 0..{store.k} (the store's tables; got {k})")
    rng = np.random.default_rng(args.seed)
    qs = [int(q) for q in rng.integers(0, 2**64 - 1, size=args.queries, dtype=np.uint64,
                                       endpoint=True)]
    for q in qs:  # warm: every run fetched, the pages mapped
        store.query(q, k)
    tables = store._h.tables  # the store's prober: its plan and run sets
    prober = tables._prober
    plan_addr = int(my_ffi.cast("uintptr_t", prober.plan(tables._radius[k])))
    sets, nsets, _keep = prober._sets
    sets_addr = int(my_ffi.cast("uintptr_t", sets))
    variants: dict[str, tuple[Any, Any, int]] = {"this checkout": (my_ffi, my_lib, plan_addr)}
    if args.no_spans:  # the same C on the plan without spans
        variants["this checkout, no spans"] = (my_ffi, my_lib, int(my_ffi.cast(
            "uintptr_t", prober.plan(tables._radius[k], spans=False))))
    for i, (rev, sha) in enumerate(shas.items()):
        mod = build_variant(rev, str(sha), f"_probe_ab_{i}_{sha[:12]}")
        variants[rev] = (mod.ffi, mod.lib, plan_addr)
    calls = {}
    for name, (f, lib, addr) in variants.items():
        calls[name] = (lib.ss_probe, f.cast("ss_probe_plan *", addr),
                       f.cast("ss_runset *", sets_addr), f.new("uint64_t[]", args.cap),
                       f.new("uint8_t[]", args.cap), f.NULL)
    answers = {}
    for name, (probe, plan, c_sets, vals, dist, null) in calls.items():
        got = []
        for q in qs:
            m = probe(q, k, plan, c_sets, nsets, vals, dist, args.cap, null)
            if m < 0 or m > args.cap:
                raise SystemExit(f"{name}: ss_probe returned {m} (a run not loaded, or "
                                 "more hits than --cap)")
            got.append(list(vals[0:m]))
        answers[name] = got
    first = next(iter(answers.values()))
    differ = [name for name, got in answers.items() if got != first]
    if differ:
        raise SystemExit(f"answers differ from this checkout's: {differ}")
    names = list(calls)
    blocks: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter_ns
    # read before each timed call (not timed): a crawler's other work between its queries
    evict = np.ones(args.evict * 128, dtype=np.uint64) if args.evict else None
    for r in range(args.rounds):
        lo = (r * args.block) % len(qs)
        block = qs[lo:lo + args.block]
        for name in names if r % 2 == 0 else names[::-1]:
            probe, plan, c_sets, vals, dist, null = calls[name]
            ns = []
            for q in block:
                if evict is not None:
                    evict.sum()
                t = clock()
                probe(q, k, plan, c_sets, nsets, vals, dist, args.cap, null)
                ns.append(clock() - t)
            blocks[name].append(float(np.median(ns)) / 1e3)
    base = np.array(blocks[names[0]])
    summary = {}
    for name in names:
        ratio = np.array(blocks[name]) / base
        q1, med, q3 = np.percentile(ratio, [25, 50, 75])
        summary[name] = {"p50_us": float(np.median(blocks[name])), "ratio": float(med),
                         "q1": float(q1), "q3": float(q3)}
        print(f"  {name:<24} block p50 {summary[name]['p50_us']:7.2f} µs   ratio "
              f"{med:.3f} ({q1:.3f}-{q3:.3f})", flush=True)
    store.close()
    load_end = load_average()
    print(f"  load average: start {load_start[0]:.2f}, end {load_end[0]:.2f}", flush=True)
    return {"command": "probe-ab", "store": str(args.store), "k": k,
            "params": {"queries": args.queries, "block": args.block, "rounds": args.rounds,
                       "seed": args.seed, "evict_kib": args.evict},
            "head": {"commit": git("rev-parse", "HEAD"),
                     "dirty_csrc": bool(git("status", "--porcelain", "--", "csrc"))},
            "revs": shas,
            "loadavg_start": load_start, "loadavg_end": load_end,
            "summary": summary, "blocks": blocks}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench probe-ab``."""
    p.add_argument("--store", type=Path, required=True, help="an existing store to query")
    p.add_argument("--rev", action="append", default=[],
                   help="a revision whose csrc/ to compare (repeat for more)")
    p.add_argument("--no-spans", action="store_true",
                   help="also this checkout's C on the plan without probe spans")
    p.add_argument("--k", type=int, default=None, help="query k (default: the store's)")
    p.add_argument("--queries", type=positive, default=1000)
    p.add_argument("--block", type=positive, default=200)
    p.add_argument("--rounds", type=positive, default=100)
    p.add_argument("--cap", type=positive, default=1 << 16, help="hits a call may return")
    p.add_argument("--evict", type=int, default=0, metavar="KIB",
                   help="read this many KiB of other memory before each timed call (not "
                        "timed), as a process's other work between its queries would")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
