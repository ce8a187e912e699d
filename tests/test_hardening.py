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


def test_fork_while_another_thread_is_inside_a_call_does_not_hang_the_child(tmp_path) -> None:
    """A thread holds the handle (mid-call) as the process forks: the child still reads."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 7)
        inside, release = threading.Event(), threading.Event()

        def busy() -> None:
            with s._env.lock:  # what a long call (a bulk add) holds
                inside.set()
                release.wait(10)

        t = threading.Thread(target=busy)
        t.start()
        inside.wait(5)
        pid = os.fork()
        if pid == 0:  # child: must answer, not wait on the parent's thread's lock
            signal.alarm(20)
            try:
                ok = [m.doc_id for m in s.query(7, 0)] == ["a"]
                s.add("child", 8)
                os._exit(0 if ok else 3)
            except BaseException:
                os._exit(4)
        release.set()
        t.join()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert s.get("child") == 8


def test_fork_during_a_batch_in_another_thread_is_refused_in_the_child(tmp_path) -> None:
    """A fork while a thread is inside batch(): the child gets StoreInUseError, never hangs."""
    with SimStore(tmp_path / "s") as s:
        inside, release = threading.Event(), threading.Event()

        def batching() -> None:
            with s.batch():
                s.add("x", 1)
                inside.set()
                release.wait(10)

        t = threading.Thread(target=batching)
        t.start()
        inside.wait(5)
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            try:
                s.add("child", 2)
                os._exit(3)
            except StoreError as exc:
                os._exit(0 if "batch()" in str(exc) else 5)
            except BaseException:
                os._exit(4)
        release.set()
        t.join()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


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
