"""The whole-store half of SimStore's face: stats, verify, rebuild, compact, pairs, clusters.

A mixin of :class:`simstore.SimStore`, kept apart so each module has one job; the
work itself is in :mod:`simstore.store.maintenance`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validate import check_expected_size, check_k
from ..exceptions import StoreError
from ..native.core import MAX_K
from ..search.layout import evaluate, plan
from . import maintenance as _maintenance, writes as _writes
from .format import DocId

if TYPE_CHECKING:
    from ..search.layout import Layout
    from ..text.fingerprinting import FingerprintConfig
    from .env import Env
    from .schema import Handles


# stats() advises a rebuild once the cost model puts a query on the store's layout at this
# many times a query on the layout planned for its size (a store created for the default
# 1M and grown to 10M: 6.7x at k = 8, measured 10x; docs/benchmarks.md)
REPLAN_AT = 2.0
REPLAN_FROM = 100_000  # documents; smaller stores answer fast on any layout


def layout_fit(layout: Layout, count: int) -> tuple[float, float, bool]:
    """The planner's model of a query (µs) on layout with count documents stored, the same
    on the layout planned for count, and whether that gap is worth a rebuild."""
    n = max(count, 1)
    cost = evaluate(layout, layout.max_k, n).cost_us
    # planned for the power of two at or below n: the planner caches it (a plan takes
    # 5-30 ms), and a store of any size between uses the same one
    other = plan(layout.max_k, 1 << (n.bit_length() - 1)).layout
    replanned = evaluate(other, layout.max_k, n).cost_us
    return cost, replanned, count >= REPLAN_FROM and cost >= REPLAN_AT * replanned


class UpkeepMethods:
    """Operations on the whole store (one transaction each, or a child process)."""

    _h: Handles
    _env: Env
    _layout: Layout
    _config: FingerprintConfig
    _want_k: int | None

    path: str
    k: int
    _k_arg: Callable[[int | None], int]
    _write: Callable[..., Any]
    snapshot: Callable[[], tuple[list[DocId], np.ndarray]]

    def stats(self) -> dict[str, Any]:
        """Size, layout and scheme of the store, as plain JSON-able values; ``levels``:
        the ids each sorted level of the tables spans, oldest first (a query probes
        each). ``query_cost_us`` and ``replanned_cost_us``:
        the planner's model of a query on this layout and on one planned for the store's
        size; ``rebuild_advised`` when the store has outgrown its layout so far that
        ``rebuild()`` (which plans for the size) would make queries much faster."""
        with self._env.reading() as txn:
            count = int(txn.stat(self._h.docs)["entries"])
            map_size, used = self._env.used_bytes()
            levels = self._h.tables.levels(txn)
        lay = self._layout
        cost, replanned, advised = layout_fit(lay, count)
        return {
            "path": self.path,
            "count": count,
            "k": lay.max_k,
            "tables": len(lay.tables),
            "blocks": len(lay.blocks),
            "header_bits": [lay.header_bits(t) for t in range(len(lay.tables))],
            "radius": lay.radius,
            "fingerprint": self._config.to_dict(),
            "map_size": map_size,
            "used_bytes": used,
            "format_version": self._h.format_version,
            "table_engine": self._h.tables.name,
            "similarity": self._config.has_signature,
            "sketch_bytes": 8 * self._h.codec.sketch_words,
            "band_key_bytes": 4 * self._h.codec.nbands,
            "exact": self._h.exact,
            "bytes_per_doc": used // count if count else None,
            "levels": levels,
            "query_cost_us": round(cost, 1),
            "replanned_cost_us": round(replanned, 1),
            "rebuild_advised": advised,
        }

    def verify(self, timeout: float | None = None) -> list[str]:
        """Every broken invariant, as sentences; [] when the store is sound.

        Checks the file's structure (as plain bytes), then that each doc is in
        every permutation and band table exactly once, no table or ids entry
        is an orphan, and records and metadata parse. Runs in a child process:
        a damaged file that would make LMDB abort is reported, never kills the
        caller. ``timeout``: seconds of the checker's CPU time (wall time where the
        system does not tell) before it is stopped with VerifyTimeoutError; by default
        they grow with the store's file (120 s + 1 s per 4 MB).
        """
        with self._env.reading() as txn:
            return _maintenance.verify(txn, self._h, timeout=timeout)

    def rebuild(self, k: int | None = None, expected_size: int | None = None) -> dict[str, Any]:
        """Re-derive every table (and the ids map) from the docs table: new k, or repair.

        One atomic transaction: a crash leaves the old layout or the new one,
        complete. Refused with StoreInUseError while another handle (in any
        process) has the store open. Returns :meth:`stats`.
        """
        env = self._env
        if env.wtxn is not None:
            raise StoreError("rebuild() cannot run inside batch(); call it outside")
        env.check_writable()
        new_k = self.k if k is None else check_k(k, "k", MAX_K)
        size = None if expected_size is None else check_expected_size(expected_size)
        with env.lock, env.exclusive("rebuild"):
            env.live()
            self._want_k = None  # from now on the layout on disk is the one to read back
            _maintenance.rebuild(env, lambda: self._h, new_k, size)
            env.reload()  # re-read layout and handles from disk
        return self.stats()

    def merge_levels(self) -> int:
        """Merge every level of the tables into one, now: queries then probe one level, as
        after a bulk load, where a store grown by writes keeps a few (each probed: at
        10M, k = 8 in ~120 µs instead of ~30). The merge writes do, begun at once and
        done in bounded commits of their own; readers and other writers go on meanwhile,
        and a kill leaves it to later writes. Returns the commits it took (0: one level or
        none already)."""
        if self._env.wtxn is not None:
            raise StoreError("merge_levels() cannot run inside batch(); call it outside")
        commits, began = 0, False
        while True:
            # a merge already under way (of the newest levels, say) is finished first, then
            # the one of every level begun; once begun, none again (writers may go on
            # adding levels: this call ends)
            spent, now = self._write(_writes.merge_all, not began)
            if not spent:
                return commits
            commits += 1
            began = began or now

    def compact(self, dest: str | bytes | os.PathLike[str]) -> None:
        """Write a compacted copy to a new directory (complete or absent, never half)."""
        _maintenance.compact(self._env, dest)

    def pairs(self, k: int | None = None) -> Iterator[tuple[DocId, DocId, int]]:
        """Every pair of stored docs within k (default: the store's k), with the distance."""
        return _maintenance.pairs(self.snapshot, self._k_arg(k))

    def clusters(self, k: int | None = None) -> list[list[DocId]]:
        """Connected groups (size >= 2) of docs within k of each other."""
        return _maintenance.clusters(self.snapshot, self._k_arg(k))
