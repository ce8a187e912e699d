"""A long text's shingle set in an exact store: held as its code, compared as it is read.

A set of more than :data:`LONG_SET` shingles (a text of a few MB) is coded as soon as it
is made (:func:`coded`), and a text's own set -- made in blocks into a mapping of its own
(:mod:`simstore.text.longtext`) -- hands its pages back to the OS a step at a time as it
is coded: the set (8 bytes a shingle) and its code (about 5) are never held whole at
once. The write stores the code's pieces as any other; a lookup
(:func:`simstore.store.shingles.similar`) compares the code with each candidate's stored
pieces as they are read (:func:`simstore.native.jaccard.jaccard_of_codes`), neither
decoded whole, the pages of LMDB's map it has read let go as it goes. The values are
those of the set: the same code, the same exact Jaccard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _mapped
from ..native import jaccard as _sets
from ..text.jaccard import ShingleSets

LONG_SET = 1 << 18
"""Sets of more shingles than this (2 MiB of hashes) are held as their code."""


@dataclass(frozen=True)
class LongSet:
    """One long set as its code (uint8, the bytes the store keeps) and its size."""

    code: np.ndarray
    size: int


def coded(sets: ShingleSets, own: bool) -> LongSet:
    """The one set of ``sets`` as a LongSet; ``own``: the caller's alone, never read
    again, so its pages are handed back as it is coded (see the module docstring)."""
    hashes = sets.hashes
    released = 0

    def done(upto: int) -> None:
        nonlocal released
        _mapped.release(hashes, released, upto)
        released = upto

    return LongSet(_sets.encode_one(hashes, done if own else None), len(hashes))
