"""What every Spark module shares: the pyspark guard, the session, column and row checks,
and the Arrow <-> numpy conversions the Python workers run.

The one representation rule: a fingerprint in a DataFrame is a LongType column holding
its 64 bits as two's complement (``np.uint64`` viewed as ``np.int64``). Sketches are
BinaryType (the sketch's little-endian uint64 words), band keys ``array<long>``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from .._validate import check_int
from ..exceptions import (
    InvalidDocIdError,
    InvalidFingerprintError,
    InvalidSignatureError,
    SimstoreTypeError,
    SimstoreValueError,
)
from ..text.fingerprinting import FingerprintConfig
from ..text.minhash import Signatures
from .environment import (
    ENV_DIR,
    EXECUTOR_PYTHON,
    RECIPE,
    ExecutorEnvironmentError,
    check_executors,
    quiet_pandas3_warning,
)

try:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession, functions as F, types as T
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "simstore.spark needs pyspark, pyarrow and pandas: pip install 'simstore[spark]' "
        f"(and Java 17+ for a local session). Original error: {exc}"
    ) from exc

__all__ = ["Column", "DataFrame", "F", "SparkSession", "T", "pa"]

# internal column names (a leading underscore keeps them clear of user columns)
REP = "_rep"  # the representative (smallest id) of a set of identical rows
RA, RB = "_ra", "_rb"  # the two representatives of a pair
ID_TYPES = (T.LongType, T.IntegerType, T.ShortType, T.ByteType, T.StringType)


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "simstore",
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A Spark session whose Python workers run this interpreter (where simstore is).

    Without ``spark.pyspark.python`` the workers would start the system ``python3``,
    which lacks simstore, pyarrow and pandas.
    """
    quiet_pandas3_warning()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    if shuffle_partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (conf or {}).items():
        b = b.config(key, value)
    return b.getOrCreate()


def cluster_session(
    master: str, env_archive: str | os.PathLike[str] | None = None, *,
    app_name: str = "simstore", conf: dict[str, str] | None = None,
) -> SparkSession:
    """A session on master whose executors run the packed environment env_archive
    (``python -m simstore.spark ENV.tar.gz``): shipped as ``spark.archives``,
    unpacked by each executor as ``./simstore_env``, its Python the executors'. Without
    an archive, as :func:`local_session`: executors run this interpreter's path (a
    cluster on this host). An active session is returned as it is (Spark's rule)."""
    if env_archive is None:
        return local_session(master, app_name=app_name, conf=conf)
    archive = os.path.abspath(env_archive)
    if not os.path.isfile(archive):
        raise ExecutorEnvironmentError(f"environment archive {archive} does not exist; "
                                       + RECIPE)
    conf = {**(conf or {}), "spark.archives": f"{archive}#{ENV_DIR}",
            "spark.pyspark.python": EXECUTOR_PYTHON}
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = EXECUTOR_PYTHON  # pyspark reads it as the context starts
    try:
        return local_session(master, app_name=app_name, conf=conf)
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def session_of(df: DataFrame) -> SparkSession:
    """The session a DataFrame belongs to."""
    return df.sparkSession


def check_df(df: Any, name: str = "df") -> DataFrame:
    """A pyspark DataFrame (else SimstoreTypeError naming the argument) of a session whose
    executors import this simstore (else ExecutorEnvironmentError: ``check_executors``)."""
    if not isinstance(df, DataFrame):
        raise SimstoreTypeError(f"{name!r} must be a pyspark DataFrame (got {type(df).__name__})")
    check_executors(df.sparkSession)
    return df


def column_type(df: DataFrame, col: Any, role: str) -> T.DataType:
    """The type of column col of df, or SimstoreValueError listing the columns there are."""
    if not isinstance(col, str):
        raise SimstoreTypeError(f"'{role}' must be a column name (got {type(col).__name__})")
    for field in df.schema.fields:
        if field.name == col:
            return field.dataType
    have = ", ".join(df.columns) or "none"
    raise SimstoreValueError(f"{role} column {col!r} is not in the DataFrame (columns: {have})")


def check_id_column(df: DataFrame, id_col: str) -> T.DataType:
    """The id column's type: an integer or string type (what a store can keep)."""
    dt = column_type(df, id_col, "id_col")
    if not isinstance(dt, ID_TYPES):
        raise InvalidDocIdError(
            f"id column {id_col!r} must be an integer or string type (got {dt.simpleString()})"
        )
    return dt


_FP_HINTS = {
    T.StringType: "hex strings convert with simstore.spark.fp_from_hex",
    T.DecimalType: "unsigned values convert with simstore.spark.fp_from_unsigned",
    T.IntegerType: "a 32-bit column cannot hold 64-bit fingerprints",
}


def check_fp_column(df: DataFrame, fp_col: str) -> None:
    """The fingerprint column must be LongType (64 bits, two's complement)."""
    dt = column_type(df, fp_col, "fp_col")
    if not isinstance(dt, T.LongType):
        hint = next((h for t, h in _FP_HINTS.items() if isinstance(dt, t)), "")
        raise InvalidFingerprintError(
            f"fingerprint column {fp_col!r} must be LongType, the 64 bits as two's complement "
            f"(got {dt.simpleString()})" + (f"; {hint}" if hint else "")
        )


def check_signature_columns(df: DataFrame, sketch_col: str, bands_col: str) -> None:
    """Sketches are BinaryType, band keys array<long>."""
    st = column_type(df, sketch_col, "sketch_col")
    if not isinstance(st, T.BinaryType):
        raise InvalidSignatureError(
            f"sketch column {sketch_col!r} must be BinaryType (got {st.simpleString()}); "
            "simstore.spark.with_signatures makes it"
        )
    bt = column_type(df, bands_col, "bands_col")
    if not (isinstance(bt, T.ArrayType) and isinstance(bt.elementType, T.LongType)):
        raise InvalidSignatureError(
            f"bands column {bands_col!r} must be array<long> (got {bt.simpleString()}); "
            "simstore.spark.with_signatures makes it"
        )


def check_rows(
    df: DataFrame,
    id_col: str,
    values: dict[str, type[Exception]],
    extra: dict[str, Column] | None = None,
) -> dict[str, Any]:
    """One job: the row count, and refusal of null ids, duplicate ids and null values.

    values: the columns every row needs, each with the error its nulls raise.
    extra: more aggregates (over each id's rows; combined over ids by their name's
    prefix min/max/sum), returned by name beside ``rows``.
    """
    names = list(values)
    per_id = df.groupBy(id_col).agg(
        F.count(F.lit(1)).alias("_c"),
        *[F.count(c).alias(f"_n{i}") for i, c in enumerate(names)],
        *[e.alias(name) for name, e in (extra or {}).items()],
    )
    idc = F.col(id_col)
    row = per_id.agg(
        F.sum("_c").alias("rows"),
        F.max(F.when(idc.isNotNull(), F.col("_c"))).alias("most"),
        F.sum(F.when(idc.isNull(), F.col("_c")).otherwise(0)).alias("null_ids"),
        *[F.sum(f"_n{i}").alias(f"_n{i}") for i in range(len(names))],
        *[_combine(name) for name in (extra or {})],
    ).collect()[0].asDict()
    rows = int(row["rows"] or 0)
    if row["null_ids"]:
        raise InvalidDocIdError(f"id column {id_col!r} holds {row['null_ids']} null(s)")
    if (row["most"] or 0) > 1:
        dup = per_id.where(F.col("_c") > 1).select(id_col).limit(3).collect()
        shown = ", ".join(repr(r[0]) for r in dup)
        raise InvalidDocIdError(
            f"id column {id_col!r} holds duplicate ids (e.g. {shown}); ids must be unique"
        )
    for i, (c, err) in enumerate(values.items()):
        nulls = rows - int(row[f"_n{i}"] or 0)
        if nulls:
            raise err(f"column {c!r} holds {nulls} null(s); every row needs a value")
    out = {name: row[name] for name in (extra or {})}
    out["rows"] = rows
    return out


def _combine(name: str) -> Column:
    """How a per-id extra aggregate combines over ids (by its name's prefix)."""
    if name.startswith("min"):
        return F.min(name).alias(name)
    if name.startswith("max"):
        return F.max(name).alias(name)
    return F.sum(name).alias(name)


ROWS_PER_PARTITION = 1 << 21


def check_partitions(value: Any, df: DataFrame, rows: int) -> int:
    """Partitions of a search shuffle: given, or enough for every core and for at most
    ROWS_PER_PARTITION rows each (a Python worker holds a whole partition)."""
    if value is not None:
        return check_int(value, "partitions", 1)
    cores = session_of(df).sparkContext.defaultParallelism
    return max(cores, -(-rows // ROWS_PER_PARTITION))


def cut_lineage(df: DataFrame) -> DataFrame:
    """Materialize df and drop its lineage: a reliable checkpoint when the SparkContext
    has a checkpoint directory, else a local (executor-memory) one."""
    sc = session_of(df).sparkContext
    if sc.getCheckpointDir():
        return df.checkpoint(eager=True)
    return df.localCheckpoint(eager=True)


# --------------------------------------------------------------------------- Arrow side


def u64(arr: Any) -> np.ndarray:
    """An int64 Arrow array (no nulls) as uint64 numpy (the two's complement bits)."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64).view(np.uint64)


def fixed_rows(arr: Any, nbytes: int) -> np.ndarray:
    """A binary Arrow array of values nbytes long each, as (n, nbytes / 8) uint64."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    n = len(arr)
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=width)[arr.offset : arr.offset + n + 1]
    if n and not np.all(np.diff(off) == nbytes):
        raise InvalidSignatureError(f"every sketch must be {nbytes} bytes long")
    data = np.frombuffer(bufs[2], dtype=np.uint8)[int(off[0]) : int(off[0]) + n * nbytes]
    return data.view(np.uint64).reshape(n, nbytes // 8)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def id_array(ids: list[Any]) -> Any:
    """Doc ids as one Arrow column: string or int64 (a Parquet column holds one type)."""
    if all(isinstance(i, str) for i in ids):
        return pa.array(ids, pa.string())
    if all(isinstance(i, int) for i in ids):
        if ids and (min(ids) < _INT64[0] or max(ids) > _INT64[1]):
            raise InvalidDocIdError("int doc ids beyond the int64 range cannot go to Parquet")
        return pa.array(np.asarray(ids, dtype=np.int64))
    raise InvalidDocIdError(
        "the store mixes str and int doc ids; a Parquet column holds one type"
    )


def store_items(batch: Any, cfg: FingerprintConfig | None) -> tuple[Any, Any]:
    """(ids, items) for ``add_many`` from an Arrow batch of columns id, fp (LongType bits)
    and, for a similarity store of config ``cfg``, sketch and bands: items are then
    Signatures, else fingerprints. Nulls and wrong types are refused."""
    for i, name in enumerate(batch.schema.names):
        if batch.column(i).null_count:
            err = InvalidDocIdError if i == 0 else InvalidFingerprintError
            raise err(f"column {name!r} holds nulls; every row needs a value")
    id_arr, fp_arr = batch.column(0), batch.column(1)
    if not pa.types.is_int64(fp_arr.type):
        raise InvalidFingerprintError(
            f"column {batch.schema.names[1]!r} must be int64 (LongType bits), got {fp_arr.type}"
        )
    ids = id_arr.to_numpy() if pa.types.is_integer(id_arr.type) else id_arr.to_pylist()
    fps = u64(fp_arr)
    if cfg is None:
        return ids, fps
    sketches = fixed_rows(batch.column(2), cfg.sketch_bits // 8)
    flat = batch.column(3).flatten().to_numpy(zero_copy_only=False)
    if len(flat) != len(fps) * cfg.bands:
        raise InvalidSignatureError(f"every row needs {cfg.bands} band keys")
    bands = flat.astype(np.int64).view(np.uint64).reshape(len(fps), cfg.bands)
    return ids, Signatures(cfg, fps, sketches, bands)


def binary_array(rows: np.ndarray) -> Any:
    """(n, words) uint64 rows as an Arrow binary array (each row's bytes)."""
    n, words = rows.shape
    offsets = (np.arange(n + 1, dtype=np.int32) * (8 * words)).astype(np.int32)
    data = np.ascontiguousarray(rows).tobytes()
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def long_lists(rows: np.ndarray) -> Any:
    """(n, m) uint64 rows as an Arrow list<int64> array (two's complement values)."""
    n, m = rows.shape
    values = pa.array(np.ascontiguousarray(rows).view(np.int64).ravel())
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * m), values)


def table_of(batches: Any) -> Any:
    """All record batches of a partition as one Arrow table (None when there are none)."""
    items = list(batches)
    if not items:
        return None
    return pa.Table.from_batches(items).combine_chunks()
