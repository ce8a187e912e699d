"""The run-table engine: a store's permutation tables, band keys and id index as levels
of sorted runs in LMDB (:class:`RunTables`, with :class:`RunBands` and :class:`RunIds`).

``tables`` holds the engine, ``cache`` its process cache of levels, ``merges`` its
merges, ``format`` the bytes of its records (state, runs, level indexes in ``index``,
tombstones in ``removed``), ``check`` its checks for ``verify``. This face hands on what
the rest of the store uses, and nothing else.
"""

from __future__ import annotations

from .bands import RunBands
from .ids import RunIds
from .rows import PUT_CHUNK, band_keys, put_sorted
from .tables import RunTables

__all__ = ["PUT_CHUNK", "RunBands", "RunIds", "RunTables", "band_keys", "put_sorted"]
