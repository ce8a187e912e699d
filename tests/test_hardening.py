"""Hostile conditions: forks under threads, dropped handles, failed creation."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from types import SimpleNamespace

import lmdb
import pytest

from simstore import SimStore, StoreAccessError, StoreError


def _lock_fds(path) -> int:
    """Open descriptors of this process on the store's lock file."""
    target = os.path.realpath(os.path.join(path, "simstore.lock"))
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(f"/proc/self/fd/{fd}") == target:
                n += 1
        except OSError:
            pass
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_dropped_handles_release_their_lock_file(tmp_path) -> None:
    """100 handles dropped without close() leave no descriptor, and rebuild() works after."""
    path = tmp_path / "s"
    for i in range(100):
        SimStore(path, durable=False).add(i, i)  # dropped at once, never closed
    gc.collect()
    assert _lock_fds(path) == 0
    with SimStore(path) as s:
        assert s.rebuild()["count"] == 100 and s.verify() == []


def _fork_child(body) -> int:
    """Fork; the child runs body() under a 20 s alarm (exit 0 if it returns True); the
    child's exit code (or -signal) in the parent."""
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            os._exit(0 if body() else 3)
        except StoreError as exc:
            os._exit(5 if "fork()" in str(exc) else 6)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def _hold(s, seconds: float, batch: bool):
    """A thread inside a store call (holding the handle, or inside batch()) for `seconds`."""
    inside = threading.Event()

    def busy() -> None:
        if batch:
            with s.batch():
                s.add("x", 1)
                inside.set()
                time.sleep(seconds)
        else:
            with s._env.lock:  # what a long call (a bulk add) holds
                inside.set()
                time.sleep(seconds)

    t = threading.Thread(target=busy)
    t.start()
    inside.wait(5)
    return t


@pytest.mark.parametrize("batch", [False, True])
def test_fork_waits_for_a_call_in_flight_then_the_child_opens_its_own(tmp_path, batch) -> None:
    """A thread is inside a call (or a batch) as the process forks: fork waits for it to end,
    and the child reads and writes through its own environment."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 7)
        t = _hold(s, 0.3, batch)
        code = _fork_child(lambda: [m.doc_id for m in s.query(7, 0)] == ["a"]
                           and s.add("child", 8) is None)
        t.join()
        assert code == 0
        assert s.get("child") == 8 and (not batch or s.get("x") == 1)


@pytest.mark.parametrize("batch", [False, True])
def test_fork_during_a_call_longer_than_the_wait_is_refused_in_the_child(tmp_path, monkeypatch,
                                                                         batch) -> None:
    """A call in flight that outlasts FORK_WAIT: the child's use of the handle raises
    StoreInUseError naming fork(), at once (never a hang); the parent goes on."""
    from simstore.store.env import forks

    monkeypatch.setattr(forks, "FORK_WAIT", 0.1)
    with SimStore(tmp_path / "s") as s:
        s.add("a", 7)
        t = _hold(s, 1.0, batch)
        start = time.monotonic()
        code = _fork_child(lambda: s.query(7, 0) is not None)
        assert code == 5 and time.monotonic() - start < 1.0
        t.join()
        s.add("after", 9)
        assert s.get("after") == 9 and s.verify() == []


_BUSY_FORKS = """
import os, sys, threading, time
import numpy as np
from simstore import SimStore
s = SimStore(sys.argv[1], durable=False)
s.add("a", 7)
stop = threading.Event()
def writer():
    n = 0
    while not stop.is_set():
        s.add_many([f"w{n}-{i}" for i in range(2000)],
                   np.arange(n * 2000 + 100, n * 2000 + 2100, dtype=np.uint64) * 7919)
        n += 1
def reader():
    while not stop.is_set():
        s.query(7, 0)
threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
for t in threads:
    t.start()
time.sleep(0.2)
kids = []
for k in range(5):
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        import signal
        signal.alarm(20)
        ok = [m.doc_id for m in s.query(7, 0)] == ["a"]
        s.add(f"child{k}", 8 + k)
        sys.exit(0 if ok else 3)  # a normal exit: the interpreter's shutdown runs too
    kids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in kids]
stop.set()
for t in threads:
    t.join()
print(codes, s.verify(), sum(f"child{k}" in s for k in range(5)))
"""


def test_fork_while_threads_write_and_read_children_never_hang(tmp_path) -> None:
    """A real process: two threads inside add_many/query in a loop, five forks; every child
    answers, writes through its own environment and exits; the store verifies."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-c", _BUSY_FORKS, str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "[0, 0, 0, 0, 0] [] 5", res.stdout


def _leftovers(tmp_path) -> list[str]:
    return sorted(os.listdir(tmp_path))


def test_failed_create_leaves_nothing_behind(tmp_path, monkeypatch) -> None:
    """A create that fails inside LMDB leaves no files; the path can be created after."""
    real_open = lmdb.open

    def failing_open(*args, **kwargs):
        raise lmdb.Error("Cannot allocate memory")

    monkeypatch.setattr(lmdb, "open", failing_open)
    with pytest.raises(StoreError, match="Cannot allocate memory"):
        SimStore(tmp_path / "s")
    assert _leftovers(tmp_path) == []
    monkeypatch.setattr(lmdb, "open", real_open)
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
    assert _leftovers(tmp_path) == ["s"]


def test_create_on_a_full_filesystem_is_refused_cleanly(tmp_path, monkeypatch) -> None:
    """With no free space, creation raises StoreAccessError before writing anything."""
    full = SimpleNamespace(f_bavail=10, f_frsize=4096)
    monkeypatch.setattr(os, "statvfs", lambda path: full)
    (tmp_path / "empty").mkdir()
    for target in ("s", "empty"):
        with pytest.raises(StoreAccessError, match="MiB free"):
            SimStore(tmp_path / target)
    assert _leftovers(tmp_path) == ["empty"] and os.listdir(tmp_path / "empty") == []


def test_huge_expected_size_and_map_size(tmp_path) -> None:
    """expected_size=10**15 creates a store (the map starts capped); an impossible map_size
    is an error that leaves nothing behind."""
    with SimStore(tmp_path / "big", expected_size=10**15, durable=False) as s:
        s.add("a", 1)
        assert s.query(1, 0)[0].doc_id == "a"
    with pytest.raises(StoreError):
        SimStore(tmp_path / "s", map_size=1 << 62)
    assert _leftovers(tmp_path) == ["big"]


def test_two_processes_creating_one_store_agree(tmp_path) -> None:
    """Concurrent creators: one wins the rename, the other opens the winner's store."""
    path = tmp_path / "s"
    pids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            try:
                with SimStore(path, k=3) as s:
                    s.add(f"p{i}", i)
                os._exit(0)
            except BaseException:
                os._exit(1)
        pids.append(pid)
    codes = [os.waitpid(p, 0)[1] for p in pids]
    assert all(os.WIFEXITED(c) and os.WEXITSTATUS(c) == 0 for c in codes)
    with SimStore(path) as s:
        assert sorted(s) == ["p0", "p1", "p2", "p3"] and s.verify() == []
    time.sleep(0)
    assert _leftovers(tmp_path) == ["s"]


def test_compact_destinations_that_cannot_work_are_refused_cleanly(tmp_path) -> None:
    """compact('dest/'), a destination under a file, or an existing one: package errors, no debris."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
        s.compact(str(tmp_path / "copy") + "/")  # a trailing slash names the directory
        with SimStore(tmp_path / "copy", readonly=True) as c:
            assert c["a"] == 1
        (tmp_path / "file").write_text("x")
        with pytest.raises(StoreAccessError, match="not an existing directory"):
            s.compact(tmp_path / "file" / "dest")
        with pytest.raises(StoreError, match="exists"):
            s.compact(tmp_path / "copy")
        with pytest.raises(StoreError, match="exists"):
            s.compact(tmp_path / "file")
    assert sorted(os.listdir(tmp_path)) == ["copy", "file", "s"]


def test_a_filesystem_that_fills_up_mid_write_leaves_a_sound_store(tmp_path) -> None:
    """On a real 6 MiB tmpfs filled by writes: a StoreError naming the full disk, no signal,
    the committed documents intact and verify() clean (skipped where mounting is not allowed)."""
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (mnt / "fill").write_bytes(b"\0" * 1_500_000)
        with SimStore(mnt / "s", durable=False) as s:
            with pytest.raises(StoreError, match="disk is full"):
                for i in range(10_000):
                    s.add_many(range(i * 1000, i * 1000 + 1000), list(range(i * 1000, i * 1000 + 1000)))
            n = len(s)
            assert n > 0 and n % 1000 == 0 and s.verify() == []
            assert s.get(n - 1) == n - 1 and s.get(n) is None
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
