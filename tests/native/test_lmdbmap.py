"""Values found in LMDB's map from their leaf nodes (csrc/lmdbmap.c) against LMDB's own get.

The oracle is py-lmdb: every record of a real environment, inline or on overflow pages,
looked up both ways in one read transaction. A map forged in a bytearray then shows that
each field the C code checks turns a lookup down when it is wrong, never into a read
outside the map.
"""

from __future__ import annotations

import lmdb
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simstore.native import lmdbmap
from simstore.native.core import ffi

PSIZE = 4096
# LMDB keeps a record in its leaf while its node (an 8-byte header, the key, the value) fits
# me_nodemax, ((PSIZE - 16) / 2 & -2) - 2 bytes; a larger one goes on overflow pages
NODEMAX = ((PSIZE - 16) // 2 & -2) - 2


def _on_overflow(key: bytes, value: bytes) -> bool:
    return 8 + len(key) + len(value) > NODEMAX


def _addr(buf) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer("uint8_t[]", buf)))


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(1, 40_000), min_size=1, max_size=30), seed=st.integers(0, 9))
def test_every_record_as_lmdb_returns_it(tmp_path_factory, sizes: list[int], seed: int) -> None:
    path = tmp_path_factory.mktemp("env")
    rng = np.random.default_rng(seed)
    env = lmdb.open(str(path), map_size=1 << 26, max_dbs=2)
    db = env.open_db(b"t")
    want = {}
    with env.begin(write=True) as txn:
        for i, n in enumerate(sizes):
            key = b"k" + i.to_bytes(8, "big")
            want[key] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            txn.put(key, want[key], db=db)
    big = [k for k, v in want.items() if _on_overflow(k, v)]
    with env.begin(buffers=True) as txn:
        cur = txn.cursor(db=db)
        base = None
        for key in big[:1]:
            assert cur.set_key(key)
            base = lmdbmap.map_base(cur.key(), cur.value(), PSIZE)
            assert base is not None
        pages = env.info()["last_pgno"] + 1
        for key, value in want.items():
            assert cur.set_key(key)
            got = None if base is None else lmdbmap.map_value(base, pages, PSIZE, cur.key())
            ref = txn.get(key, db=db)
            if _on_overflow(key, value):  # on overflow pages: found in place, where LMDB has it
                assert got is not None and bytes(got) == value
                assert _addr(got) == _addr(ref)
            else:  # inline in its leaf: not a value of its own pages
                assert got is None
                if base is not None:
                    assert lmdbmap.map_base(cur.key(), ref, PSIZE) is None
            assert bytes(ref) == value
        # a copy of a key is not in the map; a bound short of the value's pages refuses it
        if base is not None:
            assert cur.set_key(big[0])
            assert lmdbmap.map_value(base, pages, PSIZE, bytes(cur.key())) is None
            off = _addr(txn.get(big[0], db=db)) - base
            assert lmdbmap.map_value(base, off // PSIZE, PSIZE, cur.key()) is None
    env.close()


def _forged(npages: int = 6) -> tuple[bytearray, int, int, int]:
    """A map of 8 pages: leaf page 2 holding one node (key b"run", value of 2 overflow pages
    at page 4). Returns (the map, the key's offset, the value's size, its offset)."""
    m = bytearray(8 * PSIZE + PSIZE)  # one spare page to align the map within
    shift = -_addr(m) % PSIZE
    leaf = shift + 2 * PSIZE
    m[leaf:leaf + 8] = (2).to_bytes(8, "little")
    m[leaf + 10:leaf + 12] = (0x02).to_bytes(2, "little")  # P_LEAF
    size = PSIZE + 100  # two pages with the header
    node = leaf + 200
    m[node:node + 2] = (size & 0xFFFF).to_bytes(2, "little")
    m[node + 2:node + 4] = (size >> 16).to_bytes(2, "little")
    m[node + 4:node + 6] = (0x01).to_bytes(2, "little")  # F_BIGDATA
    m[node + 6:node + 8] = (3).to_bytes(2, "little")
    m[node + 8:node + 11] = b"run"
    m[node + 11:node + 19] = (4).to_bytes(8, "little")
    ov = shift + 4 * PSIZE
    m[ov:ov + 8] = (4).to_bytes(8, "little")
    m[ov + 10:ov + 12] = (0x04).to_bytes(2, "little")  # P_OVERFLOW
    m[ov + 12:ov + 16] = (2).to_bytes(4, "little")
    m[ov + 16:ov + 16 + size] = bytes(range(256)) * (size // 256) + bytes(size % 256)
    return m, shift, node + 8, size


def _look(m: bytearray, shift: int, key_at: int, pages: int = 8):
    view = memoryview(m)
    return lmdbmap.map_value(_addr(view) + shift, pages, PSIZE, view[key_at:key_at + 3])


def test_a_forged_map_is_read_as_laid_out() -> None:
    m, shift, key_at, size = _forged()
    got = _look(m, shift, key_at)
    assert got is not None and len(got) == size
    assert bytes(got) == bytes(m[shift + 4 * PSIZE + 16:shift + 4 * PSIZE + 16 + size])


@pytest.mark.parametrize("field, at, value", [
    ("leaf page number", lambda s, k: s + 2 * PSIZE, (3).to_bytes(8, "little")),
    ("leaf page flags", lambda s, k: s + 2 * PSIZE + 10, (0x01).to_bytes(2, "little")),
    ("node flags", lambda s, k: k - 4, (0x00).to_bytes(2, "little")),
    ("node key size", lambda s, k: k - 2, (4).to_bytes(2, "little")),
    ("first page past the map", lambda s, k: k + 3, (7).to_bytes(8, "little")),
    ("first page a meta page", lambda s, k: k + 3, (1).to_bytes(8, "little")),
    ("overflow page number", lambda s, k: s + 4 * PSIZE, (5).to_bytes(8, "little")),
    ("overflow page flags", lambda s, k: s + 4 * PSIZE + 10, (0x02).to_bytes(2, "little")),
    ("overflow page count", lambda s, k: s + 4 * PSIZE + 12, (3).to_bytes(4, "little")),
    ("size beyond the map", lambda s, k: k - 6, (0x40).to_bytes(2, "little")),
])
def test_a_wrong_field_turns_the_lookup_down(field: str, at, value: bytes) -> None:
    m, shift, key_at, _ = _forged()
    where = at(shift, key_at)
    m[where:where + len(value)] = value
    assert _look(m, shift, key_at) is None, field


def test_a_key_outside_the_map_or_a_bad_bound_is_turned_down() -> None:
    m, shift, key_at, _ = _forged()
    assert _look(m, shift, key_at, pages=5) is None  # the value's last page beyond the bound
    view = memoryview(m)
    assert lmdbmap.map_value(_addr(view) + shift + PSIZE, 8, PSIZE,
                             view[key_at:key_at + 3]) is None  # the key's page is not page 2
    assert lmdbmap.map_value(_addr(view) + shift, 8, 1000,
                             view[key_at:key_at + 3]) is None  # not a page size
