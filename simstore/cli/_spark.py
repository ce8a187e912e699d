"""``simstore-cli spark-dedup IN OUT.parquet``: near-duplicate removal on Spark.

IN is Parquet or JSON lines. Runs a local session (``--master local[2]`` by default), a
session on ``--master spark://...`` (executors run ``--env-archive``, the packed
environment, or this interpreter's path), or, under ``spark-submit``, the session
spark-submit configured. pyspark is imported only when the command runs. Exit codes as
every command's: 0 done, 1 failure (bad input data, Spark error, output exists, no
pyspark), 2 usage error.
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
HELP = ("deduplicate a Parquet or JSON lines dataset on Apache Spark (simstore[spark]): keep "
        "the rows, report the removed ones")
MORE = ("Near means estimated Jaccard >= --threshold (default 0.9, as dedup-corpus), or "
        "Hamming distance <= --k on fingerprints; signatures or fingerprints are computed from "
        "--text-field when the input lacks those columns. Rows are decided in input order "
        "(files by name, then their order in the file), so the kept rows are dedup-corpus's "
        "--keep first. A malformed JSON line, a row without an id or a text, a repeated id or "
        "a missing column stops the run before any search, naming it.")
THRESHOLD = 0.9  # the default rule, dedup-corpus's
POS = "_simstore_pos"  # a row's place in the input: what the search orders rows by
JSONL = (".jsonl", ".ndjson", ".json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The spark-dedup options, on its subparser."""
    p.add_argument("input", metavar="IN",
                   help="input: Parquet file or directory, or JSON lines (.jsonl, .ndjson, "
                   ".json, also compressed; --jsonl for any name)")
    p.add_argument("--jsonl", action="store_true", help="read IN as JSON lines")
    p.add_argument("kept", metavar="OUT.parquet", help="kept rows (a Parquet directory)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                     help=f"near: estimated Jaccard >= T (default {THRESHOLD})")
    how.add_argument("--k", type=index_k_arg, default=None, metavar="K",
                     help=f"near: fingerprints within Hamming distance K (0..{MAX_K}) instead")
    p.add_argument("--removed", metavar="R.parquet", default=None,
                   help="write the removed rows' report (id, kept id, score) here")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[2]; under spark-submit, its own)")
    p.add_argument("--env-archive", metavar="ENV.tar.gz", default=None,
                   help="with a cluster --master: the executors' environment, packed by "
                   "'python -m simstore.spark ENV.tar.gz' (default: executors run this "
                   "interpreter's path)")
    p.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE",
                   type=_conf_arg, help="a Spark setting of the session (repeatable)")
    p.add_argument("--mode", choices=("representative", "clusters"), default="representative",
                   help="representative: no chaining, input order; clusters: one row (the "
                        "first read) per connected component")
    p.add_argument("--id-field", dest="id_col", default="id", metavar="NAME",
                   help="column of the document id (unique)")
    p.add_argument("--text-field", dest="text_col", default="text", metavar="NAME",
                   help="column of the text")
    for old, dest in (("--id-col", "id_col"), ("--text-col", "text_col")):  # earlier names
        p.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--fp-col", default="fp",
                   help="fingerprint column (LongType)")
    p.add_argument("--sketch-col", default="sketch", help="sketch column")
    p.add_argument("--bands-col", default="bands", help="band keys column")
    p.add_argument("--partitions", type=size_arg, default=None,
                   help="shuffle partitions of the search (default: from the data size)")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")


def _conf_arg(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def _session(args: argparse.Namespace) -> tuple[Any, bool]:
    """(session, whether this call created it)."""
    from pyspark.sql import SparkSession

    from ..spark.common import cluster_session

    master = args.master
    active = SparkSession.getActiveSession()
    if master is None and active is not None:
        return active, False
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit
        return SparkSession.builder.getOrCreate(), active is None
    m = master or "local[2]"
    if args.env_archive and m.startswith("local"):
        raise CliError("--env-archive ships the environment to a cluster's executors: give "
                       "--master spark://... (a local session runs this interpreter)")
    progress = str(sys.stderr.isatty()).lower()  # Spark's progress bar on a terminal only
    conf = {"spark.ui.showConsoleProgress": progress, **dict(args.conf or ())}
    s = cluster_session(m, args.env_archive, app_name=PROG, conf=conf)
    if active is None:
        s.sparkContext.setLogLevel("ERROR")
    return s, active is None


def _read(args: argparse.Namespace, spark: Any) -> Any:
    """The input as a DataFrame; a malformed JSON line, a missing column, a row without an
    id or a text are refused (CliError naming them) before any search."""
    from pyspark.sql import functions as F

    name = args.input.lower().removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz")
    corrupt = "_simstore_corrupt"
    if args.jsonl or name.endswith(JSONL):
        df = spark.read.option("columnNameOfCorruptRecord", corrupt).json(args.input)
    else:
        df = spark.read.parquet(args.input)
    cols = df.columns
    if corrupt in cols:  # only there when some line did not parse
        others = [c for c in cols if c != corrupt]
        if not others:  # Spark refuses a query of the corrupt-record column alone
            df = df.cache()
        bad = (df.select(F.input_file_name().alias("f"), F.col(corrupt), *others[:1])
               .where(F.col(corrupt).isNotNull()).limit(1).collect())
        if bad:
            rec = bad[0][corrupt].strip()
            raise CliError(f"{bad[0]['f']}: a line is not a JSON object: "
                           f"{rec[:80]!r}{'...' if len(rec) > 80 else ''}")
        cols = [c for c in cols if c != corrupt]
        df = df.select(cols)
    need = [args.id_col]
    if not _has_search_columns(args, cols):
        need.append(args.text_col)
    for col, opt in zip(need, ("--id-field", "--text-field"), strict=False):
        if col not in cols:
            raise CliError(f"{args.input} has no column {col!r} (columns: "
                           f"{', '.join(cols) or 'none'}); {opt} names another")
    for col in need[1:]:
        rows = (df.where(F.col(col).isNull()).select(args.id_col).orderBy(args.id_col)
                .limit(3).collect())
        if rows:
            ids = ", ".join(repr(r[0]) for r in rows)
            raise CliError(f"{args.input}: rows without a {col!r} value (null or missing): "
                           f"{args.id_col} {ids}")
    return df


def _threshold(args: argparse.Namespace) -> float | None:
    """The Jaccard threshold of the rule (THRESHOLD unless --k gives a Hamming rule)."""
    return None if args.k is not None else (args.threshold or THRESHOLD)


def _has_search_columns(args: argparse.Namespace, cols: list[str]) -> bool:
    """Whether the input has the fingerprint (k) or signature (threshold) columns."""
    if args.k is not None:
        return args.fp_col in cols
    return args.sketch_col in cols and args.bands_col in cols


def _in_input_order(df: Any, spark: Any) -> Any:
    """df with POS, a long ordering the rows as they are read: files by name, then each
    row's place in its file (``monotonically_increasing_id`` grows along a file: Spark
    keeps a file's splits in order), as dedup-corpus reads a directory."""
    from pyspark.sql import functions as F

    files = sorted(df.inputFiles())
    span = max(df.rdd.getNumPartitions(), 1) << 33  # above every monotonically_increasing_id
    if len(files) * span >= 1 << 63:
        raise CliError(f"{len(files):,} files in {df.rdd.getNumPartitions():,} partitions "
                       "are too many to number the rows in input order: merge the files")
    rank = spark.createDataFrame(list(enumerate(files)), "_simstore_r long, _simstore_f string")
    tagged = df.withColumn("_simstore_f", F.input_file_name()).withColumn(
        "_simstore_m", F.monotonically_increasing_id())
    return tagged.join(F.broadcast(rank), "_simstore_f", "left").withColumn(
        POS, F.col("_simstore_r") * span + F.col("_simstore_m")).drop(
        "_simstore_f", "_simstore_r", "_simstore_m")


def _by_id(removed: Any, ordered: Any, id_col: str) -> Any:
    """The removed report (POS, kept POS, score) with the input's ids instead."""
    from pyspark.sql import functions as F

    score = removed.columns[2]
    ids = ordered.select(POS, id_col)
    kept = ids.select(F.col(POS).alias(f"kept_{POS}"), F.col(id_col).alias(f"kept_{id_col}"))
    return removed.join(ids, POS).join(kept, f"kept_{POS}").select(
        id_col, f"kept_{id_col}", score)


def _run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    from .. import spark as ss
    from ..spark.common import check_id_column, check_rows

    if not args.overwrite:
        for path in (args.kept, args.removed):
            if path and _exists(spark, path):
                raise FileExistsError(f"{path} exists (--overwrite replaces it)")
    df = _read(args, spark)
    k, t = args.k, _threshold(args)
    use_text = not _has_search_columns(args, df.columns)
    ordered = _in_input_order(df, spark)
    check_id_column(ordered, args.id_col)
    rows = check_rows(ordered, args.id_col, {})["rows"]  # the input's ids: present, unique
    result = ss.dedup(
        ordered, k=k, threshold=t, mode=args.mode,
        text_col=args.text_col if use_text else None, id_col=POS,
        fp_col=args.fp_col, sketch_col=args.sketch_col, bands_col=args.bands_col,
        **({"partitions": args.partitions} if args.partitions and k is not None else {}),
    )
    mode = "overwrite" if args.overwrite else "errorifexists"
    result.kept.drop(POS).write.mode(mode).parquet(args.kept)
    if args.removed:
        _by_id(result.removed, ordered, args.id_col).write.mode(mode).parquet(args.removed)
    kept = spark.read.parquet(args.kept).count()
    return {"input": args.input, "rows": rows, "kept": kept,
            "output": args.kept, "removed_report": args.removed,
            "rule": f"k={k}" if k is not None else f"threshold={t}",
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
    from ..spark.environment import quiet_pandas3_warning

    quiet_pandas3_warning()  # before the session: spark.common's import may warn already
    spark = None
    created = False
    try:
        spark, created = _session(args)
        summary = _run(args, spark)
    except CliError:
        raise
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
