"""Texts to the C core in chunks: the batch driver of fingerprints and signatures."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK_CHARS = 1 << 24
"""About the most characters one C call takes: bounds the encoded copy held at once."""


def blob(batch: list[bytes]) -> tuple[bytes, np.ndarray]:
    """Encoded texts as one buffer and the int64 offsets of each (n + 1 of them)."""
    offsets = np.zeros(len(batch) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batch], out=offsets[1:])
    return b"".join(batch), offsets


def _ranges(items: list[str]) -> list[tuple[int, int]]:
    """Consecutive [start, stop) chunks of items, by characters."""
    out, start, acc = [], 0, 0
    for i, t in enumerate(items):
        acc += len(t)
        if acc >= CHUNK_CHARS:
            out.append((start, i + 1))
            start, acc = i + 1, 0
    if start < len(items):
        out.append((start, len(items)))
    return out


def run(
    items: list[str],
    encode: Callable[[str], bytes],
    work: Callable[[int, bytes, np.ndarray], None],
) -> None:
    """work(start, blob, offsets) for each chunk of items, encoded."""
    for start, stop in _ranges(items):
        data, offsets = blob([encode(t) for t in items[start:stop]])
        work(start, data, offsets)
