"""Group commit: writes of threads that waited for a store's lock share one commit, each
call's result and error its own (simstore/store/env/group.py)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from simstore import SimStore

from .test_durability import counting_flushes


def _queued_behind_lock(store: SimStore, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread while this thread holds the store's lock, letting
    go once all are queued (in list order); each call's result or exception."""
    env = store._env
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[i] = exc

    threads = []
    with env.lock:
        for i in range(len(calls)):
            t = threading.Thread(target=run, args=(i,))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 10
            while len(env.shared.queue) < i + 1:
                assert time.monotonic() < deadline, "a write never queued"
                time.sleep(0.001)
    for t in threads:
        t.join(10)
    return out


def test_writes_queued_together_take_one_commit(tmp_path) -> None:
    """Eight threads' adds queued while a commit runs: one commit for all, all stored."""
    with SimStore(tmp_path / "s", k=3) as s:
        s.add("first", 1)
        before = s._env.last_txnid()
        _queued_behind_lock(s, [lambda i=i: s.add(f"t{i}", i << 20) for i in range(8)])
        assert s._env.last_txnid() == before + 1
        assert sorted(s) == ["first", *(f"t{i}" for i in range(8))]
        assert s.verify() == []


def test_each_write_sees_those_queued_before_it(tmp_path) -> None:
    """Two near copies through add_if_new in one group: the first is stored, the second
    is told of it, as if the calls ran one after the other."""
    with SimStore(tmp_path / "s", k=3) as s:
        got = _queued_behind_lock(s, [lambda: s.add_if_new("a", 0xF0F0),
                                      lambda: s.add_if_new("b", 0xF0F1)])
        assert got[0] == [] and [m.doc_id for m in got[1]] == ["a"]
        assert sorted(s) == ["a"]


def test_an_error_reaches_only_its_own_caller(tmp_path) -> None:
    """A write whose operation raises leaves the group: its caller gets the error, the
    writes queued beside it are committed (together)."""
    with SimStore(tmp_path / "s", k=3) as s:
        def boom(txn: Any) -> None:
            raise KeyError("boom")

        before = s._env.last_txnid()
        got = _queued_behind_lock(s, [lambda: s.add("x", 1),
                                      lambda: s._env.write_grouped(boom),
                                      lambda: s.add("y", 2)])
        assert got[0] is None and got[2] is None
        assert isinstance(got[1], KeyError)
        assert sorted(s) == ["x", "y"] and s._env.last_txnid() == before + 1


def test_a_durable_handle_in_a_group_gets_its_meta_flush(tmp_path) -> None:
    """A durable=True handle's write committed in a group led by a durable=False handle
    is flushed whole (one meta flush for the group); a group of durable=False writes
    is not."""
    with SimStore(tmp_path / "s", durable=False) as normal, \
            SimStore(tmp_path / "s", durable=True) as full:
        with counting_flushes(normal) as counting:
            _queued_behind_lock(normal, [lambda: normal.add("a", 1), lambda: normal.add("b", 2)])
            assert counting.flushes == 0
            _queued_behind_lock(normal, [lambda: normal.add("c", 3), lambda: full.add("d", 4)])
            assert counting.flushes == 1
        assert sorted(full) == ["a", "b", "c", "d"]


def test_many_threads_writing_at_once_lose_nothing(tmp_path) -> None:
    """Threads adding and removing at once, unsynchronized: every add is there, every
    removed id gone, verify() clean, and fewer commits than calls."""
    threads = 4
    with SimStore(tmp_path / "s", k=3) as s:
        before = s._env.last_txnid()

        def work(t: int) -> None:
            for i in range(60):
                s.add(f"{t}.{i}", (t << 32) | i)
                if i % 3 == 0:
                    s.remove(f"{t}.{i}")

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        want = {f"{t}.{i}" for t in range(threads) for i in range(60) if i % 3}
        assert set(s) == want and s.verify() == []
        assert s._env.last_txnid() - before < threads * 80


def test_a_forked_child_never_runs_the_parents_queued_writes(tmp_path) -> None:
    """A child forked while a write waits in the queue writes on its own: the parent's
    queued write runs in the parent only."""
    def queued(txn: Any) -> None:
        (tmp_path / f"ran-in-{os.getpid()}").touch()

    with SimStore(tmp_path / "s", k=3) as s:
        env = s._env
        with env.lock:
            t = threading.Thread(target=lambda: env.write_grouped(queued))
            t.start()
            while not env.shared.queue:
                time.sleep(0.001)
            pid = os.fork()
            if pid == 0:  # the child: the queue it inherited must not run here
                code = 1
                try:
                    s.add("child", 3)
                    code = 0 if s["child"] == 3 else 2
                finally:
                    os._exit(code)
        t.join(10)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert sorted(p.name for p in tmp_path.glob("ran-in-*")) == [f"ran-in-{os.getpid()}"]
