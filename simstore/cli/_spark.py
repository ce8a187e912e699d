"""``simstore-cli spark-dedup IN.parquet OUT.parquet``: near-duplicate removal on Spark.

Runs a local session (``--master local[2]`` by default) or, under ``spark-submit``, the
session spark-submit configured (any cluster). pyspark is imported only when the command
runs. Exit codes as every command's: 0 done, 1 failure (bad input data, Spark error,
output exists, no pyspark), 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..exceptions import SimstoreError
from ..native.core import MAX_K
from ._common import PROG as CLI, CliError, Out, index_k_arg, size_arg, threshold_arg

PROG = f"{CLI} spark-dedup"
HELP = ("deduplicate a Parquet dataset on Apache Spark (simstore[spark]): keep the rows, "
        "report the removed ones")
MORE = ("Hamming distance on fingerprints (--k, the default k=3) or estimated Jaccard on "
        "signatures (--threshold); computed from --text-col when the input lacks those columns.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The spark-dedup options, on its subparser."""
    p.add_argument("input", metavar="IN.parquet", help="input Parquet file or directory")
    p.add_argument("kept", metavar="OUT.parquet", help="kept rows (a Parquet directory)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--k", type=index_k_arg, default=None,
                     help=f"Hamming radius 0..{MAX_K} (default 3)")
    how.add_argument("--threshold", type=threshold_arg, default=None,
                     help="estimated Jaccard threshold in (0, 1]")
    p.add_argument("--removed", metavar="R.parquet", default=None,
                   help="write the removed rows' report (id, kept id, score) here")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[2]; under spark-submit, its own)")
    p.add_argument("--mode", choices=("representative", "clusters"), default="representative",
                   help="representative: no chaining, id order; clusters: one row per "
                        "connected component")
    p.add_argument("--id-col", default="id", help="id column")
    p.add_argument("--text-col", default="text", help="text column")
    p.add_argument("--fp-col", default="fp",
                   help="fingerprint column (LongType)")
    p.add_argument("--sketch-col", default="sketch", help="sketch column")
    p.add_argument("--bands-col", default="bands", help="band keys column")
    p.add_argument("--partitions", type=size_arg, default=None,
                   help="shuffle partitions of the search (default: from the data size)")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")


def _session(master: str | None) -> tuple[Any, bool]:
    """(session, whether this call created it)."""
    from pyspark.sql import SparkSession

    from ..spark.common import local_session

    active = SparkSession.getActiveSession()
    if master is None and active is not None:
        return active, False
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit
        return SparkSession.builder.getOrCreate(), active is None
    m = master or "local[2]"
    if m.startswith("local"):
        progress = str(sys.stderr.isatty()).lower()  # Spark's progress bar on a terminal only
        s = local_session(m, app_name=PROG, conf={"spark.ui.showConsoleProgress": progress})
    else:
        s = SparkSession.builder.master(m).appName(PROG).getOrCreate()
    if active is None:
        s.sparkContext.setLogLevel("ERROR")
    return s, active is None


def _run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    from .. import spark as ss

    if not args.overwrite:
        for path in (args.kept, args.removed):
            if path and _exists(spark, path):
                raise FileExistsError(f"{path} exists (--overwrite replaces it)")
    df = spark.read.parquet(args.input)
    cols = set(df.columns)
    k = args.k if args.k is not None else (3 if args.threshold is None else None)
    use_text = (args.fp_col not in cols) if k is not None else not (
        {args.sketch_col, args.bands_col} <= cols)
    result = ss.dedup(
        df, k=k, threshold=args.threshold, mode=args.mode,
        text_col=args.text_col if use_text else None, id_col=args.id_col,
        fp_col=args.fp_col, sketch_col=args.sketch_col, bands_col=args.bands_col,
        **({"partitions": args.partitions} if args.partitions and k is not None else {}),
    )
    mode = "overwrite" if args.overwrite else "errorifexists"
    result.kept.write.mode(mode).parquet(args.kept)
    if args.removed:
        result.removed.write.mode(mode).parquet(args.removed)
    kept = spark.read.parquet(args.kept).count()
    return {"input": args.input, "rows": df.count(), "kept": kept,
            "output": args.kept, "removed_report": args.removed,
            "rule": f"k={k}" if k is not None else f"threshold={args.threshold}",
            "mode": args.mode}


def _exists(spark: Any, path: str) -> bool:
    """Whether path exists, on whatever file system the session reads it from."""
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return bool(p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(p))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def cmd_spark_dedup(args: argparse.Namespace, out: Out) -> int:
    """Run spark-dedup; every failure is one line (a CliError)."""
    spark = None
    created = False
    try:
        spark, created = _session(args.master)
        summary = _run(args, spark)
    except (SimstoreError, ImportError, FileExistsError) as exc:
        raise CliError(_one_line(exc)) from None
    except Exception as exc:  # Spark's own errors (AnalysisException, Py4J...)  # noqa: BLE001
        raise CliError(f"{type(exc).__name__}: {_one_line(exc)}") from None
    finally:
        if created and spark is not None:
            spark.stop()
    out.record(summary, f"kept {summary['kept']} of {summary['rows']} rows ({summary['rule']}, "
               f"{summary['mode']}) -> {summary['output']}"
               + (f"; removed report -> {summary['removed_report']}" if args.removed else ""))
    return 0
