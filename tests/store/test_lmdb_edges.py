"""LMDB's edges under a store: a full reader table, readers that pin freed pages, and a disk
that fills during commits (docs/durability.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simstore import SimStore
from simstore.crawl import Frontier
from simstore.exceptions import StoreError

_HOLD = """
import lmdb, sys
env = lmdb.open(sys.argv[1], max_dbs=64, readonly=True)
txns = []
try:
    while len(txns) < int(sys.argv[2]):
        txns.append(env.begin())
except lmdb.ReadersFullError:
    pass
print(len(txns), flush=True)
sys.stdin.read()
"""


def _holder(path: Path, most: int) -> tuple[subprocess.Popen[str], int]:
    """A process holding up to ``most`` read transactions on path (each a reader slot)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), str(most)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()


def test_a_full_reader_table_refuses_an_open_clearly_and_passes(tmp_path) -> None:
    """Every reader slot held (as by more processes than slots, each keeping one while the
    store is open): a new open raises StoreError naming max_readers; once they let go, it
    opens and reads."""
    path = tmp_path / "s"
    with SimStore(path, max_readers=64) as s:
        s.add("a", 1)
    holder, held = _holder(path, 10**6)
    try:
        assert held >= 64
        with pytest.raises(StoreError, match="max_readers"):
            SimStore(path)
    finally:
        _release(holder)
    with SimStore(path) as s:
        assert s["a"] == 1 and s.verify() == []


def _churn(path: Path, rounds: int, pin: tuple[int, int] | None = None) -> list[int]:
    """A 4,000-document store, 10% of it replaced a round (add_many, then expire of the
    oldest); with pin=(a, b) a process holds a read transaction from round a to b. The
    data file's size after each round."""
    rng = np.random.default_rng(5)
    per, t0 = 400, 1e9
    sizes, holder = [], None
    with SimStore(path, k=3, expected_size=8000, durable="unsafe") as s:
        for i in range(10):
            s.add_many(range(i * per, (i + 1) * per),
                       rng.integers(0, 2**63, per, dtype=np.int64), at=t0 + i)
        for r in range(rounds):
            if pin and r == pin[0]:
                holder, _ = _holder(path, 1)
            if pin and r == pin[1] and holder is not None:
                _release(holder)
                holder = None
            new = range((10 + r) * per, (11 + r) * per)
            s.add_many(new, rng.integers(0, 2**63, per, dtype=np.int64), at=t0 + 10 + r)
            s.expire(before=t0 + r + 1)
            sizes.append(os.path.getsize(path / "data.mdb"))
        assert len(s) == 10 * per
    return sizes


def test_freed_pages_are_reused_once_a_long_reader_ends(tmp_path) -> None:
    """Without a long reader the file levels off; a reader pinning its snapshot makes it grow
    by the pages written meanwhile, and after it ends the file grows no more."""
    free = _churn(tmp_path / "free", 24)
    assert free[-1] <= free[11] * 1.25  # levelled off
    pinned = _churn(tmp_path / "pinned", 24, pin=(2, 10))
    assert pinned[9] > free[9] * 1.5  # grew while pinned
    assert pinned[-1] == pinned[11]  # nothing more after the reader ended


def _mount_ext4(tmp_path: Path, mib: int) -> Path:
    """A small ext4 file system on a loop device (skips where mounting is not allowed)."""
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(mib << 20)
    mnt.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    if made.returncode != 0 or subprocess.run(
            ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot make and mount a loop ext4 file system here (needs root)")
    return mnt


def test_a_disk_that_fills_during_commits_loses_nothing_acknowledged(tmp_path) -> None:
    """On a real 8 MiB ext4: durable single adds and frontier pushes until the disk is full
    end in StoreError saying so; once space is freed the handle writes on, and after a
    reopen every acknowledged write is there and verify() is clean."""
    mnt = _mount_ext4(tmp_path, 8)
    try:
        path, acked, pushed = mnt / "s", [], 0
        rng = np.random.default_rng(2)
        with SimStore(path, k=3) as s:
            frontier = Frontier(s)
            st = os.statvfs(mnt)
            (mnt / "fill").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (1 << 20)))
            with pytest.raises(StoreError, match="disk is full"):
                for i in range(10**6):
                    s.add(f"d{i}", int(rng.integers(2**63)))
                    acked.append(i)
                    frontier.push(0, b"p" * 500, i.to_bytes(8, "big"))
                    pushed += 1
            os.remove(mnt / "fill")
            s.add("after", 7)  # the same handle writes on
        assert len(acked) > 100
        with SimStore(path) as s:
            assert s.verify() == []
            assert all(s.get(f"d{i}") is not None for i in acked) and s["after"] == 7
            assert Frontier(s).pending() >= pushed
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
