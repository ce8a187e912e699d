"""Write operations of a store, each run inside one write transaction.

Each takes a write transaction and the store's :class:`~simstore.store.schema.Handles`;
the store runs them through :meth:`simstore.store.env.environment.Env.write` (which retries
them after growing the map), so they must only touch the transaction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import CorruptStoreError
from ..text.jaccard import ShingleSets
from ..text.minhash import band_keys32
from . import format as F, shingles as _shingles
from .reads import SimilarMatch, similar
from .runs import PUT_CHUNK, put_sorted
from .schema import Handles

# A doc's similarity part: (sketch bytes, band keys: 4 bytes each, big-endian, band by
# band), None in Hamming stores; in an exact store (sketch bytes, band keys, the code of its
# shingle set: a long set's as a uint8 array). The bytes are the docs record's.
Extra = tuple[bytes, bytes] | tuple[bytes, bytes, bytes | np.ndarray] | None

# A new doc's set code longer than this (bytes) is appended: its pieces fill LMDB's pages
# (put in order by key, they leave them half full: a long text's code then takes 4x its
# size in dirty pages); a shorter one is put by key (the pages' check costs it more).
APPEND_CODE = 64 << 10


def extra_of(sketch: np.ndarray, bands: np.ndarray) -> tuple[bytes, bytes]:
    """The stored similarity part of one signature (sketch words, 64-bit band keys): the
    band keys as :func:`~simstore.store.format.band_key_bytes` of their
    :func:`~simstore.text.minhash.band_keys32` (a cast keeps their low halves), joined."""
    return (sketch.astype("<u8").tobytes(),
            np.asarray(bands, dtype=np.uint64).astype(">u4").tobytes())


def keys_array(keys: bytes) -> np.ndarray:
    """A doc's band keys (as :func:`extra_of` stores them) as an array."""
    return np.frombuffer(keys, dtype=">u4")


def next_iid(txn: Any, h: Handles) -> int:
    """The next internal id (never a removed doc's)."""
    return h.tables.next_iid(txn)


def repay(txn: Any, h: Handles, owed: int) -> int:
    """A share of the merging a bulk write owed, in a commit of its own (the engine's)."""
    return h.tables.repay(txn, owed)


def merge_all(txn: Any, h: Handles, start: bool) -> tuple[int, bool]:
    """A share of merging every level into one, in a commit of its own (the engine's)."""
    return h.tables.merge_all(txn, start)


def _unindex(txn: Any, h: Handles, iid: bytes, rec: bytes) -> None:
    _unindex_many(txn, h, [(iid, rec)])


def _unindex_many(txn: Any, h: Handles, docs: list[tuple[bytes, Any]]) -> None:
    """Let the tables (and an exact store's shingle sets) go of docs (iid, record)."""
    bands = h.bands is not None
    h.tables.unindex_many(txn, [(iid, h.codec.parse(rec)[0],
                                 h.codec.band_keys(rec) if bands else b"") for iid, rec in docs])
    if h.shingles is not None:
        for iid, _ in docs:
            _shingles.delete(txn, h, iid)


def add(txn: Any, h: Handles, enc: bytes, fp: int, extra: Extra, at: int | None = None
        ) -> None:
    """Store one doc at time ``at`` (ms since the epoch; None: now); an existing id gets
    the new fingerprint (and signature).

    A changed doc gets a new internal id (it moves to the end of insertion
    order): run tables find new docs by internal id, and never reuse one. An unchanged
    one keeps its internal id and gets the new time. In an exact store its shingle set
    (extra's code) is written with it.
    """
    sketch, keys = extra[:2] if extra is not None else (b"", b"")
    code = extra[2] if extra is not None and len(extra) == 3 else None
    if (code is None) != (h.shingles is None):
        raise CorruptStoreError(f"store {h.path!r}: a doc's shingle set must come with it "
                                "in an exact store, and only there")
    new = h.codec.record(fp, enc, sketch, keys, at)
    old = h.idx.find(txn, enc)
    if old is not None:
        oid, rec = old
        if h.codec.same_doc(rec, new):
            if rec != new:
                txn.put(oid, new, db=h.docs)  # the new time of storage
            if code is not None:
                _shingles.put(txn, h, oid, code, replace=True)  # maybe another set
            return
        _unindex(txn, h, oid, rec)
        txn.delete(oid, db=h.docs)
    iid = F.iid_bytes(next_iid(txn, h))
    txn.put(iid, new, db=h.docs)
    if code is not None:
        _shingles.put(txn, h, iid, code, append=len(code) > APPEND_CODE)
    h.tables.index(txn, iid, fp, keys, F.id_hash(enc))


def touch(txn: Any, h: Handles, enc: bytes, at: int) -> bool:
    """Give a stored doc a new time of storage; whether it was stored."""
    found = h.idx.find(txn, enc)
    if found is None:
        return False
    iid, rec = found
    txn.put(iid, h.codec.restamp(rec, at), db=h.docs)
    return True


def expire(txn: Any, h: Handles, encs: list[bytes], before: int) -> int:
    """Delete those of encs whose doc was stored before ``before`` (ms); how many. A doc
    stored again since the caller saw it (a newer time) is kept."""
    stamp = h.codec.stored_at
    return _drop_many(txn, h, [hit for hit in h.idx.find_many(txn, encs).values()
                               if stamp(hit[1]) < before])


def remove(txn: Any, h: Handles, enc: bytes) -> bool:
    """Delete one doc; whether it was stored."""
    found = h.idx.find(txn, enc)
    if found is None:
        return False
    iid, rec = found
    _unindex(txn, h, iid, rec)
    txn.delete(iid, db=h.docs)
    return True


def remove_many(txn: Any, h: Handles, encs: list[bytes]) -> int:
    """Delete many docs; how many were stored (their ids found in one pass)."""
    return _drop_many(txn, h, list(h.idx.find_many(txn, encs).values()))


def _drop_many(txn: Any, h: Handles, docs: list[tuple[bytes, Any]]) -> int:
    """Delete docs (internal id, record) from the tables and the docs table; how many."""
    _unindex_many(txn, h, docs)
    for iid, _ in docs:
        txn.delete(iid, db=h.docs)
    return len(docs)


def add_many(
    txn: Any,
    h: Handles,
    ids: Any,
    fps: np.ndarray,
    sketches: np.ndarray | None,
    bands: np.ndarray | None,
    sets: ShingleSets | None = None,
    at: Any = None,
) -> None:
    """Add distinct ids (encoded bytes, or an int64 array of int ids) with their fps.

    The bulk path: docs appended (in an exact store ``sets``, their shingle sets, too),
    then handed to the run tables with their band keys and ids' hashes. at: the time
    of storage (ms since the epoch), one for all or a uint64 array, one per doc; None:
    now.
    """
    if at is None:
        at = F.now_ms()
    per_doc = isinstance(at, np.ndarray)
    n = len(ids)
    ints = isinstance(ids, np.ndarray)

    def encs_at(pos: np.ndarray) -> list[bytes]:
        return F.int_encodings(ids[pos]) if ints else [ids[i] for i in pos.tolist()]

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
    idh = None
    if txn.stat(h.docs)["entries"]:
        # Which ids are stored already: looked up a chunk at a time in the order of their
        # hashes, so that a chunk reads one stretch of the ids' runs, whose pages go from
        # this process's RSS after it (one chunk of a batch in input order reads them all).
        idh = h.idx.hashes(ids, np.arange(n))
        order = np.argsort(idh)
        for a in range(0, n, PUT_CHUNK):
            pos = np.sort(order[a : a + PUT_CHUNK])
            chunk = encs_at(pos)
            found = h.idx.find_many(txn, chunk)
            if found:
                is_new[pos] = [e not in found for e in chunk]
            if n > PUT_CHUNK:
                h.tables.release()
        del order
        old = np.flatnonzero(~is_new)
        for i in old.tolist():
            enc = F.encode_id(int(ids[i])) if ints else ids[i]
            add(txn, h, enc, int(fps[i]), extra(i), int(at[i]) if per_doc else at)
        if len(old) == n:
            return
    new = np.flatnonzero(is_new)
    first = next_iid(txn, h)
    iids = np.zeros(n, dtype=np.uint64)
    iids[new] = np.arange(first, first + len(new), dtype=np.uint64)
    rows = F.iid_rows(iids)
    keys32 = None if bands is None else band_keys32(bands)

    # docs: records in internal-id (= input) order, appended (the cursor goes to the end)
    prefix = h.codec.prefixes(fps, sketches, keys32, at)
    cur = h.docs_guard.cursor(txn, h.docs, F.iid_bytes(first), stop=F.iid_bytes(first))
    for a in range(0, len(new), PUT_CHUNK):
        pos = new[a : a + PUT_CHUNK]
        if ints:
            recs = F.int_encodings(ids[pos], prefix[pos])
        else:
            pre = prefix[pos].view(f"V{prefix.shape[1]}").ravel().tolist()
            recs = [p + ids[i] for p, i in zip(pre, pos.tolist(), strict=True)]
        put_sorted(cur, rows[pos].tolist(), recs, append=True)
    del prefix
    if codes is not None:  # shingles: appended after every stored doc's, as docs
        _shingles.put_many(txn, h, rows[new].tolist(), [codes[i] for i in new.tolist()])
    sub = fps[new] if len(new) != n else fps
    h.tables.fill(txn, sub, iids[new], bands=None if keys32 is None else keys32[new],
                  idh=h.idx.hashes(ids, new) if idh is None else idh[new])


def add_if_similar(
    txn: Any, h: Handles, enc: bytes, fp: int, extra: Extra, sketch: np.ndarray,
    bands: np.ndarray, t: float, query: ShingleSets | None = None, at: int | None = None,
    since: int | None = None, *, in_map: bool = False,
) -> list[SimilarMatch]:
    """Store one doc (at ``at``) unless a doc stored since ``since`` (ms; None: ever) has
    estimated Jaccard >= t (exact Jaccard, given the doc's set ``query`` in an exact
    store); the matches found. bands: the doc's nbands band keys; in_map: txn has written
    nothing yet (its lookup may read records in LMDB's map, see reads.similar)."""
    if query is not None:
        found = _shingles.similar(h, txn, fp, query, bands, t, since)
    else:
        found = similar(h, txn, fp, sketch, bands, t, since, in_map)
    if not found:
        add(txn, h, enc, fp, extra, at)
    return found
