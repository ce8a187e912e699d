"""The bytes of docs records and metadata, and the format version: bytes in, values out.

docs/format.md specifies every database of a store; this module holds what it says of
``meta`` (JSON objects; ``format`` is ``{"format": "simstore", "version": 19}``) and of
``docs`` (internal id, 8 bytes BE, assigned in insertion order -> a record:
``[tag][fingerprint][sketch][band keys][stored at][encoded id]``, see
:class:`RecordCodec`), and how doc ids are encoded (a type tag, ``s`` + UTF-8 for str,
``i`` + signed big-endian bytes for int) and hashed (:func:`id_hash`). The
run tables' bytes are :mod:`simstore.store.runs.format`'s.

Everything here is pure: no LMDB calls.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Union

import mmh3
import numpy as np

from .._validate import as_float
from ..exceptions import (
    CorruptStoreError,
    InvalidDocIdError,
    SimstoreTypeError,
    SimstoreValueError,
)
from ..native.core import murmur3_many, murmur3_packed

DocId = Union[str, int]  # noqa: UP007 - a runtime alias, kept valid on Python 3.10

PAGE = 4096  # LMDB's page size: what a run record's size and the map's growth count in
ID_HASH_SEED = 0x1D5EED  # of id_hash: part of the format, never to change

FORMAT = "simstore"
# The frozen format (docs/format.md), for every kind of store: an exact store is named
# by its ``exact`` metadata, not by a version. A change bumps it and ships a migration.
FORMAT_VERSION = 19
FORMAT_VERSIONS = (FORMAT_VERSION,)
# Versions 1-18 were development formats (never released): `simstore-cli upgrade PATH`
# rewrites such a store (simstore.store.upgrade); nothing else opens one.
DEV_VERSIONS = range(1, FORMAT_VERSION)
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


# --- internal ids and docs records -------------------------------------------


def iid_bytes(n: int) -> bytes:
    """The 8-byte key of internal id n."""
    return n.to_bytes(8, "big")


def iid_rows(iids: np.ndarray) -> np.ndarray:
    """Internal ids (uint64) as an array of 8-byte keys (numpy void rows)."""
    return iids.astype(">u8").view("V8")


def band_key_bytes(keys32: np.ndarray) -> list[bytes]:
    """One doc's 32-bit band keys as a docs record holds them: 4 bytes big-endian each."""
    return keys32.astype(">u4").view("V4").tolist()


class DocsColumns(NamedTuple):
    """Columns of the docs table, in internal-id order (see :meth:`RecordCodec.walk`).

    sketches: (n, sketch words) uint64 and bands: (n, bands) uint32, empty (n, 0) in a
    fingerprint store or when not asked for; times: each doc's time of storage (uint64
    ms since the epoch) when asked for, else None.
    """

    keys: list[bytes]
    iids: np.ndarray
    fps: np.ndarray
    encs: list[bytes] | None
    sketches: np.ndarray
    bands: np.ndarray
    times: np.ndarray | None = None


HAMMING_RECORD = 3  # the tag of a fingerprint store's docs records
SIMILARITY_RECORD = 4  # the tag of a similarity (or exact) store's docs records
_AT_BYTES = 8  # a record's time of storage: uint64 BE, ms since the Unix epoch (UTC)
MAX_AT_MS = (1 << 63) - 1


def now_ms() -> int:
    """The time of storage of a doc stored now."""
    return time.time_ns() // 1_000_000


def at_ms(at: Any, name: str = "at") -> int:
    """The stored time (ms) of ``at``: seconds since the Unix epoch (None: now)."""
    if at is None:
        return now_ms()
    if isinstance(at, (bool, np.bool_)) or not isinstance(at, (int, float, np.integer,
                                                                np.floating)):
        raise SimstoreTypeError(
            f"{name!r} must be seconds since the Unix epoch, an int or a float "
            f"(got {type(at).__name__})")
    value = as_float(at)
    if not math.isfinite(value) or value < 0 or value * 1000 > MAX_AT_MS:
        raise SimstoreValueError(
            f"{name!r} must be a finite time in seconds since the Unix epoch, >= 0 "
            f"(got {at!r})")
    return int(value * 1000) if isinstance(at, (float, np.floating)) else int(at) * 1000


class RecordCodec:
    """The docs records of one store, THE record layout (docs/format.md, "docs").

    ``[tag][fingerprint: 8 bytes BE][sketch: words x 8 bytes LE][band keys: bands x 4
    bytes BE][stored at: 8 bytes BE, ms since the epoch][encoded id]``: tag 3 in a
    fingerprint store (no sketch, no band keys), 4 in a similarity store, whose sizes
    come from its recorded config. Every record of a store has one tag and one size
    before the id.
    """

    def __init__(self, sketch_words: int = 0, nbands: int = 0) -> None:
        self.sketch_words = sketch_words
        self.nbands = nbands
        self.version = SIMILARITY_RECORD if sketch_words else HAMMING_RECORD
        self.tag = bytes((self.version,))
        self.fp_start = _FP_END - 8  # a record's fingerprint is [fp_start:sketch_start]
        self.sketch_start = _FP_END  # a record's sketch is [sketch_start:sketch_end]
        self.sketch_end = _FP_END + 8 * sketch_words
        self.at_start = self.sketch_end + 4 * nbands
        self.id_start = self.at_start + _AT_BYTES

    def record(self, fp: int, enc: bytes, sketch: bytes = b"", bands: bytes = b"",
               at: int | None = None) -> bytes:
        """The record of one doc (sketch: LE uint64 words, bands: BE uint32 keys; at: ms
        since the epoch, None: now)."""
        if len(sketch) + len(bands) != self.at_start - _FP_END:
            raise AssertionError("a record's sketch or band keys do not fit the store")
        when = now_ms() if at is None else at
        return self.tag + fp.to_bytes(8, "big") + sketch + bands + when.to_bytes(8, "big") + enc

    def prefixes(
        self, fps: np.ndarray, sketches: np.ndarray | None = None, bands: np.ndarray | None = None,
        at: Any = None,
    ) -> np.ndarray:
        """The fixed first bytes (all but the id) of many records, one uint8 row each (at:
        ms since the epoch, one for all or one per record; None: now)."""
        n = len(fps)
        prefix = np.empty((n, self.id_start), dtype=np.uint8)
        prefix[:, 0] = self.version
        prefix[:, 1:_FP_END] = fps.astype(">u8").view(np.uint8).reshape(n, 8)
        if self.sketch_words:
            assert sketches is not None and bands is not None
            prefix[:, _FP_END : self.sketch_end] = (
                sketches.astype("<u8").view(np.uint8).reshape(n, -1)
            )
            prefix[:, self.sketch_end : self.at_start] = (
                bands.astype(">u4").view(np.uint8).reshape(n, -1)
            )
        when = np.broadcast_to(np.asarray(now_ms() if at is None else at, dtype=np.uint64), (n,))
        prefix[:, self.at_start : self.id_start] = (
            when.astype(">u8").view(np.uint8).reshape(n, 8))
        return prefix

    def _check(self, rec: bytes) -> None:
        if not rec or rec[0] != self.version or len(rec) <= self.id_start:
            raise CorruptStoreError(
                f"a docs record has tag {bytes(rec[:1])!r} and {len(rec)} bytes; this "
                f"store keeps tag-{self.version} records of more than {self.id_start} bytes"
            )

    def parse(self, rec: bytes) -> tuple[int, bytes]:
        """(fingerprint, encoded id) of a record (a malformed one: CorruptStoreError)."""
        self._check(rec)
        return int.from_bytes(rec[1:_FP_END], "big"), bytes(rec[self.id_start :])

    def match(self, rec: bytes) -> tuple[DocId, int]:
        """(doc id, fingerprint) of a record: the hot path of a query's answer."""
        if rec[:1] != self.tag or len(rec) <= self.id_start:
            self._check(rec)  # raises with the reason
        return decode_id(rec[self.id_start :]), int.from_bytes(rec[1:_FP_END], "big")

    def stored_at(self, rec: bytes) -> int:
        """A record's time of storage, ms since the epoch."""
        return int.from_bytes(rec[self.at_start : self.id_start], "big")

    def same_doc(self, rec: bytes, other: bytes) -> bool:
        """Whether two records differ at most in their time of storage."""
        a = self.at_start
        return rec[:a] == other[:a] and rec[self.id_start :] == other[self.id_start :]

    def restamp(self, rec: bytes, at: int) -> bytes:
        """The record with another time of storage."""
        return bytes(rec[: self.at_start]) + at.to_bytes(8, "big") + bytes(rec[self.id_start :])

    def sketch(self, rec: bytes) -> bytes:
        """The sketch bytes (LE uint64 words) of a similarity record."""
        return bytes(rec[_FP_END : self.sketch_end])

    def band_keys(self, rec: bytes) -> bytes:
        """The band keys of a similarity record: 4 bytes each, big-endian, band by band."""
        return bytes(rec[self.sketch_end : self.at_start])

    def walk(
        self,
        items: Iterator[tuple[bytes, bytes]],
        *,
        with_ids: bool = True,
        with_sketches: bool = False,
        with_bands: bool = False,
        with_times: bool = False,
        problems: list[str] | None = None,
    ) -> DocsColumns:
        """Columns of every record from (key, record) pairs: THE docs-table walker.

        with_sketches: sketches and band keys; with_bands: band keys only; with_times:
        each doc's time of storage.

        A malformed record is reported into ``problems`` and skipped when
        given; otherwise it raises CorruptStoreError.
        """
        keys: list[bytes] = []
        fpb: list[bytes] = []
        extra: list[bytes] = []
        atb: list[bytes] = []
        encs: list[bytes] | None = [] if with_ids else None
        start, id_start, version = _FP_END, self.id_start, self.version
        band_start, at_start = self.sketch_end, self.at_start
        for key, val in items:
            if len(key) != 8 or len(val) <= id_start or val[0] != version:
                msg = (
                    f"docs record {bytes(key)!r} is malformed (key {len(key)} bytes, "
                    f"value {len(val)} bytes, tag {bytes(val[:1])!r})"
                )
                if problems is None:
                    raise CorruptStoreError(msg)
                problems.append(msg)
                continue
            keys.append(key)
            fpb.append(val[1:start])
            if with_sketches:
                extra.append(val[start:at_start])
            elif with_bands:
                extra.append(val[band_start:at_start])
            if with_times:
                atb.append(val[at_start:id_start])
            if encs is not None:
                encs.append(bytes(val[id_start:]))
        n = len(keys)
        iids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        fps = np.frombuffer(b"".join(fpb), dtype=">u8").astype(np.uint64)
        if with_sketches and self.sketch_words:
            rows = np.frombuffer(b"".join(extra), dtype=np.uint8).reshape(n, at_start - start)
            split = 8 * self.sketch_words
            sketches = np.ascontiguousarray(rows[:, :split]).view("<u8").astype(np.uint64)
            bands = np.ascontiguousarray(rows[:, split:]).view(">u4").astype(np.uint32)
        elif with_bands and self.sketch_words:
            sketches = np.empty((n, 0), dtype=np.uint64)
            raw = np.frombuffer(b"".join(extra), dtype=np.uint8).reshape(n, at_start - band_start)
            bands = raw.view(">u4").astype(np.uint32)
        else:
            sketches = np.empty((n, 0), dtype=np.uint64)
            bands = np.empty((n, 0), dtype=np.uint32)
        times = np.frombuffer(b"".join(atb), dtype=">u8").astype(np.uint64) if with_times \
            else None
        return DocsColumns(keys, iids, fps, encs, sketches, bands, times)


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


def format_meta() -> dict[str, Any]:
    """The ``format`` metadata this simstore writes for a new (or rebuilt) store."""
    return {"format": FORMAT, "version": FORMAT_VERSION}


def is_known_format(meta: dict[str, Any]) -> bool:
    """Whether this simstore reads a store with this ``format`` metadata."""
    return meta.get("format") == FORMAT and meta.get("version") in FORMAT_VERSIONS


def id_hash(enc: bytes) -> int:
    """The 64-bit key of an encoded id in ``rids`` (the run tables' id index,
    :mod:`simstore.store.runs.ids`): murmur3_x64_128's low half. Two ids may share one; a
    lookup compares the docs records' ids."""
    return int(mmh3.hash64(enc, ID_HASH_SEED, signed=False)[0])


def id_hashes(encs: Iterable[bytes]) -> np.ndarray:
    """:func:`id_hash` of many encoded ids (uint64, in order; one C call)."""
    return murmur3_many(list(encs), ID_HASH_SEED)
