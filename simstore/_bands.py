"""The band tables of a similarity store: MinHash band keys -> internal ids.

Band b is the LMDB database ``b00``, ``b01``, ... (``dupsort``/``dupfixed``):
key = the low 32 bits of the doc's band-b key (4 bytes big-endian), values =
internal ids of every doc with that key. Two docs are candidates when they
share a key in any band; 32 bits keep random collisions rare (about n / 2**32
per band and query: 0.004 per query over 16 bands at 1M docs) and the sketch
check drops them anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._format import iid_rows
from ._tables import PUT_CHUNK, put_sorted, read_rows


def band_name(b: int) -> bytes:
    """The LMDB database name of band table b."""
    return b"b%02d" % b


def band_keys32(bands: np.ndarray) -> np.ndarray:
    """The stored 32-bit keys of 64-bit band keys (any shape)."""
    return (np.asarray(bands, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def key_bytes(keys32: np.ndarray) -> list[bytes]:
    """4-byte big-endian keys of one doc's 32-bit band keys."""
    return keys32.astype(">u4").view("V4").tolist()


class Bands:
    """Handles of a similarity store's band tables."""

    def __init__(self, env: Any, txn: Any, nbands: int, *, create: bool) -> None:
        self.dbs = [
            env.open_db(band_name(b), txn=txn, create=create, dupsort=True, dupfixed=True)
            for b in range(nbands)
        ]

    def index(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Put iid under its key in every band."""
        for db, key in zip(self.dbs, keys, strict=True):
            txn.put(key, iid, db=db, dupdata=True)

    def unindex(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Delete iid from its key in every band."""
        for db, key in zip(self.dbs, keys, strict=True):
            txn.delete(key, iid, db=db)

    def candidates(self, txn: Any, keys: list[bytes]) -> list[bytes]:
        """Internal ids sharing at least one band key, each once, in first-seen order."""
        seen: dict[bytes, None] = {}
        cursor = txn.cursor
        for db, key in zip(self.dbs, keys, strict=True):
            cur = cursor(db)
            if cur.set_key(key):
                for iid in cur.iternext_dup(keys=False, values=True):
                    seen[iid] = None
        return list(seen)

    def fill(self, txn: Any, keys32: np.ndarray, iids: np.ndarray) -> None:
        """Insert many docs' (n, bands) 32-bit keys in key order (appends when empty)."""
        for b, db in enumerate(self.dbs):
            col = keys32[:, b]
            order = np.lexsort((iids, col))
            kcol, vcol = col[order], iids[order]
            cur = txn.cursor(db)
            append = txn.stat(db)["entries"] == 0
            for a in range(0, len(order), PUT_CHUNK):
                kl = kcol[a : a + PUT_CHUNK].astype(">u4").view("V4").tolist()
                vl = iid_rows(vcol[a : a + PUT_CHUNK]).tolist()
                append = put_sorted(cur, kl, vl, append=append)

    def drop(self, txn: Any) -> None:
        """Empty every band table (for a rebuild)."""
        for db in self.dbs:
            txn.drop(db, delete=False)

    def check(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band tables: each must hold exactly (key, id) of every doc."""
        problems = []
        for b, db in enumerate(self.dbs):
            order = np.lexsort((iids, keys32[:, b]))
            want_k, want_v = keys32[order, b], iids[order]
            got = read_rows(txn, db, 4)
            if got is None:
                problems.append(f"band table b{b:02d} holds an entry that is not 4+8 bytes")
            elif not (np.array_equal(got[0], want_k) and np.array_equal(got[1], want_v)):
                problems.append(
                    f"band table b{b:02d}: {len(got[0])} entries for {len(want_k)} docs "
                    "do not match the docs' band keys"
                )
        return problems
