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


# --- the B-tree walk (ss_map_lookup): every key as LMDB finds it ---------------------------

_ROOT = slice(40, 48)  # a named database's record in the main database: its root page ...
_DEPTH = slice(6, 8)  # ... and its tree's depth


def _tree(txn, name: bytes) -> tuple[int, int]:
    """(root page, depth) of a named database in txn's snapshot."""
    raw = txn.get(name)
    root = int.from_bytes(raw[_ROOT], "little")
    return root, 0 if root == 2**64 - 1 else int.from_bytes(raw[_DEPTH], "little")


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(0, 3000),
    big=st.lists(st.integers(0, 2999), max_size=8),
    gone=st.lists(st.integers(0, 2999), max_size=300),
    seed=st.integers(0, 9),
)
def test_the_tree_walk_finds_every_key_as_lmdb_does(tmp_path_factory, n, big, gone, seed):
    """ss_map_lookup from the database's root, against txn.get for every key, present or
    deleted or never written, inline and on overflow pages, trees of depth 0 to 3."""
    path = tmp_path_factory.mktemp("tree")
    rng = np.random.default_rng(seed)
    env = lmdb.open(str(path), map_size=1 << 27, max_dbs=2)
    db = env.open_db(b"docs")
    with env.begin(write=True) as txn:
        for i in range(n):
            size = 5000 if i in big else int(rng.integers(20, 300))
            txn.put(i.to_bytes(8, "big"), rng.integers(0, 256, size, dtype=np.uint8).tobytes(),
                    db=db)
        for i in gone:
            txn.delete(i.to_bytes(8, "big"), db=db)
    with env.begin(buffers=True) as txn:
        cur = txn.cursor(db=db)
        base = lmdbmap.base_of_page(cur.key(), PSIZE) if cur.first() else 0
        assert base is not None
        root, depth = _tree(txn, b"docs")
        pages = env.info()["last_pgno"] + 1
        keys = [*range(0, n + 5), 2**64 - 1, 2**63]
        found = lmdbmap.lookup(base or _addr(bytearray(PSIZE)), pages, PSIZE, root, depth, keys)
        assert found is not None
        offs, lens = found
        for j, key in enumerate(keys):
            ref = txn.get(key.to_bytes(8, "big"), db=db)
            if ref is None:
                assert offs[j] == 0
            else:
                assert offs[j] > 0 and _addr(ref) == base + offs[j] and lens[j] == len(ref)
    env.close()


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from([0x01, 0x02, 0x04, 0x12, 0x00]), min_size=4, max_size=4),
    root=st.integers(0, 8),
    depth=st.integers(0, 40),
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=6),
)
def test_the_tree_walk_over_garbage_never_reads_outside(seed, kinds, root, depth, keys):
    """Pages of random nodes under headers that pass the page-number check, any root and
    depth: the walk finds nothing, turns the lookup down, or names a value inside the pages
    it was given; never a read past them."""
    rng = np.random.default_rng(seed)
    m = bytearray(rng.integers(0, 256, 6 * PSIZE, dtype=np.uint8).tobytes())
    for p, kind in zip(range(2, 6), kinds, strict=True):
        at = p * PSIZE
        lower = 16 + 2 * int(rng.integers(0, 40))
        upper = int(rng.integers(lower, PSIZE + 2))
        m[at : at + 8] = p.to_bytes(8, "little")
        m[at + 10 : at + 16] = (kind.to_bytes(2, "little") + lower.to_bytes(2, "little")
                                + upper.to_bytes(2, "little"))
        for i in range((lower - 16) // 2):  # node pointers mostly inside the page
            ptr = int(rng.integers(max(upper - 8, 0), PSIZE + 16)) & ~1
            m[at + 16 + 2 * i : at + 18 + 2 * i] = (ptr & 0xFFFF).to_bytes(2, "little")
            if ptr + 8 <= PSIZE:  # a key size and child page that the walk may follow
                ks = int(rng.choice([0, 8, 8, 8, 300, 5000]))
                m[at + ptr + 6 : at + ptr + 8] = ks.to_bytes(2, "little")
                m[at + ptr : at + ptr + 2] = int(rng.integers(0, 9)).to_bytes(2, "little")
    found = lmdbmap.lookup(_addr(m), 6, PSIZE, root, depth, keys)
    if found is not None:
        offs, lens = found
        for j in range(len(keys)):
            assert offs[j] == 0 or 2 * PSIZE <= offs[j] <= offs[j] + lens[j] <= 6 * PSIZE


def test_the_map_base_comes_from_a_leaf_page_only() -> None:
    """base_of_page reads the page number of the page a buffer lies in: a leaf's gives the
    map's address, anything else (a branch, a bad bound) None."""
    m = bytearray(8 * PSIZE)
    base = _addr(m)
    shift = -base % PSIZE  # a page-aligned view of the bytearray
    page = shift + 3 * PSIZE
    m[page : page + 8] = (3 + (base + shift) // PSIZE * 0).to_bytes(8, "little")
    m[page + 10 : page + 12] = (0x02).to_bytes(2, "little")  # a leaf
    m[page + 12 : page + 16] = (16).to_bytes(2, "little") + (100).to_bytes(2, "little")
    at = ffi.from_buffer("uint8_t[]", m) + page + 200
    assert lmdbmap.base_of_page(ffi.buffer(at, 8), PSIZE) == base + shift
    m[page + 10 : page + 12] = (0x01).to_bytes(2, "little")  # a branch
    assert lmdbmap.base_of_page(ffi.buffer(at, 8), PSIZE) is None
    m[page + 10 : page + 12] = (0x02).to_bytes(2, "little")
    assert lmdbmap.base_of_page(ffi.buffer(ffi.from_buffer("uint8_t[]", m) + page + 50, 8),
                                PSIZE) is None  # below the page's upper bound
