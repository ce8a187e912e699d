"""Thin binding of ``csrc/keytable.c``: a multimap of uint64 keys to uint64 values that C
reads in place (the band entries of a process's recent docs).

A Python dict of lists cost a single write ~4 us for its 16 inserts into a table of tens
of thousands of keys; here they are one C call, and a similarity lookup reads the table
inside its own C call (:func:`simstore.native.single.similar_one`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .core import _u64_ptr, ffi, lib, raise_for

__all__ = ["KeyTable"]

EMPTY = int(lib.SS_KEY_EMPTY)
_MORE_ROOM = lib.SS_EROOM  # the table would pass half full: grow it


class KeyTable:
    """Pairs (key, value) of uint64s, many values to a key; no key may be 2**64 - 1."""

    def __init__(self, cap: int = 64) -> None:
        self._used = 0
        self._alloc(max(64, 1 << (int(cap) - 1).bit_length()))

    def _alloc(self, cap: int) -> None:
        self.keys = np.full(cap, EMPTY, dtype=np.uint64)
        self.vals = np.empty(cap, dtype=np.uint64)
        self.c_keys = _u64_ptr(self.keys)
        self.c_vals = _u64_ptr(self.vals)
        self.cap = cap

    def __len__(self) -> int:
        return self._used

    def add(self, keys: np.ndarray, vals: np.ndarray, per: int = 1) -> None:
        """Add pairs (keys[i], vals[i // per]) (uint64 arrays)."""
        ks = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
        vs = np.ascontiguousarray(vals, dtype=np.uint64).reshape(-1)
        if len(ks) > len(vs) * per:
            raise ValueError("simstore: a KeyTable needs a value for every per keys")
        cks, cvs, n = _u64_ptr(ks), _u64_ptr(vs), len(ks)
        self._add(n, lambda: lib.ss_keytable_add(self.c_keys, self.c_vals, self.cap,
                                                 self._used, cks, n, cvs, per))

    def add_bands(self, be32: bytes, val: int) -> None:
        """Add one doc's band entries (band << 32 | key32 of its 4-byte big-endian keys, as
        its docs record holds them), each with the value val."""
        n = len(be32) // 4
        self._add(n, lambda: lib.ss_keytable_add_bands(self.c_keys, self.c_vals, self.cap,
                                                       self._used, be32, n, val))

    def _add(self, n: int, call: Callable[[], int]) -> None:
        """call(), a C add of n pairs to the table as it stands, until it has the room."""
        while True:
            rc = int(call())
            if rc != _MORE_ROOM:
                break
            self._grow(1 << (4 * (self._used + n) - 1).bit_length())  # a quarter full
        if rc < 0:
            raise_for(rc, "adding to a key table")
        self._used = rc

    def _grow(self, cap: int) -> None:
        """Move every pair to a table of cap slots."""
        held = self.keys != EMPTY
        keys, vals = self.keys[held], self.vals[held]
        self._used = 0
        self._alloc(cap)
        self.add(keys, vals)

    def as_dict(self) -> dict[int, list[int]]:
        """Key -> its values (for checks and tests)."""
        held = self.keys != EMPTY
        out: dict[int, list[int]] = {}
        for k, v in zip(self.keys[held].tolist(), self.vals[held].tolist(), strict=True):
            out.setdefault(k, []).append(v)
        return out

    def find(self, qs: np.ndarray) -> list[int]:
        """The values of every pair whose key is one of qs (uint64), repeats kept."""
        q = np.ascontiguousarray(qs, dtype=np.uint64)
        cq = _u64_ptr(q)
        cap = 16
        while True:
            out = ffi.new("uint64_t[]", cap)
            m = int(lib.ss_keytable_find(self.c_keys, self.c_vals, self.cap, cq, len(q),
                                         out, cap))
            if m < 0:
                raise_for(m, "looking keys up in a key table")
            if m <= cap:
                return ffi.unpack(out, m) if m else []
            cap = m
