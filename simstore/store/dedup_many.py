"""``add_if_new`` for many documents in ONE write transaction: the greedy rule, decided in bulk.

:func:`add_if_new_many` returns, document by document, what calling
``add_if_new`` on each (id, item) in input order would return, and leaves the
store as those calls would: a document is stored iff nothing near it is
stored *at its turn* -- neither a document stored before the call nor an
earlier document of the same call that was stored -- and a stored id given
again is replaced, as ``add`` does. Instead of one search and ~20 puts per
document:

1. the stored candidates of every document at once: in similarity mode the
   band keys of the whole call looked up together (the run tables' exact
   lookup, whose stale entries of removed docs are skipped), each
   candidate's record read once and every (document, candidate) sketch
   distance in one C call; in Hamming mode the permutation tables' search per
   document (or, for k above the layout's, one walk of the docs table and a C
   popcount per document);
2. the greedy pass in input order over those answers plus the call's own
   earlier kept documents (band keys shared within the call and a C sketch
   distance, or the batch pair search :func:`simstore.find_all`),
   tracking which entries are live;
3. kept documents with new ids written together by the bulk path
   (:func:`simstore.store.writes.add_many`: the records, internal ids and table
   rows the single calls write, in the same order); one whose id is already
   stored or kept is written by ``add`` at its turn, as the single calls do.

Every function here only touches the transaction it is given, so
:meth:`simstore.store.env.environment.Env.write` may rerun it after growing the map.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._distinct import distinct
from ..exceptions import CorruptStoreError
from ..native import core as _core
from ..native.core import MAX_K
from ..search.hamming import find_all
from ..text.jaccard import ShingleSets, exact_jaccard
from ..text.minhash import band_keys32, jaccard_table
from . import format as F, shingles as _shingles
from .reads import Match, SimilarMatch
from .runs import band_keys
from .schema import Handles
from .writes import Extra, add, add_many, extra_of, next_iid


class Rule(NamedTuple):
    """Near means estimated Jaccard >= threshold (k None) or Hamming distance <= k, to a
    doc stored since ``since`` (ms; None: ever); kept docs are stored at ``at`` (ms;
    None: now)."""

    k: int | None
    threshold: float | None
    since: int | None = None
    at: int | None = None


class Docs(NamedTuple):
    """A call's documents by position: encoded ids and their columns (sketches, bands
    None unless the store keeps similarity signatures; sets, their shingle sets, None
    unless it is an exact store: then Jaccard is the exact one, never the estimate)."""

    encs: list[bytes]
    fps: np.ndarray
    sketches: np.ndarray | None
    bands: np.ndarray | None
    sets: ShingleSets | None = None


class Recrawl(NamedTuple):
    """One document's answer from :meth:`SimStore.recrawl_many`: ``found``, what
    ``add_if_new`` returns ([] = stored now); ``known``, whether its id was stored before
    the call; ``near_own`` (asked only with ``since``), whether the version stored under
    its id before the call, however old, is near it."""

    found: list[Any]
    known: bool
    near_own: bool


# Stored docs near one document: (score, internal id, docs record) -- score is the
# Jaccard estimate or the Hamming distance.
Found = list[tuple[Any, int, bytes]]


def add_if_new_many(txn: Any, h: Handles, docs: Docs, rule: Rule) -> list[list[Any]]:
    """Per document, the matches ``add_if_new`` would return ([] = stored); see the module doc."""
    if not docs.encs:
        return []
    keys = None
    if rule.k is None:
        assert rule.threshold is not None and docs.bands is not None
        keys = _CallKeys(docs.bands)
        if docs.sets is not None:
            stored = _stored_exact(txn, h, docs, keys, rule.threshold)
        else:
            stored = _stored_similar(txn, h, docs, keys, rule.threshold)
    else:
        stored = _stored_hamming(txn, h, docs.fps, rule.k)
    if rule.since is not None:
        stamp, since = h.codec.stored_at, rule.since
        stored = {j: kept for j, found in stored.items()
                  if (kept := [f for f in found if stamp(f[2]) >= since])}
    return _Greedy(txn, h, docs, rule, keys).run(stored)


# --------------------------------------------------------------------------- stored candidates


class _CallKeys:
    """The band-table keys of a call's documents (uint64: band << 32 | low 32 key bits).

    ``keys32``: the (n, bands) stored 32-bit keys; ``uniq``: the distinct keys,
    sorted; ``inverse``: each (doc, band) cell's index in uniq (doc-major);
    ``shared[j]``: doc j's keys that another doc of the call holds too (only docs
    with some).
    """

    def __init__(self, bands: np.ndarray) -> None:
        self.keys32 = keys32 = band_keys32(bands)
        self.nbands = keys32.shape[1]
        packed = band_keys(keys32).ravel()
        self.uniq, inverse, counts = np.unique(packed, return_inverse=True, return_counts=True)
        self.inverse = inverse.ravel()
        cells = np.flatnonzero(counts[self.inverse] > 1)
        self.shared: dict[int, list[int]] = {}
        for cell, key in zip(cells.tolist(), packed[cells].tolist(), strict=True):
            self.shared.setdefault(cell // self.nbands, []).append(key)


def _records(txn: Any, h: Handles, iids: list[bytes], what: str,
             stale_ok: bool = False) -> list[bytes | None]:
    """The docs records of internal ids. A missing one is CorruptStoreError, or None
    with ``stale_ok`` (a removed doc's band entries stay until a merge of their level)."""
    get, docs = txn.get, h.docs
    recs = []
    for iid in iids:
        rec = get(iid, db=docs)
        if rec is None and not stale_ok:
            raise CorruptStoreError(f"store {h.path!r}: {what} names a doc the docs database lacks")
        recs.append(rec)
    return recs


def _band_pairs(txn: Any, h: Handles, keys: _CallKeys) -> tuple[np.ndarray, np.ndarray]:
    """(document, internal id) of every stored doc sharing a band key with a document."""
    assert h.bands is not None
    return h.bands.candidate_pairs(txn, keys.keys32)


class _Cands(NamedTuple):
    """The stored candidates of a call: distinct internal ids (uint64) with their docs
    records (None: a removed doc's stale entry), and the (document, candidate index)
    pairs that share a band key, stale ones dropped."""

    iids: np.ndarray
    recs: list[bytes | None]
    pdoc: np.ndarray
    pcand: np.ndarray


def _candidates(txn: Any, h: Handles, keys: _CallKeys) -> _Cands | None:
    """Every stored doc sharing a band key with a document, each record read once; None
    when there is none."""
    assert h.bands is not None
    doc, iids = _band_pairs(txn, h, keys)
    if not len(doc):
        return None
    cand, cidx = np.unique(iids, return_inverse=True)
    code = distinct(doc.astype(np.uint64) * np.uint64(len(cand)) + cidx.ravel())
    pdoc = (code // np.uint64(len(cand))).astype(np.int64)
    pcand = (code % np.uint64(len(cand))).astype(np.int64)
    got = _records(txn, h, F.iid_rows(cand).tolist(), "a band table", stale_ok=True)
    if any(r is None for r in got):  # drop removed docs' stale entries
        live = np.array([r is not None for r in got])
        keep = live[pcand]
        pdoc, pcand = pdoc[keep], pcand[keep]
        if not len(pdoc):
            return None
    return _Cands(cand, got, pdoc, pcand)


def _found(c: _Cands, score: np.ndarray, t: float) -> dict[int, Found]:
    """The candidate pairs scoring >= t (score: one per pair), by document."""
    ok = np.flatnonzero(score >= t)
    out: dict[int, Found] = {}
    cand_ints = c.iids.tolist()
    for d, i, e in zip(c.pdoc[ok].tolist(), c.pcand[ok].tolist(), score[ok].tolist(),
                       strict=True):
        out.setdefault(d, []).append((e, cand_ints[i], c.recs[i]))
    return out


def _stored_similar(txn: Any, h: Handles, docs: Docs, keys: _CallKeys,
                    t: float) -> dict[int, Found]:
    """Stored docs sharing a band key with a document and an estimate >= t, by document."""
    assert docs.sketches is not None
    c = _candidates(txn, h, keys)
    if c is None:
        return {}
    codec = h.codec
    words = codec.sketch_words
    blank = bytes(8 * words)
    stored = np.frombuffer(b"".join(codec.sketch(r) if r else blank for r in c.recs),
                           dtype="<u8")
    stored = stored.astype(np.uint64).reshape(len(c.recs), words)
    dist = _core.sketch_distance_pairwise(np.ascontiguousarray(docs.sketches[c.pdoc]),
                                          np.ascontiguousarray(stored[c.pcand]))
    return _found(c, jaccard_table(64 * words)[dist], t)


def _stored_exact(txn: Any, h: Handles, docs: Docs, keys: _CallKeys,
                  t: float) -> dict[int, Found]:
    """Stored docs sharing a band key with a document and an exact Jaccard >= t, by
    document (an exact store: each candidate's set read once, every pair merged in C)."""
    assert docs.sets is not None
    c = _candidates(txn, h, keys)
    if c is None:
        return {}
    live = np.array([r is not None for r in c.recs], dtype=bool)
    at = np.cumsum(live) - 1  # a live candidate's row among the live ones
    rows = F.iid_rows(c.iids[live]).tolist()
    stored = _shingles.read(txn, h, rows)
    return _found(c, exact_jaccard(docs.sets, c.pdoc, at[c.pcand], stored, t), t)


def _stored_hamming(txn: Any, h: Handles, fps: np.ndarray, k: int) -> dict[int, Found]:
    """Stored docs within Hamming distance k of each document (tables, or a scan above them)."""
    qs = fps.tolist()
    rows: list[list[tuple[Any, ...]]]  # (distance, internal id[, docs record]) per document
    if k <= h.layout.max_k:
        search = h.tables.search
        rows = [search(txn, q, k) for q in qs]
    else:
        cols = h.codec.walk(h.docs_guard.cursor(txn, h.docs).iternext(), with_ids=False)
        all_fps, all_keys = cols.fps, cols.keys
        rows = []
        for q in qs:
            idx, dist = _core.hamming_within(q, all_fps, k)
            rows.append([(d, bytes(all_keys[i]))
                         for i, d in zip(idx.tolist(), dist.tolist(), strict=True)])
    have = {bytes(r[1]): r[2] for rs in rows for r in rs if len(r) > 2}
    wanted = [iid for iid in dict.fromkeys(bytes(r[1]) for rs in rows for r in rs)
              if iid not in have]
    have.update(zip(wanted, _records(txn, h, wanted, "a permutation table"), strict=True))
    return {j: [(r[0], int.from_bytes(r[1], "big"), have[bytes(r[1])]) for r in rs]
            for j, rs in enumerate(rows) if rs}


# --------------------------------------------------------------------------- the greedy pass


class _Greedy:
    """The documents of one call in input order against the live entries (see the module doc).

    An entry is a stored doc (its internal id) or a kept document of the call
    (its position). Kept documents with new ids wait in ``pending`` and are
    written together by ``add_many``; one whose id is already an entry is
    written at once by ``add`` (after the pending ones), as the single calls
    would, and its internal id looked up again by its id, so the pass
    follows whatever internal id ``add`` gives a changed doc.
    """

    def __init__(self, txn: Any, h: Handles, docs: Docs, rule: Rule,
                 keys: _CallKeys | None) -> None:
        self.txn, self.h, self.docs, self.rule, self.keys = txn, h, docs, rule, keys
        n = len(docs.encs)
        found = h.idx.find_many(txn, docs.encs)
        self.stored_iid = {enc: int.from_bytes(iid, "big") for enc, (iid, _) in found.items()}
        self.next_new = next_iid(txn, h)
        self.pending: list[int] = []  # kept positions with new ids, not written yet
        self.dead: set[int] = set()  # internal ids of stored docs replaced by the call
        self.alive = [False] * n  # kept and not replaced since
        self.iid = [0] * n  # internal id of each kept document
        self.holder: dict[bytes, int] = {}  # encoded id -> position of its live kept document
        self.pairs = None if rule.k is None else _CallPairs(docs.fps, rule.k)
        self.by_key: dict[int, list[int]] = {}  # shared band key -> kept positions
        if rule.k is None and docs.sets is None:
            assert docs.sketches is not None
            self.table = jaccard_table(docs.sketches.shape[1] * 64)

    def run(self, stored: dict[int, Found]) -> list[list[Any]]:
        """The matches of every document ([] = kept), the kept ones written."""
        out: list[list[Any]] = []
        match = self.h.codec.match
        encs = self.docs.encs
        fps = self.docs.fps.tolist()
        dead, iid_of = self.dead, self.iid
        for j in range(len(encs)):
            rows: list[tuple[Any, int, Any]] = []
            q = fps[j]
            for score, iid, rec in stored.get(j, ()):
                if iid not in dead:
                    doc_id, got = match(rec)
                    rows.append(self._row(q, score, iid, doc_id, got))
            for i, score in self._earlier(j):
                rows.append(self._row(q, score, iid_of[i], F.decode_id(encs[i]), fps[i]))
            if rows:
                rows.sort(key=lambda r: (r[0], r[1]))
                out.append([r[2] for r in rows])
            else:
                self._keep(j)
                out.append([])
        self._flush()
        return out

    def _row(self, q: int, score: Any, iid: int, doc_id: Any, got: int) -> tuple[Any, int, Any]:
        """(sort key, internal id, match): nearest first, then insertion order."""
        if self.rule.k is None:
            est = float(score)
            return (-est, iid, SimilarMatch(doc_id, got, (got ^ q).bit_count(), est))
        return (score, iid, Match(doc_id, got, int(score)))

    def _earlier(self, j: int) -> list[tuple[int, Any]]:
        """(position, score) of the live kept documents of the call near document j."""
        alive = self.alive
        if self.pairs is not None:
            return [(i, d) for i, d in self.pairs(j) if alive[i]]
        assert self.keys is not None
        shared = self.keys.shared.get(j)
        if not shared:
            return []
        by_key = self.by_key
        cands = list(dict.fromkeys(i for key in shared for i in by_key.get(key, ()) if alive[i]))
        if not cands:
            return []
        t = self.rule.threshold
        assert t is not None
        sets = self.docs.sets
        if sets is not None:
            jac = exact_jaccard(sets, np.full(len(cands), j, dtype=np.int64),
                                np.asarray(cands, dtype=np.int64), threshold=t).tolist()
            return [(i, e) for i, e in zip(cands, jac, strict=True) if e >= t]
        sk = self.docs.sketches
        assert sk is not None
        dist = _core.sketch_distance_one(np.ascontiguousarray(sk[j]),
                                         np.ascontiguousarray(sk[cands]))
        est = self.table[dist].tolist()
        return [(i, e) for i, e in zip(cands, est, strict=True) if e >= t]

    def _keep(self, j: int) -> None:
        key = self.docs.encs[j]
        prev = self.holder.get(key)
        if prev is None and key not in self.stored_iid:
            self.iid[j] = self.next_new + len(self.pending)  # add_many's order
            self.pending.append(j)
        else:
            self._flush()
            docs = self.docs
            extra: Extra = None
            if docs.sketches is not None and docs.bands is not None:
                part = extra_of(docs.sketches[j], docs.bands[j])
                extra = part if docs.sets is None else \
                    (*part, _shingles.encode(docs.sets.take([j]))[0])
            add(self.txn, self.h, docs.encs[j], int(docs.fps[j]), extra, self.rule.at)
            if prev is not None:
                self.alive[prev] = False
            else:
                self.dead.add(self.stored_iid[key])
            now = self.h.idx.find(self.txn, docs.encs[j])
            assert now is not None  # add() just wrote it
            self.iid[j] = int.from_bytes(now[0], "big")
            self.next_new = next_iid(self.txn, self.h)
        self.alive[j] = True
        self.holder[key] = j
        if self.keys is not None:
            for band_key in self.keys.shared.get(j, ()):
                self.by_key.setdefault(band_key, []).append(j)

    def _flush(self) -> None:
        """Write the pending kept documents (new ids, in input order) by the bulk path."""
        if not self.pending:
            return
        p, docs = self.pending, self.docs
        sk, bands = docs.sketches, docs.bands
        add_many(self.txn, self.h, [docs.encs[i] for i in p], docs.fps[p],
                 None if sk is None else sk[p], None if bands is None else bands[p],
                 None if docs.sets is None else docs.sets.take(p), self.rule.at)
        self.pending = []
        self.next_new = next_iid(self.txn, self.h)


class _CallPairs:
    """The earlier documents of the call within k of each one: (position, distance)."""

    def __init__(self, fps: np.ndarray, k: int) -> None:
        self.fps, self.k = np.ascontiguousarray(fps, dtype=np.uint64), k
        self.by_j: dict[int, list[tuple[int, int]]] | None = None
        if k <= MAX_K:  # find_all's largest radius; above it each doc is popcounted
            found = find_all(self.fps, k, workers=1)
            self.by_j = {}
            for i, j, d in zip(found.i.tolist(), found.j.tolist(), found.distance.tolist(),
                               strict=True):
                self.by_j.setdefault(j, []).append((i, d))

    def __call__(self, j: int) -> list[tuple[int, int]]:
        if self.by_j is not None:
            return self.by_j.get(j, [])
        idx, dist = _core.hamming_within(int(self.fps[j]), self.fps[:j], self.k)
        return list(zip(idx.tolist(), dist.tolist(), strict=True))
