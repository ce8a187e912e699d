"""Thin binding of ``csrc/lmdbmap.c``: a record's value in LMDB's map, its pages untouched.

py-lmdb reads every page of a value it returns; :func:`map_value` finds the value of a
record a read transaction's cursor stands on from the key's leaf node alone, given where
the map lies, which :func:`map_base` finds from one value py-lmdb did return. Neither
ever gives memory outside the map; the caller keeps that memory valid (a read
transaction that sees the record, and no remap since the base was taken).
"""

from __future__ import annotations

from typing import Any

from .core import ffi, lib, raise_for

__all__ = ["advise_huge", "base_of_page", "lookup", "map_base", "map_buffer", "map_value",
           "place", "release", "snapshot_pages", "tree", "tree_of_record"]


def map_base(key: Any, value: Any, psize: int) -> int | None:
    """The map's address, from a record py-lmdb returned in place (key and value buffers
    of one read transaction begun with ``buffers=True``), or None when its value is not
    on overflow pages (or the buffers are copies)."""
    out = ffi.new("uintptr_t *")
    rc = lib.ss_map_base(ffi.from_buffer("uint8_t[]", key), len(key),
                         ffi.from_buffer("uint8_t[]", value), len(value), psize, out)
    return int(out[0]) if rc == lib.SS_OK else None


def map_value(base: int, pages: int, psize: int, key: Any) -> Any | None:
    """The value of the record whose key buffer is key (a cursor's, in a read transaction
    begun with ``buffers=True``) as a buffer over the map at base, of `pages` pages (no
    page of the snapshot lies beyond); None when it is not on overflow pages there (get
    it from LMDB instead)."""
    size = ffi.new("uint64_t *")
    off = lib.ss_map_value(ffi.cast("uint8_t *", base), pages, psize,
                           ffi.from_buffer("uint8_t[]", key), len(key), size)
    if off < 0:
        return None
    return ffi.buffer(ffi.cast("uint8_t *", base + off), size[0])


def advise_huge(start: int, size: int) -> bool:
    """Ask the OS for huge pages where it reads the file into the mapping [start, start +
    size) (a whole mapping the caller found in /proc/self/maps); whether it took the
    advice. Only how pages are read in changes, never their bytes."""
    return lib.ss_map_advise_huge(start, size) == lib.SS_OK


def release(start: int, size: int) -> bool:
    """Drop the pages this process has mapped in the mapping [start, start + size) (LMDB's
    map, found in /proc/self/maps) from its resident set; whether the OS did. They stay in
    the page cache and are mapped again, the same bytes, when next read: LMDB never
    writes through its map here (no ``writemap``), so nothing is lost."""
    return lib.ss_map_release(start, size) == lib.SS_OK


def base_of_page(at: Any, psize: int) -> int | None:
    """The map's address, from a buffer a read transaction returned inside a leaf page (a
    cursor's key, ``buffers=True``); None when that page does not read as a leaf."""
    out = ffi.new("uintptr_t *")
    rc = lib.ss_map_base_of_page(ffi.from_buffer("uint8_t[]", at), psize, out)
    return int(out[0]) if rc == lib.SS_OK else None


def tree(base: int, pages: int, psize: int, root: int, depth: int) -> Any:
    """The C view (ss_map_tree *) of the B-tree at root, depth levels deep, of the map at
    base (`pages` pages of psize bytes)."""
    return ffi.new("ss_map_tree *", {"map": ffi.cast("uint8_t *", base), "pages": pages,
                                     "psize": psize, "root": root, "depth": depth})


def place(t: Any, base: int, pages: int) -> None:
    """Point a tree (ss_map_tree *) at the map at base, of `pages` pages."""
    t.map = ffi.cast("uint8_t *", base)
    t.pages = pages


def tree_of_record(record: Any, t: Any) -> bool:
    """Set t's root and depth (an ss_map_tree *) from a named database's record in the
    main database (depth 0: an empty tree); False when it does not read as one."""
    rc = lib.ss_map_tree_of_record(ffi.from_buffer("uint8_t[]", record), len(record), t)
    if rc == lib.SS_EMAP:
        return False
    if rc != lib.SS_OK:
        raise_for(rc, "reading a database's record")
    return True


def lookup(base: int, pages: int, psize: int, root: int, depth: int, keys: list[int]
           ) -> tuple[Any, Any] | None:
    """Where the values of 8-byte keys (ints, big-endian) lie in the B-tree at root, depth
    levels deep, of the map at base (`pages` pages): (offsets, sizes) as cffi arrays, offset
    0 for a key the tree lacks; None when a page does not check out (ask LMDB)."""
    n = len(keys)
    cells = ffi.new("uint64_t[]", 2 * n + (n + 1) // 2)  # keys, offsets, then the sizes
    cells[0:n] = keys
    offs = ffi.cast("int64_t *", cells + n)
    lens = ffi.cast("uint32_t *", cells + 2 * n)
    rc = lib.ss_map_lookup(tree(base, pages, psize, root, depth), cells, n, offs, lens)
    if rc == lib.SS_EMAP:
        return None
    if rc != lib.SS_OK:
        raise_for(rc, "walking a tree of the map")
    return offs, lens


def snapshot_pages(info: dict[str, int], psize: int) -> int:
    """Pages no record of a snapshot this process reads lies beyond (from an environment's
    ``info()``: the last commit's, within this process's map): a map lookup's bound."""
    return int(min(info["last_pgno"] + 1, info["map_size"] // psize))


def map_buffer(base: int, size: int) -> Any:
    """The map at base, size bytes, as a buffer whose slices are bytes copies (of values
    :func:`lookup` found, while the transaction they were found in lives)."""
    return ffi.buffer(ffi.cast("char *", base), size)
