"""Handles on one store in one process: they share its environment, and a dropped one
lets go of it at once (issue #48 item 7)."""

from __future__ import annotations

import gc
import os
import weakref

import pytest

from simstore import (
    InvalidFingerprintError,
    ReadOnlyError,
    SimStore,
    StoreClosedError,
    StoreInUseError,
)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fds_into(directory) -> list[str]:
    """This process's descriptors open on files in directory (by /proc/self/fd's links):
    unlike a count, blind to what other tests' garbage and threads open and close."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, another thread)
            continue
        if target.startswith(f"{directory}{os.sep}"):
            out.append(target)
    return out


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "s"
    with SimStore(p) as s:
        s.add("a", 7)
    return p


def test_dropped_handles_never_block_a_reopen(path) -> None:
    """The issue's loop: a handle opened, queried and dropped, fifty times."""
    for _ in range(50):
        assert [m.doc_id for m in SimStore(path).query(7)] == ["a"]


def test_a_handle_kept_by_a_traceback_never_blocks_a_reopen(path) -> None:
    """The REPL keeps the last traceback (sys.last_traceback), and with it the frame of a
    handle whose call failed: the next SimStore(path) still opens."""
    try:
        SimStore(path).query("not a fingerprint")
    except InvalidFingerprintError as exc:
        kept = exc.__traceback__  # as the REPL keeps it
    assert [m.doc_id for m in SimStore(path).query(7)] == ["a"]
    del kept


def test_handles_still_referenced_share_the_store(path) -> None:
    """Handles kept alive elsewhere (a traceback, a notebook's Out) never block an open:
    each new SimStore joins the environment the others have open."""
    held = [SimStore(path) for _ in range(5)]
    held[3].add("b", 7)
    assert {m.doc_id for m in held[0].query(7)} == {"a", "b"}
    held[0].close()
    with pytest.raises(StoreClosedError):
        held[0].query(7)
    assert len(held[4]) == 2  # the others go on
    for s in held[1:]:
        s.close()


def test_the_last_close_releases_the_files(path) -> None:
    """The environment and the lock file close with the last handle on them."""
    before = _fds()
    a, b = SimStore(path), SimStore(path)
    a.close()
    assert _fds() > before
    b.close()
    assert _fds() == before


def test_a_handle_in_a_reference_cycle_is_released_by_gc(path, tmp_path) -> None:
    """A handle only a reference cycle keeps is closed when gc collects it: no descriptor
    on the store's files is left, whatever else the collection closes (garbage of earlier
    tests holding files: it made a count of all descriptors fail in the whole suite)."""

    class Cycle:
        """Garbage an earlier test could leave: a cycle holding an open file."""

    old = Cycle()
    old.me, old.file = old, open(tmp_path / "other", "wb")  # type: ignore[attr-defined]
    del old
    s = SimStore(path)
    s.me = s  # type: ignore[attr-defined]
    shared = weakref.ref(s._env.shared)
    assert _fds_into(path)
    del s
    gc.collect()
    assert shared() is None
    assert _fds_into(path) == []


def test_no_descriptor_leak_over_many_opens(path) -> None:
    """200 handles opened and dropped (some closed, some in a batch) leave no fd behind."""
    SimStore(path).query(7)
    before = _fds()
    for i in range(200):
        s = SimStore(path)
        if i % 3 == 0:
            with s.batch():
                s.add(f"d{i}", i)
        elif i % 3 == 1:
            s.close()
            continue
        s.query(7)
    del s
    assert _fds() == before


def test_writes_of_one_handle_in_anothers_batch_join_it(path) -> None:
    """In one thread, a second handle writing inside the first's batch() joins that batch:
    its write is seen inside, and aborted with it (LMDB has one writer per process)."""
    a, b = SimStore(path), SimStore(path)
    with pytest.raises(RuntimeError), a.batch():
        a.add("x", 1)
        b.add("y", 2)
        assert a.get("y") == 2 and b.get("x") == 1
        raise RuntimeError("abort")
    assert "x" not in b and "y" not in a
    with a.batch():
        b.add("y", 2)
    assert a.get("y") == 2
    a.close()
    b.close()


def test_whole_store_operations_need_the_only_handle(path) -> None:
    """rebuild() refuses while another SimStore of this process has the store open."""
    a, b = SimStore(path), SimStore(path)
    with pytest.raises(StoreInUseError, match="another SimStore of this process"):
        a.rebuild()
    b.close()
    assert a.rebuild()["count"] == 1
    a.close()


def test_readonly_and_writable_handles(path) -> None:
    """A readonly handle joins a writable one and still refuses writes; a writable open
    of a store this process has open readonly is refused, naming the fix."""
    w = SimStore(path)
    r = SimStore(path, readonly=True)
    with pytest.raises(ReadOnlyError):
        r.add("b", 1)
    w.add("b", 1)
    assert r.get("b") == 1
    w.close()
    r.close()
    r = SimStore(path, readonly=True)
    with pytest.raises(StoreInUseError, match="readonly=True"):
        SimStore(path)
    r.close()
    SimStore(path).close()


def test_shared_handles_after_fork(path) -> None:
    """After fork, both handles on a shared environment work in the child."""
    a, b = SimStore(path), SimStore(path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            b.add("child", 0xFFFF << 48)
            code = 0 if a.get("child") == 0xFFFF << 48 and len(b.query(7)) == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert a.get("child") == 0xFFFF << 48
    a.close()
    b.close()


def test_a_thread_joining_during_a_batch_waits_for_it(path, tmp_path) -> None:
    """Another thread opening the store while a batch is open joins after the batch ends
    and sees its writes; the batch's thread meanwhile opens other stores (no deadlock)."""
    import threading

    a = SimStore(path)
    seen: list[int | None] = []
    with a.batch():
        a.add("x", 1)
        t = threading.Thread(target=lambda: seen.append(SimStore(path).get("x")))
        t.start()
        t.join(0.3)
        assert t.is_alive()  # waiting for the batch's lock
        SimStore(tmp_path / "other").close()
    t.join(10)
    assert seen == [1]
    a.close()
