"""The seam between the store and its table engine, declared once.

A store keeps its documents in the docs table; the permutation tables (and, in
a similarity store, the band keys) are derived from it by a *table engine*: the run
tables (:class:`simstore.store.runs.tables.RunTables`, with
:class:`~simstore.store.runs.bands.RunBands` for the band keys), bound by
:func:`simstore.store.schema.bind`. The store's operations call only what these
protocols declare.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..search.layout import Layout


class TableEngine(Protocol):
    """The permutation tables of one layout in one open environment."""

    name: str  # what stats() reports as the table engine
    layout: Layout

    def init(self, txn: Any, next_iid: int = 0) -> None:
        """Write what empty tables need (at creation, or a rebuild's start)."""

    def next_iid(self, txn: Any) -> int:
        """The next internal id to hand out (never a removed doc's)."""

    def index(self, txn: Any, iid: bytes, fp: int, keys: bytes, idh: int = 0) -> None:
        """Take a doc just written to the docs table (keys: its band keys, 4 bytes each,
        big-endian, band by band, in a similarity store, as its docs record holds them; idh:
        the hash of its id, :func:`~simstore.store.format.id_hash`)."""

    def unindex(self, txn: Any, iid: bytes, fp: int, keys: bytes) -> None:
        """Let go of a doc about to leave the docs table (keys as for index)."""

    def unindex_many(self, txn: Any, docs: list[tuple[bytes, int, bytes]]) -> None:
        """Let go of many docs about to leave (internal id, fp, keys as for index)."""

    def fill(self, txn: Any, fps: np.ndarray, iids: np.ndarray,
             bands: np.ndarray | None = None, idh: np.ndarray | None = None) -> None:
        """Take many docs just written to the docs table at new iids.

        bands: their (n, nbands) 32-bit band keys in a similarity store; idh: their ids'
        hashes (None: read back from the docs records when needed).
        """

    def search(self, txn: Any, q: int, k: int) -> list[tuple[int, bytes, bytes]]:
        """(distance, internal id, docs record) of every live doc within k of q
        (k at most the layout's)."""

    def drop(self, txn: Any) -> None:
        """Delete every table of this layout and the band keys (for a rebuild)."""

    def check(self, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
        """Problems of the tables against the live docs (iids, fps in iid order)."""

    def extra(self, txn: Any) -> list[str]:
        """Names of tables beyond this layout's (left by another layout)."""

    def levels(self, txn: Any) -> list[int]:
        """The internal ids each sorted level spans, oldest first: how many a query
        probes, for stats()."""

    def release(self) -> None:
        """Let go of the store's pages this process has read through the map (they count
        in its RSS until then; the page cache keeps them): a bulk write's, as it goes."""

    def take_owed(self, txn: Any) -> int:
        """Docs' worth of upkeep the committed write transaction txn left owed (bounded
        commits: a bulk write's merging), then none."""

    def repay(self, txn: Any, owed: int) -> int:
        """A bounded share of that upkeep in a transaction of its own: how much it did (0:
        there was none left, the caller stops)."""

    def merge_all(self, txn: Any, start: bool) -> tuple[int, bool]:
        """A bounded share of merging every level into one (start: beginning it when no
        merge is under way), in a transaction of its own: how much it did and whether it
        began it ((0, False): nothing was under way or begun, the caller stops)."""


class BandIndex(Protocol):
    """The band keys of a similarity store: which docs share a MinHash band key (the
    table engine writes them with the docs; this reads them)."""

    def candidates(self, txn: Any, bands: np.ndarray) -> list[int]:
        """Internal ids of docs sharing at least one of a doc's band keys (its nbands keys,
        any unsigned dtype: only the low 32 bits are stored), each once; removed docs'
        stale entries among them (the reader skips those)."""

    def parts(self, txn: Any, bands: np.ndarray) -> tuple[Any, Any]:
        """What one C call needs to find a doc's candidates itself (its nbands keys):
        the prober of the band entries in the sorted levels and the recent docs' key
        table of band entries (None: none), synced to txn."""

    def candidate_pairs(self, txn: Any, keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, internal id) of every doc sharing a band key with a row of (n, bands)
        32-bit keys: the lookups of many docs at once."""

    def check(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band keys against the live docs."""
