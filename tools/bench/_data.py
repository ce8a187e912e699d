"""Seeded inputs of the benchmarks: random, clustered and planted fingerprints, and stores."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

U64 = np.uint64


def random_fps(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct uniformly random 64-bit fingerprints."""
    out = np.unique(rng.integers(0, 2**64 - 1, size=n, dtype=U64, endpoint=True))
    while len(out) < n:
        extra = rng.integers(0, 2**64 - 1, size=n - len(out), dtype=U64, endpoint=True)
        out = np.unique(np.concatenate([out, extra]))
    return rng.permutation(out[:n])


def clustered_fps(rng: np.random.Generator, n: int, shared_bits: int) -> np.ndarray:
    """n distinct fingerprints sharing their top shared_bits bits (random low bits)."""
    free = 64 - shared_bits
    top = U64(int(rng.integers(0, 2**shared_bits)) << free)
    low = rng.choice(2**free, size=n, replace=False).astype(U64)
    return top | low


def flip_bits(rng: np.random.Generator, fps: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Each fingerprint with a random number in lo..hi of distinct random bits flipped."""
    out = fps.copy()
    dist = rng.integers(lo, hi + 1, size=len(fps))
    for i, d in enumerate(dist):
        bits = rng.choice(64, size=int(d), replace=False)
        mask = 0
        for b in bits:
            mask |= 1 << int(b)
        out[i] ^= U64(mask)
    return out


def open_store(path: Path, k: int, expected_size: int) -> Any:
    """A new durable SimStore at path, planned for k and expected_size."""
    from simstore.store import SimStore

    return SimStore(path, k=k, expected_size=expected_size, durable=True)


def build_store(path: Path, k: int, fps: np.ndarray) -> tuple[Any, float]:
    """A store holding fps under ids 0..n-1, and the seconds add_many took."""
    store = open_store(path, k, len(fps))
    t0 = time.perf_counter()
    store.add_many(range(len(fps)), fps)
    return store, time.perf_counter() - t0
