"""The on-disk format, written down in one place: versions, ids, records, metadata.

A store is one LMDB environment (a directory) with named databases:

- ``meta``: JSON values: ``format`` ({"format": "simstore", "version": 1}),
  ``layout`` (:meth:`Layout.to_dict`), ``fingerprint``
  (:meth:`FingerprintConfig.to_dict`).
- ``docs``: internal id (8-byte big-endian, assigned in insertion order) ->
  record: 1 format byte (:data:`RECORD_VERSION`), the fingerprint (8 bytes
  big-endian), the encoded doc id. Readers dispatch on the first byte.
- ``ids`` (formats 1-12): id key (see :func:`id_key`, or :func:`ordered_id_key` where
  meta ``idkeys`` says int ids key by value) -> internal id; from format 13 the ids are
  the run database ``rids`` instead (:func:`id_hash` -> internal id). An encoded id is
  a type tag (``s`` + UTF-8 for str, ``i`` + signed big-endian bytes for int).
- ``t00``, ``t01``, ...: one table per permutation of :mod:`simstore.layout`
  (see :mod:`simstore.store.legacy.tables`).

Everything here is pure: bytes in, values out, no LMDB calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Union

import numpy as np

from ..exceptions import CorruptStoreError, InvalidDocIdError, SimstoreTypeError
from ..native.core import murmur3_packed
from .idkeys import (  # noqa: F401 - the ids' keys, part of the format, re-exported
    ID_HASH_SEED,
    MAX_KEY_BYTES,
    ORDERED_KEY,
    collision_message,
    id_hash,
    id_hashes,
    id_key,
    ordered_id_key,
    ordered_int_keys,
)

DocId = Union[str, int]  # noqa: UP007 - a runtime alias, kept valid on Python 3.10

FORMAT = "simstore"
# 1: Hamming stores, 2: similarity stores (docs records version 2), both with
# dupsort permutation tables; 3: either, with run tables (simstore.store.runs);
# 4: run tables whose runs carry a directory (read in place without a search);
# 5: those in any number of levels merged a slice per write, removed docs' entries
# marked by tombstones (simstore.store.runs). A write brings a 3-4 store to 5.
# 6: a format-5 store that keeps each doc's shingle set (exact=True:
# simstore.store.shingles), numbered apart so that a simstore without sets refuses to
# open it rather than add docs without their sets.
# 7 and 8: formats 5 and 6 whose levels each have an index record of their runs' first
# keys (simstore.store.runfile), so a reader opens a level by one record and fetches a
# run when a probe first needs it; a simstore that does not keep the index refuses to
# write them. A write brings 3-5 to 7 and 6 to 8.
# 9 and 10: formats 7 and 8 whose merge under way is visible: its target level is in the
# state from the start, and each slice deletes the sources' runs it has merged, so the
# pages of a merge's sources are freed (and reused) as it goes, not at its end
# (simstore.store.merges); a simstore that hides the target would lose those entries.
# A write brings 3-5 and 7 to 9, 6 and 8 to 10.
# 11 and 12: formats 9 and 10 whose multi-page records are paged: a level's index is
# chunks that each fit in a leaf page (simstore.store.runindex), and so is a merge's
# list of removed docs, and tombstones are 64-byte blocks of 512 ids (both in
# simstore.store.removed): records of many pages rewritten often took runs of free pages
# that later ones did not fit, so the file grew under churn. A store created or rebuilt
# from 11 on keys its int ids by value (meta "idkeys", ordered_id_key); older stores keep
# their keys until a rebuild.
# A write brings 3-10 to 11 (12 when exact).
# 13 and 14: formats 11 and 12 whose ids are a run database too (``rids``: keys the
# 64-bit hash of each doc's encoded id, :func:`id_hash`, values its internal id), derived
# from the docs records and merged with the tables; no ``ids`` B-tree. A B-tree of random
# keys (URLs) rewrote some 2,000 scattered pages a commit under churn and its file grew
# 76 % over 1M adds with removes. Stores created or rebuilt from 13 on; 11 and 12 keep
# their ``ids`` B-tree until a rebuild.
# 15 and 16: formats 13 and 14 whose merges may keep their list of removed docs as
# tombstone blocks (``mgb`` chunks, simstore.store.removed) where those take fewer bytes
# than the ids: 13 and 14 read no such chunk. Stores created or rebuilt from 15 on; 13
# and 14 keep writing the ids until a rebuild.
# 17 and 18: formats 15 and 16 whose merges also leave out the entries of docs removed
# while they run, wherever they have yet to pass (their tombstones kept, counted, for
# the next merge), so a level may hold fewer stale entries than the state counts: the
# verify of 15 and 16 counts them exactly. Stores created or rebuilt from 17 on; 15 and
# 16 keep their merges as they were until a rebuild.
FORMAT_VERSION = 17
EXACT_FORMAT_VERSION = 18
TREE_FORMAT_VERSION, TREE_EXACT_FORMAT_VERSION = 11, 12  # what a write upgrades 3-10 to
FORMAT_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)
RUNS_FROM = 3  # the first format version with run tables
RUN_DIRS_FROM = 4  # the first whose runs carry directories
RUN_INDEX_FROM = 7  # the first whose levels have index records
VISIBLE_MERGE_FROM = 9  # the first whose merge target is a level of the state
PAGED_FROM = 11  # the first whose level indexes and merge records are paged
RUN_IDS_FROM = 13  # the first whose ids are a run database
GONE_BLOCKS_FROM = 15  # the first whose merges may list removed docs as blocks
LATE_GONE_FROM = 17  # the first whose merges leave out docs removed while they run
MAX_DOC_ID_BYTES = 1 << 16
_FP_END = 9  # a record is [version byte][fingerprint: bytes 1..8][encoded id]
TEXT_ID = ord("s")  # the first byte of an encoded str doc id
INT_ID = ord("i")  # the first byte of an encoded int doc id
_INT64_MIN = -(1 << 63)


# --- doc ids ---------------------------------------------------------------


def encode_id(doc_id: Any) -> bytes:
    """Type-tagged bytes of a doc id; refuses what a store cannot give back exactly."""
    if isinstance(doc_id, str):
        if not doc_id:
            raise InvalidDocIdError("a doc id must be a non-empty str or an int (got '')")
        try:
            payload = doc_id.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidDocIdError(
                f"a str doc id must be valid Unicode text; {doc_id!r:.80} holds a lone "
                f"surrogate at position {exc.start} (it could not be written as UTF-8)"
            ) from None
        tag = b"s"
    elif isinstance(doc_id, (int, np.integer)) and not isinstance(doc_id, (bool, np.bool_)):
        x = int(doc_id)
        nbytes = (x.bit_length() + 8) // 8
        if nbytes > MAX_DOC_ID_BYTES:
            raise InvalidDocIdError(
                f"an int doc id must fit in {MAX_DOC_ID_BYTES} bytes (got {nbytes} bytes)"
            )
        payload = x.to_bytes(nbytes, "big", signed=True)
        tag = b"i"
    else:
        raise SimstoreTypeError(
            f"a doc id must be a str or an int (got {type(doc_id).__name__})"
        )
    if len(payload) > MAX_DOC_ID_BYTES:
        raise InvalidDocIdError(
            f"a doc id must be at most {MAX_DOC_ID_BYTES} bytes as UTF-8 (got {len(payload)})"
        )
    return tag + payload


def decode_id(enc: bytes) -> DocId:
    """Inverse of :func:`encode_id`."""
    tag, payload = enc[:1], enc[1:]
    if tag == b"s":
        try:
            return bytes(payload).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise CorruptStoreError(
                f"a docs record holds an id that is not UTF-8 ({exc.reason} at byte "
                f"{exc.start}): the store looks damaged; run verify()"
            ) from None
    if tag == b"i":
        return int.from_bytes(payload, "big", signed=True)
    raise CorruptStoreError(f"a docs record holds an id with unknown type tag {bytes(tag)!r}")


def doc_ids_list(doc_ids: Any) -> list[Any]:
    """A list of doc ids from an iterable (refusing a lone str or bytes)."""
    if isinstance(doc_ids, (str, bytes)) or not isinstance(doc_ids, Iterable):
        raise SimstoreTypeError(
            f"'doc_ids' must be an iterable of str or int ids (got {type(doc_ids).__name__})"
        )
    return doc_ids.tolist() if isinstance(doc_ids, np.ndarray) else list(doc_ids)


# --- int ids with numpy (bulk loads) ---------------------------------------


def int_id_array(doc_ids: Any) -> np.ndarray | None:
    """int64 array of doc ids when all are ints (range, int array, list of ints), else None."""
    if isinstance(doc_ids, range):
        if not doc_ids:
            return np.empty(0, dtype=np.int64)
        lo, hi = min(doc_ids[0], doc_ids[-1]), max(doc_ids[0], doc_ids[-1])
        if lo <= _INT64_MIN or hi >= 1 << 63:
            return None
        return np.arange(doc_ids.start, doc_ids.stop, doc_ids.step, dtype=np.int64)
    if isinstance(doc_ids, np.ndarray):
        if doc_ids.ndim != 1 or doc_ids.dtype.kind not in "iu":
            return None
        if doc_ids.dtype.kind == "u" and len(doc_ids) and doc_ids.max() >= 1 << 63:
            return None
        arr = doc_ids.astype(np.int64)
    elif isinstance(doc_ids, (list, tuple)) and all(type(x) is int for x in doc_ids):
        try:
            arr = np.array(doc_ids, dtype=np.int64)
        except OverflowError:
            return None
    else:
        return None
    if len(arr) and arr.min() == _INT64_MIN:
        return None
    return arr


def _int_id_lengths(xs: np.ndarray) -> np.ndarray:
    """Payload bytes of each int id's encoding: (bit_length(|x|) + 8) // 8, as encode_id."""
    mag = np.abs(xs).view(np.uint64)
    nbytes = np.ones(len(xs), dtype=np.int64)
    for size in range(1, 8):
        nbytes += mag >= np.uint64(1 << (8 * size - 1))
    return nbytes


def int_encodings(xs: np.ndarray, prefix: np.ndarray | None = None) -> list[bytes]:
    """encode_id of each int64 id, each after its row of prefix bytes if given."""
    nbytes = _int_id_lengths(xs)
    be = xs.astype(">i8").view(np.uint8).reshape(len(xs), 8)
    width = 0 if prefix is None else prefix.shape[1]
    sizes = np.unique(nbytes).tolist()
    out = None if len(sizes) == 1 else np.empty(len(xs), dtype=object)
    for size in sizes:
        sel = np.flatnonzero(nbytes == size) if out is not None else slice(None)
        rows = np.empty((len(be[sel]), width + 1 + size), dtype=np.uint8)
        if prefix is not None:
            rows[:, :width] = prefix[sel]
        rows[:, width] = ord("i")
        rows[:, width + 1 :] = be[sel, 8 - size :]
        encoded = rows.view(f"V{width + 1 + size}").ravel().tolist()
        if out is None:
            return encoded
        out[sel] = encoded
    return [] if out is None else out.tolist()


def int_id_hashes(xs: np.ndarray) -> np.ndarray:
    """:func:`id_hash` of each int64 id's encoding (uint64, in order), the encodings packed
    a length at a time, never made into bytes objects (10M ids: 0.3 s, not 3)."""
    nbytes = _int_id_lengths(xs)
    be = xs.astype(">i8").view(np.uint8).reshape(len(xs), 8)
    out = np.empty(len(xs), dtype=np.uint64)
    for size in np.unique(nbytes).tolist():
        sel = np.flatnonzero(nbytes == size)
        rows = np.empty((len(sel), 1 + size), dtype=np.uint8)
        rows[:, 0] = ord("i")
        rows[:, 1:] = be[sel, 8 - size :]
        ends = np.arange(1, len(sel) + 1, dtype=np.uint64) * np.uint64(1 + size)
        out[sel] = murmur3_packed(rows.tobytes(), ends, ID_HASH_SEED)
    return out


def int_id_order(xs: np.ndarray) -> np.ndarray:
    """Positions of int ids sorted as LMDB sorts their encodings (bytes, shorter first)."""
    nbytes = _int_id_lengths(xs)
    left = xs.view(np.uint64) << ((8 - nbytes) * 8).astype(np.uint64)
    return np.lexsort((nbytes, left))


# --- internal ids and docs records -------------------------------------------


def iid_bytes(n: int) -> bytes:
    """The 8-byte key of internal id n."""
    return n.to_bytes(8, "big")


def iid_rows(iids: np.ndarray) -> np.ndarray:
    """Internal ids (uint64) as an array of 8-byte keys (numpy void rows)."""
    return iids.astype(">u8").view("V8")


class DocsColumns(NamedTuple):
    """Columns of the docs table, in internal-id order (see :meth:`RecordCodec.walk`).

    sketches: (n, sketch words) uint64 and bands: (n, bands) uint32, empty
    (n, 0) for version-1 records.
    """

    keys: list[bytes]
    iids: np.ndarray
    fps: np.ndarray
    encs: list[bytes] | None
    sketches: np.ndarray
    bands: np.ndarray


class RecordCodec:
    """The docs records of one store, THE record layout.

    Version 1 (Hamming stores): ``[1][fingerprint: 8 bytes BE][encoded id]``.
    Version 2 (similarity stores): ``[2][fingerprint: 8 bytes BE][sketch:
    words x 8 bytes LE][band keys: bands x 4 bytes BE][encoded id]``; the sizes
    come from the store's recorded config, so every record of a store has one
    version.
    """

    def __init__(self, sketch_words: int = 0, nbands: int = 0) -> None:
        self.sketch_words = sketch_words
        self.nbands = nbands
        self.version = 2 if sketch_words else 1
        self.tag = bytes((self.version,))
        self.sketch_start = _FP_END  # a record's sketch is [sketch_start:sketch_end]
        self.sketch_end = _FP_END + 8 * sketch_words
        self.id_start = self.sketch_end + 4 * nbands

    def record(self, fp: int, enc: bytes, sketch: bytes = b"", bands: bytes = b"") -> bytes:
        """The record of one doc (sketch: LE uint64 words, bands: BE uint32 keys)."""
        if len(sketch) + len(bands) != self.id_start - _FP_END:
            raise AssertionError("a record's sketch or band keys do not fit the store")
        return self.tag + fp.to_bytes(8, "big") + sketch + bands + enc

    def prefixes(
        self, fps: np.ndarray, sketches: np.ndarray | None = None, bands: np.ndarray | None = None
    ) -> np.ndarray:
        """The fixed first bytes (all but the id) of many records, one uint8 row each."""
        n = len(fps)
        prefix = np.empty((n, self.id_start), dtype=np.uint8)
        prefix[:, 0] = self.version
        prefix[:, 1:_FP_END] = fps.astype(">u8").view(np.uint8).reshape(n, 8)
        if self.sketch_words:
            assert sketches is not None and bands is not None
            prefix[:, _FP_END : self.sketch_end] = (
                sketches.astype("<u8").view(np.uint8).reshape(n, -1)
            )
            prefix[:, self.sketch_end :] = (
                bands.astype(">u4").view(np.uint8).reshape(n, -1)
            )
        return prefix

    def _check(self, rec: bytes | None) -> None:
        if rec is None:  # the ids table names a doc the docs table does not hold
            raise CorruptStoreError(
                "a doc id's internal id has no docs record: the store is damaged "
                "(verify() says more; restore data.mdb from a copy)"
            )
        if not rec or rec[0] != self.version or len(rec) <= self.id_start:
            raise CorruptStoreError(
                f"a docs record has format {bytes(rec[:1])!r} and {len(rec)} bytes; this "
                f"store keeps format {self.version} records of more than {self.id_start} bytes"
            )

    def parse(self, rec: bytes | None) -> tuple[int, bytes]:
        """(fingerprint, encoded id) of a record (None, a missing one: CorruptStoreError)."""
        self._check(rec)
        return int.from_bytes(rec[1:_FP_END], "big"), bytes(rec[self.id_start :])

    def match(self, rec: bytes) -> tuple[DocId, int]:
        """(doc id, fingerprint) of a record: the hot path of a query's answer."""
        if rec[:1] != self.tag or len(rec) <= self.id_start:
            self._check(rec)  # raises with the reason
        return decode_id(rec[self.id_start :]), int.from_bytes(rec[1:_FP_END], "big")

    def sketch(self, rec: bytes) -> bytes:
        """The sketch bytes (LE uint64 words) of a version-2 record."""
        return bytes(rec[_FP_END : self.sketch_end])

    def band_keys(self, rec: bytes) -> list[bytes]:
        """The 4-byte band keys of a version-2 record, band by band."""
        end = self.sketch_end
        return [bytes(rec[end + 4 * b : end + 4 * b + 4]) for b in range(self.nbands)]

    def walk(
        self,
        items: Iterator[tuple[bytes, bytes]],
        *,
        with_ids: bool = True,
        with_sketches: bool = False,
        with_bands: bool = False,
        problems: list[str] | None = None,
    ) -> DocsColumns:
        """Columns of every record from (key, record) pairs: THE docs-table walker.

        with_sketches: sketches and band keys; with_bands: band keys only.

        A malformed record is reported into ``problems`` and skipped when
        given; otherwise it raises CorruptStoreError.
        """
        keys: list[bytes] = []
        fpb: list[bytes] = []
        extra: list[bytes] = []
        encs: list[bytes] | None = [] if with_ids else None
        start, id_start, version = _FP_END, self.id_start, self.version
        band_start = _FP_END + 8 * self.sketch_words
        for key, val in items:
            if len(key) != 8 or len(val) <= id_start or val[0] != version:
                msg = (
                    f"docs record {bytes(key)!r} is malformed (key {len(key)} bytes, "
                    f"value {len(val)} bytes, format byte {bytes(val[:1])!r})"
                )
                if problems is None:
                    raise CorruptStoreError(msg)
                problems.append(msg)
                continue
            keys.append(key)
            fpb.append(val[1:start])
            if with_sketches:
                extra.append(val[start:id_start])
            elif with_bands:
                extra.append(val[band_start:id_start])
            if encs is not None:
                encs.append(bytes(val[id_start:]))
        n = len(keys)
        iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        fps = np.frombuffer(b"".join(fpb), dtype=">u8").astype(np.uint64)
        if with_sketches and self.sketch_words:
            rows = np.frombuffer(b"".join(extra), dtype=np.uint8).reshape(n, id_start - start)
            split = 8 * self.sketch_words
            sketches = np.ascontiguousarray(rows[:, :split]).view("<u8").astype(np.uint64)
            bands = np.ascontiguousarray(rows[:, split:]).view(">u4").astype(np.uint32)
        elif with_bands and self.sketch_words:
            sketches = np.empty((n, 0), dtype=np.uint64)
            raw = np.frombuffer(b"".join(extra), dtype=np.uint8).reshape(n, id_start - band_start)
            bands = raw.view(">u4").astype(np.uint32)
        else:
            sketches = np.empty((n, 0), dtype=np.uint64)
            bands = np.empty((n, 0), dtype=np.uint32)
        return DocsColumns(keys, iids, fps, encs, sketches, bands)


# --- metadata ------------------------------------------------------------------


def to_json(value: Any) -> bytes:
    """Canonical JSON bytes of a metadata value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def from_json(raw: bytes | None, name: str) -> dict[str, Any]:
    """A metadata JSON object, or CorruptStoreError saying what is wrong with it."""
    if raw is None:
        raise CorruptStoreError(f"the store's metadata lacks {name!r}")
    try:
        value = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptStoreError(f"the store's metadata {name!r} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptStoreError(f"the store's metadata {name!r} is not a JSON object")
    return value


def format_meta(exact: bool = False, run_ids: bool | None = None) -> dict[str, Any]:
    """The ``format`` metadata this simstore writes for a new (or rebuilt) store; with
    run_ids False, for a store that keeps its ``ids`` B-tree (one written in place since
    11)."""
    if run_ids is None:
        run_ids = FORMAT_VERSION >= RUN_IDS_FROM
    if not run_ids:  # (never past what this simstore writes: tests write older ones)
        return {"format": FORMAT, "version": min(EXACT_FORMAT_VERSION, TREE_EXACT_FORMAT_VERSION)
                if exact else min(FORMAT_VERSION, TREE_FORMAT_VERSION)}
    return {"format": FORMAT, "version": EXACT_FORMAT_VERSION if exact else FORMAT_VERSION}


def has_runs(meta: dict[str, Any]) -> bool:
    """Whether a store of this ``format`` metadata keeps run tables (else dupsort tables)."""
    return int(meta["version"]) >= RUNS_FROM


def has_run_dirs(meta: dict[str, Any]) -> bool:
    """Whether the runs a writer adds to such a store carry directories (older simstores
    reading format 3 would not understand them)."""
    return int(meta["version"]) >= RUN_DIRS_FROM


def has_run_index(meta: dict[str, Any]) -> bool:
    """Whether every level of such a store has its index record."""
    return int(meta["version"]) >= RUN_INDEX_FROM


def has_visible_merges(meta: dict[str, Any]) -> bool:
    """Whether a merge under way in such a store keeps its target in the state and
    deletes its sources' runs slice by slice (older simstores expect them whole)."""
    return int(meta["version"]) >= VISIBLE_MERGE_FROM


def has_paged_records(meta: dict[str, Any]) -> bool:
    """Whether such a store's level indexes and merge records are in page-sized chunks
    (older simstores read neither)."""
    return int(meta["version"]) >= PAGED_FROM


def has_run_ids(meta: dict[str, Any]) -> bool:
    """Whether such a store's ids are a run database (no ``ids`` B-tree)."""
    return int(meta["version"]) >= RUN_IDS_FROM


def has_gone_blocks(meta: dict[str, Any]) -> bool:
    """Whether a merge may list its removed docs as tombstone blocks in such a store."""
    return int(meta["version"]) >= GONE_BLOCKS_FROM


def has_late_gone(meta: dict[str, Any]) -> bool:
    """Whether a merge in such a store leaves out the entries of docs removed while it
    runs (older simstores count a level's stale entries exactly)."""
    return int(meta["version"]) >= LATE_GONE_FROM


def is_known_format(meta: dict[str, Any]) -> bool:
    """Whether this simstore reads a store with this ``format`` metadata."""
    return meta.get("format") == FORMAT and meta.get("version") in FORMAT_VERSIONS
