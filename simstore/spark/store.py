"""The bridge between a store and Parquet (pyarrow only; no Spark session needed).

``export_store``: a store's ids and fingerprints (``store.snapshot()``: one consistent
read) to a Parquet file with columns id (int64 or string) and fp (LongType bits). A
similarity store is exported with fingerprints only: the public API gives no access to
stored sketches and band keys (recompute them from the texts with
``simstore.spark.with_signatures``).

``import_store``: a Parquet file or directory (as Spark writes it) into a store, in
chunks through ``store.add_many``; a similarity store also takes the sketch and bands
columns.
"""

from __future__ import annotations

import os
from typing import Any

from .._validate import check_int
from ..exceptions import SimstoreTypeError, SimstoreValueError
from .columns import to_long
from .common import id_array, store_items


def _store(store: Any, create: bool, options: dict[str, Any]) -> tuple[Any, bool]:
    """(an open SimStore, whether we opened it) from a store or a path."""
    from ..store import SimStore  # the store's face: the one way in to a store

    if isinstance(store, SimStore):
        if options:
            raise SimstoreValueError("store options apply only when 'store' is a path")
        return store, False
    if not isinstance(store, (str, os.PathLike)):
        raise SimstoreTypeError(
            f"'store' must be a SimStore or a path (got {type(store).__name__})"
        )
    if create:
        return SimStore(store, **options), True
    return SimStore(store, readonly=True, **options), True


def export_store(
    store: Any, path: str | os.PathLike[str], *, id_col: str = "id", fp_col: str = "fp",
    row_group: int = 1_000_000,
) -> int:
    """Write a store's (id, fp) to one Parquet file; returns the number of rows.

    store: a SimStore, or the path of one (opened read-only).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    row_group = check_int(row_group, "row_group", 1)
    s, opened = _store(store, create=False, options={})
    try:
        ids, fps = s.snapshot()
    finally:
        if opened:
            s.close()
    table = pa.table({id_col: id_array(ids), fp_col: pa.array(to_long(fps))})
    pq.write_table(table, os.fspath(path), row_group_size=row_group)
    return len(ids)


def import_store(
    path: str | os.PathLike[str], store: Any, *, id_col: str = "id", fp_col: str = "fp",
    sketch_col: str = "sketch", bands_col: str = "bands", chunk: int = 1_000_000,
    **store_options: Any,
) -> int:
    """Add every row of a Parquet file or directory to a store; returns the rows added.

    store: a SimStore, or a path where one is opened or created with store_options
    (``k=``, ``config=``, ...). Fingerprints are LongType bits; a similarity store also
    reads sketch_col (binary) and bands_col (array<long>). Ids given twice keep their
    last row (``add_many``).
    """
    import pyarrow.dataset as ds

    chunk = check_int(chunk, "chunk", 1)
    data = ds.dataset(os.fspath(path), format="parquet")
    s, opened = _store(store, create=True, options=store_options)
    try:
        similar = bool(s.config.has_signature)
        cols = [id_col, fp_col] + ([sketch_col, bands_col] if similar else [])
        missing = [c for c in cols if c not in data.schema.names]
        if missing:
            raise SimstoreValueError(
                f"{os.fspath(path)!r} has no column(s) {', '.join(missing)} "
                f"(columns: {', '.join(data.schema.names)})"
            )
        total = 0
        for batch in data.to_batches(columns=cols, batch_size=chunk):
            if batch.num_rows:
                _add(s, batch, similar)
                total += batch.num_rows
        return total
    finally:
        if opened:
            s.close()


def _add(store: Any, batch: Any, similar: bool) -> None:
    store.add_many(*store_items(batch, store.config if similar else None))
