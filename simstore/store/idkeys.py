"""The keys a store finds doc ids by (part of the on-disk format, re-exported by
:mod:`simstore.store.format`): the ``ids`` B-tree's id keys of formats 1-12 and the 64-bit
id hashes of the run ids from format 13 (:mod:`simstore.store.idindex`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import mmh3
import numpy as np

from ..native.core import murmur3_many

MAX_KEY_BYTES = 511  # LMDB's key limit: longer ids are keyed by a digest
ID_HASH_SEED = 0x1D5EED  # of id_hash: part of the format, never to change


def id_key(enc: bytes) -> bytes:
    """The ``ids`` key of an encoded id: itself, or a digest when over the key limit."""
    if len(enc) <= MAX_KEY_BYTES:
        return enc
    return b"h" + hashlib.blake2b(enc, digest_size=32).digest()


ORDERED_KEY = b"n"  # the lead byte of an int id's key in an ``ordered`` store
_ORDERED_MAX = 100  # payload bytes an ordered key holds; longer ints keep id_key's form


def ordered_id_key(enc: bytes) -> bytes:
    """The ``ids`` key of an encoded id in a store whose int ids sort by value (those
    created or rebuilt from format 11; meta ``idkeys``): ``n``, a length byte (0x80 + n
    for x >= 0, 0x80 - n below zero) and x's n low bytes big-endian (x + 256**n when
    negative), so neighbouring ints are neighbouring keys and removing a range of them
    touches a few leaf pages, not one each (the signed minimal bytes of :func:`encode_id`
    sort 5 with 1280-1535); a str id keys as :func:`id_key`."""
    if enc[:1] != b"i":
        return id_key(enc)
    x = int.from_bytes(enc[1:], "big", signed=True)
    n = max(1, ((~x if x < 0 else x).bit_length() + 7) // 8)
    if n > _ORDERED_MAX:
        return id_key(enc)
    lead = 0x80 + n if x >= 0 else 0x80 - n
    return ORDERED_KEY + bytes((lead,)) + (x % (1 << (8 * n))).to_bytes(n, "big")


def ordered_int_keys(xs: np.ndarray) -> list[bytes]:
    """:func:`ordered_id_key` of int64 ids, vectorized (in input order)."""
    a = xs.astype(np.int64)
    mag = np.where(a < 0, ~a, a).astype(np.uint64)
    n = np.ones(len(a), dtype=np.int64)
    for j in range(1, 8):
        n += mag >= np.uint64(1 << (8 * j))
    lead = np.where(a >= 0, 0x80 + n, 0x80 - n).astype(np.uint8)
    big = a.astype(">i8").view(np.uint8).reshape(-1, 8)
    out: list[bytes] = [b""] * len(a)
    for m in np.unique(n).tolist():
        pos = np.flatnonzero(n == m)
        rows = np.empty((len(pos), m + 2), dtype=np.uint8)
        rows[:, 0], rows[:, 1], rows[:, 2:] = ORDERED_KEY[0], lead[pos], big[pos, 8 - m:]
        for p, key in zip(pos.tolist(), rows.view(f"V{m + 2}").ravel().tolist(), strict=True):
            out[p] = key
    return out


def id_hash(enc: bytes) -> int:
    """The 64-bit key of an encoded id in a run-ids store (format 13 on): murmur3_x64_128's
    low half. Two ids may share one; a lookup compares the docs records' ids."""
    return int(mmh3.hash64(enc, ID_HASH_SEED, signed=False)[0])


def id_hashes(encs: Iterable[bytes]) -> np.ndarray:
    """:func:`id_hash` of many encoded ids (uint64, in order; one C call)."""
    return murmur3_many(list(encs), ID_HASH_SEED)


def collision_message(path: str) -> str:
    """What to say when two long ids share a digest (never seen; reported, not hidden)."""
    return (
        f"store {path!r}: two doc ids longer than {MAX_KEY_BYTES} bytes share a blake2b "
        "digest; please report this"
    )
