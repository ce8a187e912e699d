"""The keys a store finds doc ids by (part of the on-disk format, re-exported by
:mod:`simstore.store.format`): the 64-bit id hashes of the ``rids`` run database
(:mod:`simstore.store.idindex`)."""

from __future__ import annotations

from collections.abc import Iterable

import mmh3
import numpy as np

from ..native.core import murmur3_many

ID_HASH_SEED = 0x1D5EED  # of id_hash: part of the format, never to change


def id_hash(enc: bytes) -> int:
    """The 64-bit key of an encoded id in ``rids``: murmur3_x64_128's low half. Two ids
    may share one; a lookup compares the docs records' ids."""
    return int(mmh3.hash64(enc, ID_HASH_SEED, signed=False)[0])


def id_hashes(encs: Iterable[bytes]) -> np.ndarray:
    """:func:`id_hash` of many encoded ids (uint64, in order; one C call)."""
    return murmur3_many(list(encs), ID_HASH_SEED)
