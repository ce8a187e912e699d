"""Small helpers shared by the tools: popcount, and the environment of a tool's child process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent  # the checkout these tools belong to

_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount(x: np.ndarray) -> np.ndarray:
    """Bits set in each uint64 of x, as uint8 of the same shape.

    numpy >= 2.0 has ``bitwise_count``; older numpy goes through a byte table.
    """
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    a = np.ascontiguousarray(x, dtype=np.uint64)
    return _BYTE_BITS[a.view(np.uint8).reshape(*a.shape, 8)].sum(axis=-1, dtype=np.uint8)


def checkout_env() -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH.

    A child started as ``python -m tools.…`` (or ``-m simstore``) then imports these tools
    and this checkout's simstore, whatever its working directory.
    """
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *rest])}
