"""``memlimit``: queries on a store larger than the memory the querying process may use.

The store's data file is dropped from the page cache (``posix_fadvise(DONTNEED)``), then
a fresh process runs in a memory cgroup whose limit is well below the store's size
(cgroup v1 ``memory.limit_in_bytes`` or v2 ``memory.max``; needs root). It opens the
store, times its first answer, then runs the queries twice (cold: pages read from disk
under the limit; warm: what the limit lets stay cached), and checks every answer
against a brute-force scan done here, outside the limit. ``--base REV`` runs the same
with REV's simstore on the store REV built (``readers`` builds both stores of a
revision pair in ``--workdir``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ._harness import REPO, git, load_average

CHILD = r'''
import json, sys, time
import numpy as np
from simstore import SimStore
store, qfile, k, ra, fetch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if fetch == "whole":  # every run read whole, as py-lmdb returns it (an experiment)
    from simstore.store.runs import cache
    cache._lmdbmap.map_value = lambda *a: None
qs = np.load(qfile).tolist()
t0 = time.perf_counter()
s = SimStore(store, readonly=True, **({} if ra == "auto" else {"readahead": ra == "on"}))
s.query(qs[0], k)
first = time.perf_counter() - t0
out = {"first_s": first, "answers": []}
for phase in ("cold", "warm"):
    lat = []
    for q in qs:
        a = time.perf_counter_ns()
        got = s.query(q, k)
        lat.append(time.perf_counter_ns() - a)
        if phase == "cold":
            out["answers"].append(sorted((m.doc_id, m.distance) for m in got))
    lat.sort()
    out[phase] = {"p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * .99)] / 1e3}
print(json.dumps(out))
'''


def _cgroup(limit: int) -> tuple[Path, Path]:
    """A memory cgroup limited to `limit` bytes: (its directory, the file taking a pid)."""
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists():
        d = v1 / f"simstore-bench-{os.getpid()}"
        d.mkdir(exist_ok=True)
        (d / "memory.limit_in_bytes").write_text(str(limit))
        return d, d / "cgroup.procs"
    v2 = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified").is_dir() \
        else Path("/sys/fs/cgroup")
    d = v2 / f"simstore-bench-{os.getpid()}"
    d.mkdir(exist_ok=True)
    (d / "memory.max").write_text(str(limit))
    return d, d / "cgroup.procs"


def _peak(d: Path) -> int | None:
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        if (d / name).exists():
            return int((d / name).read_text())
    return None


def _drop_cache(store: Path) -> None:
    """Drop the store's files from the page cache (clean pages only; no root needed)."""
    for f in store.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _run(tree: Path, store: Path, qfile: Path, k: int, limit: int, readahead: str = "auto",
         fetch: str = "auto") -> dict[str, Any]:
    d, procs = _cgroup(limit)
    _drop_cache(store)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # the child joins the cgroup before it imports anything
    pre = f"open({str(procs)!r}, 'w').write(str(__import__('os').getpid()))\n"
    proc = subprocess.run([sys.executable, "-c", pre + CHILD, str(store), str(qfile), str(k),
                           readahead, fetch],
                          env=env, cwd=qfile.parent, capture_output=True, text=True)
    res: dict[str, Any] = {"returncode": proc.returncode, "peak_bytes": _peak(d),
                           "limit_bytes": limit}
    if proc.returncode == 0:
        res.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    else:
        res["stderr"] = proc.stderr.strip()[-500:]
    d.rmdir()
    return res


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Exact answers under a memory limit below the store's size, cold and warm."""
    from .readers import _fps, _queries, sides

    workdir = Path(args.workdir).resolve()
    if args.limit_mb < 16:
        raise SystemExit(f"memlimit: --limit-mb must be at least 16 (got {args.limit_mb})")
    try:  # refused before any work: the limit needs a memory cgroup we may create
        _cgroup(args.limit_mb << 20)[0].rmdir()
    except OSError as exc:
        raise SystemExit(f"memlimit: cannot create a memory cgroup ({exc}); run as root on a "
                         "machine with cgroup v1 memory or v2 memory.max") from None
    load0 = load_average()
    fps = _fps(args.n, args.seed)
    qs = _queries(fps, args.queries, args.seed + 2)
    qfile = workdir / "memlimit-queries.npy"
    np.save(qfile, qs)
    want = []
    for q in qs.tolist():  # brute force, here (outside the limit)
        d = np.bitwise_count(fps ^ np.uint64(q))
        want.append(sorted((int(i), int(d[i])) for i in np.flatnonzero(d <= args.k)))
    del fps
    rows = []
    for side, (tree, store) in sides(args, workdir, build=False).items():
        size = (store / "data.mdb").stat().st_size
        res = _run(tree, store, qfile, args.k, args.limit_mb << 20, args.readahead,
                   args.fetch)
        answers = res.pop("answers", None)
        res.update(side=side, store_bytes=size,
                   exact=None if answers is None else sum(
                       [tuple(x) for x in a] == w for a, w in zip(answers, want, strict=True)),
                   queries=len(want))
        rows.append(res)
        print(f"  {side:<4} store {size / 2**20:.0f} MiB, limit {args.limit_mb} MiB: rc "
              f"{res['returncode']}" + (
                  f", first {res['first_s'] * 1e3:.0f} ms, cold p50 {res['cold']['p50_us']:.0f} "
                  f"us p99 {res['cold']['p99_us']:.0f} us, warm p50 "
                  f"{res['warm']['p50_us']:.0f} us, exact {res['exact']}/{len(want)}, peak "
                  f"{(res['peak_bytes'] or 0) / 2**20:.0f} MiB" if res["returncode"] == 0
                  else f" ({res.get('stderr', '')[-120:]!r})"), flush=True)
    return {"benchmark": "memlimit", "n": args.n, "k": args.k, "limit_mb": args.limit_mb,
            "head": args.head, "base": args.base, "readahead": args.readahead,
            "commit": git("rev-parse", "HEAD"),
            "fetch": args.fetch,
            "load_start": load0,
            "load_end": load_average(), "rows": rows,
            "command": " ".join(["python -m tools.bench", *args.argv])}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench memlimit``."""
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--limit-mb", type=int, default=256, help="the cgroup's memory limit")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--head", help="the head revision (a worktree), else this checkout")
    p.add_argument("--base", help="also run this revision's simstore on its own store")
    p.add_argument("--workdir", default=str(REPO / ".bench" / "readers"))
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--readahead", choices=("auto", "on", "off"), default="auto",
                   help="SimStore(readahead=): auto leaves it to the store (a revision "
                        "before the option takes only auto)")
    p.add_argument("--fetch", choices=("auto", "whole"), default="auto",
                   help="whole: read every run whole as py-lmdb returns it, never placed "
                        "from its leaf node (an experiment; revisions from 5e7b3b8)")
    p.add_argument("--out", type=Path, help="write the JSON result here")
