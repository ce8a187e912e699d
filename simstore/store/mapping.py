"""The mapping half of SimStore's face: a store read as a dict of doc id -> fingerprint.

A mixin of :class:`simstore.SimStore`, kept apart so each module has one job:
``get``, ``in``, ``len``, iteration in insertion order, ``del``, whole-store snapshots.
Every read is one short read transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from . import format as F
from .format import DocId

if TYPE_CHECKING:
    from .env import Env
    from .reads import Scanner
    from .schema import Handles

_READ_CHUNK = 10_000  # docs read per transaction by items()


class MappingMethods:
    """Dict-like reads (and ``del``) of a store."""

    _h: Handles
    _env: Env
    _scanner: Scanner

    remove: Callable[[DocId], bool]

    def get(self, doc_id: DocId, default: Any = None) -> int | None:
        """The fingerprint stored for doc_id, or default (None)."""
        enc = F.encode_id(doc_id)
        with self._env.reading() as txn:
            found = self._lookup(txn, enc)
        return default if found is None else found[1]

    def _lookup(self, txn: Any, enc: bytes) -> tuple[bytes, int] | None:
        found = self._h.idx.find(txn, enc)
        if found is None:
            return None
        return found[0], self._h.codec.parse(found[1])[0]

    def __getitem__(self, doc_id: DocId) -> int:
        """The fingerprint of doc_id; KeyError if it is not stored."""
        fp = self.get(doc_id)
        if fp is None:
            raise KeyError(doc_id)
        return fp

    def __delitem__(self, doc_id: DocId) -> None:
        """Delete doc_id; KeyError if it is not stored."""
        if not self.remove(doc_id):
            raise KeyError(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        """Whether doc_id is stored (False for values that cannot be doc ids)."""
        try:
            enc = F.encode_id(doc_id)
        except (TypeError, ValueError):
            return False
        with self._env.reading() as txn:
            return self._lookup(txn, enc) is not None

    def __len__(self) -> int:
        """Number of stored docs."""
        with self._env.reading() as txn:
            return int(txn.stat(self._h.docs)["entries"])

    def items(self) -> Iterator[tuple[DocId, int]]:
        """(doc_id, fingerprint) in insertion order, read in short transactions.

        Writes made while iterating may or may not be seen.
        """
        after: bytes | None = None
        while True:
            with self._env.reading() as txn:
                cur = txn.cursor(self._h.docs)
                ok = cur.set_range(after) if after is not None else cur.first()
                if ok and after is not None and cur.key() == after:
                    ok = cur.next()
                chunk: list[tuple[DocId, int]] = []
                while ok and len(chunk) < _READ_CHUNK:
                    key, val = cur.item()
                    fp, enc = self._h.codec.parse(val)
                    chunk.append((F.decode_id(enc), fp))
                    after = bytes(key)
                    ok = cur.next()
            yield from chunk
            if not ok:
                return

    def __iter__(self) -> Iterator[DocId]:
        """Doc ids in insertion order (see :meth:`items`)."""
        return (doc_id for doc_id, _ in self.items())

    def snapshot(self) -> tuple[list[DocId], np.ndarray]:
        """All doc ids and their fingerprints (uint64) from one consistent read."""
        with self._env.reading() as txn:
            cols = self._h.codec.walk(txn.cursor(self._h.docs).iternext())
        assert cols.encs is not None
        return [F.decode_id(e) for e in cols.encs], cols.fps

    def fingerprints(self) -> np.ndarray:
        """Every stored fingerprint (uint64) in insertion order, for batch searches."""
        with self._env.reading() as txn:
            return self._scanner.all_fps(self._h, txn)[1].copy()

    def doc_ids(self) -> list[DocId]:
        """Every stored doc id in insertion order (the order of :meth:`fingerprints`)."""
        return self.snapshot()[0]
