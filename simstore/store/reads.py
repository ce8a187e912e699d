"""Read paths of a store: answers of Hamming queries and similarity lookups.

Pure functions of the store's :class:`~simstore.store.schema.Handles` and a read
transaction; the results are the public :class:`Match` and :class:`SimilarMatch`.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import CorruptStoreError
from ..native import core as _core, single as _single
from ..text.minhash import jaccard_table
from .docsmap import Hit
from .env import Env
from .format import INT_ID, TEXT_ID, DocId, iid_bytes
from .schema import Handles


class Match(NamedTuple):
    """One stored document within the query distance."""

    doc_id: DocId
    fingerprint: int
    distance: int


class SimilarMatch(NamedTuple):
    """One stored document at or above the Jaccard threshold.

    jaccard: the estimate from the two sketches, or in an exact store queried
    with a text the exact Jaccard of the two shingle sets; distance: the
    Hamming distance of the two simhash fingerprints (for reference).
    """

    doc_id: DocId
    fingerprint: int
    distance: int
    jaccard: float


def recent(h: Handles, txn: Any, rows: list[Any], since: int) -> list[Any]:
    """Those (distance, internal id[, docs record]) rows whose doc was stored since
    ``since`` (ms), each with its record."""
    get, docs, stamp = txn.get, h.docs, h.codec.stored_at
    recs = [row[2] if len(row) > 2 else get(row[1], None, docs) for row in rows]
    if any(rec is None for rec in recs):
        raise CorruptStoreError(f"store {h.path!r}: a table names a doc the docs database lacks")
    return [(row[0], row[1], rec) for row, rec in zip(rows, recs, strict=True)
            if stamp(rec) >= since]


def matches(h: Handles, txn: Any, rows: list[Any]) -> list[Match]:
    """Matches of (distance, internal id[, docs record]) rows, by distance then insertion order.

    The hot loop of every query's answer: the id of a well-formed record is
    decoded inline (one slice, one decode) and the Match built as a plain
    tuple; anything else goes through the codec, which checks and explains
    (tests/store/test_format.py holds both to decode_id).
    Hits of the run tables already come in order, so the sort only confirms it.
    """
    rows.sort()
    get = txn.get
    docs = h.docs
    codec = h.codec
    version, start = codec.version, codec.id_start
    fp_at, fp_end = codec.fp_start, codec.fp_start + 8
    text_at = start + 1
    make = tuple.__new__
    out = []
    for row in rows:
        rec = row[2] if len(row) > 2 else get(row[1], None, docs)
        if rec is None:
            raise CorruptStoreError(
                f"store {h.path!r}: a table names a doc the docs database lacks"
            )
        tag = rec[start] if rec[0] == version and len(rec) > start else None
        if tag == TEXT_ID:
            try:
                doc_id: DocId = str(rec[text_at:], "utf-8", "surrogatepass")
            except UnicodeDecodeError:
                doc_id, _ = codec.match(rec)  # raises, saying why
            out.append(make(Match, (doc_id, int.from_bytes(rec[fp_at:fp_end], "big"), row[0])))
        elif tag == INT_ID:
            doc_id = int.from_bytes(rec[text_at:], "big", signed=True)
            out.append(make(Match, (doc_id, int.from_bytes(rec[fp_at:fp_end], "big"), row[0])))
        else:
            doc_id, fp = codec.match(rec)
            out.append(make(Match, (doc_id, fp, row[0])))
    return out


def similar(
    h: Handles, txn: Any, fp: int, sketch: np.ndarray, bands: np.ndarray, threshold: float,
    since: int | None = None, in_map: bool = False,
) -> list[SimilarMatch]:
    """Stored docs sharing a band key with the query (its nbands keys) whose estimated
    Jaccard >= threshold (stored since ``since``, ms, when given).

    Best first (Jaccard descending, then insertion order). The candidates' sketches are
    checked against the threshold in one C call; only the hits are decoded. in_map: the
    candidates' records may be read where LMDB maps them (:mod:`.docsmap`: a read
    transaction, or a write transaction that has not written the docs yet).
    """
    assert h.bands is not None
    codec = h.codec
    bits = 64 * codec.sketch_words
    maxd = max_distance(bits, threshold)
    found = None
    if in_map and h.docmap is not None:
        prober, recent = h.bands.parts(txn, bands)
        found = h.docmap.similar(txn, prober, recent, (bands, sketch), codec, maxd, since)
    if found is None:
        found = _hits_via_lmdb(h, txn, h.bands.candidates(txn, bands), sketch, maxd, since)
    if not found:
        return []
    table = jaccard_list(bits)
    make = tuple.__new__  # (a plain tuple's constructor: once per hit)
    if len(found) > 1:  # best first: Jaccard down, then insertion order (internal id)
        found.sort(key=lambda hit: (-table[hit[1]], hit[0]))
    return [make(SimilarMatch, (doc_id, got, (got ^ fp).bit_count(), table[d]))
            for _, d, doc_id, got in found]


def _hits_via_lmdb(h: Handles, txn: Any, iids: list[int], sketch: np.ndarray, maxd: int,
                   since: int | None) -> list[Hit]:
    """:meth:`DocsMap.similar <simstore.store.docsmap.DocsMap.similar>` with each record
    fetched through LMDB, among the internal ids iids."""
    codec = h.codec
    recs, at = live_records(h, txn, iids, since)
    if not recs:
        return []
    found = _single.sketch_hits(sketch, recs, _single.docs_layout(codec), maxd)
    if isinstance(found, int):
        codec.match(recs[found])  # the short record raises, saying why
        raise CorruptStoreError(f"store {h.path!r}: a docs record is too short")
    match = codec.match
    return [(iids[at[j]], d, *match(recs[j])) for j, d in zip(*found, strict=True)]


@functools.lru_cache(maxsize=64)
def max_distance(bits: int, threshold: float) -> int:
    """The largest sketch distance whose Jaccard estimate is >= threshold (the estimate
    falls as the distance grows): the threshold as the C check takes it."""
    table = jaccard_list(bits)
    d = 0
    while d + 1 < len(table) and table[d + 1] >= threshold:
        d += 1
    return d


def candidate_records(h: Handles, txn: Any, bands: np.ndarray, since: int | None = None
                      ) -> tuple[list[Any], list[int]]:
    """(docs records, internal ids) of the live docs sharing a band key with a doc's
    nbands keys (stored since ``since``, ms, when given)."""
    assert h.bands is not None
    iids = h.bands.candidates(txn, bands)
    recs, at = live_records(h, txn, iids, since)
    return recs, [iids[i] for i in at]


def live_records(h: Handles, txn: Any, iids: list[int], since: int | None = None
                 ) -> tuple[list[Any], list[int]]:
    """(docs records, their indices into iids) of those internal ids whose doc is stored
    (since ``since``, ms, when given), each fetched through LMDB."""
    get, docs, stamp = txn.get, h.docs, h.codec.stored_at
    recs: list[Any] = []
    at: list[int] = []
    for i, iid in enumerate(iids):
        rec = get(iid.to_bytes(8, "big"), None, docs)  # (db by place: keywords parse slowly)
        if rec is None:
            continue  # a removed doc's stale entry
        if since is not None and stamp(rec) < since:
            continue
        recs.append(rec)
        at.append(i)
    return recs, at


@functools.lru_cache(maxsize=8)
def jaccard_list(bits: int) -> list[float]:
    """jaccard_table as a list of floats: indexed once per candidate, no numpy scalar."""
    return jaccard_table(bits).tolist()


class Scanner:
    """Exact answers for k above the layout's k: popcount over every stored fingerprint.

    Keeps the fingerprints of the last committed snapshot it read (a scan per
    query would otherwise walk the docs table each time).
    """

    def __init__(self, env: Env) -> None:
        self._env = env
        self._cache: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None

    def all_fps(self, h: Handles, txn: Any) -> tuple[np.ndarray, np.ndarray]:
        """(internal ids, fingerprints) of every doc in internal order, cached per snapshot."""
        env = self._env
        tag = (env.epoch, txn.id())
        # Only committed snapshots may be cached: a write transaction's id is the
        # next commit's, so its (pre-write or aborted) view would pass for that snapshot.
        cacheable = txn is not env.wtxn and tag[1] <= env.last_txnid()
        if cacheable and self._cache is not None and self._cache[0] == tag:
            return self._cache[1], self._cache[2]
        cols = h.codec.walk(h.docs_guard.cursor(txn, h.docs).iternext(), with_ids=False)
        if cacheable:
            self._cache = (tag, cols.iids, cols.fps)
        return cols.iids, cols.fps

    def scan(self, h: Handles, txn: Any, q: int, k: int, since: int | None = None
             ) -> list[Match]:
        """Every doc within k of q (stored since ``since``, ms, when given), by a C scan
        of all stored fingerprints."""
        iids, fps = self.all_fps(h, txn)
        idx, dist = _core.hamming_within(q, fps, k)
        rows: list[Any] = [
            (d, iid_bytes(int(iids[i])))
            for i, d in zip(idx.tolist(), dist.tolist(), strict=True)
        ]
        if rows and since is not None:
            rows = recent(h, txn, rows, since)
        return matches(h, txn, rows)


def stored_before(h: Handles, txn: Any, before: int, start: bytes, limit: int
                  ) -> tuple[list[bytes], bytes | None]:
    """The encoded ids of docs stored before ``before`` (ms) among at most ``limit``
    docs records from internal id ``start`` (b"": the first) on, and where the next
    slice starts (None: the table's end)."""
    cur = h.docs_guard.cursor(txn, h.docs, start, limit)
    if not (cur.set_range(start) if start else cur.first()):
        return [], None
    a, b = h.codec.at_start, h.codec.id_start
    out = []
    for _ in range(limit):
        rec = cur.value()
        if int.from_bytes(rec[a:b], "big") < before:
            out.append(bytes(rec[b:]))
        if not cur.next():
            return out, None
    return out, bytes(cur.key())
