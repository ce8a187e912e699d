"""The band keys of a similarity store, as :class:`~simstore.store.engine.BandIndex`.

Kept apart from :mod:`simstore.store.runs.tables`, which writes them: this only looks them up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .rows import band_keys
from .tables import RunTables


class RunBands:
    """The band entries of a similarity store, kept by its RunTables.

    The band keys are levels of the run tables too (database ``rbands``: keys
    band << 32 | key32), derived from the docs records with them: RunTables
    writes them, this looks them up in the levels and recent docs. A removed doc's
    entries stay (stale) until a merge of their level leaves them out: a candidate
    may name a doc without a docs record.
    """

    def __init__(self, tables: RunTables) -> None:
        self.tables = tables
        self.nbands = tables.nbands

    def candidates(self, txn: Any, bands: np.ndarray) -> list[int]:
        """Internal ids sharing at least one band key (a doc's nbands keys, low 32 bits)."""
        return self.tables.band_candidates(txn, band_keys(bands.astype(np.uint32)))

    def parts(self, txn: Any, bands: np.ndarray) -> tuple[Any, Any]:
        """The prober of the levels' band entries and the recent docs' key table of band
        entries (None: no recent docs), synced to txn."""
        return self.tables.band_parts(txn, bands)

    def candidate_pairs(self, txn: Any, keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, internal id) of every doc sharing a band key with a row of the (n, nbands)
        32-bit keys (stale ones included)."""
        per_row = [self.tables.band_candidates(txn, row) for row in band_keys(keys32)]
        lens = np.fromiter((len(c) for c in per_row), dtype=np.int64, count=len(per_row))
        flat = [i for c in per_row for i in c]
        return (np.repeat(np.arange(len(per_row)), lens),
                np.asarray(flat, dtype=np.uint64).reshape(-1))

    def check(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band entries against the live docs."""
        return self.tables.check_bands(txn, iids, keys32)
