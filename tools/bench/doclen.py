"""``doclen``: the cost of one document by its length, simstore vs rensa and datasketch.

English documents cut at word boundaries to at most each of --lengths bytes
(tools/_corpus.english_documents) go through ``simstore.fingerprints`` and
``simstore.signatures`` (one thread, one batch call per repetition) and through
the peers, one document at a time: rensa ``RMinHash(128)`` and datasketch
``MinHash(128)``, each fed the 3-word shingles of the one-line Python shingler of
``text``. Rows give microseconds per document (wall; the CPU median beside it)
and MB/s, so a fixed cost per document shows at the short lengths.

With ``--base REV`` simstore is measured in two trees in the same run: REV
checked out under .bench/doclen/ and built, and this checkout. Each round runs
one fresh process per tree (``_doclen_probe.py``, order alternating) and the
peers in this process; the summary is head / base of the median per document.
``--instructions`` adds, per tree, the instructions callgrind counts in the C entry
points of one call over --instr-docs documents: a count that other work on the
machine does not change, unlike the times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import _corpus
from . import _doclen_probe
from ._harness import MB, REPO, Report, Stats, git, load_average
from ._peers import load_datasketch, load_rensa
from .ab import add_worktree, build, remove_worktree, resolve
from .text import shingles

DOCLEN_DIR = REPO / ".bench" / "doclen"
_US = 1e6


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench doclen``."""
    p.add_argument("--lengths", type=lambda s: [int(v) for v in s.split(",") if v],
                   default=[60, 500, 5000],
                   help="document size caps in UTF-8 bytes, comma-separated (default 60,500,5000)")
    p.add_argument("--docs", type=int, default=2000, help="documents per length (default 2000)")
    p.add_argument("--peer-docs", type=int, default=1000,
                   help="documents per length given to rensa; datasketch gets a quarter "
                        "(default 1000)")
    p.add_argument("--reps", type=int, default=5,
                   help="timed batch calls per case and round, after one untimed (default 5)")
    p.add_argument("--base", default=None,
                   help="also measure this revision (any commit-ish) in the same run")
    p.add_argument("--rounds", type=int, default=3,
                   help="with --base: rounds, one process per tree each (default 3)")
    p.add_argument("--instructions", action="store_true",
                   help="with --base: also count instructions per document under callgrind")
    p.add_argument("--instr-docs", type=int, default=300,
                   help="documents per length in the counted call (default 300)")
    p.add_argument("--seed", type=int, default=20261125, help="corpus seed (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _bytes(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8")) for t in texts)


def _peers(texts: list[str], peer_docs: int) -> dict[str, tuple[list[str], Callable[[], Any]]]:
    """name -> (the texts it signs, one pass over them) for the importable peers."""
    out: dict[str, tuple[list[str], Callable[[], Any]]] = {}
    rensa, ds = load_rensa(), load_datasketch()
    if rensa is not None:
        few = texts[:peer_docs]

        def rensa_sign(few: list[str] = few) -> None:
            for t in few:
                m = rensa.RMinHash(num_perm=128, seed=0)
                m.update(shingles(t))
                m.digest()
        out["rensa.RMinHash(128) + Python shingles"] = (few, rensa_sign)
    if ds is not None:
        fewer = texts[: max(10, peer_docs // 4)]

        def ds_sign(fewer: list[str] = fewer) -> None:
            for t in fewer:
                m = ds.MinHash(num_perm=128)
                m.update_batch([s.encode("utf-8") for s in shingles(t)])
                m.digest()
        out["datasketch.MinHash(128) + Python shingles"] = (fewer, ds_sign)
    return out


def _probe(tree: Path, script: Path, texts_file: Path, reps: int) -> list[dict[str, Any]]:
    """The probe's rows from a fresh process that imports tree's simstore."""
    cmd = [sys.executable, str(script), "--texts", str(texts_file), "--reps", str(reps)]
    rows: list[dict[str, Any]] = _run_probe(cmd, tree, script)[0]["rows"]
    return rows


def _run_probe(cmd: list[str], tree: Path, script: Path) -> tuple[dict[str, Any], str]:
    """The JSON a probe command printed and its stderr; SystemExit if it failed or imported
    simstore from elsewhere than tree."""
    proc = subprocess.run(cmd, cwd=script.parent, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the probe failed in {tree}:\n{proc.stderr.strip()[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(out["simstore_file"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the probe for {tree} imported simstore from {out['simstore_file']}")
    return out, proc.stderr


class _Samples:
    """Seconds per document of every timed call, gathered over the rounds per (impl, length)."""

    def __init__(self) -> None:
        self.wall: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.docs: dict[tuple[str, str], list[str]] = {}
        self.rounds: dict[tuple[str, str], list[float]] = defaultdict(list)

    def add(self, impl: str, length: str, texts: list[str], walls: list[float],
            cpus: list[float]) -> None:
        key = (impl, length)
        self.docs[key] = texts
        self.wall[key] += [w / len(texts) for w in walls]
        self.cpu[key] += [c / len(texts) for c in cpus]
        self.rounds[key].append(float(np.median(walls)) / len(texts))

    def report(self, rep: Report) -> dict[str, float]:
        """One row per (impl, length) in us per document; the wall medians by 'impl | length'."""
        medians = {}
        for key, walls in self.wall.items():
            impl, length = key
            texts = self.docs[key]
            med = float(np.median(walls))
            rep.row(impl, f"{length} B", Stats.of(walls).scaled(_US), "us/doc",
                    cpu_us_per_doc=float(np.median(self.cpu[key])) * _US,
                    mb_s=_bytes(texts) / len(texts) / med / MB, docs=len(texts),
                    mean_bytes=round(_bytes(texts) / len(texts), 1),
                    round_medians_us=[round(v * _US, 2) for v in self.rounds[key]])
            medians[f"{impl} | {length}"] = med * _US
        return medians


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore fingerprints/signatures and peers, us per document at each length."""
    if args.instructions and args.base is None:
        raise SystemExit("--instructions needs --base")
    params = {k: getattr(args, k) for k in ("lengths", "docs", "peer_docs", "reps", "base",
                                            "rounds", "instructions", "instr_docs", "seed")}
    rep = Report("doclen", params)
    texts = {str(n): _corpus.english_documents(args.docs, n, args.seed) for n in args.lengths}
    peers = {n: _peers(t, args.peer_docs) for n, t in texts.items()}
    samples = _Samples()

    def peer_round() -> None:
        for length, by_name in peers.items():
            for name, (few, fn) in by_name.items():
                walls, cpus = _doclen_probe.time_batch(fn, args.reps)
                samples.add(name, length, few, walls, cpus)

    def add_rows(side: str, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            impl = f"{side}simstore.{r['what']}(threads=1)"
            samples.add(impl, r["length"], texts[r["length"]], r["wall_s"], r["cpu_s"])

    out: dict[str, Any] = {}
    if args.base is None:
        add_rows("", _doclen_probe.measure(texts, args.reps))
        peer_round()
    else:
        out = _two_trees(args, texts, add_rows, peer_round)
    rep.header()
    medians = samples.report(rep)
    if args.base is not None:
        out["head_over_base"] = {
            f"{what} | {n}": medians[f"head: simstore.{what}(threads=1) | {n}"]
            / medians[f"base: simstore.{what}(threads=1) | {n}"]
            for what in _doclen_probe.FUNCTIONS for n in texts}
        for k, v in out["head_over_base"].items():
            rep.note(f"head / base, median us per document, {k} B: {v:.3f}")
        for k, v in out.get("instructions_per_doc", {}).items():
            rep.note(f"instructions per document (callgrind), {k} B: base {v['base']:,.0f}, "
                     f"head {v['head']:,.0f}, head / base {v['head'] / v['base']:.3f}")
    result = rep.to_dict()
    result.update(out)
    result["headline_us_per_doc"] = {k: round(v, 2) for k, v in medians.items()}
    return result


def _two_trees(args: argparse.Namespace, texts: dict[str, list[str]],
               add_rows: Callable[[str, list[dict[str, Any]]], None],
               peer_round: Callable[[], None]) -> dict[str, Any]:
    """Rounds of base and head probes (alternating order) and the peers; what was compared."""
    base_sha = resolve(args.base)
    run_dir = DOCLEN_DIR / f"run-{os.getpid()}"
    base = run_dir / "base"
    made = False
    try:
        add_worktree(base_sha, base)
        made = True
        build(base)
        build(REPO)
        script = run_dir / "probe" / "probe.py"
        script.parent.mkdir(parents=True)
        shutil.copyfile(_doclen_probe.__file__, script)
        texts_file = run_dir / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        trees = {"base": base, "head": REPO}
        for r in range(args.rounds):
            for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
                print(f"  round {r + 1}: {side} (load {load_average()[0]:.2f})", flush=True)
                add_rows(f"{side}: ", _probe(trees[side], script, texts_file, args.reps))
            peer_round()
        counts = _instructions(trees, script, texts_file, args) if args.instructions else {}
    finally:
        if made:
            msg = remove_worktree(base)
            if msg:
                print(f"  note: {msg}", flush=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"instructions_per_doc": counts, "base": {"rev": args.base, "commit": base_sha},
            "head": {"commit": git("rev-parse", "HEAD"), "dirty_package": bool(
                git("status", "--porcelain", "--", "simstore", "csrc"))}}


def _instructions(trees: dict[str, Path], script: Path, texts_file: Path,
                  args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """'function | length' -> {tree: instructions per document}, counted by callgrind."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (callgrind) on the PATH")
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for side, tree in trees.items():
        for what, entry in _doclen_probe.C_ENTRIES.items():
            for length in map(str, args.lengths):
                cmd = ["valgrind", "--tool=callgrind", f"--toggle-collect={entry}",
                       "--callgrind-out-file=/dev/null", sys.executable, str(script),
                       "--texts", str(texts_file), "--once", what, length, str(args.instr_docs)]
                stderr = _run_probe(cmd, tree, script)[1]
                found = re.search(r"Collected : (\d+)", stderr)
                if found is None:
                    raise SystemExit(f"callgrind counted nothing in {tree}:\n{stderr[-3000:]}")
                docs = min(args.instr_docs, args.docs)
                out[f"{what} | {length}"][side] = int(found.group(1)) / docs
                print(f"  instructions: {side} {what} {length} B: "
                      f"{out[f'{what} | {length}'][side]:,.0f} per document", flush=True)
    return dict(out)
