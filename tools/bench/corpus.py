"""``corpus``: ``simstore-cli dedup-corpus`` end to end on a large JSONL built from real text.

The corpus (seeded, written once and reused): real documents of this machine
(:func:`tools._corpus.load`: copyright files, licences, Python package
licences, man pages) are cut into segments; each *new* document is 2-5
segments of 100-400 words from random documents at random offsets, so new
documents share little with each other. A share of the documents are planted
copies of a recent document: *exact* copies, and *near* copies with 0.2-1% of
their words replaced, deleted or inserted (estimated Jaccard of word
3-shingles mostly 0.9-0.98). Every line carries id, url, score, text, the
planted kind and ``copy_of`` (the id it copies), so each run is also scored.

Each run is a separate ``python -m simstore dedup-corpus`` process (the
command a user types), timed by wall clock and by CPU time (user + system of
the process and its children: on a shared machine the wall time follows the
load, the CPU time much less). Memory is sampled every 0.2 s from ``/proc``:
the largest anonymous RSS (the process's own memory) and VmHWM (its peak RSS,
which also counts the pages of the store's memory map that were read: page
cache, reclaimable). Quality: a planted copy kept together with the document
it copies is *missed*; a removed document with no copies, or whose family
(linked by ``copy_of``) keeps no member, is a *false removal*. Peers run on the
first ``--peer-mb`` MB, beside simstore's ``--threshold 0.9`` and ``--k 5`` on
the same slice, from the interpreter given with ``--peer-python``:
text-dedup's MinHash (LSH at about the same threshold), text-dedup's SimHash
(k = 5 and its default k = 3) and datatrove's MinHash pipeline; a peer that
does not import is reported, not compared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from ._harness import DEFAULT_WORKDIR, REPO, Report, load_average

KINDS = ("new", "near", "exact")


def _segments_source(scripts: str = "english", seed: int = 0) -> list[list[str]]:
    """Word lists of the source documents: English, or with scripts="mixed" twice as many
    translations (gettext catalogs in every script the machine has) beside them."""
    from tools import _corpus

    docs = _corpus.load(max_docs=8000, keep_duplicates=False).texts
    english = [d.split() for d in docs if len(d.split()) >= 120]
    if scripts != "mixed":
        return english
    translated = [d.split() for _, d in _corpus.translation_documents(2 * len(english), seed)]
    return english + [w for w in translated if len(w) >= 20]


def _mix(rng: random.Random, pool: list[list[str]]) -> str:
    parts = []
    for _ in range(rng.randint(2, 5)):
        words = pool[rng.randrange(len(pool))]
        n = rng.randint(100, 400)
        start = rng.randrange(max(1, len(words) - n))
        parts.append(" ".join(words[start : start + n]))
    return "\n\n".join(parts)


def _perturb(rng: random.Random, text: str, vocab: list[str]) -> str:
    words = text.split(" ")
    edits = max(1, int(len(words) * rng.uniform(0.002, 0.01)))
    for _ in range(edits):
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 0.5:
            words[i] = rng.choice(vocab)
        elif op < 0.75 and len(words) > 10:
            del words[i]
        else:
            words.insert(i, rng.choice(vocab))
    return " ".join(words)


def build_corpus(path: Path, target_bytes: int, seed: int, near: float, exact: float,
                 scripts: str = "english") -> dict[str, Any]:
    """Write the JSONL corpus (see the module docstring); its counts by planted kind."""
    pool = _segments_source(scripts, seed)
    vocab = [w for words in pool[:200] for w in words[:200]]
    rng = random.Random(seed)
    recent: deque[tuple[str, str]] = deque(maxlen=5000)
    counts = dict.fromkeys(KINDS, 0)
    written = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        i = 0
        while written < target_bytes:
            r = rng.random()
            doc_id, copy_of = f"doc-{i:08d}", None
            if recent and r < exact + near:
                copy_of, text = recent[rng.randrange(len(recent))]
                kind = "exact" if r < exact else "near"
                if kind == "near":
                    text = _perturb(rng, text, vocab)
            else:
                kind, text = "new", _mix(rng, pool)
            recent.append((doc_id, text))
            counts[kind] += 1
            line = json.dumps({"id": doc_id, "url": f"https://example.org/{i}",
                               "score": round(rng.random(), 4), "kind": kind,
                               "copy_of": copy_of, "text": text}, ensure_ascii=False) + "\n"
            written += out.write(line)
            i += 1
    tmp.rename(path)
    return {"docs": sum(counts.values()), "bytes": path.stat().st_size, **counts}


def _corpus(args: argparse.Namespace, rep: Report) -> tuple[Path, dict[str, Any]]:
    args.workdir.mkdir(parents=True, exist_ok=True)
    tail = "" if args.scripts == "english" else f"-{args.scripts}"
    path = args.workdir / f"corpus-{args.mb}mb-s{args.seed}{tail}.jsonl"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        info = json.loads(meta.read_text())
        rep.note(f"reusing {path} ({info['bytes'] / 1e6:.0f} MB, {info['docs']:,} documents)")
        return path, info
    t0 = time.perf_counter()
    info = build_corpus(path, args.mb * 1_000_000, args.seed, args.near, args.exact,
                        args.scripts)
    meta.write_text(json.dumps(info))
    rep.note(f"built {path}: {info['bytes'] / 1e6:.0f} MB, {info['docs']:,} documents "
             f"({info['near']:,} near and {info['exact']:,} exact planted copies) in "
             f"{time.perf_counter() - t0:.0f} s")
    return path, info


def _sample(pid: int, stop: threading.Event, anon: list[int], hwm: list[int]) -> None:
    """RssAnon and VmHWM of a process (and the largest of its children's) every 0.2 s."""
    while not stop.wait(0.2):
        pids = [pid]
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pids += [int(c) for c in f.read().split()]
        except OSError:
            pass
        a = h = 0
        for p in pids:
            try:
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            a = max(a, int(line.split()[1]) * 1024)
                        elif line.startswith("VmHWM:"):
                            h = max(h, int(line.split()[1]) * 1024)
            except OSError:
                continue
        if a:
            anon.append(a)
            hwm.append(h)


def run_measured(argv: list[str]) -> dict[str, Any]:
    """Run a command; wall seconds, CPU seconds (user + system, the command and its
    children: on a shared machine wall time depends on the load, CPU time much less), its
    peak RSS (VmHWM, includes memory-mapped files) and largest anonymous RSS, both sampled
    every 0.2 s (the largest process of the run)."""
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    anon: list[int] = []
    hwm: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, stop, anon, hwm), daemon=True)
    sampler.start()
    out, err = proc.communicate()
    secs = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()[-500:]}")
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"seconds": secs, "cpu_seconds": cpu, "stdout": out, "stderr": err,
            "peak_rss": max(hwm) if hwm else None, "peak_anon": max(anon) if anon else None}


def _quality(corpus: Path, removed: set[str]) -> dict[str, int]:
    """How a run treated the planted copies: pairs (copy, its source) both kept = missed;
    removed documents whose family (linked by copy_of) keeps no member, or that have
    no copies at all = false removals."""
    root: dict[str, str] = {}
    copies: list[tuple[str, str]] = []
    size: dict[str, int] = {}
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            src = rec.get("copy_of")
            r = rec["id"] if src is None else root[src]
            root[rec["id"]] = r
            size[r] = size.get(r, 0) + 1
            if src is not None:
                copies.append((rec["id"], src))
    kept_in: dict[str, int] = {}
    for doc, r in root.items():
        if doc not in removed:
            kept_in[r] = kept_in.get(r, 0) + 1
    missed = sum(1 for doc, src in copies if doc not in removed and src not in removed)
    false = sum(1 for doc in removed if size[root[doc]] == 1 or not kept_in.get(root[doc]))
    return {"planted": len(copies), "missed": missed, "false": false}


def _ids_in_jsonl(path: Path) -> set[str]:
    with open(path, encoding="utf-8") as f:
        return {json.loads(line)["id"] for line in f}


def _slice(path: Path, mb: int) -> tuple[Path, dict[str, Any]]:
    """The first mb MB of whole lines of the corpus, and its counts by kind."""
    out = path.with_name(f"{path.stem}-first{mb}mb.jsonl")
    counts = dict.fromkeys(KINDS, 0)
    with open(path, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        size = 0
        for line in src:
            if size >= mb * 1_000_000:
                break
            size += dst.write(line)
            counts[json.loads(line)["kind"]] += 1
    return out, {"docs": sum(counts.values()), "bytes": out.stat().st_size, **counts}


MODES = {
    "t09": ["--threshold", "0.9"],
    "k5": ["--k", "5"],
    "longest": ["--threshold", "0.9", "--keep", "longest"],
    "t09gz": ["--threshold", "0.9"],
    "t09parquet": ["--threshold", "0.9"],
    "exact": ["--threshold", "0.9", "--exact"],
    "exact-longest": ["--threshold", "0.9", "--keep", "longest", "--exact"],
}
# Modes reading (and writing) another form of the same corpus: its suffix.
FORMATS = {"t09gz": ".jsonl.gz", "t09parquet": ".parquet"}


def _variant(path: Path, suffix: str) -> Path:
    """The corpus as .jsonl.gz (gzip's default level 6) or Parquet (pyarrow's defaults: one
    row group of up to 1Mi rows), written once beside it."""
    out = path.with_name(path.stem + suffix)
    if out.exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    if suffix == ".jsonl.gz":
        import gzip

        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    else:
        import pyarrow.json as pj
        import pyarrow.parquet as pq

        pq.write_table(pj.read_json(path), tmp)
    tmp.rename(out)
    return out


def _simstore_row(rep: Report, path: Path, info: dict[str, Any], mode: str, out_dir: Path,
                  label: str, chunk: int | None = None) -> None:
    suffix = FORMATS.get(mode, ".jsonl")
    src = path if mode not in FORMATS else _variant(path, suffix)
    kept, removed = out_dir / f"kept-{mode}{suffix}", out_dir / f"removed-{mode}.jsonl"
    extra = [] if chunk is None else ["--chunk", str(chunk)]
    argv = [sys.executable, "-m", "simstore", "--json", "--progress-every", "0",
            "dedup-corpus", str(src), "-o", str(kept), "--removed", str(removed), *MODES[mode],
            *extra]
    res = run_measured(argv)
    summary = json.loads(res["stdout"].splitlines()[-1])
    what = " ".join(MODES[mode] + extra) + ("" if mode not in FORMATS else f", {suffix} in and out")
    _row(rep, f"simstore-cli dedup-corpus {what}", label, info, res,
         summary["kept"], summary["removed"], _quality(path, _ids_in_jsonl(removed)))
    for p in (kept, removed):
        p.unlink(missing_ok=True)


def _row(rep: Report, impl: str, label: str, info: dict[str, Any], res: dict[str, Any],
         kept: int, removed: int, q: dict[str, int]) -> None:
    secs = res["seconds"]
    rep.row(impl, label, None, "s", seconds=round(secs, 1),
            cpu_seconds=round(res["cpu_seconds"], 1),
            docs_per_s=round(info["docs"] / secs), mb_per_s=round(info["bytes"] / 1e6 / secs, 1),
            peak_rss_mb=None if res["peak_rss"] is None else round(res["peak_rss"] / 2**20),
            peak_anon_mb=None if res["peak_anon"] is None else round(res["peak_anon"] / 2**20),
            kept=kept, removed=removed, planted_copies_missed=f"{q['missed']}/{q['planted']}",
            false_removals=q["false"], load_after=load_average()[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """dedup-corpus on a >= 1 GB JSONL of real text with planted near-duplicates."""
    rep = Report("corpus", {"mb": args.mb, "seed": args.seed, "scripts": args.scripts,
                            "near": args.near,
                            "exact": args.exact, "modes": args.modes, "peer_mb": args.peer_mb})
    path, info = _corpus(args, rep)
    out_dir = args.workdir / "corpus-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    rep.note(f"load average before the runs: {load_average()}")
    rep.header()
    label = f"{info['bytes'] / 1e9:.2f} GB, {info['docs']:,} docs"
    for mode in args.modes:
        _simstore_row(rep, path, info, mode, out_dir, label, args.chunk)
    if args.peer_mb:
        part, pinfo = _slice(path, args.peer_mb)
        plabel = f"first {pinfo['bytes'] / 1e6:.0f} MB, {pinfo['docs']:,} docs"
        for mode in args.peer_modes:
            _simstore_row(rep, part, pinfo, mode, out_dir, plabel)
        _peers(args, rep, part, pinfo, out_dir, plabel)
    return rep.to_dict()


_DATATROVE = """
import os, sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster,
                                      MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

src, work = sys.argv[1], sys.argv[2]
folder, name = os.path.split(os.path.abspath(src))
# 3-word shingles; 9 bands x 20 rows: the LSH S-curve is at (1/9)**(1/20) = 0.90
cfg = MinhashConfig(hash_config=HashConfig(precision=64, hash_fc="sha1"), n_grams=3,
                    num_buckets=9, hashes_per_bucket=20)
def reader():
    return JsonlReader(folder, glob_pattern=name, id_key="id", text_key="text")
stages = [
    [reader(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)],
    [MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets",
                         config=cfg)],
    [MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove",
                         config=cfg)],
    [reader(), MinhashDedupFilter(input_folder=f"{work}/remove",
                                  exclusion_writer=JsonlWriter(f"{work}/removed")),
     JsonlWriter(f"{work}/kept")],
]
for i, stage in enumerate(stages):
    tasks = cfg.num_buckets if i == 1 else 1
    LocalPipelineExecutor(pipeline=stage, tasks=tasks, workers=1,
                          logging_dir=f"{work}/logs/{i}").run()
"""


def _gz_ids(folder: Path) -> set[str]:
    import gzip

    ids: set[str] = set()
    for p in sorted(folder.glob("*.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            ids.update(json.loads(line)["id"] for line in f)
    return ids


def _peer_datatrove(py: str, rep: Report, part: Path, info: dict[str, Any], work: Path,
                    label: str) -> None:
    script = work / "datatrove_minhash.py"
    script.write_text(_DATATROVE)
    res = run_measured([py, str(script), str(part), str(work / "dt")])
    removed = _gz_ids(work / "dt" / "removed")
    kept = len(_gz_ids(work / "dt" / "kept"))
    _row(rep, "datatrove MinHash (4 stages, 1 process)", label, info, res, kept, len(removed),
         _quality(part, removed))


def _text_dedup_kept(out: Path) -> set[str]:
    """The ids of the Hugging Face dataset (Arrow files) text-dedup saves."""
    import pyarrow as pa

    kept_ids: set[str] = set()
    for p in sorted(out.glob("*.arrow")):
        with pa.memory_map(str(p)) as src:
            kept_ids.update(pa.ipc.open_stream(src).read_all().column("id").to_pylist())
    return kept_ids


def _peer_text_dedup(py: str, rep: Report, part: Path, info: dict[str, Any], work: Path,
                     label: str) -> None:
    out = work / "td"
    res = run_measured([py, "-m", "text_dedup.minhash", "--path", "json", "--data_files",
                        str(part), "--split", "train", "--column", "text", "--output", str(out),
                        "--threshold", "0.9", "--ngram", "3", "--num_perm", "128",
                        "--hash_func", "xxh3", "--num_proc", "2", "--cache_dir",
                        str(work / "hf-cache")])
    kept_ids = _text_dedup_kept(out)
    removed = _ids_in_jsonl(part) - kept_ids
    _row(rep, "text-dedup MinHash (datasets, 2 procs)", label, info, res, len(kept_ids),
         len(removed), _quality(part, removed))


def _text_dedup_simhash(k: int) -> Any:
    """A text-dedup simhash run within Hamming distance k of 64 bits, k+1 blocks (every
    pair within k agrees on one block). text-dedup hashes character 3-grams (it has no
    word shingles); k=5 is simstore's --k 5, k=3 its own default."""

    def run(py: str, rep: Report, part: Path, info: dict[str, Any], work: Path,
            label: str) -> None:
        out = work / "tds"
        res = run_measured([py, "-m", "text_dedup.simhash", "--path", "json", "--data_files",
                            str(part), "--split", "train", "--column", "text", "--output",
                            str(out), "--ngram", "3", "--f", "64", "--bit_diff", str(k),
                            "--num_bucket", str(k + 1), "--num_proc", "2", "--cache_dir",
                            str(work / "hf-cache")])
        kept_ids = _text_dedup_kept(out)
        removed = _ids_in_jsonl(part) - kept_ids
        _row(rep, f"text-dedup SimHash k={k} (datasets, 2 procs)", label, info, res,
             len(kept_ids), len(removed), _quality(part, removed))

    return run


PEERS = {
    "text-dedup-minhash": ("text_dedup.minhash", _peer_text_dedup),
    "text-dedup-simhash": ("text_dedup.simhash", _text_dedup_simhash(5)),
    "text-dedup-simhash-k3": ("text_dedup.simhash", _text_dedup_simhash(3)),
    "datatrove": ("datatrove", _peer_datatrove),
}


def _peers(args: argparse.Namespace, rep: Report, part: Path, info: dict[str, Any],
           out_dir: Path, label: str) -> None:
    py = args.peer_python
    if py is None or not os.path.exists(py):
        rep.note("peers (text-dedup, datatrove): no --peer-python interpreter found; "
                 "not compared")
        return
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in args.peers:
        mod, run = PEERS[name]
        if subprocess.run([py, "-c", f"import {mod}"], capture_output=True).returncode != 0:
            rep.note(f"peer {mod}: does not import from {py}; not compared")
            continue
        work = Path(tempfile.mkdtemp(prefix="peer-", dir=out_dir))
        try:
            run(py, rep, part, info, work, label)
        except SystemExit as exc:
            rep.note(f"peer {mod} failed: {exc}")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench corpus``."""
    p.add_argument("--mb", type=int, default=1100,
                   help="corpus size in MB of JSONL (default %(default)s)")
    p.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    p.add_argument("--scripts", choices=("english", "mixed"), default="english",
                   help="source text: English only, or mixed: twice as many gettext "
                   "translations (every script under /usr/share/locale) beside it "
                   "(default %(default)s)")
    p.add_argument("--near", type=float, default=0.15,
                   help="share of planted near copies (default %(default)s)")
    p.add_argument("--exact", type=float, default=0.05,
                   help="share of planted exact copies (default %(default)s)")
    p.add_argument("--modes", type=lambda t: [m for m in t.split(",") if m],
                   default=["t09", "longest", "k5"],
                   help="simstore runs on the whole corpus: t09 (--threshold 0.9, keep first), "
                   "longest (two passes), k5 (--k 5), t09gz / t09parquet (t09 on the corpus as "
                   ".jsonl.gz / Parquet, written in that form), exact and exact-longest (t09 and "
                   "longest with --exact); comma-separated (default t09,longest,k5)")
    p.add_argument("--chunk", type=int, default=None,
                   help="pass --chunk N to the simstore runs on the whole corpus (default: the "
                   "CLI's default)")
    p.add_argument("--peer-mb", type=int, default=100,
                   help="slice (first MB) given to the peers and to simstore beside them; "
                   "0 = no peers (default %(default)s)")
    p.add_argument("--peers", type=lambda t: [m for m in t.split(",") if m],
                   default=list(PEERS),
                   help=f"peer runs on the slice, comma-separated (default {','.join(PEERS)})")
    p.add_argument("--peer-modes", type=lambda t: [m for m in t.split(",") if m],
                   default=["t09", "k5"],
                   help="simstore runs on the slice beside the peers (default t09,k5)")
    p.add_argument("--peer-python", default="/tmp/peervenv/bin/python",
                   help="interpreter with text-dedup and datatrove installed (default "
                   "%(default)s)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the corpus and outputs go (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
