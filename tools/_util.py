"""Small numeric helpers shared by the tools (benchmarks and quality evaluation)."""

from __future__ import annotations

import numpy as np

_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount(x: np.ndarray) -> np.ndarray:
    """Bits set in each uint64 of x, as uint8 of the same shape.

    numpy >= 2.0 has ``bitwise_count``; older numpy goes through a byte table.
    """
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    a = np.ascontiguousarray(x, dtype=np.uint64)
    return _BYTE_BITS[a.view(np.uint8).reshape(*a.shape, 8)].sum(axis=-1, dtype=np.uint8)
