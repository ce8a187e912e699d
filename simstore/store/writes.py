"""Write operations of a store, each run inside one write transaction.

Each takes a write transaction and the store's :class:`~simstore.store.schema.Handles`;
the store runs them through :meth:`simstore.store.env.Env.write` (which retries
them after growing the map), so they must only touch the transaction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import CorruptStoreError
from ..text.jaccard import ShingleSets
from ..text.minhash import band_keys32
from . import format as F, shingles as _shingles
from .legacy.bands import key_bytes
from .reads import SimilarMatch, similar
from .rows import PUT_CHUNK, put_sorted
from .schema import Handles

# A doc's similarity part: (sketch bytes, 4-byte band keys), None in Hamming stores; in an
# exact store (sketch bytes, 4-byte band keys, the code of its shingle set).
Extra = tuple[bytes, list[bytes]] | tuple[bytes, list[bytes], bytes] | None


def extra_of(sketch: np.ndarray, bands: np.ndarray) -> tuple[bytes, list[bytes]]:
    """The stored similarity part of one signature (sketch words, 64-bit band keys)."""
    return sketch.astype("<u8").tobytes(), key_bytes(band_keys32(bands))


def next_iid(txn: Any, h: Handles) -> int:
    """The next internal id (never a removed doc's in a store with run tables)."""
    return h.tables.next_iid(txn)


def _unindex(txn: Any, h: Handles, iid: bytes, rec: bytes) -> None:
    fp, _ = h.codec.parse(rec)
    h.tables.unindex(txn, iid, fp, h.codec.band_keys(rec) if h.bands is not None else [])
    if h.shingles is not None:
        _shingles.delete(txn, h, iid)


def add(txn: Any, h: Handles, idkey: bytes, enc: bytes, fp: int, extra: Extra) -> None:
    """Store one doc; an existing id gets the new fingerprint (and signature).

    A changed doc gets a new internal id (it moves to the end of insertion
    order): run tables find new docs by internal id, and never reuse one. In an
    exact store its shingle set (extra's code) is written with it.
    """
    sketch, keys = extra[:2] if extra is not None else (b"", [])
    code = extra[2] if extra is not None and len(extra) == 3 else None
    if (code is None) != (h.shingles is None):
        raise CorruptStoreError(f"store {h.path!r}: a doc's shingle set must come with it "
                                "in an exact store, and only there")
    new = h.codec.record(fp, enc, sketch, b"".join(keys))
    old = txn.get(idkey, db=h.ids)
    if old is not None:
        oid = bytes(old)
        rec = txn.get(oid, db=h.docs)
        if h.codec.parse(rec)[1] != enc:
            raise CorruptStoreError(F.collision_message(h.path))
        if rec == new:
            if code is not None:
                _shingles.put(txn, h, oid, code, replace=True)  # maybe another set
            return
        _unindex(txn, h, oid, rec)
        txn.delete(oid, db=h.docs)
    iid = F.iid_bytes(next_iid(txn, h))
    txn.put(idkey, iid, db=h.ids)
    txn.put(iid, new, db=h.docs)
    if code is not None:
        _shingles.put(txn, h, iid, code)
    h.tables.index(txn, iid, fp, keys)


def remove(txn: Any, h: Handles, idkey: bytes, enc: bytes) -> bool:
    """Delete one doc; whether it was stored."""
    iid = txn.get(idkey, db=h.ids)
    if iid is None:
        return False
    iid = bytes(iid)
    rec = txn.get(iid, db=h.docs)
    if h.codec.parse(rec)[1] != enc:
        return False  # a digest collision: the stored doc is another id
    _unindex(txn, h, iid, rec)
    txn.delete(iid, db=h.docs)
    txn.delete(idkey, db=h.ids)
    return True


def remove_many(txn: Any, h: Handles, encs: list[bytes]) -> int:
    """Delete many docs; how many were stored."""
    return sum(remove(txn, h, h.id_key(e), e) for e in encs)


def add_many(
    txn: Any,
    h: Handles,
    ids: Any,
    fps: np.ndarray,
    sketches: np.ndarray | None,
    bands: np.ndarray | None,
    sets: ShingleSets | None = None,
) -> None:
    """Add distinct ids (encoded bytes, or an int64 array of int ids) with their fps.

    The bulk path: docs appended, ids and every table written in key order;
    in an exact store ``sets`` (their shingle sets) appended too.
    """
    n = len(ids)
    ints = isinstance(ids, np.ndarray)
    if ints:
        id_order = np.argsort(ids, kind="stable") if h.ordered_ids else F.int_id_order(ids)
    else:
        idkeys = [h.id_key(e) for e in ids]
        id_order = np.asarray(sorted(range(n), key=idkeys.__getitem__), dtype=np.int64)

    def id_keys(pos: np.ndarray) -> list[bytes]:
        if not ints:
            return [idkeys[i] for i in pos.tolist()]
        return F.ordered_int_keys(ids[pos]) if h.ordered_ids else F.int_encodings(ids[pos])

    if (sets is None) != (h.shingles is None):
        raise CorruptStoreError(f"store {h.path!r}: docs' shingle sets must come with them "
                                "in an exact store, and only there")
    codes = None if sets is None else _shingles.encode(sets)

    def extra(i: int) -> Extra:
        if sketches is None or bands is None:
            return None
        part = extra_of(sketches[i], bands[i])
        return part if codes is None else (*part, codes[i])

    is_new = np.ones(n, dtype=bool)
    if txn.stat(h.ids)["entries"]:
        # Which ids are stored already: lookups in key order, one cursor.
        cur = txn.cursor(h.ids)
        for a in range(0, n, PUT_CHUNK):
            pos = id_order[a : a + PUT_CHUNK]
            for i, key in zip(pos.tolist(), id_keys(pos), strict=True):
                if cur.set_key(key):
                    is_new[i] = False
        old = np.flatnonzero(~is_new)
        for i in old.tolist():
            enc = F.encode_id(int(ids[i])) if ints else ids[i]
            add(txn, h, h.id_key(enc), enc, int(fps[i]), extra(i))
        if len(old) == n:
            return
    new = np.flatnonzero(is_new)
    first = next_iid(txn, h)
    iids = np.zeros(n, dtype=np.uint64)
    iids[new] = np.arange(first, first + len(new), dtype=np.uint64)
    rows = F.iid_rows(iids)
    keys32 = None if bands is None else band_keys32(bands)

    def write_docs_ids_and_bands() -> None:
        # docs: records in internal-id (= input) order, appended
        prefix = h.codec.prefixes(fps, sketches, keys32)
        cur = txn.cursor(h.docs)
        for a in range(0, len(new), PUT_CHUNK):
            pos = new[a : a + PUT_CHUNK]
            if ints:
                recs = F.int_encodings(ids[pos], prefix[pos])
            else:
                pre = prefix[pos].view(f"V{prefix.shape[1]}").ravel().tolist()
                recs = [p + ids[i] for p, i in zip(pre, pos.tolist(), strict=True)]
            put_sorted(cur, rows[pos].tolist(), recs, append=True)
        del prefix
        # ids: encoded id -> internal id, in key order
        new_order = id_order[is_new[id_order]]
        cur = txn.cursor(h.ids)
        append = txn.stat(h.ids)["entries"] == 0
        for a in range(0, len(new_order), PUT_CHUNK):
            pos = new_order[a : a + PUT_CHUNK]
            append = put_sorted(cur, id_keys(pos), rows[pos].tolist(), append=append)
        if codes is not None:  # shingles: appended after every stored doc's, as docs
            _shingles.put_many(txn, h, rows[new].tolist(), [codes[i] for i in new.tolist()])

    sub = fps[new] if len(new) != n else fps
    h.tables.fill(txn, sub, iids[new], before=write_docs_ids_and_bands,
                  bands=None if keys32 is None else keys32[new])


def add_if_similar(
    txn: Any, h: Handles, idkey: bytes, enc: bytes, fp: int, extra: Extra,
    sketch: np.ndarray, keys: list[bytes], t: float, query: ShingleSets | None = None,
) -> list[SimilarMatch]:
    """Store one doc unless a stored doc has estimated Jaccard >= t (exact Jaccard, given
    the doc's set ``query`` in an exact store); the matches found."""
    if query is not None:
        found = _shingles.similar(h, txn, fp, query, keys, t)
    else:
        found = similar(h, txn, fp, sketch, keys, t)
    if not found:
        add(txn, h, idkey, enc, fp, extra)
    return found
