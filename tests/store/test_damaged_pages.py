"""A damaged docs page under a cursor: every walk of the docs table refuses it with
CorruptStoreError (never an abort inside LMDB), and verify advises restoring the file."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simstore.store import SimStore
from simstore.store.check.lmdbfile import read_metas
from tests.testlib import state_of, tree_pages

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/store/..)
PSIZE = 4096
FPS = list(range(0, 3000 * 7919, 7919))


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of a level (a bulk add) and recent docs after it, on a 2-level docs tree."""
    path = tmp_path_factory.mktemp("sound") / "s"
    with SimStore(path, k=3) as s:
        s.add_many([f"doc-{i}" for i in range(len(FPS))], FPS)
        s.add_many([f"r{i}" for i in range(200)], [12345 + i * 77777 for i in range(200)])
        st = state_of(s)
        assert st.next - st.flushed == 200  # the last 200 are recent docs
    return path


def _damaged(sound: Path, tmp_path: Path, payload: bytes) -> Path:
    path = tmp_path / "d"
    path.mkdir()
    (path / "data.mdb").write_bytes((sound / "data.mdb").read_bytes())
    leaf = tree_pages(path / "data.mdb", b"docs")[1][-1]  # where the recent docs lie
    with open(path / "data.mdb", "r+b") as fh:
        fh.seek(leaf * PSIZE)
        fh.write(payload)
    return path


PAYLOADS = {"zeroed": bytes(PSIZE), "random bytes": random.Random(3).randbytes(PSIZE)}
CALLS = {
    "query": "s.query(12345, 2)",
    "export": "list(s.items())",
    "snapshot": "s.snapshot()",
    "scan above k": "s.query(12345, 10)",
    "rebuild": "s.rebuild()",
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_docs_walk_refuses_a_damaged_leaf_of_recent_docs(sound, tmp_path, payload):
    """Query, export, snapshot, a scan and rebuild each raise CorruptStoreError naming the
    page and saying to restore data.mdb, in a child process that lives (no SIGABRT)."""
    path = _damaged(sound, tmp_path, PAYLOADS[payload])
    code = textwrap.dedent(f"""
        from simstore import CorruptStoreError, SimStore
        for call in {list(CALLS.values())!r}:
            try:
                with SimStore({str(path)!r}) as s:
                    eval(call)
            except CorruptStoreError as exc:
                print("refused:", exc)
            else:
                print("answered:", call)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode} (negative: a signal): {r.stderr[-500:]}"
    lines = r.stdout.splitlines()
    assert len(lines) == len(CALLS), r.stdout
    for line in lines:
        assert line.startswith("refused:") and "database 'docs'" in line, line
        assert "restore data.mdb from a copy" in line, line


def test_cli_on_a_damaged_docs_leaf_exits_1_and_verify_advises_restoring(sound, tmp_path):
    """simstore-cli query, export and rebuild exit 1 with one line (no abort); verify's
    advice is to restore data.mdb, not a rebuild that reads the same pages."""
    path = _damaged(sound, tmp_path, bytes(PSIZE))
    for args in (["query", "--k", "2", str(path), "0x3039"], ["export", str(path)],
                 ["rebuild", str(path)], ["verify", str(path)]):
        r = subprocess.run([sys.executable, "-m", "simstore", "--quiet", *args],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 1, (args, r.returncode, r.stderr[-500:])
        last = r.stderr.strip().splitlines()[-1]
        assert "Traceback" not in r.stderr and "restore data.mdb from a copy" in last, last
        if args[0] != "verify":
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        else:
            assert "rebuild' re-lays" not in last, last


def test_a_sound_store_walks_as_before(sound, tmp_path):
    """The guard passes every walk of a sound store: query, export and a rebuild answer."""
    path = _damaged(sound, tmp_path, b"")  # a copy, nothing written over
    with SimStore(path) as s:
        assert s.query(12345, 0)[0].doc_id == "r0"
        assert len(list(s.items())) == len(FPS) + 200
        assert s.rebuild()["count"] == len(FPS) + 200


# --------------------------------------------------------------------------- upgrade

DEV = ROOT / "tests" / "data" / "dev-stores" / "dev17-similarity"  # a 2-level docs tree


def _last_page_past_the_end(data: Path) -> None:
    metas = read_metas(str(data), PSIZE)
    slot = max(range(2), key=lambda i: metas[i].txnid)  # type: ignore[union-attr]
    with open(data, "r+b") as fh:
        fh.seek(slot * PSIZE + 136)  # the newest meta's last page number
        fh.write((metas[slot].last_pg + 40).to_bytes(8, "little"))  # type: ignore[union-attr]


def _write_at_last_leaf(payload: bytes, name: bytes = b"docs"):
    def damage(data: Path) -> None:
        leaf = tree_pages(data, name)[1][-1]
        with open(data, "r+b") as fh:
            fh.seek(leaf * PSIZE)
            fh.write(payload)
    return damage


def _truncate_half(data: Path) -> None:
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size // 2)


UPGRADE_DAMAGE = {
    "zeroed docs leaf": _write_at_last_leaf(bytes(PSIZE)),
    "random docs leaf": _write_at_last_leaf(random.Random(4).randbytes(PSIZE)),
    "zeroed leaf of a table it drops": _write_at_last_leaf(bytes(PSIZE), b"runs"),
    "last page past the end": _last_page_past_the_end,
    "truncated to half": _truncate_half,
}


@pytest.mark.parametrize("case", sorted(UPGRADE_DAMAGE))
def test_upgrade_refuses_a_damaged_development_store_in_one_line(tmp_path, case):
    """simstore-cli upgrade runs the structural check before LMDB maps a page: a damaged
    store is refused with one line and exit 1 (no SIGBUS/SIGABRT), and left unchanged."""
    path = tmp_path / "dev"
    path.mkdir()
    (path / "data.mdb").write_bytes((DEV / "data.mdb").read_bytes())
    UPGRADE_DAMAGE[case](path / "data.mdb")
    before = (path / "data.mdb").read_bytes()
    r = subprocess.run([sys.executable, "-m", "simstore", "--quiet", "upgrade", str(path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, f"exit {r.returncode} (negative: a signal): {r.stderr[-500:]}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "looks damaged: data.mdb: " in lines[0], r.stderr
    assert "restore data.mdb from a copy" in lines[0]
    assert (path / "data.mdb").read_bytes() == before
