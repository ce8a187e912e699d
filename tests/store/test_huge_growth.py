"""A writer prepares its next pages in huge pages (``readahead.HugeGrowth``).

Inside each write transaction the data file is extended past the pages in use and the new
part read into the page cache through a mapping advised into huge pages, so LMDB's writes
land in 2 MiB folios every reader then maps whole. What must hold: the file only grows,
never past the map, and only by a hole (no byte of the store changes); the store answers
and verifies as before, in this process and in a fresh one; small stores, read-only
handles and stores without readahead are left alone; and where this kernel can map file
pages whole at all, a fresh reader does map the pages written this way whole.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simstore import SimStore
from simstore.store.env import readahead as R

from ..oracles import brute_matches
from ..testlib import env

HUGE = R.HUGE_PAGE


def _data(path: Path) -> Path:
    return path / "data.mdb"


def _fill(s: SimStore, rng: np.random.Generator, start: int, n: int, per_commit: int) -> None:
    for lo in range(start, start + n, per_commit):
        s.add_many(range(lo, lo + per_commit),
                   rng.integers(0, 2**64 - 1, per_commit, dtype=np.uint64, endpoint=True))


def test_a_writer_keeps_room_past_its_pages_and_the_store_stays_whole(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every commit leaves the file at least as long as its pages in use and at most the
    room past them; the room is a hole; answers equal brute force before and after a
    reopen, and verify() finds nothing."""
    monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 0)
    rng = np.random.default_rng(5)
    path = tmp_path / "s"
    sizes = []
    with SimStore(path, k=3, durable=False, readahead=True) as s:
        for step in range(12):
            _fill(s, rng, step * 3000, 3000, 500)
            used, st = s.stats()["used_bytes"], os.stat(_data(path))
            sizes.append(st.st_size)
            assert used <= st.st_size <= used + R.HUGE_ROOM_MAX + HUGE
            assert st.st_size == used or st.st_size % HUGE == 0  # extended to a boundary
        assert sizes == sorted(sizes) and sizes[-1] > s.stats()["used_bytes"]
        # the room is a hole: the blocks on disk are about the pages in use
        assert os.stat(_data(path)).st_blocks * 512 < s.stats()["used_bytes"] + HUGE
        stored = dict(s.items())
        assert s.verify() == []
    qs = rng.integers(0, 2**64 - 1, 20, dtype=np.uint64, endpoint=True).tolist()
    qs[:10] = [fp ^ 0b101 for fp in list(stored.values())[::3000][:10]]
    with SimStore(path, readonly=True) as s:
        for q in qs:
            assert s.query(q, 3) == brute_matches(stored, q, 3)
        assert s.verify() == []


def test_room_is_made_for_a_bulk_write_within_the_map(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """HugeGrowth alone, on a plain file: room for need bytes (two huge pages at least,
    HUGE_ROOM_MAX at most), never past the map, never shrinking the file, and nothing
    while half the room is ready or for a store below HUGE_GROWTH_FROM."""
    data = tmp_path / "f"
    data.write_bytes(b"x" * 5000)
    g = R.HugeGrowth(str(data))
    monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 1 << 40)
    assert g.before_write(5000, 0, 1 << 30) == 0 and data.stat().st_size == 5000
    monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 0)
    if g.before_write(5000, 0, 1 << 30) == 0:  # the OS could not: the file may have grown
        assert not g.able
        pytest.skip("this OS cannot read a file in through a huge-page mapping")
    assert data.stat().st_size == 3 * HUGE  # 5000 bytes in use + two huge pages, rounded
    assert data.read_bytes()[:5000] == b"x" * 5000  # the bytes in use untouched
    assert g.before_write(HUGE, 0, 1 << 30) == 0  # half the room (one huge page) still ready
    assert g.before_write(HUGE, 6 * HUGE, 1 << 30) == 4 * HUGE  # a bulk write's need
    assert data.stat().st_size == 7 * HUGE  # past used + need, to a boundary
    assert g.before_write(6 * HUGE, 1 << 40, 8 * HUGE) == HUGE  # capped by the map
    assert data.stat().st_size == 8 * HUGE
    g.ready = 0  # forgetting what it knew changes nothing: the file's size is read again
    assert g.before_write(HUGE, 0, 1 << 30) == 0 and data.stat().st_size == 8 * HUGE
    big = R.HugeGrowth(str(data))
    assert big.before_write(0, 1 << 40, 1 << 40) > 0  # HUGE_ROOM_MAX, not the need
    assert data.stat().st_size == max(8 * HUGE, R.HUGE_ROOM_MAX)


@pytest.mark.parametrize("how", ["small", "readonly", "no readahead"])
def test_files_are_left_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                              how: str) -> None:
    """A small store, a read-only handle and a store without readahead (larger than
    memory: its readers never map huge pages) keep the file LMDB writes."""
    path = tmp_path / "s"
    rng = np.random.default_rng(6)
    if how != "small":
        monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 0)
    with SimStore(path, k=3, durable=False, readahead=how != "no readahead") as s:
        if how == "readonly":
            monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 1 << 40)  # the writer adds none
        _fill(s, rng, 0, 4000, 1000)
        size = os.stat(_data(path)).st_size
        assert size < HUGE or how == "readonly"
    if how == "readonly":
        monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 0)
        with SimStore(path, readonly=True, readahead=True) as s:
            assert env(s)._growth is None
            assert len(s.query(int(s.fingerprints()[0]), 3)) >= 1
        assert os.stat(_data(path)).st_size == size


def _whole_mappings(path: Path) -> bool:
    """Whether this kernel maps a file's pages whole once written in 2 MiB pieces into a
    mapping advised into huge pages (ext4 or xfs with large folios, THP on madvise)."""
    f = path / "probe"
    with open(f, "wb") as fh:
        for _ in range(4):
            fh.write(os.urandom(HUGE))
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 4 * HUGE, prot=mmap.PROT_READ) as m:
        if not hasattr(mmap, "MADV_HUGEPAGE"):
            return False
        m.madvise(mmap.MADV_HUGEPAGE)
        sum(m[i] for i in range(0, 4 * HUGE, 4096))
        return _pmd_kib(str(f)) > 0


def _pmd_kib(name: str, field: str = "FilePmdMapped") -> int:
    """KiB of this process's mappings of file name mapped whole (or another smaps field)."""
    total, inside = 0, False
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5:
            inside = len(parts) >= 6 and parts[5] == name
        elif inside and line.startswith(field + ":"):
            total += int(parts[1])
    return total


READER = """
import sys
sys.path.insert(0, sys.argv[2])
from simstore import SimStore
from tests.store.test_huge_growth import _pmd_kib
with SimStore(sys.argv[1], readonly=True, readahead=True) as s:
    for fp in s.fingerprints()[::7].tolist():
        assert s.query(fp, 3)
    print(_pmd_kib(sys.argv[1] + "/data.mdb"), _pmd_kib(sys.argv[1] + "/data.mdb", "Rss"))
"""


def test_a_fresh_reader_maps_the_written_pages_whole(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """Where the kernel can map file pages whole, a reader in another process maps most of
    the pages it reads whole, though commits wrote them (alone they would be 4 KB folios:
    LMDB writes at most 64 pages at once)."""
    if sys.platform != "linux" or not _whole_mappings(tmp_path):
        pytest.skip("this kernel or file system does not map file pages whole")
    monkeypatch.setattr(R, "HUGE_GROWTH_FROM", 0)
    path = tmp_path / "s"
    rng = np.random.default_rng(7)
    with SimStore(path, k=3, durable=False, readahead=True) as s:
        _fill(s, rng, 0, 150_000, 1000)
        assert s.stats()["used_bytes"] > 5 * HUGE
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", READER, str(path), root], check=True,
                         capture_output=True, text=True).stdout
    whole, resident = map(int, out.split()[-2:])
    assert resident > 4 * HUGE // 1024 and whole >= resident // 2, (whole, resident)
