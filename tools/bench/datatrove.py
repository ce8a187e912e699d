"""``datatrove``: datatrove's own 4-stage MinHash dedup against simstore's datatrove steps.

One corpus, one machine, one run. The corpus is ``corpus``'s (real text of this machine,
cut into new documents, with planted exact and near copies: :func:`tools.bench.corpus.
build_corpus`) at ``--mb`` MB, split into ``--tasks`` JSON lines shards (task r reads
shard r). Three pipelines, each a separate process under datatrove's
``LocalPipelineExecutor`` (``--workers`` processes; with 1, the default, every task runs
in the measured process, so its peak RSS is the pipeline's):

- datatrove: ``MinhashDedupSignature``, ``MinhashDedupBuckets``, ``MinhashDedupCluster``,
  ``MinhashDedupFilter``: word 3-grams, 64-bit hashes, 9 buckets x 20 hashes (the LSH
  S-curve at (1/9)**(1/20) = 0.90, the configuration ``corpus`` gives it); it needs
  ``pip install orjson regex spacy tokenizers`` beside datatrove, else it is skipped
  with a note;
- simstore 4 stages: ``NearDedupSignature`` .. ``NearDedupClusterFilter`` (16 band tasks);
- simstore shared store: one stage, reader -> ``NearDedupFilter`` -> writer.

Each pipeline writes its kept documents and, through the exclusion writer, its removed
ones. Wall and CPU seconds and peak RSS come from :func:`tools.bench.corpus.run_measured`.
Quality, on a seeded sample of ``--sample`` documents against the exact Jaccard of
shingle sets (word 3-grams, ``simstore.shingle_sets``) with every document of the
corpus: a removed sample document is right when some kept document of that pipeline is
>= threshold to it, a kept one is a miss when another kept document is >= threshold to
it (so the measure does not depend on which member of a group a pipeline keeps);
precision, recall and F1 of "removed". Target: simstore >= 5x faster than datatrove's
MinHash at equal or better F1.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

import simstore

from ._harness import DEFAULT_WORKDIR, Report
from .corpus import _gz_ids, build_corpus, run_measured

_COMMON = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

src, work = sys.argv[1], sys.argv[2]
t, tasks, workers = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def reader():
    return JsonlReader(src, id_key="id", text_key="text")

def run(stage, n, logs):
    LocalPipelineExecutor(pipeline=stage, tasks=n, workers=min(workers, n),
                          logging_dir=f"{work}/logs/{logs}").run()
"""

_DATATROVE = (
    _COMMON
    + """
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets,
    MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature)
from datatrove.utils.hashing import HashConfig

if __name__ == "__main__":
    cfg = MinhashConfig(hash_config=HashConfig(precision=64, hash_fc="sha1"), n_grams=3,
                        num_buckets=9, hashes_per_bucket=20)
    run([reader(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)], tasks, 1)
    run([MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets",
                             config=cfg)], cfg.num_buckets, 2)
    run([MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove",
                             config=cfg)], 1, 3)
    run([reader(), MinhashDedupFilter(input_folder=f"{work}/remove",
                                      exclusion_writer=JsonlWriter(f"{work}/removed")),
         JsonlWriter(f"{work}/kept")], tasks, 4)
"""
)

_STAGES = (
    _COMMON
    + """
from simstore.datatrove import (NearDedupBuckets, NearDedupCluster, NearDedupClusterFilter,
    NearDedupSignature)
from simstore import SIGNATURE_CONFIG

if __name__ == "__main__":
    run([reader(), NearDedupSignature(f"{work}/sigs")], tasks, 1)
    run([NearDedupBuckets(f"{work}/sigs", f"{work}/pairs", threshold=t)],
        SIGNATURE_CONFIG.bands, 2)
    run([NearDedupCluster(f"{work}/sigs", f"{work}/pairs", f"{work}/remove")], 1, 3)
    run([reader(), NearDedupClusterFilter(f"{work}/remove", JsonlWriter(f"{work}/removed")),
         JsonlWriter(f"{work}/kept")], tasks, 4)
"""
)

_SHARED = (
    _COMMON
    + """
from simstore.datatrove import NearDedupFilter

if __name__ == "__main__":
    run([reader(), NearDedupFilter(f"{work}/store", t,
                                   exclusion_writer=JsonlWriter(f"{work}/removed")),
         JsonlWriter(f"{work}/kept")], tasks, 1)
"""
)

PIPELINES = {
    "datatrove MinHash (4 stages)": _DATATROVE,
    "simstore 4 stages": _STAGES,
    "simstore shared store (1 stage)": _SHARED,
}


# flag, type, default, help (each help ends with its default)
_OPTIONS = (
    (
        "--mb",
        int,
        40,
        "corpus size in MB of JSON lines (the issue asks >= 300; 40 on a shared 2-core machine)",
    ),
    ("--tasks", int, 4, "shards = tasks of stages 1 and 4"),
    ("--workers", int, 1, "executor processes (1: every task in the measured process)"),
    ("--threshold", float, 0.9, "Jaccard"),
    ("--sample", int, 1000, "documents scored against exact Jaccard"),
    ("--seed", int, 20240601, "RNG seed"),
    ("--workdir", Path, DEFAULT_WORKDIR, "where the corpus and outputs go"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``datatrove``."""
    for flag, kind, default, text in _OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _shards(args: argparse.Namespace, rep: Report) -> tuple[Path, list[dict[str, Any]]]:
    """The corpus split into --tasks shards of consecutive documents; every document."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / f"datatrove-{args.mb}mb-s{args.seed}.jsonl"
    if not path.exists():
        info = build_corpus(path, args.mb * 1_000_000, args.seed, near=0.1, exact=0.05)
        rep.note(
            f"built {path}: {info['docs']:,} documents ({info['near']:,} near and "
            f"{info['exact']:,} exact planted copies)"
        )
    with open(path, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    folder = args.workdir / f"datatrove-{args.mb}mb-s{args.seed}-{args.tasks}"
    if not folder.exists():
        tmp = folder.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        per = -(-len(docs) // args.tasks)
        for r in range(args.tasks):
            with open(tmp / f"{r:05d}.jsonl", "w", encoding="utf-8") as f:
                for d in docs[r * per : (r + 1) * per]:
                    f.write(json.dumps({"id": d["id"], "text": d["text"]}) + "\n")
        tmp.rename(folder)
    return folder, docs


def _shingle_matrix(texts: list[str]) -> Any:
    """Documents x distinct shingles (scipy CSR of ones): simstore's shingle sets, the word
    3-grams its exact Jaccard compares (64-bit hashes)."""
    import scipy.sparse as sp

    sets = simstore.shingle_sets(texts)
    _, cols = np.unique(sets.hashes, return_inverse=True)
    return sp.csr_matrix(
        (np.ones(len(cols), np.int32), cols.ravel(), sets.offsets),
        shape=(len(texts), int(cols.max()) + 1 if len(cols) else 0),
    )


def near_matrix(texts: list[str], sample: np.ndarray, t: float) -> Any:
    """(sample x corpus) boolean CSR: exact Jaccard >= t, a document with itself left out."""
    x = _shingle_matrix(texts)
    sizes = np.diff(x.indptr).astype(np.int64)
    inter = (x[sample] @ x.T).tocoo()
    union = sizes[sample][inter.row] + sizes[inter.col] - inter.data
    ok = (inter.data / union >= t) & (sample[inter.row] != inter.col)
    import scipy.sparse as sp

    return sp.csr_matrix(
        (np.ones(int(ok.sum()), bool), (inter.row[ok], inter.col[ok])),
        shape=(len(sample), len(texts)),
    )


def score(near: Any, sample: np.ndarray, kept: np.ndarray) -> dict[str, Any]:
    """Precision, recall and F1 of "removed" on the sample (see the module docstring)."""
    kept_near = (near @ kept.astype(np.int32)) > 0  # a kept document >= t to each sample doc
    removed = ~kept[sample]
    tp = int((removed & kept_near).sum())
    fp = int((removed & ~kept_near).sum())
    fn = int((~removed & kept_near).sum())
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(f1, 4),
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }


def _measured(rep: Report, name: str, argv: list[str]) -> dict[str, Any] | None:
    """run_measured, or None with a note when the pipeline fails (a peer that does not
    import: datatrove's MinHash needs ``regex``, ``spacy`` and ``tokenizers`` too)."""
    try:
        return run_measured(argv)
    except SystemExit as exc:
        rep.note(f"{name} skipped: {str(exc)[-300:]}")
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the three pipelines on one corpus; wall, CPU, peak RSS and F1 of each."""
    rep = Report(
        "datatrove",
        {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("func", "parser", "argv", "machine")
        },
    )
    src, docs = _shards(args, rep)
    mb = sum(len(d["text"].encode()) for d in docs) / 1e6
    rep.note(f"{len(docs):,} documents, {mb:.1f} MB of text, {args.tasks} shards")
    rng = np.random.default_rng(args.seed)
    sample = np.sort(rng.choice(len(docs), size=min(args.sample, len(docs)), replace=False))
    near = near_matrix([d["text"] for d in docs], sample, args.threshold)
    position = {d["id"]: i for i, d in enumerate(docs)}
    rep.header()
    seconds: dict[str, float] = {}
    f1: dict[str, float] = {}
    for name, script in PIPELINES.items():
        work = args.workdir / f"datatrove-run-{random.getrandbits(32):08x}"
        work.mkdir()
        try:
            (work / "pipeline.py").write_text(script)
            res = _measured(
                rep,
                name,
                [
                    sys.executable,
                    str(work / "pipeline.py"),
                    str(src),
                    str(work),
                    str(args.threshold),
                    str(args.tasks),
                    str(args.workers),
                ],
            )
            if res is None:
                continue
            kept_ids = _gz_ids(work / "kept")
            kept = np.zeros(len(docs), dtype=bool)
            kept[[position[i] for i in kept_ids]] = True
            q = score(near, sample, kept)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        seconds[name], f1[name] = res["seconds"], q["f1"]
        rep.row(
            name,
            f"{mb:.0f} MB",
            None,
            "s",
            wall_s=round(res["seconds"], 2),
            cpu_s=round(res["cpu_seconds"], 2),
            peak_rss_mb=round((res["peak_rss"] or 0) / 2**20),
            kept=int(kept.sum()),
            removed=int(len(docs) - kept.sum()),
            **q,
        )
    base = "datatrove MinHash (4 stages)"
    for name in list(PIPELINES)[1:] if base in seconds else []:
        rep.target(f"{name}: speed-up over datatrove", seconds[base] / seconds[name], 5, ">=", "x")
        rep.target(f"{name}: F1 minus datatrove's", f1[name] - f1[base], 0, ">=", "")
    return rep.to_dict()
