"""A damaged page of a run table, of database ``runs`` (state, merges, tombstones) or of an
exact store's shingle sets: every operation whose cursor walks it is CorruptStoreError
naming the page (never an abort inside LMDB), and verify reports it."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from simstore.store import SimStore
from simstore.store.verify import needs_restore
from tests.testlib import child_prelude, merging, small, state_of, tree_pages

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/store/..)
PSIZE = 4096
DOCS = 40_000  # internal ids over 79 tombstone blocks of 512: two leaves of them


# --------------------------------------------------------------------------- damage

def _zeroed(page: bytearray) -> None:
    page[:] = bytes(PSIZE)


def _renumbered(page: bytearray) -> None:
    """The page says it is another (a write that landed one page off)."""
    struct.pack_into("<Q", page, 0, struct.unpack_from("<Q", page)[0] + 1)


def _node_outside(page: bytearray) -> None:
    """Its first node's offset points past the page's end."""
    struct.pack_into("<H", page, 16, PSIZE - 2)


def _child_to_meta(page: bytearray) -> None:
    """A branch's last node points to meta page 1 (in range for LMDB, no leaf)."""
    n = (struct.unpack_from("<H", page, 12)[0] - 16) // 2
    ptr = struct.unpack_from("<H", page, 16 + 2 * (n - 1))[0]
    struct.pack_into("<HHH", page, ptr, 1, 0, 0)


DAMAGE: dict[str, tuple[bool, Callable[[bytearray], None]]] = {  # (a branch?, how)
    "zeroed leaf": (False, _zeroed),
    "leaf with a wrong page number": (False, _renumbered),
    "leaf with a node outside it": (False, _node_outside),
    "branch pointing to a meta page": (True, _child_to_meta),
}


def _damaged(sound: Path, path: Path, name: bytes, damage: str) -> int:
    """Copy the store at sound to path, the last leaf (or the root branch) of database name
    damaged; the page."""
    path.mkdir()
    data = path / "data.mdb"
    data.write_bytes((sound / "data.mdb").read_bytes())
    branch, how = DAMAGE[damage]
    branches, leaves = tree_pages(data, name)
    pgno = branches[0] if branch else leaves[-1]
    with open(data, "r+b") as fh:
        fh.seek(pgno * PSIZE)
        page = bytearray(fh.read(PSIZE))
        how(page)
        fh.seek(pgno * PSIZE)
        fh.write(page)
    return pgno


# --------------------------------------------------------------------------- stores

# a level of 40k docs: 200 runs a table, each on overflow pages (as in any large store)
SMALL = {"RECENT_MAX": 8, "RUN_ENTRIES": 200}


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run tables of short runs (two levels of pages each, the levels' indexes on the last
    leaves), tombstones on the last leaf of database runs; two levels, no merge under way."""
    path = tmp_path_factory.mktemp("runs") / "s"
    with pytest.MonkeyPatch.context() as mp:
        small(mp, **SMALL)
        with SimStore(path, k=3) as s:
            s.add_many(range(DOCS), [i * 0x9E3779B97F4A7C15 % (1 << 64) for i in range(DOCS)])
            s.remove_many(range(0, DOCS, 509))  # a tombstone in every block
            s.add_many(range(DOCS, DOCS + 20), list(range(20)))  # a second level
            assert len(state_of(s).levels) == 2 and merging(s) is None
    for name in (b"r00", b"runs"):
        branches, leaves = tree_pages(path / "data.mdb", name)
        assert branches and len(leaves) >= 2, (name, branches, leaves)
    return path


WORDS = [f"w{i}" for i in range(3000)]
TEXTS = [" ".join(random.Random(i).choices(WORDS, k=400)) for i in range(160)]


@pytest.fixture(scope="module")
def exact_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exact store whose shingle sets take two levels of pages."""
    path = tmp_path_factory.mktemp("exact") / "s"
    with SimStore(path, exact=True) as s:
        s.add_many(range(len(TEXTS)), TEXTS)
    branches, _ = tree_pages(path / "data.mdb", b"shingles")
    assert branches
    return path


# --------------------------------------------------------------------------- calls

# per database: the store, and the operations whose cursors walk the damaged page
CALLS = {
    b"r00": ("runs_store", {
        "query": "s.query(12345, 3)",  # opens each level: its index
        "add_many": "s.add_many(range(-30, 0), range(30))",  # a new level's index
        "rebuild": "s.rebuild()",  # frees the tables' pages, reading their overflow runs
        "compact": "s.compact({dest!r})",
        "verify": "s.verify()",
    }),
    b"runs": ("runs_store", {
        "merge_levels": "s.merge_levels()",  # its tombstones
        # LMDB empties database runs reading only its branches (no record of it spills
        # onto overflow pages): a rebuild mends a damaged leaf
        "rebuild": "s.rebuild() and s.verify()",
        "compact": "s.compact({dest!r})",
        "verify": "s.verify()",
    }),
    b"shingles": ("exact_store", {
        "similar": f"s.similar({TEXTS[-1]!r}, 0.5)",  # the last doc's set, by key
        "remove": f"s.remove({len(TEXTS) - 1})",  # by key
        "add_many": "s.add_many(['x', 'y'], ['a new text', 'another new text'])",
        "compact": "s.compact({dest!r})",
        "verify": "s.verify()",
    }),
}


# Lookups by key (a query's candidates' sets, a removed doc's): LMDB steps to no other
# leaf, refuses a page of the wrong kind itself (the guard then names it) and reads past
# damage it cannot see (a page's own number, a node its search does not reach)
KEYED = {"similar", "remove"}
WRONG_KIND = {"zeroed leaf", "branch pointing to a meta page"}


@pytest.mark.parametrize("name", sorted(CALLS), ids=lambda n: n.decode())
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_walk_refuses_a_damaged_page(request, tmp_path, name, damage):
    """Each operation walking the damaged page (on a copy of its own) raises
    CorruptStoreError naming it and advising to restore data.mdb, in a child process that
    lives (no SIGABRT, SIGSEGV or SIGBUS); a lookup by key does where LMDB refuses the
    page; verify reports the page, and its advice is a restore: a rebuild frees the run
    tables through the same pages, and keeps the shingle sets as they are (they come from
    the texts, not the docs table)."""
    fixture, calls = CALLS[name]
    sound = request.getfixturevalue(fixture)
    todo = []
    for what, call in calls.items():
        path = tmp_path / what
        pgno = _damaged(sound, path, name, damage)
        todo.append((what, str(path), call.format(dest=str(tmp_path / f"{what}-copy"))))
    code = child_prelude(SMALL) + textwrap.dedent(f"""
        from simstore import CorruptStoreError, SimStore
        for what, path, call in {todo!r}:
            try:
                with SimStore(path) as s:
                    got = eval(call)
            except CorruptStoreError as exc:
                print("refused:", what, exc)
            else:
                print("answered:", what, got[0] if what == "verify" and got else got)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode} (negative: a signal): {r.stderr[-800:]}"
    lines = r.stdout.splitlines()
    assert [ln.split()[1] for ln in lines] == list(calls), r.stdout
    where = f"database '{name.decode()}': page {pgno}"
    for line in lines:
        if line.startswith("answered: verify "):
            problem = line.removeprefix("answered: verify ")
            assert where in problem and needs_restore([problem]), line
        elif name == b"runs" and not DAMAGE[damage][0] and " rebuild" in line:
            assert line == "answered: rebuild []", line  # mended: verify finds nothing
        elif line.split()[1] in KEYED and damage not in WRONG_KIND:
            continue  # it lives: read past
        else:
            assert line.startswith("refused:") and where in line, line
            assert "restore data.mdb from a copy" in line, line
