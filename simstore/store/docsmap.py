"""Docs records read where LMDB maps them: a similarity lookup's candidates in one C call.

py-lmdb has no transaction a C function could use, so every record fetched through it
is a Python call (about 0.45 us); a similarity lookup fetches a dozen or more and checks
most of them away. The docs database's record in the main database names the root page
and depth of its B-tree in the snapshot a transaction sees; from there
``csrc/lmdbmap.c`` walks the pages of that snapshot, which LMDB never changes while the
transaction lives (copy-on-write), checking each page it reads, and ``csrc/single.c``
checks the sketches where the records lie. Only the hits become bytes.

Valid for a read transaction, and for a write transaction before it writes the docs
database (its main database still names the last commit's tree); never inside a batch.
Anything unexpected (a page that does not check out, no map address yet) answers None,
and the caller fetches through LMDB as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lmdb
import numpy as np

from ..native import lmdbmap as _lmdbmap, single as _single
from .check.ranges import TreeGuard
from .format import DocId, decode_id

# a hit: (internal id, sketch distance, doc id, fingerprint)
Hit = tuple[int, int, DocId, int]


class DocsMap:
    """The docs records of a store's environment, found in its map (one per binding)."""

    def __init__(self, env: Any, docs: Any, name: bytes, guard: TreeGuard,
                 map_epoch: Callable[[], int]) -> None:
        """env: the LMDB environment; docs, name and guard: the docs database's handle,
        name and the guard of its pages; map_epoch: the environment's remap counter (an
        address holds within one epoch)."""
        self._env = env
        self._name = name
        self._docs = docs
        self._guard = guard
        self._epoch = map_epoch
        self._psize = int(env.stat()["psize"])
        self._base: tuple[int, int, Any] | None = None  # (epoch, map address, its buffer)
        self._pages = 0  # pages known to lie within the file (it never shrinks)
        self._tree = _lmdbmap.tree(0, 0, self._psize, 0, 0)  # the docs tree, set per call
        self._query: tuple[Any, _single.SimilarQuery] | None = None  # (codec, its lookup)

    def similar(self, txn: Any, prober: Any, recent: Any, sig: tuple[np.ndarray, np.ndarray],
                codec: Any, maxd: int, since: int | None) -> list[Hit] | None:
        """The docs sharing a band key with sig = (band keys, sketch) -- band entries in the
        prober's run sets or the recent docs' key table -- stored since ``since`` (ms, when
        given), whose sketch is within maxd bits, in internal id order; None when the map
        cannot answer (ask LMDB)."""
        raw = txn.get(self._name)  # the docs database's record in the main database
        tree = self._tree
        if raw is None or not _lmdbmap.tree_of_record(raw, tree):
            return None
        if tree.depth == 0:
            return []  # no docs
        at = self._address()
        if at is None:
            return None
        base, buf = at
        if self._query is None or self._query[0] is not codec:
            self._query = (codec, _single.SimilarQuery(_single.docs_layout(codec)))
        query = self._query[1]
        bands, sketch = sig
        id_start = codec.id_start
        for fresh in (False, True):  # a tree past the pages known: learn the file's end
            if fresh:
                self._pages = _lmdbmap.snapshot_pages(self._env.info(), self._psize)
            _lmdbmap.place(tree, base, self._pages)
            got = query.run(prober, tree, bands, sketch, recent, since, maxd)
            if not isinstance(got, int):
                return [(got[j], got[j + 1],
                         decode_id(buf[got[j + 2] + id_start:got[j + 2] + got[j + 3]]),
                         got[j + 4]) for j in range(0, len(got), 5)]
        return None

    def _address(self) -> tuple[int, Any] | None:
        """Where the map lies in this map epoch, found once from a docs leaf page, and the
        map as a buffer."""
        epoch = self._epoch()
        if self._base is not None and self._base[0] == epoch:
            return self._base[1:]
        try:
            with self._env.begin(buffers=True) as txn:
                cur = self._guard.cursor(txn, self._docs, records=0)  # its first leaf
                base = _lmdbmap.base_of_page(cur.key(), self._psize) if cur.first() else None
        except lmdb.Error:  # e.g. a map another process grew: LMDB answers this time
            return None
        if base is None:
            return None
        info = self._env.info()
        self._pages = _lmdbmap.snapshot_pages(info, self._psize)
        size = int(info["map_size"])  # (what C reads stays below its pages)
        self._base = (epoch, base, _lmdbmap.map_buffer(base, size))
        return self._base[1:]
