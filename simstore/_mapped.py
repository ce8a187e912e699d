"""Arrays in private anonymous mappings of their own, whose pages can go back to the OS
before the array does.

A long text's shingle set (tens of MB) lives in one, so that what is made from it a step
at a time (its code, a copy of it in a batch) hands back the pages it has read: the two
are never held whole at once. A page handed back reads as zeros after: only the owner of
an array it will never read again (those items) releases them. Where the OS has no such
mappings or advice, an array is an ordinary one and nothing is released.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

_MAPS = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MADV_DONTNEED")


def empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialized array of n items in a mapping of its own (its pages taken only as
    they are written)."""
    if not _MAPS:
        return np.empty(n, dtype=dtype)
    size = max(1, n * np.dtype(dtype).itemsize)
    return np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE), dtype=dtype, count=n)


def _mapping(arr: np.ndarray) -> mmap.mmap | None:
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer's base: a view of the mapping
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def release(arr: np.ndarray, start: int, stop: int) -> None:
    """Hand back the whole pages under items [start, stop) of a 1-D array made by
    :func:`empty` (or a view of one); they read as zeros after. Nothing for another array."""
    mm = _mapping(arr) if _MAPS else None
    if mm is None or stop <= start:
        return
    origin = np.frombuffer(mm, dtype=np.uint8, count=1).ctypes.data
    at = arr.ctypes.data - origin
    lo = -(-(at + start * arr.itemsize) // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = (at + stop * arr.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
