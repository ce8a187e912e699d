"""Refusing bad input before any work: one check per kind of argument, one line each.

A dataset must be a ``datasets.Dataset`` with a string text column without nulls; an id
column (needed with a store) holds non-null str or int ids a store can keep; a keep
column is numeric. Columns are scanned as Arrow batches (nulls counted by Arrow, ids
checked one by one), never converted whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..corpus.records import BadRecord, check_doc_id
from ..exceptions import SimstoreTypeError, SimstoreValueError
from ._deps import datasets

STRING_TYPES = ("string", "large_string")
ID_TYPES = (*STRING_TYPES, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMBER_TYPES = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
SCAN_ROWS = 10_000  # rows of one column read at a time by the checks


def _dtype(ds: Any, column: str) -> str:
    feature = ds.features[column]
    return feature.dtype if isinstance(feature, datasets.Value) else type(feature).__name__


def _column(ds: Any, column: str, what: str) -> None:
    if not isinstance(column, str):
        raise SimstoreTypeError(f"'{what}' must be a column name (got {type(column).__name__})")
    if column not in ds.column_names:
        raise SimstoreValueError(
            f"the dataset has no column {column!r} ('{what}'); its columns are "
            f"{', '.join(map(repr, ds.column_names)) or 'none'}"
        )


def _batches(ds: Any, column: str) -> Iterable[Any]:
    """The column's Arrow chunks, SCAN_ROWS rows at a time."""
    for table in ds.select_columns([column]).with_format("arrow").iter(batch_size=SCAN_ROWS):
        yield table.column(0)


def _no_nulls(ds: Any, column: str, what: str) -> None:
    at = 0
    for col in _batches(ds, column):
        if col.null_count:
            row = at + next(i for i, v in enumerate(col.is_null().to_pylist()) if v)
            raise SimstoreValueError(f"column {column!r} ('{what}') is null at row {row}")
        at += len(col)


def check_dataset(
    ds: Any,
    column: str,
    *,
    id_column: str | None = None,
    keep: str | None = None,
    reserved: Iterable[str] = (),
) -> None:
    """Refuse a dataset the run cannot use (see the module docstring)."""
    if not isinstance(ds, datasets.Dataset):
        hint = ": pick a split, e.g. ds['train']" if isinstance(ds, datasets.DatasetDict) else ""
        raise SimstoreTypeError(f"expected a datasets.Dataset (got {type(ds).__name__}){hint}")
    _column(ds, column, "column")
    if _dtype(ds, column) not in STRING_TYPES:
        raise SimstoreTypeError(
            f"column {column!r} must hold strings (it holds {_dtype(ds, column)})"
        )
    for name in reserved:
        if name in ds.column_names:
            raise SimstoreValueError(
                f"the dataset has a column {name!r}, which the removed rows get from dedup; "
                "rename it first (ds.rename_column)"
            )
    if keep is not None:
        _column(ds, keep, "keep")
        if _dtype(ds, keep) not in NUMBER_TYPES:
            raise SimstoreTypeError(
                f"keep={keep!r} must name a numeric column (it holds {_dtype(ds, keep)}); "
                "or give keep='first' or 'longest'"
            )
    _no_nulls(ds, column, "column")
    if id_column is not None:
        check_ids(ds, id_column)


def check_ids(ds: Any, id_column: str) -> None:
    """The id column holds str or int ids a store keeps, none null."""
    _column(ds, id_column, "id_column")
    if _dtype(ds, id_column) not in ID_TYPES:
        raise SimstoreTypeError(
            f"id column {id_column!r} must hold strings or integers (it holds "
            f"{_dtype(ds, id_column)})"
        )
    at = 0
    for col in _batches(ds, id_column):
        for i, v in enumerate(col.to_pylist()):
            try:
                check_doc_id(v, id_column)
            except BadRecord as exc:
                raise SimstoreValueError(f"row {at + i}: {exc}") from None
        at += len(col)


def check_batch(batch: Any, column: str) -> list[Any]:
    """The text values of a map function's batch (a dict of columns) in its column."""
    if not isinstance(batch, Mapping):
        raise SimstoreTypeError(f"'batch' must be a dict of columns (got {type(batch).__name__})")
    if not isinstance(column, str):
        raise SimstoreTypeError(f"'column' must be a column name (got {type(column).__name__})")
    if column not in batch:
        raise SimstoreValueError(
            f"the batch has no column {column!r} ('column'); its columns are "
            f"{', '.join(map(repr, batch)) or 'none'}"
        )
    texts = batch[column]
    check_text_values(texts, column)
    return texts


def check_text_values(texts: list[Any], column: str) -> None:
    """Every value of a batch is a str (the map function's check: a batch, not a dataset)."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise SimstoreTypeError(
                f"column {column!r} must hold strings (row {i} of the batch is {type(t).__name__})"
            )
