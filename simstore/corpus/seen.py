"""The ids a corpus run has met, in about 8 bytes each: is this occurrence the first?

A run through a persistent store decides the first occurrence of each id and removes the
later ones as repeated, whatever the chunking; so a rerun after an interruption meets
every id in the same order and decides the same way. Each id is kept as a 64-bit
blake2b digest of its encoded form: recent ones in a set, older ones merged into one
sorted array (8 bytes each). Two distinct ids collide with probability about
n**2 / 2**65 (1 in 370,000 for ten million ids): the later one would count as repeated.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..store.format import encode_id

_MERGE_AT = 1 << 16  # recent digests gathered before a merge into the sorted array


def _digest(doc_id: Any) -> int:
    return int.from_bytes(hashlib.blake2b(encode_id(doc_id), digest_size=8).digest(), "little")


class SeenIds:
    """Ids met so far; :meth:`first` adds one and says whether it is new."""

    def __init__(self) -> None:
        self._old = np.empty(0, dtype=np.uint64)
        self._recent: set[int] = set()

    def first(self, doc_id: Any) -> bool:
        """Whether doc_id is met here for the first time (it is remembered either way)."""
        d = _digest(doc_id)
        if d in self._recent:
            return False
        old = self._old
        if old.size:
            i = int(np.searchsorted(old, np.uint64(d)))
            if i < old.size and int(old[i]) == d:
                return False
        self._recent.add(d)
        if len(self._recent) >= _MERGE_AT:
            merged = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
            self._old = np.union1d(old, merged)
            self._recent = set()
        return True

    def __len__(self) -> int:
        return int(self._old.size) + len(self._recent)
