"""The shingle sets of an exact store: its ``shingles`` database, the codec, the exact rule.

A store created with ``exact=True`` (recorded in ``meta`` under ``exact``)
keeps each document's sorted distinct shingle hashes (the 64-bit feature
hashes of its signature config, :func:`simstore.text.jaccard.shingle_sets`)
in one more LMDB database, ``shingles`` (bound by :mod:`simstore.store.schema`,
which reads the option): internal id (as in ``docs``) ->
the set's code (:func:`simstore.native.core.encode_sets`: a version byte, the
size, Golomb-Rice coded gaps; about 7 bytes a shingle). A set is written in
the write transaction of its docs record and deleted with it, so every
committed snapshot has exactly one set per doc.

:func:`similar` is the exact rule on a store: the candidates of the band
tables (as the sketch rule has them), each decided by the exact Jaccard of
the two sets (C), with no sketch estimate in between.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import CorruptStoreError
from ..native import core as _core
from ..text.jaccard import ShingleSets, exact_jaccard
from . import format as F
from .reads import SimilarMatch
from .rows import PUT_CHUNK, put_sorted
from .schema import Handles

_MAX_LISTED = 20


# --------------------------------------------------------------------------- the codec


def encode(sets: ShingleSets) -> list[bytes]:
    """Each set's code (C), in order."""
    if not len(sets):
        return []
    blob, off = _core.encode_sets(sets.hashes, sets.offsets)
    view = memoryview(blob)
    bounds = off.tolist()
    return [bytes(view[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def decode(codes: list[bytes], path: str, iids: list[bytes] | None = None) -> ShingleSets:
    """The sets of codes, in order (C); CorruptStoreError naming the first bad one."""
    off = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in codes], out=off[1:])
    hashes, offsets, bad = _core.decode_sets(b"".join(codes), off)
    if bad >= 0:
        which = f" of doc {iids[bad].hex()}" if iids is not None else ""
        raise CorruptStoreError(
            f"store {path!r}: the shingle set{which} is malformed; run verify()"
        )
    return ShingleSets(hashes, offsets)


# --------------------------------------------------------------------------- writes


def put(txn: Any, h: Handles, iid: bytes, code: bytes) -> None:
    """Store one doc's set code (in the doc's write transaction)."""
    txn.put(iid, code, db=h.shingles)


def put_many(txn: Any, h: Handles, iids: list[bytes], codes: list[bytes]) -> None:
    """Store new docs' set codes, iids ascending past every stored one (appended)."""
    cur = txn.cursor(h.shingles)
    append = True
    for a in range(0, len(iids), PUT_CHUNK):
        append = put_sorted(cur, iids[a : a + PUT_CHUNK], codes[a : a + PUT_CHUNK],
                            append=append)


def delete(txn: Any, h: Handles, iid: bytes) -> None:
    """Drop one doc's set (with its docs record)."""
    txn.delete(iid, db=h.shingles)


# --------------------------------------------------------------------------- reads


def read(txn: Any, h: Handles, iids: list[bytes]) -> ShingleSets:
    """The sets of stored docs (internal ids), in order; a missing one is CorruptStoreError."""
    get, db = txn.get, h.shingles
    codes = []
    for iid in iids:
        code = get(iid, db=db)
        if code is None:
            raise CorruptStoreError(
                f"store {h.path!r}: doc {iid.hex()} has no shingle set in an exact store; "
                "run verify()"
            )
        codes.append(bytes(code))
    return decode(codes, h.path, iids)


def similar(
    h: Handles, txn: Any, fp: int, query: ShingleSets, keys: list[bytes], threshold: float
) -> list[SimilarMatch]:
    """Stored docs sharing a band key with the query whose exact Jaccard >= threshold.

    query: the query's one set. Best first (Jaccard descending, then insertion order);
    each match's ``jaccard`` is the exact value.
    """
    assert h.bands is not None
    cands = h.bands.candidates(txn, keys)
    if not cands:
        return []
    get, docs = txn.get, h.docs
    recs, live = [], []
    for iid in cands:
        rec = get(iid, db=docs)
        if rec is None:
            if h.bands.stale_entries:
                continue  # a removed doc's stale entry
            raise CorruptStoreError(
                f"store {h.path!r}: a band table names a doc the docs database lacks"
            )
        recs.append(rec)
        live.append(bytes(iid))
    if not live:
        return []
    stored = read(txn, h, live)
    jac = exact_jaccard(query, np.zeros(len(live), dtype=np.int64),
                        np.arange(len(live), dtype=np.int64), stored, threshold)
    out = []
    match = h.codec.match
    for i in np.flatnonzero(jac >= threshold).tolist():
        doc_id, got = match(recs[i])
        j = float(jac[i])
        out.append((-j, live[i], SimilarMatch(doc_id, got, (got ^ fp).bit_count(), j)))
    out.sort(key=lambda row: (row[0], row[1]))
    return [row[2] for row in out]


# --------------------------------------------------------------------------- checks


def check(txn: Any, h: Handles, iids: np.ndarray) -> list[str]:
    """Problems of the shingles database against the live docs (iids ascending): a doc
    without a set, a set without a doc, a set that does not decode."""
    problems: list[str] = []
    want = F.iid_rows(np.asarray(iids, dtype=np.uint64)).tolist() if len(iids) else []
    wanted = set(want)
    missing = orphans = 0
    bad: list[str] = []
    batch_keys: list[bytes] = []
    batch_codes: list[bytes] = []

    def settle() -> None:
        codes, keys = batch_codes, batch_keys
        while codes:
            off = np.zeros(len(codes) + 1, dtype=np.int64)
            np.cumsum([len(c) for c in codes], out=off[1:])
            _, _, at = _core.decode_sets(b"".join(codes), off)
            if at < 0:
                break
            bad.append(keys[at].hex())
            codes, keys = codes[at + 1 :], keys[at + 1 :]
        batch_keys.clear()
        batch_codes.clear()

    seen = 0
    for key, val in txn.cursor(h.shingles).iternext():
        k = bytes(key)
        if k not in wanted:
            orphans += 1
            continue
        seen += 1
        batch_keys.append(k)
        batch_codes.append(bytes(val))
        if len(batch_keys) >= 4096:
            settle()
    settle()
    missing = len(want) - seen
    if missing:
        problems.append(f"{missing} docs have no shingle set (an exact store keeps one per doc)")
    if orphans:
        problems.append(f"the shingles database has {orphans} sets of no doc (orphans)")
    for iid in bad[:_MAX_LISTED]:
        problems.append(f"the shingle set of doc {iid} is malformed")
    if len(bad) > _MAX_LISTED:
        problems.append(f"... and {len(bad) - _MAX_LISTED} more malformed shingle sets")
    return problems
