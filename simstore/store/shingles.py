"""The shingle sets of an exact store: its ``shingles`` database, the codec, the exact rule.

A store created with ``exact=True`` (recorded in ``meta`` under ``exact``)
keeps each document's sorted distinct shingle hashes (the 64-bit feature
hashes of its signature config, :func:`simstore.text.jaccard.shingle_sets`)
in one more LMDB database, ``shingles`` (bound by :mod:`simstore.store.schema`,
which reads the option). A set is stored as its code
(:func:`simstore.native.jaccard.encode_sets`: a version byte, the size,
Golomb-Rice coded gaps; about 7 bytes a shingle) cut into pieces of at most
:data:`PIECE` bytes, split evenly: key = internal id (as in ``docs``) + the
piece's number (2 bytes, big-endian, from 0). Small pieces pack LMDB's 4 KiB
leaf pages: on the English documents of ``tools.bench exact-store`` (codes of
3 KB on average) the pages take 1.11x the codes' bytes with 500-byte pieces,
1.27x with 2,000-byte ones, and about 1.5x as whole values (a value over 2 KB
takes overflow pages of 4 KiB each, the last one half empty). A set is
written in the write transaction of its docs record and deleted with it, so
every committed snapshot has exactly one set per doc.

:func:`similar` is the exact rule on a store: the candidates of the band
tables (as the sketch rule has them), each decided by the exact Jaccard of
the two sets (C), with no sketch estimate in between. A long query comes as its
code (:mod:`.longsets`) and meets each candidate's code as its pieces are read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import lmdb
import numpy as np

from ..exceptions import CorruptStoreError
from ..native import jaccard as _sets
from ..text.jaccard import ShingleSets
from . import format as F
from .check.ranges import TreeGuard
from .longsets import LongSet
from .reads import SimilarMatch, candidate_records
from .runs import PUT_CHUNK, put_sorted
from .schema import Handles

_MAX_LISTED = 20


# --------------------------------------------------------------------------- the codec


def encode(sets: ShingleSets) -> list[bytes]:
    """Each set's code (C), in order."""
    if not len(sets):
        return []
    blob, off = _sets.encode_sets(sets.hashes, sets.offsets)
    if len(sets) == 1:
        return [blob]  # the one code, not copied (a long text's is tens of MB)
    view = memoryview(blob)
    bounds = off.tolist()
    return [bytes(view[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def decode(codes: list[bytes] | list[bytearray], path: str, iids: list[bytes] | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """The sets of codes, in order (C): hashes and offsets, as :class:`ShingleSets` holds
    them (sound by construction); CorruptStoreError naming the first bad code."""
    off = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in codes], out=off[1:])
    blob = codes[0] if len(codes) == 1 else b"".join(codes)  # one code: read in place
    hashes, offsets, bad = _sets.decode_sets(blob, off)
    if bad >= 0:
        raise _malformed(path, iids[bad] if iids is not None else None)
    return hashes, offsets


def _malformed(path: str, iid: bytes | None) -> CorruptStoreError:
    which = f" of doc {iid.hex()}" if iid is not None else ""
    return CorruptStoreError(f"store {path!r}: the shingle set{which} is malformed; run verify()")


def _missing(path: str, iid: bytes) -> CorruptStoreError:
    return CorruptStoreError(
        f"store {path!r}: doc {iid.hex()} has no shingle set in an exact store; run verify()")


# --------------------------------------------------------------------------- writes

PIECE = 500  # bytes at most a piece (see the module docstring)
_KEY = 10  # internal id (8 bytes) + piece number (2)
MAX_PIECES = 1 << 16  # pieces a piece number of 2 bytes can name


def pieces(iid: bytes, code: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, piece) rows of one doc's code, in key order, made as they are taken (at most
    :data:`MAX_PIECES`: a code over 32 MB, a text of about 5M distinct shingles, gets
    longer pieces)."""
    m = min(max(1, -(-len(code) // PIECE)), MAX_PIECES)
    step = -(-len(code) // m)
    return ((iid + i.to_bytes(2, "big"), code[i * step : (i + 1) * step]) for i in range(m))


def put(txn: Any, h: Handles, iid: bytes, code: Any, *, replace: bool = False,
        append: bool = False) -> None:
    """Store one doc's set code (in the doc's write transaction); ``replace`` first drops
    the pieces it had (a new internal id has none); ``append``: iid is past every stored
    one (a new doc's), so its pieces fill LMDB's pages whole (put in order, the pages
    they split are left half full) and none is held twice."""
    if replace:
        delete(txn, h, iid)
    if append:
        _guard(h).check(txn, iid, stop=iid)  # the pages on the way to the end
    for key, piece in pieces(iid, code):
        txn.put(key, piece, db=h.shingles, append=append)


def _guard(h: Handles) -> TreeGuard:
    assert h.shingles_guard is not None  # (an exact store's handles)
    return h.shingles_guard


def _past(iid: bytes) -> bytes:
    """A key past every piece of doc iid and before the next doc's."""
    return iid + b"\xff\xff\xff"


def put_many(txn: Any, h: Handles, iids: list[bytes], codes: list[bytes]) -> None:
    """Store new docs' set codes, iids ascending past every stored one (appended: the
    cursor goes to the end)."""
    first = iids[0] if iids else b""
    cur = _guard(h).cursor(txn, h.shingles, first, stop=first)
    append = True
    for a in range(0, len(iids), PUT_CHUNK):
        rows = [row for iid, code in zip(iids[a : a + PUT_CHUNK], codes[a : a + PUT_CHUNK],
                                         strict=True) for row in pieces(iid, code)]
        append = put_sorted(cur, [k for k, _ in rows], [v for _, v in rows], append=append)


def delete(txn: Any, h: Handles, iid: bytes) -> None:
    """Drop one doc's set (with its docs record): its pieces by key (see :func:`_pieces`)."""
    n = 0
    try:
        while n < MAX_PIECES and txn.delete(iid + n.to_bytes(2, "big"), db=h.shingles):
            n += 1
    except lmdb.Error:
        _guard(h).explain(iid, _past(iid))
        raise


# --------------------------------------------------------------------------- reads


def _code(cur: Any, iid: bytes) -> bytearray | None:
    """One doc's code from the pieces a cursor walks (verify's walk, over pages checked
    first), gathered in one buffer; a gap in the piece numbers or a key of another
    length makes it malformed (an empty code)."""
    if not cur.set_range(iid):
        return None
    code, n = bytearray(), 0
    for key, piece in cur.iternext():
        if key[:8] != iid:
            break
        if len(key) != _KEY or int.from_bytes(key[8:], "big") != n:
            return bytearray()
        code += piece
        n += 1
    return code if n else None


class _Gap(Exception):
    """A doc's piece numbers skip one: its code is malformed."""


def _batches(cur: Any, iid: bytes) -> Iterator[list[bytes]]:
    """One doc's pieces, looked up by key in growing batches (none if it has none); _Gap
    at a gap in the piece numbers. By key, LMDB never steps from leaf to leaf, where a
    damaged page aborts it: a query reads no more pages than its candidates' (a walk's
    check, per candidate, cost more than the query)."""
    n, want = 0, 8
    while n < MAX_PIECES:
        got = cur.getmulti([iid + i.to_bytes(2, "big")
                            for i in range(n, min(n + want, MAX_PIECES))])
        for key, _ in got:
            if int.from_bytes(key[8:], "big") != n:
                raise _Gap
            n += 1
        if got:
            yield [piece for _, piece in got]
        if len(got) < want:
            break
        want = min(4 * want, 1 << 12)


def _pieces(cur: Any, iid: bytes) -> bytearray | None:
    """One doc's code from its pieces (:func:`_batches`; None if it has none), in one
    buffer (a long text's is tens of MB: never held twice); a gap in the piece numbers
    makes it malformed (an empty code)."""
    code, n = bytearray(), 0
    try:
        for batch in _batches(cur, iid):
            for piece in batch:
                code += piece
                n += 1
    except _Gap:
        return bytearray()
    return code if n else None


def read(txn: Any, h: Handles, iids: list[bytes]) -> ShingleSets:
    """The sets of stored docs (internal ids), in order; a missing one is CorruptStoreError."""
    return ShingleSets(*_read(txn, h, iids))


def _read(txn: Any, h: Handles, iids: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    cur = txn.cursor(h.shingles)
    codes: list[bytearray] = []
    for iid in iids:
        try:
            code = _pieces(cur, iid)
        except lmdb.Error:
            _guard(h).explain(iid, _past(iid))
            raise
        if code is None:
            raise _missing(h.path, iid)
        codes.append(code)
    return decode(codes, h.path, iids)


def _jaccards_read(txn: Any, h: Handles, iids: list[bytes], query: LongSet,
                   threshold: float) -> np.ndarray:
    """jaccard_pairs' values of a long set with stored docs' sets, each code read a batch
    of pieces at a time and compared as it comes (:mod:`.longsets`), the map's pages let
    go after each batch."""
    cur = txn.cursor(h.shingles)
    out = np.empty(len(iids), dtype=np.float64)
    for i, iid in enumerate(iids):
        try:
            batches = _batches(cur, iid)
            first = next(batches, None)
            if first is None:
                raise _missing(h.path, iid)
            got = _sets.jaccard_of_codes(query.code, _joined(h, itertools.chain([first], batches)),
                                         threshold)
        except lmdb.Error:
            _guard(h).explain(iid, _past(iid))
            raise
        except _Gap:
            got = None
        if got is None:
            raise _malformed(h.path, iid)
        out[i] = got
    return out


def _joined(h: Handles, batches: Iterable[list[bytes]]) -> Iterator[bytes]:
    """Each batch of pieces as one buffer, the map's pages read let go after each."""
    for batch in batches:
        yield b"".join(batch)
        h.tables.release()


def similar(
    h: Handles, txn: Any, fp: int, query: ShingleSets | LongSet, bands: np.ndarray,
    threshold: float, since: int | None = None,
) -> list[SimilarMatch]:
    """Stored docs sharing a band key with the query (its nbands keys) whose exact
    Jaccard >= threshold (stored since ``since``, ms, when given).

    query: the query's one set (a long one as its code). Best first (Jaccard descending,
    then insertion order); each match's ``jaccard`` is the exact value.
    """
    recs, iids = candidate_records(h, txn, bands, since)
    if not iids:
        return []
    live = [F.iid_bytes(i) for i in iids]
    if isinstance(query, LongSet):
        jac = _jaccards_read(txn, h, live, query, threshold)
    else:
        hashes, offsets = _read(txn, h, live)
        # one C call; its inputs are sound by construction (the checks of exact_jaccard
        # cost as much as the merges)
        jac = _sets.jaccard_pairs(query.hashes, query.offsets, hashes, offsets,
                                  np.zeros(len(live), dtype=np.int64),
                                  np.arange(len(live), dtype=np.int64), threshold)
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
    orphans = 0
    bad: list[str] = []
    batch_keys: list[bytes] = []
    batch_codes: list[bytearray] = []

    def settle() -> None:
        codes, keys = batch_codes, batch_keys
        while codes:
            off = np.zeros(len(codes) + 1, dtype=np.int64)
            np.cumsum([len(c) for c in codes], out=off[1:])
            _, _, at = _sets.decode_sets(b"".join(codes), off)
            if at < 0:
                break
            bad.append(keys[at].hex())
            codes, keys = codes[at + 1 :], keys[at + 1 :]
        batch_keys.clear()
        batch_codes.clear()

    seen = 0
    cur = txn.cursor(h.shingles)
    more = cur.first()
    while more:
        iid = bytes(cur.key()[:8])
        if len(cur.key()) != _KEY or iid not in wanted:
            orphans += 1
            more = cur.next()
            continue
        code = _code(cur, iid)
        seen += 1
        batch_keys.append(iid)
        batch_codes.append(code or bytearray())
        if len(batch_keys) >= 4096:
            settle()
        more = cur.set_range(_past(iid))
    settle()
    missing = len(want) - seen
    if missing:
        problems.append(f"{missing} docs have no shingle set (an exact store keeps one per doc)")
    if orphans:
        problems.append(f"the shingles database has {orphans} pieces of no doc (orphans)")
    for iid in bad[:_MAX_LISTED]:
        problems.append(f"the shingle set of doc {iid} is malformed")
    if len(bad) > _MAX_LISTED:
        problems.append(f"... and {len(bad) - _MAX_LISTED} more malformed shingle sets")
    return problems
