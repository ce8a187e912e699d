"""Fingerprint and signature columns from text columns, and fingerprint conversions.

Texts go to the Python workers in Arrow batches and through simstore's own batch
pipeline (``simstore.fingerprints`` / ``simstore.signatures``: one C pass per chunk),
never one UDF call per row. pyspark >= 4.1 runs a scalar Arrow UDF (only the text
column travels); pyspark 4.0 falls back to ``mapInArrow`` over the whole rows.
A null text gives null outputs.
"""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

import numpy as np

from ..exceptions import InvalidConfigError, SimstoreTypeError
from ..text.fingerprinting import DEFAULT_CONFIG, SIGNATURE_CONFIG, FingerprintConfig, fingerprints
from ..text.minhash import signatures
from .common import (
    Column,
    DataFrame,
    F,
    T,
    binary_array,
    check_df,
    column_type,
    long_lists,
    pa,
)

_TWO64 = Decimal(1 << 64)
_TWO63 = Decimal(1 << 63)
# pyspark >= 4.1: scalar Arrow UDFs (only the text column goes to Python)
ARROW_UDF = hasattr(F, "arrow_udf")


def check_config(config: Any, signature: bool) -> FingerprintConfig:
    """A FingerprintConfig (the default one for None); with a signature if asked."""
    if config is None:
        return SIGNATURE_CONFIG if signature else DEFAULT_CONFIG
    if not isinstance(config, FingerprintConfig):
        raise SimstoreTypeError(
            f"'config' must be a FingerprintConfig (got {type(config).__name__})"
        )
    if signature and not config.has_signature:
        raise InvalidConfigError(
            "this config has no similarity signature: use one with sketch_bits, bands and "
            f"rows set, e.g. simstore.SIGNATURE_CONFIG ({SIGNATURE_CONFIG.scheme})"
        )
    return config


def _text_column(df: DataFrame, text_col: str) -> None:
    dt = column_type(df, text_col, "text_col")
    if not isinstance(dt, T.StringType):
        raise SimstoreTypeError(
            f"text column {text_col!r} must be StringType (got {dt.simpleString()})"
        )


def _valid_texts(texts: Any) -> tuple[np.ndarray, list[str]]:
    """The validity mask of an Arrow string array and its non-null values."""
    texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    valid = np.asarray(texts.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return valid, texts.filter(pa.array(valid)).to_pylist()


def _spread(arr: Any, valid: np.ndarray) -> Any:
    """arr (one value per valid row) spread over all rows, null where not valid."""
    if valid.all():
        return arr
    idx = np.cumsum(valid) - 1
    return arr.take(pa.array(idx, mask=~valid))


def fp_array(config: FingerprintConfig, texts: Any) -> Any:
    """Fingerprints (int64, two's complement) of an Arrow string array."""
    valid, items = _valid_texts(texts)
    fps = fingerprints(items, config, threads=1)  # Spark runs a task per core already
    return _spread(pa.array(fps.view(np.int64)), valid)


def signature_array(config: FingerprintConfig, texts: Any) -> Any:
    """A struct array (fp, sketch, bands) of an Arrow string array's signatures."""
    valid, items = _valid_texts(texts)
    s = signatures(items, config, threads=1)  # Spark runs a task per core already
    parts = [pa.array(s.fingerprints.view(np.int64)), binary_array(s.sketches), long_lists(s.bands)]
    return _spread(pa.StructArray.from_arrays(parts, names=["fp", "sketch", "bands"]), valid)


def _batches_with(fn: Any, text_col: str, names: list[str], batches: Any) -> Any:
    """mapInArrow body (pyspark 4.0): each batch with fn's outputs appended."""
    for batch in batches:
        out = fn(batch.column(text_col))
        cols = [out] if len(names) == 1 else out.flatten()  # flatten keeps the row nulls
        arrays = list(batch.columns) + cols
        yield pa.RecordBatch.from_arrays(arrays, names=list(batch.schema.names) + names)


def _apply(
    df: DataFrame, text_col: str, fn: Any, out: dict[str, T.DataType], struct: bool
) -> DataFrame:
    """df with the columns out (name -> type) computed by fn from the text column."""
    check_df(df)
    _text_column(df, text_col)
    names = list(out)
    if ARROW_UDF:
        rtype: T.DataType = (
            T.StructType([T.StructField(f, t) for f, t in zip(("fp", "sketch", "bands"),
                                                              out.values(), strict=False)])
            if struct else next(iter(out.values()))
        )
        def run(texts: pa.Array) -> pa.Array:  # arrow_udf wants a plain function
            return fn(texts)

        make: Any = F.arrow_udf  # scalar Arrow UDF: pa.Array -> pa.Array
        value = make(run, rtype)(F.col(text_col))
        if not struct:
            return df.withColumn(names[0], value)
        tmp = "_simstore_sig"
        x = df.withColumn(tmp, value)
        fields = ("fp", "sketch", "bands")
        for name, field in zip(names, fields, strict=True):
            x = x.withColumn(name, F.col(tmp).getField(field))
        return x.drop(tmp)
    kept = [f for f in df.schema.fields if f.name not in out]
    schema = T.StructType(kept + [T.StructField(n, t) for n, t in out.items()])
    base = df.select([f.name for f in kept])
    return base.mapInArrow(partial(_batches_with, fn, text_col, names), schema)


def with_fingerprints(
    df: DataFrame, text_col: str = "text", fp_col: str = "fp", config: Any = None
) -> DataFrame:
    """df plus a LongType fingerprint column (64 bits as two's complement) of text_col."""
    cfg = check_config(config, signature=False)
    return _apply(df, text_col, partial(fp_array, cfg), {fp_col: T.LongType()}, struct=False)


def with_signatures(
    df: DataFrame, text_col: str = "text", *, fp_col: str = "fp", sketch_col: str = "sketch",
    bands_col: str = "bands", config: Any = None,
) -> DataFrame:
    """df plus fingerprint (long), sketch (binary) and band keys (array<long>) columns."""
    cfg = check_config(config, signature=True)
    out = {fp_col: T.LongType(), sketch_col: T.BinaryType(), bands_col: T.ArrayType(T.LongType())}
    return _apply(df, text_col, partial(signature_array, cfg), out, struct=True)


# --------------------------------------------------------------------------- conversions


def to_long(fps: Any) -> np.ndarray:
    """uint64 fingerprints as the int64 values a LongType column holds (same bits)."""
    return np.ascontiguousarray(fps, dtype=np.uint64).view(np.int64)


def from_long(values: Any) -> np.ndarray:
    """LongType values (int64) back to uint64 fingerprints (same bits)."""
    return np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)


def fp_from_hex(col: Any) -> Column:
    """A LongType fingerprint from a hex string column ('0x' prefix optional)."""
    c = F.regexp_replace(F.lower(F.col(col) if isinstance(col, str) else col), "^0x", "")
    return F.conv(c, 16, -10).cast("long")


def fp_to_hex(col: Any) -> Column:
    """A LongType fingerprint as 16 lower-case hex digits (its unsigned value)."""
    c = F.col(col) if isinstance(col, str) else col
    return F.lpad(F.lower(F.hex(c)), 16, "0")


def fp_from_unsigned(col: Any) -> Column:
    """A LongType fingerprint from an unsigned value 0..2**64-1 (decimal(20,0) or string)."""
    c = (F.col(col) if isinstance(col, str) else col).cast("decimal(20,0)")
    return F.when(c >= F.lit(_TWO63).cast("decimal(20,0)"), c - F.lit(_TWO64).cast("decimal(21,0)")
                  ).otherwise(c).cast("long")


def fp_to_unsigned(col: Any) -> Column:
    """A LongType fingerprint as its unsigned value, decimal(20,0)."""
    c = (F.col(col) if isinstance(col, str) else col).cast("decimal(20,0)")
    return F.when(c < 0, c + F.lit(_TWO64).cast("decimal(21,0)")).otherwise(c).cast(
        "decimal(20,0)"
    )
