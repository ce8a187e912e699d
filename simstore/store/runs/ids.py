"""Doc id -> internal id: the seam between the store's writes and reads and where ids live.

The ids are one more run database of the run tables (``rids``: the 64-bit
:func:`~simstore.store.format.id_hash` of each encoded id -> internal id), derived from
the docs records and merged in tiers with the tables, so a commit writes no scattered
B-tree pages. The docs record of a found internal id must hold the very id (a hash
shared by two ids names both); a run entry whose doc was removed (stale until a merge
drops it) names no docs record and is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import format as F

if TYPE_CHECKING:
    from .tables import RunTables

Found = tuple[bytes, Any]  # (internal id, 8-byte key; its docs record)


class RunIds:
    """Where a store finds the internal id of a doc id: the ids' run database, which the
    tables write and merge from the docs records; this looks them up. (It holds no store
    handles: a cycle through them would keep a closed store's environment open until the
    garbage collector ran.)"""

    def __init__(self, docs: Any, codec: Any, tables: RunTables) -> None:
        self.docs, self.codec = docs, codec
        self._tables = tables

    def find(self, txn: Any, enc: bytes) -> Found | None:
        """(internal id, docs record) of the live doc with this encoded id, or None."""
        for iid in self._tables.id_candidates(txn, F.id_hash(enc)):
            key = F.iid_bytes(iid)
            rec = txn.get(key, None, self.docs)
            if rec is not None and self.codec.parse(rec)[1] == enc:
                return key, rec
        return None

    def find_many(self, txn: Any, encs: list[bytes]) -> dict[bytes, Found]:
        """Encoded id -> (internal id, docs record) of those of encs that are stored."""
        want = set(encs)
        if not want:
            return {}
        out: dict[bytes, Found] = {}
        get, docs, parse = txn.get, self.docs, self.codec.parse
        hs = np.unique(F.id_hashes(want))
        for iid in self._tables.id_candidates(txn, hs):
            key = F.iid_bytes(iid)
            rec = get(key, None, docs)
            if rec is not None:
                enc = parse(rec)[1]
                if enc in want:
                    out[enc] = key, rec
        return out

    def hashes(self, ids: Any, pos: np.ndarray) -> np.ndarray:
        """The hashes of ids[pos] (encoded ids, or an int64 array of int ids): what the
        tables index of new docs written in bulk."""
        if isinstance(ids, np.ndarray):
            return F.int_id_hashes(ids[pos])
        return F.id_hashes([ids[i] for i in pos.tolist()])

    def check(self, txn: Any, keys: list[bytes], encs: list[bytes]) -> list[str]:
        """Problems of the ids against the live docs (8-byte keys and encoded ids)."""
        problems = []
        distinct = len(set(encs))
        if distinct != len(encs):
            problems.append(f"{len(encs) - distinct} live docs share an id with another")
        iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        return problems + self._tables.check_ids(txn, iids, F.id_hashes(encs))
