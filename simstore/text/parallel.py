"""Texts to the C core in chunks on several threads: the batch driver of fingerprints, signatures.

The C passes release the GIL (cffi releases it around every call), so chunks
run in parallel; each chunk's results go to its own slice of the caller's
arrays, so any number of threads gives exactly the arrays one thread gives.
Encoding a chunk to UTF-8 needs the GIL: it runs in the worker too, so one
chunk's encoding overlaps another's C pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._validate import check_int

CHUNK_CHARS = 1 << 24
"""About the most characters one C call takes: bounds the encoded copy each thread holds."""
_MIN_PARALLEL_CHUNK = 1 << 17  # below this a chunk costs more to hand over than to run
_CHUNKS_PER_THREAD = 4  # the largest parallel chunk: 1 / (threads * this) of all characters
_TAIL_SHARE = 2  # later chunks: 1 / (threads * this) of the characters not yet in a chunk
_RAMP = 3  # the first chunks are 1/8, 1/4, 1/2 of the largest


def cpu_count() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_count(threads: object) -> int:
    """threads, or every core for None: the rule of ``fingerprints(..., threads=)``."""
    if threads is None:
        return cpu_count()
    return check_int(threads, "threads", minimum=1)


def blob(batch: list[bytes]) -> tuple[bytes, np.ndarray]:
    """Encoded texts as one buffer and the int64 offsets of each (n + 1 of them)."""
    offsets = np.zeros(len(batch) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batch], out=offsets[1:])
    return b"".join(batch), offsets


def _chunk_size(total: int, left: int, threads: int, index: int) -> int:
    """Characters of chunk `index` when `left` of `total` characters are not yet in a chunk.

    One thread: CHUNK_CHARS. Several: small first chunks (the threads encode
    their first chunks one after another, holding the GIL, and C starts only
    after), then the largest, then 1 / (threads * _TAIL_SHARE) of what is
    left, so the last chunks are small and the threads finish together.
    """
    if threads == 1:
        return CHUNK_CHARS
    share = min(total // (threads * _CHUNKS_PER_THREAD), left // (threads * _TAIL_SHARE))
    share >>= max(0, _RAMP - index)
    return min(CHUNK_CHARS, max(_MIN_PARALLEL_CHUNK, share))


def _ranges(items: list[str], threads: int) -> list[tuple[int, int]]:
    """Consecutive [start, stop) chunks of items, by characters, for this many threads."""
    lengths = [len(t) for t in items]
    total = left = sum(lengths)
    size = _chunk_size(total, left, threads, 0)
    out, start, acc = [], 0, 0
    for i, n in enumerate(lengths):
        acc += n
        if acc >= size:
            out.append((start, i + 1))
            start, left, acc = i + 1, left - acc, 0
            size = _chunk_size(total, left, threads, len(out))
    if start < len(items):
        out.append((start, len(items)))
    return out


def run(
    items: list[str],
    encode: Callable[[str], bytes],
    work: Callable[[int, bytes, np.ndarray], None],
    threads: int,
) -> None:
    """work(start, blob, offsets) for each chunk of items (encoded), on up to `threads` threads.

    work must write only its own slice (start .. start + len(offsets) - 1) of its outputs.
    """

    def one(span: tuple[int, int]) -> None:
        start, stop = span
        data, offsets = blob([encode(t) for t in items[start:stop]])
        work(start, data, offsets)

    spans = _ranges(items, threads)
    if threads == 1 or len(spans) < 2:
        for span in spans:
            one(span)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(spans))) as pool:
        for _ in pool.map(one, spans):
            pass
