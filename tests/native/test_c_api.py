"""The C core's interface: named return codes, short parameter lists, one LMDB layout."""

from __future__ import annotations

import pathlib
import re
import struct

import lmdb
import pytest

from simstore.exceptions import SimstoreError
from simstore.native import core, lmdbmap, single
from simstore.native.core import ffi, lib
from simstore.store.check import lmdbfile
from simstore.store.format import RecordCodec

CSRC = pathlib.Path(__file__).resolve().parents[2] / "csrc"
MAX_PARAMS = 15
STATUS = ["SS_OK", "SS_IDENTICAL", "SS_ENOMEM", "SS_EINVAL", "SS_ENEED", "SS_EMAP",
          "SS_EROOM", "SS_EBADCODE", "SS_EOS"]


def c_functions() -> dict[str, tuple[str, int]]:
    """Every function defined in csrc/*.c: name -> (file, parameter count)."""
    out = {}
    for path in sorted(CSRC.glob("*.c")):
        text = re.sub(r"/\*.*?\*/", " ", path.read_text(encoding="utf-8"), flags=re.S)
        text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*\{", text):
            name, params = m.group(1), m.group(2).strip()
            if name not in {"if", "for", "while", "switch", "return", "sizeof"}:
                out[name] = (path.name, 0 if params in ("", "void") else params.count(",") + 1)
    return out


def test_no_c_function_takes_more_than_15_parameters():
    """Parameters that travel together go in a struct: no function of csrc/ takes over 15."""
    funcs = c_functions()
    assert "ss_similar_one" in funcs and "ss_map_lookup" in funcs  # (the parser sees them)
    over = {name: n for name, (_, n) in funcs.items() if n > MAX_PARAMS}
    assert over == {}


def test_no_c_function_returns_a_bare_negative_number():
    """Every failure of csrc/ is returned by its name in enum ss_status, never as -N."""
    bare = [f"{p.name}: {line.strip()}" for p in sorted(CSRC.glob("*.c"))
            for line in p.read_text(encoding="utf-8").splitlines()
            if re.search(r"return\s+-\d|\?\s*-\d|:\s*-\d\s*;|rc\s*=\s*-\d", line)]
    assert bare == []


def test_every_status_has_its_words_and_a_package_exception():
    """Each code of enum ss_status has its own ss_strerror words and maps to one exception
    of the package (or MemoryError); any other value reads as unknown."""
    codes = {name: getattr(lib, name) for name in STATUS}
    assert len(set(codes.values())) == len(codes)
    words = {code: core.strerror(code) for code in codes.values()}
    assert len(set(words.values())) == len(words)
    assert "unknown status" not in words.values()
    assert core.strerror(-99) == "unknown status"
    for name, code in codes.items():
        if name == "SS_OK":
            continue
        exc = core.ERRORS[code]
        assert issubclass(exc, (SimstoreError, MemoryError)), name
        with pytest.raises(exc, match=re.escape(words[code])):
            core.raise_for(code, "testing")


def test_the_lmdb_layout_of_c_and_of_the_checks_is_one():
    """csrc's LMDB page, node and database-record layout is the one lmdbfile.py parses."""
    assert lib.SS_LMDB_PAGE_HEAD == lmdbfile.PAGE_HEADER == lmdbfile.HEADER.size
    assert lib.SS_LMDB_NODE_HEAD == lmdbfile.NODE_HEADER == lmdbfile.NODE.size
    assert lib.SS_LMDB_DB_RECORD == lmdbfile.DB_RECORD
    assert lib.SS_LMDB_NO_ROOT == lmdbfile.EMPTY
    assert lib.SS_LMDB_MAX_DEPTH == lmdbfile.MAX_DEPTH
    assert (lib.SS_LMDB_P_BRANCH, lib.SS_LMDB_P_LEAF, lib.SS_LMDB_P_OVERFLOW,
            lib.SS_LMDB_P_LEAF2) == (lmdbfile.P_BRANCH, lmdbfile.P_LEAF,
                                     lmdbfile.P_OVERFLOW, lmdbfile.P_LEAF2)
    assert lib.SS_LMDB_F_BIGDATA == lmdbfile.F_BIGDATA
    # every field of a record distinct: C's depth and root are the parser's
    raw = struct.pack("<IHHQQQQQ", 1, 2, 3, 4, 5, 6, 7, 8)
    rec = lmdbfile.Record.parse(raw, 0)
    tree = lmdbmap.tree(0, 0, 4096, 0, 0)
    assert lmdbmap.tree_of_record(raw, tree)
    assert (tree.depth, tree.root) == (rec.depth, rec.root) == (3, 8)
    assert not lmdbmap.tree_of_record(raw[:-1], tree)


def test_a_named_database_record_reads_as_lmdb_wrote_it(tmp_path):
    """The record LMDB writes for a named database gives C the root and depth the checks'
    parser reads from it, and depth 0 while the tree is empty."""
    env = lmdb.open(str(tmp_path / "e"), max_dbs=2, map_size=1 << 24)
    try:
        db = env.open_db(b"docs")
        tree = lmdbmap.tree(0, 0, 4096, 0, 0)
        with env.begin() as txn:
            assert lmdbmap.tree_of_record(txn.get(b"docs"), tree) and tree.depth == 0
        with env.begin(write=True) as txn:
            for i in range(5000):
                txn.put(i.to_bytes(8, "big"), b"x" * 40, db=db)
        with env.begin() as txn:
            raw = txn.get(b"docs")
            rec = lmdbfile.Record.parse(raw, 0)
            assert lmdbmap.tree_of_record(raw, tree)
            assert (tree.depth, tree.root) == (rec.depth, rec.root) and rec.depth >= 2
    finally:
        env.close()


def test_the_docs_layout_c_reads_is_the_codecs():
    """ss_docs_layout is filled from the record codec alone: a record it writes has the
    fingerprint, sketch, time and id where the layout says."""
    codec = RecordCodec(sketch_words=2, nbands=3)
    layout = single.docs_layout(codec)
    sketch = struct.pack("<QQ", 11, 22)
    rec = codec.record(0x0102030405060708, b"i\x05", sketch, b"\x00" * 12)
    rec = codec.restamp(rec, 1234)
    assert rec[0] == layout.tag == codec.version
    assert int.from_bytes(rec[layout.fp_start:layout.fp_start + 8], "big") == 0x0102030405060708
    assert rec[layout.sketch_start:layout.sketch_start + 8 * layout.words] == sketch
    assert int.from_bytes(rec[layout.at_start:layout.at_start + 8], "big") == 1234
    assert rec[layout.id_start:] == b"i\x05"
    assert ffi.typeof(layout) is ffi.typeof("ss_docs_layout *")
