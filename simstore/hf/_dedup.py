""":func:`dedup`: a ``Dataset`` in, its kept rows and its removed rows out.

Arguments and the dataset are checked first (:mod:`._checks`): nothing is read for
the decisions and no store is created before they pass. The decisions come from the
engines of the corpus workflow (:mod:`._engine`); the two results are views of the
input (``Dataset.select``, no copy of the kept rows), the removed ones with four
columns added.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._validate import check_path
from ..corpus import open_store
from ..corpus.summary import REPEATED
from ..exceptions import SimstoreTypeError, SimstoreValueError
from ..search.similar import check_threshold
from ..store import SimStore
from ._checks import check_dataset
from ._deps import pa
from ._engine import Outcome, Rows, exact as exact_pass, ranked, streamed

# Columns the removed rows get: the kept row representing it (its index in the input, or
# null when it is a stored document), that row's id (with id_column or a store), how near
# it is (exact or estimated Jaccard; null for a repeated id) and why it went.
REMOVED_COLUMNS = ("kept_index", "kept_id", "jaccard", "reason")


def dedup(
    ds: Any,
    column: str = "text",
    threshold: float = 0.9,
    exact: bool = False,
    keep: str = "first",
    store: SimStore | str | os.PathLike[str] | None = None,
    *,
    id_column: str | None = None,
    batch_size: int = 1000,
) -> tuple[Any, Any]:
    """(kept, removed): ``ds`` without near-duplicates (Jaccard >= threshold), and the rest.

    keep: "first" (row order), "longest" or a numeric column (largest first, nulls last).
    exact: decide by exact Jaccard of the shingle sets, not the MinHash estimate.
    store: a persistent store (path or SimStore) the rows are checked against and the
    kept ones added to, so a later dataset is deduplicated against this one without
    reading it again; needs ``id_column`` (unique ids) and keep="first". A row whose id
    the store already holds is kept; a later row with the same id is removed.
    ``removed`` has the input's columns plus :data:`REMOVED_COLUMNS`. Results equal
    ``dedup_corpus`` on the same rows.
    """
    t = check_threshold(threshold)
    if not isinstance(keep, str) or not keep:
        raise SimstoreTypeError("'keep' must be 'first', 'longest' or a column name")
    if not isinstance(exact, bool):
        raise SimstoreTypeError(f"'exact' must be True or False (got {type(exact).__name__})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SimstoreValueError(f"'batch_size' must be an int >= 1 (got {batch_size!r})")
    if store is not None and not isinstance(store, SimStore):
        check_path(store, "store")
    if store is not None and id_column is None:
        raise SimstoreValueError(
            "store= needs each row's id: give id_column, a column of unique str or int ids"
        )
    if store is not None and keep != "first":
        raise SimstoreValueError("store= keeps the first row of a group only (keep='first')")
    field = None if keep in ("first", "longest") else keep
    check_dataset(ds, column, id_column=id_column, keep=field, reserved=REMOVED_COLUMNS)
    rows = Rows(ds, column, id_column, batch_size)
    values = None if keep == "first" else rows.values(keep)
    if values is not None and len(values) and np.isneginf(values).all():
        raise SimstoreValueError(f"keep={keep!r}: every row's value is null (nothing was done)")
    if store is not None:
        out = _with_store(rows, store, t, exact)
    elif exact:
        out = exact_pass(rows, t, keep, values)
    elif values is not None:
        out = ranked(rows, t, values)
    else:
        out = _scratch(rows, t)
    return ds.select(out.kept), _removed(ds, out, id_column)


def _scratch(rows: Rows, t: float) -> Outcome:
    with open_store(threshold=t) as opened:
        return streamed(rows, opened.store, t, persistent=False)


def _with_store(
    rows: Rows, store: SimStore | str | os.PathLike[str], t: float, exact: bool
) -> Outcome:
    """The rows through a persistent store (a new path is created; removed again if the
    run fails before storing anything)."""
    with open_store(store, threshold=t, exact=exact) as opened:
        return streamed(rows, opened.store, t, persistent=True)


def _removed(ds: Any, out: Outcome, id_column: str | None) -> Any:
    """The removed rows with :data:`REMOVED_COLUMNS` (kept_id only with ids)."""
    rows = out.removed
    rep = out.rep[rows]
    has_rep = rep >= 0
    cols: dict[str, Any] = {
        "kept_index": pa.array(rep, mask=~has_rep, type=pa.int64()),
    }
    if id_column is not None:
        ids = [out.kept_id.get(int(r)) for r in rows]
        at = np.flatnonzero(has_rep)
        if len(at):
            got = ds.select_columns([id_column]).select(rep[at])[id_column]
            for a, v in zip(at.tolist(), got, strict=True):
                ids[a] = v
        cols["kept_id"] = pa.array(ids, type=ds.features[id_column].pa_type)
    jac = out.jaccard[rows]
    cols["jaccard"] = pa.array(np.round(jac, 4), mask=np.isnan(jac), type=pa.float64())
    repeated = out.status[rows] == REPEATED
    cols["reason"] = pa.array(
        np.where(repeated, "repeated id", "near-duplicate").tolist(), type=pa.string()
    )
    removed = ds.select(rows).flatten_indices() if len(rows) else ds.select(rows)
    for name, col in cols.items():
        removed = removed.add_column(name, col)
    return removed
