"""Helpers of the run tables and the writes: bulk puts, leftover tables, band keys."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

PUT_CHUNK = 1 << 19  # rows turned into bytes objects at a time (bounds memory)


def band_keys(keys32: np.ndarray) -> np.ndarray:
    """Band-entry keys band << 32 | key32 (uint64) of 32-bit band keys (bands: last axis)."""
    return _band_hi(keys32.shape[-1]) | keys32.astype(np.uint64)


@functools.lru_cache(maxsize=8)
def _band_hi(nb: int) -> np.ndarray:
    """band << 32 of bands 0..nb-1 (uint64, read-only: shared by every call)."""
    hi = np.arange(nb, dtype=np.uint64) << np.uint64(32)
    hi.flags.writeable = False
    return hi


SPREAD = 512  # rows put in bit-reversed order within each window of this many (see put_sorted)


def put_sorted(cur: Any, keys: list[bytes], values: list[bytes], *, append: bool) -> bool:
    """putmulti of rows given in key order; whether appending still works for the next rows.

    Appended (asked to, or when the first row is past the database's end), they
    fill LMDB's pages whole. An append that LMDB refuses (a row not after the
    end) is redone as ordinary puts, which skip rows already written, in
    bit-reversed order within each window of ``SPREAD`` rows: LMDB splits a
    full page in half and, for a key past a page's last, inserts at the next
    page's start, so rows put in key order between stored
    keys leave a trail of half-full pages (~50 % fill); spread, they land
    between each other as random keys do (~70 %), and the windows keep the
    pages a chunk touches in key order.
    """
    if not append and keys and cur.last():  # rows past the end append all the same
        append = keys[0] > bytes(cur.key())
    if append:
        _, added = cur.putmulti(zip(keys, values, strict=False), append=True)
        if added == len(keys):
            return True
    order = spread_order(len(keys)).tolist()
    cur.putmulti((keys[i], values[i]) for i in order)
    return False


def spread_order(n: int, window: int = SPREAD) -> np.ndarray:
    """0..n-1 in bit-reversed order within each window of ``window`` (a power of two)."""
    bits = max(window - 1, 1).bit_length()
    x = np.arange(window, dtype=np.int64)
    rev = np.zeros(window, dtype=np.int64)
    for b in range(bits):
        rev |= ((x >> b) & 1) << (bits - 1 - b)
    one = np.argsort(rev)  # window positions in bit-reversed order
    idx = (np.arange(0, n, window, dtype=np.int64)[:, None] + one[None, :]).ravel()
    return idx[idx < n]


def tables_beyond(txn: Any, letter: bytes, count: int) -> list[str]:
    """Names of the environment's tables ``<letter>NN`` with NN >= count (another layout's)."""
    names = []
    for key in txn.cursor().iternext(keys=True, values=False):
        k = bytes(key)
        if len(k) == 3 and k[:1] == letter and k[1:].isdigit() and int(k[1:]) >= count:
            names.append(k.decode())
    return names
