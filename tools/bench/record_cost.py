"""``record-cost``: what one record just under the size cap costs, path by path.

A text of ``--bytes`` UTF-8 bytes (default: just under the corpus readers' cap,
``simstore.corpus.sources.MAX_RECORD_BYTES``, with room for its JSON line), English-like
(words of a random 50,000-word vocabulary) or CJK (Han characters, a comma or a full
stop every few), goes through each path in a fresh child process: ``fingerprint``,
``signature`` and ``shingle_sets`` of the text; an exact store's ``add`` (an empty
store), ``similar`` and ``add_if_new`` (a store holding a copy of it); the corpus
readers over a JSON-lines and a Parquet file holding it among small records (every
chunk read); ``dedup_corpus`` over those files (and ``exact=True`` over the JSON lines).
Files and the store with a copy are written by another child first.

The measuring child makes its inputs, runs the path once on a small record (imports,
first-use set-up), frees what it can (``gc``, ``malloc_trim``), resets the kernel's peak
(VmHWM) and runs the path: a record's cost is the peak's growth over the resident set
before, divided by the record's UTF-8 size; the issue's target is < 4x. tests hold
every path under it (:func:`cost`, at 8 MB). Run: ``python -m tools.bench record-cost``.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._harness import DEFAULT_WORKDIR, REPO, current_rss, peak_rss, reset_peak_rss, scratch_dir

TARGET = 4.0  # the ceiling: a record's peak cost over its size
SCRIPTS = ("english", "cjk")
# path -> what it is given: the text in hand, a store holding a copy of it, or files
PATHS: dict[str, str] = {
    "fingerprint": "text", "signature": "text", "shingle-set": "text",
    "exact-add": "text", "exact-similar": "copy", "exact-add-if-new": "copy",
    "jsonl-read": "files", "parquet-read": "files",
    "dedup-jsonl": "files", "dedup-parquet": "files", "dedup-exact-jsonl": "files",
}
# glibc's mmap threshold fixed at its first value: left to rise (to 32 MiB at most, after a
# large block is freed) it keeps the blocks one step frees in the heap for the next, and a
# record under 32 MiB is charged for what the allocator keeps (up to ~0.4x at 8 MB), not
# what is held; a record at the cap has its large blocks above that ceiling anyway
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}
SMALL_RECORDS = 200  # small records around the big one in a file (5 KB each)


# --------------------------------------------------------------------------- texts


def text(script: str, nbytes: int, seed: int = 1) -> str:
    """A seeded text of about ``nbytes`` UTF-8 bytes (at most that) in ``script``."""
    rng = np.random.default_rng([seed, nbytes, SCRIPTS.index(script)])
    if script == "cjk":  # a Han character (3 bytes) a code point; "，" or "。" every 4-27
        n = nbytes // 3
        cps = rng.integers(0x4E00, 0x4E00 + 20_000, n, dtype=np.uint32)
        stops = np.cumsum(rng.integers(4, 28, n // 4 + 1))
        stops = stops[stops < n]
        cps[stops] = np.where(rng.random(len(stops)) < 0.7, 0xFF0C, 0x3002)
        return cps.astype("<u4").tobytes().decode("utf-32-le")
    vocab = _vocabulary()
    parts, size = [], 0
    while size < nbytes:
        words = rng.integers(0, len(vocab), min(1 << 16, nbytes // 5 + 16))
        part = " ".join(map(vocab.__getitem__, words.tolist())) + " "
        parts.append(part)
        size += len(part)
    return "".join(parts)[:nbytes]


@functools.cache
def _vocabulary() -> list[str]:
    """50,000 random lower-case words of 2-8 letters (seeded: always the same)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 9, 50_000)
    letters = (rng.integers(0, 26, int(lengths.sum()), dtype=np.uint8) + ord("a")).tobytes()
    ends = np.cumsum(lengths).tolist()
    return [letters[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _records(big: str) -> list[dict[str, Any]]:
    """Small records with the big one among them."""
    small = [{"id": f"s{i}", "text": text("english", 5000, seed=i)}
             for i in range(SMALL_RECORDS)]
    return small[: SMALL_RECORDS // 2] + [{"id": "big", "text": big}] + small[SMALL_RECORDS // 2 :]


def prepare(script: str, nbytes: int, workdir: Path) -> None:
    """Write the inputs of the ``copy`` and ``files`` paths under workdir."""
    from simstore import SIGNATURE_CONFIG, SimStore
    from simstore.corpus.parquet import pyarrow

    big = text(script, nbytes)
    with SimStore(workdir / "copy.simstore", config=SIGNATURE_CONFIG, exact=True) as store:
        store.add("copy", big)
    recs = _records(big)
    with open(workdir / "records.jsonl", "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    pa = pyarrow()
    pa.parquet.write_table(pa.table({"id": [r["id"] for r in recs],
                                     "text": [r["text"] for r in recs]}),
                           workdir / "records.parquet", row_group_size=64)


# --------------------------------------------------------------------------- the child


def _trim() -> None:
    """Give the heap's free memory back to the OS (glibc), so the baseline holds none."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _call(path: str, script: str, nbytes: int, workdir: Path) -> Callable[[], Any]:
    """The path's one call on the record (its inputs made or opened now)."""
    import simstore
    from simstore import SIGNATURE_CONFIG, SimStore
    from simstore.corpus import dedup_corpus
    from simstore.corpus.readers import ReadOptions, iter_chunks, raise_bad
    from simstore.corpus.sources import Inputs
    from simstore.text.jaccard import shingle_sets

    if PATHS[path] == "text":
        doc = text(script, nbytes)
        if path.startswith("exact"):
            n = len(list(workdir.glob("new*.simstore")))
            store = SimStore(workdir / f"new{n}.simstore", config=SIGNATURE_CONFIG, exact=True)
            return lambda: store.add("doc", doc)
        one = {"fingerprint": simstore.fingerprint, "signature": simstore.signature,
               "shingle-set": lambda t: shingle_sets([t])}[path]
        return lambda: one(doc)
    if PATHS[path] == "copy":
        doc = text(script, nbytes)
        store = SimStore(workdir / "copy.simstore")
        if path == "exact-similar":
            return lambda: store.similar(doc, 0.9)
        return lambda: store.add_if_new("doc", doc, threshold=0.9)
    name = "records.parquet" if "parquet" in path else "records.jsonl"
    src = str(workdir / name)
    if path.endswith("-read"):
        def read() -> None:
            with Inputs([src], ReadOptions()) as inp:
                for _ in iter_chunks(inp.sources, inp.opts, raise_bad):
                    pass
        return read
    out = workdir / f"kept-{path}{Path(name).suffix}"
    return lambda: dedup_corpus([src], out, exact=path == "dedup-exact-jsonl")


def _warm(path: str, workdir: Path) -> None:
    """The path once on a small record: imports and first-use set-up, before the baseline."""
    with scratch_dir(workdir, "warm") as small:
        if PATHS[path] != "text":
            prepare("english", 3000, small)
        _call(path, "english", 3000, small)()


def measure(path: str, script: str, nbytes: int, workdir: Path) -> float:
    """The record's cost on path: peak RSS growth over the baseline / its UTF-8 size."""
    _warm(path, workdir)
    call = _call(path, script, nbytes, workdir)
    _trim()
    # the peak reset to now: VmHWM, not ru_maxrss, which also keeps the peak of the image
    # exec replaced (the parent's, when it was started by vfork)
    reset_peak_rss()
    before = current_rss()
    call()
    return (peak_rss() - before) / nbytes


def cost(path: str, script: str, nbytes: int, workdir: Path) -> float:
    """The cost of a record of ``nbytes`` on path, measured in a fresh child process (the
    inputs of the ``copy`` and ``files`` paths are written in workdir by another, once)."""
    py = [sys.executable, "-m", "tools.bench.record_cost"]
    workdir.mkdir(parents=True, exist_ok=True)
    if PATHS[path] != "text" and not (workdir / "records.parquet").exists():
        subprocess.run([*py, "prepare", script, str(nbytes), str(workdir)],
                       cwd=REPO, check=True, timeout=600)
    env = {**os.environ, **STEADY_MALLOC}
    out = subprocess.run([*py, "measure", path, script, str(nbytes), str(workdir)], env=env,
                         cwd=REPO, check=True, timeout=600, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


# --------------------------------------------------------------------------- the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench record-cost``."""
    from simstore.corpus.sources import MAX_RECORD_BYTES

    p.add_argument("--bytes", type=int, default=MAX_RECORD_BYTES - (64 << 10),
                   help="the record's UTF-8 size (default: 64 KiB under the cap, %(default)s)")
    p.add_argument("--paths", type=lambda s: s.split(","), default=list(PATHS),
                   help=f"comma-separated, of {','.join(PATHS)} (default all)")
    p.add_argument("--scripts", type=lambda s: s.split(","), default=list(SCRIPTS),
                   help="comma-separated, of english,cjk (default both)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the inputs go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One row per path: the record's cost (peak growth / its size) in each script."""
    print(f"== record-cost ==  a record of {args.bytes:,} bytes; target < {TARGET:g}x",
          flush=True)
    print(f"  {'path':<20}" + "".join(f"{s:>10}" for s in args.scripts), flush=True)
    rows = []
    with scratch_dir(args.workdir, "record-cost") as d:
        for path in args.paths:
            got = {s: cost(path, s, args.bytes, d / s) for s in args.scripts}
            over = [s for s, x in got.items() if x >= TARGET]
            print(f"  {path:<20}" + "".join(f"{x:>9.2f}x" for x in got.values())
                  + (f"  OVER ({', '.join(over)})" if over else ""), flush=True)
            rows.append({"path": path, **{s: round(x, 3) for s, x in got.items()}})
    return {"command": "record-cost", "bytes": args.bytes, "target": TARGET, "rows": rows}


def main(argv: list[str]) -> None:
    """The children: ``prepare SCRIPT BYTES DIR`` and ``measure PATH SCRIPT BYTES DIR``."""
    if argv[0] == "prepare":
        prepare(argv[1], int(argv[2]), Path(argv[3]))
    else:
        print(measure(argv[1], argv[2], int(argv[3]), Path(argv[4])))


if __name__ == "__main__":
    main(sys.argv[1:])
