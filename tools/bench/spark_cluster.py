"""``spark-cluster``: near-duplicate text on a Spark standalone cluster, simstore.spark
against Spark ML ``MinHashLSH``, on a ladder of sizes up to 10M rows.

The cluster (``tools/spark_cluster.py``): a master and ``--workers`` 1-core workers on
127.0.0.1, one executor per worker in its own JVM (``--executor-memory``), the driver
in this process. Its executors import this checkout's simstore (``PYTHONPATH``).

The data, per size N (Parquet under ``--workdir``, made once and reused): documents of
``--words`` words drawn independently from the word frequencies of real English text
(the license and copyright files of ``tools/_corpus``), generated on the executors in
blocks of ``--block`` rows; in each block a ``--planted`` share of the rows are near
copies of a random earlier document of the block with ``--edits`` words replaced, their
exact Jaccard (word 3-shingle sets) stored beside them. All words are lower-case ASCII
letters, so simstore's tokens and Spark ML's ``RegexTokenizer`` split them alike.

Per size, each timed once after a 2,000-row warm-up (``--reps`` is not used: a 10M run
takes half an hour), each holding ``--lock`` while it runs:

(a) ``simstore.spark``: ``with_signatures`` (text -> sketch, bands) + ``find_similar(t)``,
    Parquet in, pairs written as Parquet.
(b) Spark ML: ``RegexTokenizer`` + ``NGram(3)`` + ``HashingTF(2**28, binary)`` +
    ``MinHashLSH(numHashTables=--lsh-tables)`` + ``approxSimilarityJoin`` at Jaccard
    distance 1 - t (a self-join; pairs a < b kept), written as Parquet. Skipped above
    ``--lsh-max`` rows; cancelled (``cancelJobGroup``) after ``--cap`` seconds.

Reported per run: wall time; shuffle write and read bytes, executor run time and disk
spill summed over the run's stages (Spark's REST API on the driver's UI); pairs found;
recall of the planted pairs with exact Jaccard >= t; and precision: the share of a
random sample of returned pairs (``--sample``) whose exact Jaccard is >= t, with the
sample's lowest Jaccard.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import simstore

from .. import _corpus
from ._cli import common, pair, positive, sizes
from ._harness import DEFAULT_WORKDIR, Report, Stats, load_average, write_json
from .spark import Rest

LOCK = Path("/tmp/simstore-bench.lock")
_LOWER = re.compile(r"^[a-z]+$")


# --------------------------------------------------------------------------- data


def vocabulary(seed: int, docs: int = 3000) -> tuple[list[str], np.ndarray]:
    """Lower-case ASCII words of real English text and their cumulative frequencies."""
    counts: collections.Counter[str] = collections.Counter()
    for text in _corpus.english_documents(docs, 5000, seed):
        counts.update(w for w in simstore.tokens(text) if _LOWER.match(w))
    words = sorted(counts, key=lambda w: (-counts[w], w))
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return words, np.cumsum(freq) / freq.sum()


def shingles(text: str) -> set[str]:
    """Word 3-shingles of simstore.tokens (the whole text when it has fewer words)."""
    toks = simstore.tokens(text)
    return {" ".join(toks[a : a + 3]) for a in range(len(toks) - 2)} or {" ".join(toks)}


def jaccard(a: set[Any], b: set[Any]) -> float:
    """Exact Jaccard similarity of two sets."""
    return len(a & b) / len(a | b) if a or b else 1.0


def _trigrams(w: np.ndarray) -> set[tuple[int, int, int]]:
    return set(zip(w.tolist(), w[1:].tolist(), w[2:].tolist(), strict=False))


def generate_block(block: int, *, n: int, rows: int, seed: int, words: list[str],
                   cdf: np.ndarray, lengths: tuple[int, int], planted: float,
                   edits: tuple[int, int]) -> Any:
    """Block `block` of the corpus (ids block*rows ..): (id, text, src, planted_jaccard);
    src and planted_jaccard are set on the near copies only."""
    import pyarrow as pa

    first = block * rows
    m = min(rows, n - first)
    copies = int(round(m * planted)) if m > 1 else 0
    originals = m - copies
    rng = np.random.default_rng([seed, block])
    lens = rng.integers(lengths[0], lengths[1] + 1, size=originals)
    flat = np.searchsorted(cdf, rng.random(int(lens.sum())), side="right")
    flat = np.minimum(flat, len(words) - 1)
    docs = np.split(flat, np.cumsum(lens)[:-1])
    src = rng.integers(0, originals, size=copies)
    nedits = rng.integers(edits[0], edits[1] + 1, size=copies)
    jac = np.empty(copies)
    for c in range(copies):
        w = docs[src[c]].copy()
        at = rng.choice(len(w), size=min(int(nedits[c]), len(w)), replace=False)
        w[at] = np.minimum(np.searchsorted(cdf, rng.random(len(at)), side="right"),
                           len(words) - 1)
        jac[c] = jaccard(_trigrams(docs[src[c]]), _trigrams(w))
        docs.append(w)
    vocab = np.array(words, dtype=object)
    texts = [" ".join(vocab[d].tolist()) for d in docs]
    ids = first + rng.permutation(m).astype(np.int64)
    src_ids = np.concatenate([np.zeros(originals, np.int64), ids[src]])
    mask = np.arange(m) < originals  # null on the originals
    return pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(texts),
         pa.array(src_ids, mask=mask),
         pa.array(np.concatenate([np.zeros(originals), jac]), mask=mask)],
        names=["id", "text", "src", "planted_jaccard"])


def _generate_partition(gen: Any, batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        for block in batch.column(0).to_pylist():
            yield gen(block)


def make_corpus(spark: Any, args: argparse.Namespace, n: int, path: Path) -> dict[str, Any]:
    """Write the N-row corpus as Parquet (once per size and settings); its summary."""
    meta_path = path / "_simstore_bench.json"
    want = {"n": n, "seed": args.seed, "block": args.block, "words": list(args.words),
            "planted": args.planted, "edits": list(args.edits)}
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta["settings"] == want:
            return meta
        shutil.rmtree(path)
    words, cdf = vocabulary(args.seed)
    gen = partial(generate_block, n=n, rows=args.block, seed=args.seed, words=words, cdf=cdf,
                  lengths=args.words, planted=args.planted, edits=args.edits)
    blocks = -(-n // args.block)
    schema = "id long, text string, src long, planted_jaccard double"
    t0 = time.perf_counter()
    spark.range(blocks, numPartitions=blocks).mapInArrow(
        partial(_generate_partition, gen), schema).write.parquet(str(path))
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["planted_jaccard"])
    pj = t.column("planted_jaccard").drop_null().to_numpy()
    meta = {"settings": want, "seconds": round(time.perf_counter() - t0, 1),
            "vocabulary": len(words),
            "bytes": sum(f.stat().st_size for f in path.glob("*.parquet")),
            "planted": len(pj), "planted_jaccard_quantiles": {
                q: round(float(np.quantile(pj, q)), 4) for q in (0.0, 0.1, 0.5, 0.9, 1.0)}
            if len(pj) else {}}
    meta_path.write_text(json.dumps(meta))
    return meta


# --------------------------------------------------------------------------- the two runs


def simstore_pairs(spark: Any, src: str, out: str, t: float) -> tuple[str, str]:
    """(a): with_signatures + find_similar, written to out; the pair columns."""
    from simstore import spark as ss

    df = spark.read.parquet(src).select("id", "text")
    ss.find_similar(ss.with_signatures(df), t).write.parquet(out)
    return "id_a", "id_b"


def mllib_pairs(spark: Any, src: str, out: str, t: float, tables: int, seed: int
                ) -> tuple[str, str]:
    """(b): Spark ML word 3-shingles + MinHashLSH approxSimilarityJoin, written to out."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import HashingTF, MinHashLSH, NGram, RegexTokenizer
    from pyspark.sql import functions as F

    df = spark.read.parquet(src).select("id", "text")
    feats = Pipeline(stages=[
        RegexTokenizer(inputCol="text", outputCol="tokens", pattern=r"[\p{L}\p{N}]+",
                       gaps=False, toLowercase=True),
        NGram(n=3, inputCol="tokens", outputCol="shingles"),
        HashingTF(inputCol="shingles", outputCol="features", numFeatures=1 << 28, binary=True),
    ]).fit(df).transform(df).select("id", "features")
    model = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=tables,
                       seed=seed).fit(feats)
    j = model.approxSimilarityJoin(feats, feats, 1.0 - t, distCol="dist")
    j.select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b"),
             (1.0 - F.col("dist")).alias("jaccard")).where(F.col("a") < F.col("b")
                                                         ).write.parquet(out)
    return "a", "b"


@contextlib.contextmanager
def bench_lock(path: Path | None) -> Iterator[None]:
    """Hold the shared benchmark lock (flock) while a measurement runs."""
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def timed(spark: Any, rest: Rest, group: str, cap: float, lock: Path | None, fn: Any
          ) -> dict[str, Any]:
    """Run fn() as job group `group`, cancelled after cap seconds: wall, load, Spark totals."""
    sc = spark.sparkContext
    out: dict[str, Any] = {}
    with bench_lock(lock):
        out["loadavg_before"] = load_average()
        sc.setJobGroup(group, group)

        def stop() -> None:  # what was running, then cancel it
            tracker = sc.statusTracker()
            out["at_cancel"] = [
                {"stage": i, "tasks": info.numTasks, "completed": info.numCompletedTasks}
                for i in tracker.getActiveStageIds() if (info := tracker.getStageInfo(i))]
            sc.cancelJobGroup(group)

        timer = threading.Timer(cap, stop)
        timer.start()
        t0 = time.perf_counter()
        try:
            out["cols"] = fn()
            out["finished"] = True
        except Exception as exc:  # noqa: BLE001 - a cancelled (or failed) Spark job
            out["finished"] = False
            out["error"] = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else (
                type(exc).__name__)
        finally:
            out["seconds"] = time.perf_counter() - t0
            timer.cancel()
            sc.setJobGroup("idle", "idle")
        out["loadavg_after"] = load_average()
    jobs = rest.jobs(group)
    out["totals"] = {key: sum(j[key] for j in jobs) for key in (
        "shuffle_write_bytes", "shuffle_read_bytes", "executor_run_ms", "spilled_disk_bytes")}
    out["jobs"] = [{k: v for k, v in j.items() if k != "stages"} for j in jobs]
    return out


# --------------------------------------------------------------------------- quality


def pair_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Unordered pairs of ids < n as sorted int64 keys min * n + max."""
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    return np.unique(lo * n + hi)


def quality(spark: Any, src: Path, out: Path, cols: tuple[str, str], n: int, t: float,
            planted: np.ndarray, sample: int, seed: int) -> dict[str, Any]:
    """Pairs found, planted pairs (exact Jaccard >= t) found, precision of a sample."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    got = pq.read_table(out, columns=list(cols))
    keys = pair_keys(got.column(0).to_numpy(), got.column(1).to_numpy(), n)
    found = int(np.isin(planted, keys, assume_unique=True).sum())
    rng = np.random.default_rng([seed, n, 99])
    pick = keys[rng.choice(len(keys), size=min(sample, len(keys)), replace=False)]
    ids = sorted({int(v) for k in pick.tolist() for v in divmod(k, n)})
    texts = {r["id"]: r["text"] for r in spark.read.parquet(str(src)).where(
        F.col("id").isin(ids)).select("id", "text").collect()}
    sh = {i: shingles(texts[i]) for i in ids}
    exact = np.array([jaccard(sh[a], sh[b]) for a, b in (divmod(int(k), n) for k in pick)])
    return {"pairs": len(keys), "planted_true": len(planted), "planted_found": found,
            "planted_recall": round(found / len(planted), 5) if len(planted) else None,
            "sampled": len(pick),
            "precision": round(float((exact >= t).mean()), 5) if len(pick) else None,
            "sample_min_jaccard": round(float(exact.min()), 4) if len(pick) else None,
            "sample_median_jaccard": round(float(np.median(exact)), 4) if len(pick) else None}


# --------------------------------------------------------------------------- the command


def cluster_conf(args: argparse.Namespace, cluster: Any) -> dict[str, str]:
    """The session's settings: the cluster's, with the UI on (its REST API) and memory."""
    conf = cluster.conf()
    conf.update({
        "spark.ui.enabled": "true", "spark.ui.retainedJobs": "10000",
        "spark.ui.retainedStages": "10000",
        "spark.executor.memory": args.executor_memory, "spark.driver.memory": args.driver_memory,
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.local.dir": str(args.workdir / "local"),
    })
    return conf


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.spark vs Spark ML MinHashLSH on a standalone cluster, per size."""
    from simstore import spark as ss
    from tools.spark_cluster import Cluster

    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
              if isinstance(v, (int, float, str, list, tuple, Path)) and k != "out"}
    rep = Report("spark-cluster", params)
    if args.append and args.out is not None and args.out.exists():
        earlier = json.loads(args.out.read_text())
        rep.rows, rep.notes = earlier["rows"], earlier["notes"]
        rep.params = {"runs": [*earlier["params"].get("runs", [earlier["params"]]), params]}
        rep.note(f"appended to {args.out} (rows above from earlier runs of this command)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    (args.workdir / "local").mkdir(exist_ok=True)
    logs = args.workdir / "cluster"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    cluster = Cluster(logs, workers=args.workers, worker_memory=args.worker_memory)
    try:
        spark = ss.cluster_session(cluster.url, app_name="simstore-bench-cluster",
                                   conf=cluster_conf(args, cluster))
        spark.sparkContext.setLogLevel("ERROR")
        ss.check_executors(spark)
        rep.note(f"pyspark {spark.version}, {cluster.url}: {args.workers} workers x 1 core, "
                 f"executor memory {args.executor_memory}, driver {args.driver_memory}, "
                 f"spark.sql.shuffle.partitions {args.shuffle_partitions}")
        rep.header()
        try:
            for n in args.sizes:
                one_size(rep, args, spark, Rest(spark), n)
                write_json(args.out, rep.to_dict())
        finally:
            spark.stop()
    finally:
        cluster.stop()
    return rep.to_dict()


def one_size(rep: Report, args: argparse.Namespace, spark: Any, rest: Rest, n: int) -> None:
    """Both runs on the N-row corpus."""
    import pyarrow.parquet as pq

    src = args.workdir / f"corpus-{n}.parquet"
    meta = make_corpus(spark, args, n, src)
    rep.note(f"N={n:,}: corpus {meta['bytes'] / 1e6:.0f} MB of Parquet, {meta['planted']:,} "
             f"planted near copies (exact Jaccard quantiles "
             f"{meta['planted_jaccard_quantiles']}), vocabulary {meta['vocabulary']:,} words; "
             f"generated in {meta['seconds']} s (or earlier)")
    t = args.threshold
    pl = pq.read_table(src, columns=["id", "src", "planted_jaccard"])
    pj = pl.column("planted_jaccard").to_numpy(zero_copy_only=False)
    keep = ~np.isnan(pj) & (pj >= t)
    planted = pair_keys(pl.column("id").to_numpy()[keep],
                        pl.column("src").to_numpy(zero_copy_only=False)[keep].astype(np.int64), n)
    case = f"N={n:,}"
    rep.set_meta(n=n, threshold=t)
    runs = [("simstore.spark with_signatures + find_similar", "simstore",
             partial(simstore_pairs, t=t), n <= args.simstore_max),
            (f"Spark ML MinHashLSH ({args.lsh_tables} tables) approxSimilarityJoin", "mllib",
             partial(mllib_pairs, t=t, tables=args.lsh_tables, seed=args.seed),
             n <= args.lsh_max)]
    warm = str(args.workdir / "warm.parquet")
    if not Path(warm).exists():
        spark.read.parquet(str(src)).limit(2000).write.parquet(warm)
    for impl, tag, fn, on in runs:
        if not on:
            rep.note(f"{case}: {impl} skipped (over --simstore-max / --lsh-max)")
            continue
        shutil.rmtree(args.workdir / "warm-out", ignore_errors=True)
        fn(spark, warm, str(args.workdir / "warm-out"))
        out = args.workdir / f"pairs-{tag}-{n}.parquet"
        shutil.rmtree(out, ignore_errors=True)
        res = timed(spark, rest, f"{tag}-{n}", args.cap, args.lock,
                    lambda fn=fn, out=out: fn(spark, str(src), str(out)))
        extra: dict[str, Any] = {"finished": res["finished"],
                                 "loadavg_before": res["loadavg_before"],
                                 "loadavg_after": res["loadavg_after"], **res["totals"]}
        if res["finished"]:
            extra.update(quality(spark, src, out, res["cols"], n, t, planted, args.sample,
                                 args.seed))
        else:
            extra.update(error=res["error"], active_stages_at_cancel=res.get("at_cancel"))
        extra["core_seconds_per_million_rows"] = round(
            res["totals"]["executor_run_ms"] / 1000 / (n / 1e6), 1)
        extra["jobs"] = res["jobs"]
        rep.row(impl, case, Stats.of([res["seconds"]]), "s", **extra)
        shutil.rmtree(out, ignore_errors=True)
    if not args.keep_corpus:
        shutil.rmtree(src, ignore_errors=True)


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench spark-cluster``."""
    def share(text: str) -> float:
        v = float(text)
        if not 0 < v <= 1:
            raise argparse.ArgumentTypeError(f"{text} is not a valid share, must be in (0, 1]")
        return v

    def seconds(text: str) -> float:
        v = float(text)
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text} is not a valid time, must be > 0")
        return v

    common(sp)
    sp.add_argument("--sizes", type=sizes, default=[100_000, 300_000, 1_000_000],
                    help="corpus sizes N, comma-separated (default 100000,300000,1000000)")
    sp.add_argument("--threshold", type=share, default=0.9,
                    help="Jaccard threshold t (MinHashLSH distance 1 - t; default %(default)s)")
    sp.add_argument("--lsh-tables", type=positive, default=5,
                    help="MinHashLSH numHashTables (default %(default)s: a pair at Jaccard "
                         "0.9 collides in some table with probability 1 - 0.1**5)")
    sp.add_argument("--lsh-max", type=int, default=10_000_000,
                    help="largest N given to MinHashLSH (default %(default)s)")
    sp.add_argument("--simstore-max", type=int, default=10_000_000,
                    help="largest N given to simstore.spark (default %(default)s)")
    sp.add_argument("--cap", type=seconds, default=1200,
                    help="seconds after which a run is cancelled (default %(default)s)")
    sp.add_argument("--block", type=positive, default=100_000,
                    help="rows per generated block (one generating task; default %(default)s)")
    sp.add_argument("--words", type=pair(int), default=(40, 120),
                    help="LO,HI words per document (default 40,120)")
    sp.add_argument("--planted", type=share, default=0.05,
                    help="share of rows that are near copies (default %(default)s)")
    sp.add_argument("--edits", type=pair(int, zero=True), default=(0, 3),
                    help="LO,HI words replaced in a near copy (default 0,3)")
    sp.add_argument("--sample", type=positive, default=2000,
                    help="returned pairs whose exact Jaccard is computed (default %(default)s)")
    sp.add_argument("--workers", type=positive, default=2,
                    help="1-core workers (default %(default)s)")
    sp.add_argument("--worker-memory", default="5g",
                    help="memory each worker offers (default %(default)s)")
    sp.add_argument("--executor-memory", default="3g",
                    help="spark.executor.memory (default %(default)s)")
    sp.add_argument("--driver-memory", default="2g",
                    help="spark.driver.memory (default %(default)s)")
    sp.add_argument("--shuffle-partitions", type=positive, default=200,
                    help="spark.sql.shuffle.partitions (default %(default)s)")
    sp.add_argument("--lock", type=lambda s: Path(s) if s else None, default=LOCK,
                    help="flock held while each run is timed, '' for none (default "
                         "%(default)s)")
    sp.add_argument("--append", action="store_true",
                    help="add this run's rows to those already in --out")
    sp.add_argument("--keep-corpus", action="store_true",
                    help="keep each size's Parquet corpus (reused by the next run)")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "spark-cluster",
                    help="corpora, pairs, Spark's local dir and the cluster's logs "
                         "(default %(default)s)")
