"""``corpus-memory``: peak RSS of ``simstore-cli dedup-corpus`` against the same rows as JSON lines.

Memory ceilings of corpus runs, measured on real processes (the command a user
types), each one's own peak RSS taken from the kernel when it ends (``wait4``:
``ru_maxrss``, which counts the pages of memory-mapped files it touched too). Cases:

- ``parquet``: the corpus as Parquet with row groups of each ``--group-rows`` size,
  Parquet in and out, against the JSON-lines run; target: every one <= 1.5x.
- ``exact``: ``--exact`` (no store) against the JSON-lines run (estimated Jaccard);
  target <= 1.5x.
- ``huge``: a ``.gz`` holding one JSON line of ``--record-mb`` MB (a few hundred KB on
  disk): ``dedup-corpus`` and ``index`` must refuse it (exit 1, ``file:line``) at
  <= 256 MiB peak.

The corpus is :func:`tools.bench.corpus.build_corpus`'s (real text of this machine
with planted near and exact copies, seeded); every input is built under
``--workdir`` (a temporary directory by default) and removed at the end unless
``--keep``. Run: ``python -m tools.bench corpus-memory --mb 1000 --out result.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._harness import REPO, Report, load_average

MiB = 1 << 20
RATIO = 1.5  # the ceiling: a run's peak against the JSON-lines run's
HUGE_CEILING = 256 * MiB  # the oversized record must be refused within this peak


# A small parent between this process and the measured one: a child's peak RSS counts the
# address space it was forked from (the kernel copies its high-water mark), so the measured
# command is forked from this ~10 MB interpreter, never from the tool (pyarrow, corpora).
_WRAPPER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\n@maxrss {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_run(argv: list[str], workdir: Path) -> dict[str, Any]:
    """Run a command to its end: exit code, its own peak RSS (bytes), seconds, stderr."""
    err_path = workdir / "stderr.txt"
    t0 = time.perf_counter()
    with open(err_path, "wb") as err:
        rc = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=err, check=False).returncode
    lines = err_path.read_text(errors="replace").strip().splitlines()
    peak = int(lines.pop().split()[1]) * 1024
    text = [ln for ln in lines if ln.strip()]
    return {"rc": rc, "peak": peak, "seconds": time.perf_counter() - t0,
            "stderr": text[-1:] or [""]}


def cli(*args: str) -> list[str]:
    """argv of one simstore-cli run from this interpreter."""
    return [sys.executable, "-m", "simstore", "--quiet", "--json", *args]


# --------------------------------------------------------------------------- inputs


def corpus(workdir: Path, mb: int, seed: int) -> Path:
    """The JSON-lines corpus of ``mb`` MB (built once per workdir)."""
    from .corpus import build_corpus

    path = workdir / f"corpus-{mb}mb-s{seed}.jsonl"
    if not path.exists():
        build_corpus(path, mb * 1_000_000, seed, 0.15, 0.05)
    return path


def parquet_variant(src: Path, rows: int) -> Path:
    """The corpus as Parquet in row groups of ``rows`` rows, written a group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = src.with_name(f"{src.stem}-g{rows}.parquet")
    if out.exists():
        return out
    schema = pa.schema([("id", pa.string()), ("url", pa.string()), ("score", pa.float64()),
                        ("kind", pa.string()), ("copy_of", pa.string()), ("text", pa.string())])
    with open(src, encoding="utf-8") as f, pq.ParquetWriter(out, schema) as w:
        group: list[dict[str, Any]] = []
        for line in f:
            group.append(json.loads(line))
            if len(group) == rows:
                w.write_table(pa.Table.from_pylist(group, schema), row_group_size=rows)
                group = []
        if group:
            w.write_table(pa.Table.from_pylist(group, schema), row_group_size=rows)
    return out


def huge_record(workdir: Path, mb: int) -> Path:
    """A .gz of one JSON line whose text is ``mb`` MB of repeated words (written in pieces)."""
    path = workdir / f"huge-{mb}mb.jsonl.gz"
    if path.exists():
        return path
    piece = ("lorem ipsum dolor sit amet consectetur adipiscing elit " * 4096).encode()
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"id": "huge", "text": "')
        left = mb * 1_000_000
        while left > 0:
            f.write(piece[:left])
            left -= len(piece)
        f.write(b'"}\n')
    return path


# --------------------------------------------------------------------------- cases


def _row(rep: Report, impl: str, case: str, res: dict[str, Any], base: int | None) -> float:
    """Record a run; its ratio to the JSON-lines run's peak (0 when there is none)."""
    ratio = res["peak"] / base if base else 0.0
    rep.row(impl, case, None, "MiB", peak_rss_mib=round(res["peak"] / MiB, 1),
            ratio=round(ratio, 2) if base else None, rc=res["rc"],
            seconds=round(res["seconds"], 1), stderr=res["stderr"][0][:160],
            load=load_average()[0])
    if res["rc"] not in (0, 1):
        raise SystemExit(f"{impl}: exit {res['rc']}: {res['stderr'][0]}")
    return ratio


def jsonl_baseline(rep: Report, src: Path, work: Path) -> int:
    """The JSON-lines run (estimated Jaccard 0.9, keep first): its peak RSS."""
    res = peak_run(cli("dedup-corpus", str(src), "-o", str(work / "kept.jsonl")), work)
    _row(rep, "dedup-corpus JSONL -> JSONL", src.name, res, None)
    return int(res["peak"])


def case_parquet(rep: Report, src: Path, work: Path, base: int, groups: list[int]) -> None:
    """Parquet in and out, one run per input row-group size."""
    worst = 0.0
    for rows in groups:
        pq_in = parquet_variant(src, rows)
        res = peak_run(cli("dedup-corpus", str(pq_in), "-o", str(work / "kept.parquet")),
                       work)
        worst = max(worst, _row(rep, "dedup-corpus Parquet -> Parquet",
                                f"row groups of {rows:,}", res, base))
    rep.target("Parquet peak / JSON-lines peak, worst row-group size", worst, RATIO, "<=", "x")


def case_exact(rep: Report, src: Path, work: Path, base: int) -> None:
    """--exact without a store against the JSON-lines run."""
    res = peak_run(cli("dedup-corpus", str(src), "-o", str(work / "kept.jsonl"), "--exact"),
                   work)
    ratio = _row(rep, "dedup-corpus --exact JSONL -> JSONL", src.name, res, base)
    rep.target("--exact peak / JSON-lines peak", ratio, RATIO, "<=", "x")


def case_huge(rep: Report, work: Path, mb: int) -> None:
    """One oversized record in a small .gz: refused (exit 1) within HUGE_CEILING."""
    gz = huge_record(work, mb)
    rep.note(f"{gz.name}: {gz.stat().st_size / 1e3:.0f} kB on disk, one {mb} MB record")
    runs = {"dedup-corpus": cli("dedup-corpus", str(gz), "-o", str(work / "kept.jsonl")),
            "index": cli("index", str(work / "huge.simstore"), str(gz))}
    for name, argv in runs.items():
        res = peak_run(argv, work)
        _row(rep, f"{name} of one {mb} MB record", gz.name, res, None)
        refused = res["rc"] == 1 and ":1:" in res["stderr"][0]
        rep.target(f"{name}: refused (exit 1, file:line) and peak", res["peak"] / MiB
                   if refused else None, HUGE_CEILING / MiB, "<=", "MiB")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every case asked for; the inputs are removed at the end unless --keep."""
    rep = Report("corpus_memory", {"mb": args.mb, "seed": args.seed, "cases": args.cases,
                                   "group_rows": args.group_rows, "record_mb": args.record_mb})
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="simstore-corpus-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        rep.note(f"load average before the runs: {load_average()}")
        if "huge" in args.cases:
            case_huge(rep, workdir, args.record_mb)
        if {"parquet", "exact"} & set(args.cases):
            src = corpus(workdir, args.mb, args.seed)
            base = jsonl_baseline(rep, src, workdir)
            if "parquet" in args.cases:
                case_parquet(rep, src, workdir, base, args.group_rows)
            if "exact" in args.cases:
                case_exact(rep, src, workdir, base)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rep.to_dict()


def _list(kind: type) -> Any:
    return lambda text: [kind(v) for v in text.split(",") if v]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench corpus-memory``."""
    p.add_argument("--mb", type=int, default=200, help="corpus size in MB of JSON lines "
                   "(default %(default)s; the issue's ceilings are for ~1000)")
    p.add_argument("--seed", type=int, default=20240601, help="corpus seed (default %(default)s)")
    p.add_argument("--cases", type=_list(str), default=["parquet", "exact", "huge"],
                   help="comma-separated: parquet, exact, huge (default all)")
    p.add_argument("--group-rows", type=_list(int), default=[1000, 10000, 30000],
                   help="Parquet inputs' rows per row group (default 1000,10000,30000)")
    p.add_argument("--record-mb", type=int, default=256,
                   help="the huge case's record size in MB (default %(default)s)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where inputs and outputs go (default: a new temporary directory)")
    p.add_argument("--keep", action="store_true", help="leave the inputs in --workdir")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
