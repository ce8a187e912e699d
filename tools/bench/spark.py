"""``spark``: simstore.spark on a local Spark session, against in-memory simstore and Spark ML.

Two measurements in one run (one local session, ``--master``, default ``local[2]``):

1. ``simstore.spark.find_all`` over N random fingerprints with planted neighbours, read
   from Parquet and written back as Parquet, against in-memory ``simstore.find_all`` on
   the same array (answers compared). Per Spark job: wall time, shuffle bytes and
   records from the Spark status REST API (the session's own UI); the search shuffle
   divided by its passes gives the bytes per pass. Peak memory: the executor's peak
   JVM heap and off-heap (REST ``peakMemoryMetrics``) and the peak RSS of the whole
   process tree (driver Python + JVM + Python workers, sampled by psutil every 0.2 s).
2. Similarity dedup of real English documents (``tools/_corpus.english_documents``):
   ``with_signatures`` + ``find_similar(t)`` against Spark ML ``RegexTokenizer`` +
   ``NGram(3)`` + ``HashingTF(binary)`` + ``MinHashLSH.approxSimilarityJoin`` at Jaccard
   distance 1 - t, both from the text column, on the same session. Precision, recall
   and F1 against the exact Jaccard of simstore's word 3-shingle sets (all pairs).

Spark wall times include Spark's own overheads (job scheduling, shuffle files, the
JVM <-> Python Arrow transfer); the in-memory rows show what one process does without
them. Spark runs are long, so N-size runs are timed once (``--spark-reps``).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import simstore

from .. import _corpus
from ._cli import common, positive, sizes
from ._data import flip_bits, random_fps
from ._harness import DEFAULT_WORKDIR, Report, Stats, scratch_dir, timed_reps


class TreeRss:
    """Peak RSS of this process and all its descendants, sampled in a thread."""

    def __init__(self, every: float = 0.2) -> None:
        import psutil

        self._me = psutil.Process()
        self._every = every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for p in [self._me, *self._me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a worker that just exited
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self._every)

    def __enter__(self) -> TreeRss:
        self.peak = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Rest:
    """The Spark status REST API of a session's UI."""

    def __init__(self, spark: Any) -> None:
        sc = spark.sparkContext
        self.base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return json.load(r)

    def jobs(self, group: str) -> list[dict[str, Any]]:
        """The jobs of a job group with their stages' shuffle totals, oldest first."""
        stages = {s["stageId"]: s for s in self.get("/stages") if s["status"] == "COMPLETE"}
        out = []
        for j in sorted(self.get("/jobs"), key=lambda j: j["jobId"]):
            if j.get("jobGroup") != group:
                continue
            st = [stages[i] for i in j["stageIds"] if i in stages]
            out.append({
                "job": j["jobId"], "name": j["name"][:60],
                "seconds": _seconds(j),
                "shuffle_write_bytes": sum(s["shuffleWriteBytes"] for s in st),
                "shuffle_write_records": sum(s["shuffleWriteRecords"] for s in st),
                "shuffle_read_bytes": sum(s["shuffleReadBytes"] for s in st),
                "executor_run_ms": sum(s["executorRunTime"] for s in st),
                "spilled_disk_bytes": sum(s["diskBytesSpilled"] for s in st),
                "stages": [{"stage": s["stageId"], "tasks": s["numTasks"],
                            "shuffle_write_bytes": s["shuffleWriteBytes"],
                            "shuffle_write_records": s["shuffleWriteRecords"],
                            "executor_run_ms": s["executorRunTime"]} for s in st],
            })
        return out

    def peak_memory(self) -> dict[str, int]:
        """Peak memory metrics of the executors (local mode: the driver)."""
        out: dict[str, int] = {}
        for e in self.get("/executors"):
            for key, v in (e.get("peakMemoryMetrics") or {}).items():
                out[key] = max(out.get(key, 0), int(v))
        return out


def _seconds(job: dict[str, Any]) -> float | None:
    from datetime import datetime

    def at(s: str) -> datetime:
        return datetime.strptime(s.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")

    if "submissionTime" not in job or "completionTime" not in job:
        return None
    return (at(job["completionTime"]) - at(job["submissionTime"])).total_seconds()


def session(args: argparse.Namespace) -> Any:
    """The local session of the run: UI on (for the REST API), process-tree metrics."""
    from simstore.spark import local_session

    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.executor.processTreeMetrics.enabled": "true",
        "spark.driver.memory": args.driver_memory,
        "spark.local.dir": str(args.workdir),
    }
    s = local_session(args.master, app_name="simstore-bench", conf=conf)
    s.sparkContext.setLogLevel("ERROR")
    return s


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.spark find_all and similarity dedup on a local session."""
    rep = Report("spark", {"sizes": args.sizes, "k": args.k, "planted": args.planted,
                           "master": args.master, "docs": args.docs,
                           "thresholds": args.thresholds, "lsh_tables": args.lsh_tables,
                           "spark_reps": args.spark_reps, "reps": args.reps,
                           "seed": args.seed, "driver_memory": args.driver_memory})
    args.workdir.mkdir(parents=True, exist_ok=True)
    spark = session(args)
    rest = Rest(spark)
    rep.note(f"pyspark {spark.version}, master {args.master}, "
             f"spark.sql.shuffle.partitions {spark.conf.get('spark.sql.shuffle.partitions')}")
    rep.header()
    try:
        if args.sizes:
            find_all_section(rep, args, spark, rest)
        if args.docs:
            similarity_section(rep, args, spark)
    finally:
        spark.stop()
    return rep.to_dict()


# --------------------------------------------------------------------------- find_all


def find_all_section(rep: Report, args: argparse.Namespace, spark: Any, rest: Rest) -> None:
    """find_all on Spark vs in memory, per size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simstore import spark as ss
    from simstore.spark import DEFAULT_MAX_GROUP
    from simstore.spark.hamming import plan

    sc = spark.sparkContext
    for n in args.sizes:
        rng = np.random.default_rng([args.seed, n, 15])
        planted = min(args.planted, n // 2)
        base = random_fps(rng, n - planted)
        fps = rng.permutation(np.concatenate([base, flip_bits(rng, base[:planted], 1, args.k)]))
        case = f"random N={n:,}"
        rep.set_meta(n=n, k=args.k)
        warm = fps[: n // 10]
        walls, _, want = timed_reps(lambda f=fps: simstore.find_all(f, args.k), args.reps,
                                    warmup=lambda w=warm: simstore.find_all(w, args.k))
        in_memory = Stats.of(walls).median
        rep.row("in-memory simstore.find_all (2 threads)", case, Stats.of(walls), "s",
                pairs=len(want.i))
        nblocks, combos = plan(n, args.k, DEFAULT_MAX_GROUP // 2)
        with scratch_dir(args.workdir, "spark") as d:
            src = d / "in.parquet"
            pq.write_table(pa.table({"id": np.arange(n, dtype=np.int64),
                                     "fp": ss.to_long(fps)}), src, row_group_size=1 << 20)
            walls, peak_rss, jobs = [], 0, {}
            for r in range(args.spark_reps + 1):  # the first run warms up the workers
                group = f"find_all-{n}-{r}"
                sc.setJobGroup(group, f"find_all N={n} run {r}")
                out = d / f"pairs-{r}.parquet"
                with TreeRss() as tree:
                    t0 = time.perf_counter()
                    df = spark.read.parquet(str(src))
                    ss.find_all(df, args.k).write.parquet(str(out))
                    wall = time.perf_counter() - t0
                if r:
                    walls.append(wall)
                    peak_rss = max(peak_rss, tree.peak)
                    jobs = {"run": r, "jobs": rest.jobs(group)}
                got = pq.read_table(out)
                check_pairs(rep, case, got, want)
                if r == 0 and args.spark_reps and n >= 5_000_000:
                    rep.note(f"{case}: warm-up run took {wall:.1f} s")
            sc.setJobGroup("idle", "idle")
        search = max(jobs["jobs"], key=lambda j: j["shuffle_write_bytes"])
        per_pass = search["shuffle_write_bytes"] / len(combos)
        rep.row("simstore.spark.find_all (local)", case, Stats.of(walls), "s",
                pairs=len(want.i), passes=len(combos), blocks=nblocks,
                shuffle_bytes_per_pass=int(per_pass),
                shuffle_bytes_total=sum(j["shuffle_write_bytes"] for j in jobs["jobs"]),
                peak_tree_rss_mib=round(peak_rss / 2**20),
                times_in_memory=round(float(np.median(walls)) / in_memory, 1),
                jobs=jobs["jobs"])
        mem = rest.peak_memory()
        shown = ", ".join(f"{key} {mem[key] / 2**20:.0f} MiB" for key in (
            "JVMHeapMemory", "JVMOffHeapMemory", "ProcessTreeJVMRSS", "ProcessTreePythonRSS")
            if mem.get(key))
        rep.note(f"{case}: executor peak memory (REST peakMemoryMetrics, the session so far; "
                 f"local mode reports no process-tree metrics): {shown}")
        rep.rows[-1]["executor_peak_memory"] = mem


def check_pairs(rep: Report, case: str, got: Any, want: simstore.Pairs) -> None:
    """Note a mismatch between the Spark pairs and the in-memory ones."""
    i, j = got.column("id_a").to_numpy(), got.column("id_b").to_numpy()
    d = got.column("distance").to_numpy()
    o = np.lexsort((j, i))
    same = (np.array_equal(i[o], want.i) and np.array_equal(j[o], want.j)
            and np.array_equal(d[o], want.distance))
    if not same:
        rep.note(f"{case}: Spark pairs DIFFER from in-memory find_all "
                 f"({len(i)} vs {len(want.i)})")


# --------------------------------------------------------------------------- similarity


def truth_pairs(texts: list[str], t_min: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs i < j with exact Jaccard of word 3-shingle sets >= t_min (scipy sparse)."""
    import scipy.sparse as sp

    ids: dict[str, int] = {}
    indices: list[int] = []
    indptr = [0]
    for text in texts:
        toks = simstore.tokens(text)
        sh = {" ".join(toks[a : a + 3]) for a in range(len(toks) - 2)} or {" ".join(toks)}
        indices.extend(ids.setdefault(s, len(ids)) for s in sh)
        indptr.append(len(indices))
    x = sp.csr_matrix((np.ones(len(indices), np.int32), indices, indptr),
                      shape=(len(texts), len(ids)))
    sizes = np.diff(x.indptr).astype(np.int64)
    inter = (x @ x.T).tocoo()
    up = inter.col > inter.row
    a, b, c = inter.row[up], inter.col[up], inter.data[up].astype(np.int64)
    jac = c / (sizes[a] + sizes[b] - c)
    keep = jac >= t_min
    return a[keep].astype(np.int64), b[keep].astype(np.int64), jac[keep]


def prf(pred_i: np.ndarray, pred_j: np.ndarray, true_i: np.ndarray, true_j: np.ndarray,
        n: int) -> dict[str, float]:
    """Precision, recall and F1 of predicted pairs against true pairs."""
    p = set((pred_i.astype(np.int64) * n + pred_j).tolist())
    t = set((true_i.astype(np.int64) * n + true_j).tolist())
    tp = len(p & t)
    precision = tp / len(p) if p else 1.0
    recall = tp / len(t) if t else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "predicted": len(p), "true": len(t)}


def similarity_section(rep: Report, args: argparse.Namespace, spark: Any) -> None:
    """find_similar on Spark vs Spark ML MinHashLSH, on real documents."""
    from pyspark.ml.feature import MinHashLSH
    from pyspark.sql import functions as F

    from simstore import spark as ss

    texts = _corpus.english_documents(args.docs, args.doc_bytes, args.seed)
    n = len(texts)
    df = spark.createDataFrame(list(enumerate(texts)), "id long, text string").repartition(4)
    df = df.cache()
    df.count()
    truth = truth_pairs(texts, min(args.thresholds))
    case = f"{n:,} docs"
    rep.note(f"similarity: {n:,} English documents of <= {args.doc_bytes} bytes "
             f"({sum(len(t) for t in texts) / 1e6:.1f} MB); truth: exact Jaccard of "
             "simstore.tokens word 3-shingle sets, all pairs")
    peer = _peer_pipeline()
    for t in args.thresholds:
        rep.set_meta(n=n, threshold=t)
        true_i, true_j = truth[0][truth[2] >= t], truth[1][truth[2] >= t]

        def ours(t: float = t) -> Any:
            return ss.find_similar(ss.with_signatures(df), t, check=False).toArrow()

        def theirs(t: float = t) -> Any:
            feats = peer.fit(df).transform(df)
            lsh = MinHashLSH(inputCol="features", outputCol="hashes",
                             numHashTables=args.lsh_tables, seed=args.seed).fit(feats)
            j = lsh.approxSimilarityJoin(feats, feats, 1.0 - t, distCol="dist")
            return j.select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b")
                            ).where(F.col("a") < F.col("b")).toArrow()

        # alternate the two, after one warm-up each, so load drift on a shared VM hits both
        runs: dict[str, list[float]] = {"ours": [], "theirs": []}
        last: dict[str, Any] = {}
        for r in range(args.reps + 1):
            for name, fn in (("ours", ours), ("theirs", theirs)):
                t0 = time.perf_counter()
                last[name] = fn()
                if r:
                    runs[name].append(time.perf_counter() - t0)
        got = last["ours"]
        score = prf(got.column("id_a").to_numpy(), got.column("id_b").to_numpy(),
                    true_i, true_j, n)
        rep.row("simstore.spark with_signatures + find_similar", case,
                Stats.of(runs["ours"]), "s", threshold=t, **score)
        got = last["theirs"]
        score = prf(got.column("a").to_numpy(), got.column("b").to_numpy(), true_i, true_j, n)
        rep.row(f"Spark ML MinHashLSH ({args.lsh_tables} tables) approxSimilarityJoin", case,
                Stats.of(runs["theirs"]), "s", threshold=t, **score)
    df.unpersist()


def _peer_pipeline() -> Any:
    """Text -> word 3-shingles -> binary hashed features, all in Spark ML."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import HashingTF, NGram, RegexTokenizer

    return Pipeline(stages=[
        RegexTokenizer(inputCol="text", outputCol="tokens", pattern=r"[\p{L}\p{N}]+",
                       gaps=False, toLowercase=True),
        NGram(n=3, inputCol="tokens", outputCol="shingles"),
        HashingTF(inputCol="shingles", outputCol="features", numFeatures=1 << 22, binary=True),
    ])


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench spark``."""
    common(sp)
    sp.add_argument("--sizes", type=sizes, default=[1_000_000],
                    help="fingerprint counts N for find_all, comma-separated; empty to skip "
                         "(default 1000000)")
    sp.add_argument("--k", type=positive, default=3, help="Hamming radius (default %(default)s)")
    sp.add_argument("--planted", type=int, default=10_000,
                    help="planted near copies (distance 1..k) per size (default %(default)s)")
    sp.add_argument("--spark-reps", type=int, default=1,
                    help="timed Spark find_all runs after one warm-up (default %(default)s)")
    sp.add_argument("--docs", type=int, default=3000,
                    help="English documents for the similarity part, 0 to skip "
                         "(default %(default)s)")
    sp.add_argument("--doc-bytes", type=positive, default=5000,
                    help="document size cap in UTF-8 bytes (default %(default)s)")
    sp.add_argument("--thresholds", type=lambda s: [float(v) for v in s.split(",")],
                    default=[0.9, 0.8], help="Jaccard thresholds (default 0.9,0.8)")
    sp.add_argument("--lsh-tables", type=positive, default=5,
                    help="MinHashLSH numHashTables (default %(default)s)")
    sp.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    sp.add_argument("--driver-memory", default="4g",
                    help="spark.driver.memory (local mode: the executor too; default "
                         "%(default)s)")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="Parquet files and Spark's local dir (default %(default)s)")
