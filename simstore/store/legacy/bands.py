"""The band table of a similarity store: MinHash band keys -> internal ids.

One LMDB database ``bands`` (``dupsort``/``dupfixed``): key = the band index
(1 byte) and the low 32 bits of the doc's key in that band (4 bytes big-endian),
values = internal ids of every doc with that key. Two docs are candidates when
they share a key in any band; 32 bits keep random collisions rare (about
n / 2**32 per band and query: 0.004 per query over 16 bands at 1M docs) and the
sketch check drops them anyway. One database lets a query look up all its
bands in one call (``Cursor.getmulti``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..format import iid_rows
from ..rows import PUT_CHUNK, band_keys, put_sorted, read_rows

_KEY_BYTES = 5  # a band-table key: band index (1 byte), low 32 bits of the band key (BE)


def key_bytes(keys32: np.ndarray) -> list[bytes]:
    """4-byte big-endian keys of one doc's 32-bit band keys."""
    return keys32.astype(">u4").view("V4").tolist()


class Bands:
    """Handles of a similarity store's band table (formats 1 and 2): a BandIndex."""

    stale_entries = False  # every entry names a live doc (removes delete them)

    def __init__(self, env: Any, txn: Any, nbands: int, *, create: bool) -> None:
        self.nbands = nbands
        self._prefix = [bytes((b,)) for b in range(nbands)]
        self.db = env.open_db(b"bands", txn=txn, create=create, dupsort=True, dupfixed=True)

    def _keys(self, keys: list[bytes]) -> list[bytes]:
        return [p + k for p, k in zip(self._prefix, keys, strict=True)]

    def index(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Put iid under its key in every band (keys: 4-byte band keys, band by band)."""
        for key in self._keys(keys):
            txn.put(key, iid, db=self.db, dupdata=True)

    def unindex(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Delete iid from its key in every band."""
        for key in self._keys(keys):
            txn.delete(key, iid, db=self.db)

    def candidates(self, txn: Any, keys: list[bytes]) -> list[bytes]:
        """Internal ids sharing at least one band key, each once, in first-seen order."""
        found = txn.cursor(self.db).getmulti(self._keys(keys), dupdata=True)
        return list(dict.fromkeys(iid for _, iid in found))

    def candidate_pairs(self, txn: Any, keys32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, internal id) of every stored doc sharing a band key with a row of the
        (n, bands) 32-bit keys: one ``getmulti`` of all their distinct keys."""
        nb = keys32.shape[1]
        packed = band_keys(keys32).ravel()
        uniq, inverse = np.unique(packed, return_inverse=True)
        inverse = inverse.ravel()
        lead = uniq.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - _KEY_BYTES :]
        lkeys = np.ascontiguousarray(lead).view(f"V{_KEY_BYTES}").ravel().tolist()
        raw = txn.cursor(self.db).getmulti(lkeys, dupdata=True, dupfixed_bytes=8,
                                           keyfixed=True)
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _KEY_BYTES + 8)
        kb = np.zeros((len(rows), 8), dtype=np.uint8)
        kb[:, 8 - _KEY_BYTES :] = rows[:, :_KEY_BYTES]
        u = np.searchsorted(uniq, kb.view(">u8").ravel().astype(np.uint64))
        iids = np.ascontiguousarray(rows[:, _KEY_BYTES:]).view(">u8").ravel().astype(np.uint64)
        # every row holding key uniq[u[i]], for each entry i found
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
        lens = (starts[u + 1] - starts[u]).astype(np.int64)
        at = np.repeat(np.arange(len(u)), lens)
        offs = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        return order[starts[u][at] + offs] // nb, iids[at]

    def fill(self, txn: Any, keys32: np.ndarray, iids: np.ndarray) -> None:
        """Insert many docs' (n, bands) 32-bit keys in key order (appends when empty)."""
        n = len(iids)
        if not n:
            return
        band = np.repeat(np.arange(self.nbands, dtype=np.uint64), n)
        flat = keys32.T.reshape(-1).astype(np.uint64)
        ids = np.tile(iids, self.nbands)
        order = np.lexsort((ids, flat, band))
        packed = (band[order] << np.uint64(32)) | flat[order]  # 5 significant bytes
        rows = packed.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 3:]
        vals = ids[order]
        cur = txn.cursor(self.db)
        append = txn.stat(self.db)["entries"] == 0
        for a in range(0, len(order), PUT_CHUNK):
            kl = np.ascontiguousarray(rows[a : a + PUT_CHUNK]).view("V5").ravel().tolist()
            vl = iid_rows(vals[a : a + PUT_CHUNK]).tolist()
            append = put_sorted(cur, kl, vl, append=append)

    def drop(self, txn: Any) -> None:
        """Delete the band table (a rebuild moves the store to run tables)."""
        txn.drop(self.db, delete=True)

    def check(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band table: it must hold exactly (band, key, id) of every doc."""
        n = len(iids)
        band = np.repeat(np.arange(self.nbands, dtype=np.uint64), n)
        flat = keys32.T.reshape(-1).astype(np.uint64)
        ids = np.tile(iids, self.nbands)
        order = np.lexsort((ids, flat, band))
        want_k = (band[order] << np.uint64(32)) | flat[order]
        got = read_rows(txn, self.db, 5)
        if got is None:
            return ["the band table holds an entry that is not 5+8 bytes"]
        if np.array_equal(got[0], want_k) and np.array_equal(got[1], ids[order]):
            return []
        return [
            f"the band table has {len(got[0])} entries for {n} docs x {self.nbands} bands; "
            "they do not match the docs' band keys"
        ]
