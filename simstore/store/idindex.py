"""Doc id -> internal id: the seam between the store's writes and reads and where ids live.

Two implement :class:`IdIndex`: :class:`TreeIds`, the ``ids`` B-tree of formats 1-12
(id key -> internal id, written in place), and :class:`RunIds` of format 13 on, where
the ids are one more run database of the run tables (``rids``: the 64-bit
:func:`~simstore.store.format.id_hash` of each encoded id -> internal id), derived from
the docs records and merged in tiers with the tables, so a commit writes no scattered
B-tree pages. In both, the docs record of a found internal id must hold the very id
(a digest or hash shared by two ids names only one of them); a run entry whose doc was
removed (stale until a merge drops it) names no docs record and is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..exceptions import CorruptStoreError
from . import format as F
from .rows import PUT_CHUNK, put_sorted

if TYPE_CHECKING:
    from .runs import RunTables

Found = tuple[bytes, Any]  # (internal id, 8-byte key; its docs record)


class IdIndex(Protocol):
    """Where a store finds the internal id of a doc id."""

    def find(self, txn: Any, enc: bytes, *, strict: bool = False) -> Found | None:
        """(internal id, docs record) of the live doc with this encoded id, or None;
        strict: CorruptStoreError where the id's key names another id's doc (a long id's
        digest in an ids B-tree: a write must not take the key over)."""

    def find_many(self, txn: Any, encs: list[bytes]) -> dict[bytes, Found]:
        """Encoded id -> (internal id, docs record) of those of encs that are stored."""

    def put(self, txn: Any, enc: bytes, iid: bytes) -> None:
        """Note a doc written at iid under this id (after its docs record)."""

    def delete(self, txn: Any, enc: bytes) -> None:
        """Note the doc of this id gone (its docs record deleted)."""

    def put_new(self, txn: Any, ids: Any, pos: np.ndarray, rows: np.ndarray) -> None:
        """Note docs of new, distinct ids written (the bulk path): ids[pos] (encoded ids,
        or an int64 array of int ids) at the internal ids rows[pos] (8-byte rows)."""

    def hashes(self, ids: Any, pos: np.ndarray) -> np.ndarray | None:
        """What the table engine indexes of ids[pos] (encoded ids, or an int64 array of
        int ids): RunIds their hashes, TreeIds None."""

    def check(self, txn: Any, keys: list[bytes], encs: list[bytes]) -> list[str]:
        """Problems of the index against the live docs (8-byte keys and encoded ids)."""


class _Docs:
    """The docs table and its codec: a found internal id's record must hold the id.
    (An index holds no store handles: a cycle through them would keep a closed
    store's environment open until the garbage collector ran.)"""

    def __init__(self, docs: Any, codec: Any) -> None:
        self.docs, self.codec = docs, codec

    def _live(self, txn: Any, iid: bytes, enc: bytes) -> Found | None:
        """(iid, record) when iid's docs record holds enc."""
        rec = txn.get(iid, db=self.docs)
        if rec is None:
            return None
        if self.codec.parse(rec)[1] != enc:
            return None
        return iid, rec


class TreeIds(_Docs):
    """The ``ids`` B-tree (formats 1-12): id key -> internal id."""

    def __init__(self, docs: Any, codec: Any, ids: Any, ordered: bool, path: str = "") -> None:
        super().__init__(docs, codec)
        self.db = ids
        self.ordered = ordered  # int ids key by value (F.ordered_id_key)
        self.path = path

    def id_key(self, enc: bytes) -> bytes:
        """The B-tree key of an encoded id."""
        return F.ordered_id_key(enc) if self.ordered else F.id_key(enc)

    def find(self, txn: Any, enc: bytes, *, strict: bool = False) -> Found | None:
        iid = txn.get(self.id_key(enc), db=self.db)
        if iid is None:
            return None
        found = self._named(txn, bytes(iid), enc)
        if found is None and strict:
            raise CorruptStoreError(F.collision_message(self.path))
        return found

    def _named(self, txn: Any, iid: bytes, enc: bytes) -> Found | None:
        """(iid, record) of the doc the B-tree names, None when it holds another id (a
        digest shared); a record gone is damage (CorruptStoreError), not a stale entry."""
        rec = txn.get(iid, db=self.docs)
        return (iid, rec) if self.codec.parse(rec)[1] == enc else None

    def find_many(self, txn: Any, encs: list[bytes]) -> dict[bytes, Found]:
        if not txn.stat(self.db)["entries"]:
            return {}
        keyed = sorted((self.id_key(e), e) for e in dict.fromkeys(encs))
        cur, out = txn.cursor(self.db), {}
        for key, enc in keyed:  # in key order: one cursor's walk
            if cur.set_key(key):
                out[enc] = bytes(cur.value())
        got = {}
        for enc, iid in out.items():
            found = self._named(txn, iid, enc)
            if found is None:  # its key names another id's doc: never written over
                raise CorruptStoreError(F.collision_message(self.path))
            got[enc] = found
        return got

    def put(self, txn: Any, enc: bytes, iid: bytes) -> None:
        txn.put(self.id_key(enc), iid, db=self.db)

    def delete(self, txn: Any, enc: bytes) -> None:
        txn.delete(self.id_key(enc), db=self.db)

    def put_new(self, txn: Any, ids: Any, pos: np.ndarray, rows: np.ndarray) -> None:
        ordered = self.ordered
        if isinstance(ids, np.ndarray):  # int ids: sorted as their keys sort, vectorized
            sub = ids[pos]
            order = pos[np.argsort(sub, kind="stable") if ordered else F.int_id_order(sub)]

            def keys_at(p: np.ndarray) -> list[bytes]:
                return F.ordered_int_keys(ids[p]) if ordered else F.int_encodings(ids[p])
        else:
            idkeys = {i: self.id_key(ids[i]) for i in pos.tolist()}
            order = np.asarray(sorted(idkeys, key=idkeys.__getitem__), dtype=np.int64)

            def keys_at(p: np.ndarray) -> list[bytes]:
                return [idkeys[i] for i in p.tolist()]
        cur = txn.cursor(self.db)
        append = txn.stat(self.db)["entries"] == 0
        for a in range(0, len(order), PUT_CHUNK):
            p = order[a : a + PUT_CHUNK]
            append = put_sorted(cur, keys_at(p), rows[p].tolist(), append=append)

    def hashes(self, ids: Any, pos: np.ndarray) -> np.ndarray | None:
        return None

    def reset(self, txn: Any, encs: list[bytes], iids: np.ndarray) -> None:
        """Write the B-tree of every doc afresh (encs and iids of all docs)."""
        txn.drop(self.db, delete=False)
        rows = F.iid_rows(np.asarray(iids, dtype=np.uint64)).tolist()
        items = sorted(zip(map(F.ordered_id_key, encs), rows, strict=True))
        txn.cursor(self.db).putmulti(items, append=True)

    def check(self, txn: Any, keys: list[bytes], encs: list[bytes]) -> list[str]:
        problems, bad = [], 0
        for key, enc in zip(keys, encs, strict=True):
            got = txn.get(self.id_key(enc), db=self.db)
            if got is None or bytes(got) != key:
                bad += 1
                if bad <= MAX_LISTED:
                    problems.append(
                        f"doc {safe_id(enc)!r}: the ids table "
                        + ("lacks it" if got is None else "points to another record"))
        if bad > MAX_LISTED:
            problems.append(f"... and {bad - MAX_LISTED} more docs with bad ids entries")
        n_ids = int(txn.stat(self.db)["entries"])
        if n_ids != len(keys):
            problems.append(
                f"the ids table has {n_ids} entries for {len(keys)} docs (orphans or gaps)")
        return problems


class RunIds(_Docs):
    """The ids as a run database of the run tables (format 13 on): the tables write and
    merge its entries from the docs records; this looks them up."""

    def __init__(self, docs: Any, codec: Any, tables: RunTables) -> None:
        super().__init__(docs, codec)
        self._tables = tables

    def find(self, txn: Any, enc: bytes, *, strict: bool = False) -> Found | None:
        for iid in self._tables.id_candidates(txn, [F.id_hash(enc)]):  # (no key to take)
            found = self._live(txn, F.iid_bytes(iid), enc)
            if found is not None:
                return found
        return None

    def find_many(self, txn: Any, encs: list[bytes]) -> dict[bytes, Found]:
        want = set(encs)
        if not want:
            return {}
        out: dict[bytes, Found] = {}
        get, docs, parse = txn.get, self.docs, self.codec.parse
        hs = np.unique(F.id_hashes(want))
        for iid in self._tables.id_candidates(txn, hs):
            key = F.iid_bytes(iid)
            rec = get(key, db=docs)
            if rec is not None:
                enc = parse(rec)[1]
                if enc in want:
                    out[enc] = key, rec
        return out

    def put(self, txn: Any, enc: bytes, iid: bytes) -> None:
        pass  # the tables read the id from the doc's record when its level is written

    def delete(self, txn: Any, enc: bytes) -> None:
        pass  # the doc's entry is stale with its tables' entries (its tombstone)

    def put_new(self, txn: Any, ids: Any, pos: np.ndarray, rows: np.ndarray) -> None:
        pass

    def hashes(self, ids: Any, pos: np.ndarray) -> np.ndarray | None:
        if isinstance(ids, np.ndarray):
            return F.int_id_hashes(ids[pos])
        return F.id_hashes([ids[i] for i in pos.tolist()])

    def check(self, txn: Any, keys: list[bytes], encs: list[bytes]) -> list[str]:
        problems = []
        distinct = len(set(encs))
        if distinct != len(encs):
            problems.append(f"{len(encs) - distinct} live docs share an id with another")
        iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        return problems + self._tables.check_ids(txn, iids, F.id_hashes(encs))


MAX_LISTED = 20  # problems listed one by one before a count


def safe_id(enc: bytes) -> Any:
    """An encoded id decoded for a message (as bytes when it does not decode)."""
    try:
        return F.decode_id(enc)
    except Exception:  # noqa: BLE001 - a damaged id must not stop the report
        return enc
