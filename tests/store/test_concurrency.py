"""Many processes, one store: writers, snapshot-checking readers, add_if_new races, fork safety."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import select
import signal

import pytest

import simstore
from simstore.store import Match, SimStore
from tools.stress.ops import run_ops

METHODS = ["fork", "spawn"]


def _writer(path: str, w: int, n_ops: int, out) -> None:
    """Random add / add_many / remove on ids 'w<w>.*'; sends the acknowledged final state."""
    rng = random.Random(w)
    model: dict[str, int] = {}
    with SimStore(path) as s:
        for _ in range(n_ops):
            r = rng.random()
            if r < 0.5:
                i, fp = f"w{w}.{rng.randrange(100)}", rng.getrandbits(64)
                s.add(i, fp)
                model[i] = fp
            elif r < 0.8:
                ids = [f"w{w}.{rng.randrange(100)}" for _ in range(rng.randint(2, 60))]
                fps = [rng.getrandbits(64) for _ in ids]
                s.add_many(ids, fps)
                model.update(zip(ids, fps, strict=False))
            else:
                i = f"w{w}.{rng.randrange(100)}"
                assert s.remove(i) == (i in model)
                model.pop(i, None)
    out.put(("writer", w, model))


def _reader(path: str, r: int, stop, out) -> None:
    """verify() (one read transaction = one snapshot) in a loop; sends what it saw."""
    seen = []
    problems: list[str] = []
    with SimStore(path, readonly=True) as s:
        while not stop.is_set() or not seen:
            problems += s.verify()
            seen.append(len(s))
    out.put(("reader", r, (seen, problems)))


@pytest.mark.parametrize("method", METHODS)
def test_writers_and_readers_share_one_store(tmp_path, method) -> None:
    """3 writers + 2 readers: every acknowledged write is there; no reader sees a half-written doc."""
    ctx = multiprocessing.get_context(method)
    path = str(tmp_path / "s")
    SimStore(path, k=3, expected_size=1000).close()
    out, stop = ctx.Queue(), ctx.Event()
    writers = [ctx.Process(target=_writer, args=(path, w, 120, out)) for w in range(3)]
    readers = [ctx.Process(target=_reader, args=(path, r, stop, out)) for r in range(2)]
    for p in readers + writers:
        p.start()
    results = {}
    for _ in writers:
        kind, n, value = out.get(timeout=120)
        results[(kind, n)] = value
    stop.set()
    for _ in readers:
        kind, n, value = out.get(timeout=120)
        results[(kind, n)] = value
    for p in readers + writers:
        p.join(timeout=60)
        assert p.exitcode == 0
    with SimStore(path) as s:
        assert s.verify() == []
        for w in range(3):
            got = {d: fp for d, fp in s.items() if d.startswith(f"w{w}.")}
            assert got == results[("writer", w)]
    for r in range(2):
        seen, problems = results[("reader", r)]
        assert problems == [] and seen


def _race(path: str, p: int, bases: list[int], barrier, out) -> None:
    with SimStore(path) as s:
        wins = []
        for b, base in enumerate(bases):
            barrier.wait()
            if s.add_if_new(f"p{p}.b{b}", base ^ (1 << p)) == []:
                wins.append(b)
    out.put((p, wins))


@pytest.mark.parametrize("method", METHODS)
def test_add_if_new_racing_on_one_near_duplicate_stores_exactly_one(tmp_path, method) -> None:
    """4 processes add_if_new near-duplicates of one base at once, 25 times: one wins each time."""
    ctx = multiprocessing.get_context(method)
    path = str(tmp_path / "s")
    SimStore(path, k=3).close()
    rng = random.Random(7)
    bases = [rng.getrandbits(64) for _ in range(25)]
    out, barrier = ctx.Queue(), ctx.Barrier(4)
    procs = [ctx.Process(target=_race, args=(path, p, bases, barrier, out)) for p in range(4)]
    for p in procs:
        p.start()
    wins = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for b in range(len(bases)):
        assert sum(b in w for w in wins.values()) == 1, f"base {b}"
    with SimStore(path) as s:
        assert len(s) == len(bases) and s.verify() == []
        for base in bases:
            assert len(s.query(base, 1)) == 1


_INHERITED: SimStore | None = None


def _use_inherited(i: int) -> list[Match]:
    assert _INHERITED is not None
    _INHERITED.add(f"child{i}", 1000 + i)
    return _INHERITED.query(1000 + i, 0)


def test_store_opened_before_fork_works_in_pool_children(tmp_path) -> None:
    """A store opened (and read) before fork is reopened transparently in fork-pool children."""
    global _INHERITED
    with SimStore(tmp_path / "s") as s:
        s.add("parent", 1)
        assert s.query(1, 0)  # leaves the parent with a used environment to inherit
        _INHERITED = s
        try:
            with multiprocessing.get_context("fork").Pool(2) as pool:
                got = pool.map(_use_inherited, range(6))
        finally:
            _INHERITED = None
        assert got == [[Match(f"child{i}", 1000 + i, 0)] for i in range(6)]
        assert s.query(1, 0) == [Match("parent", 1, 0)] and len(s) == 7
        assert s.verify() == []


def _use_pickled(blob: bytes) -> tuple[int, int]:
    s = pickle.loads(blob)
    s.add(f"pid{os.getpid()}", 5)
    return s.k, len(s)


@pytest.mark.parametrize("method", METHODS)
def test_pickled_store_works_in_pool_workers(tmp_path, method) -> None:
    """A store passed to multiprocessing workers by pickle opens by path there and writes."""
    with SimStore(tmp_path / "s", k=5) as s:
        blob = pickle.dumps(s)
        with multiprocessing.get_context(method).Pool(2) as pool:
            got = pool.map(_use_pickled, [blob] * 4)
        assert all(k == 5 for k, _ in got)
        assert len(s) >= 1 and all(m.distance == 0 for m in s.query(5, 0))
        assert s.verify() == []


@pytest.mark.parametrize("method", METHODS)
def test_random_operations_in_several_processes(tmp_path, method) -> None:
    """python -m tools.stress ops, small: 3 processes of random ops, then verify() and every model."""
    assert run_ops(str(tmp_path / "s"), 3, 150, seed=3, method=method) == []


@pytest.mark.stress
@pytest.mark.parametrize("method", METHODS)
def test_random_operations_long(tmp_path, method) -> None:
    """The heavy variant: 6 processes x 3000 random operations."""
    assert run_ops(str(tmp_path / "s"), 6, 3000, seed=11, method=method) == []


def test_fork_inside_batch_is_refused_in_the_child(tmp_path) -> None:
    """A handle forked inside batch() refuses use in the child instead of deadlocking."""
    path = tmp_path / "s"
    store = SimStore(path, k=3)
    r, w = os.pipe()
    with store.batch():
        store.add("a", 1)
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                store.query(1)
            except simstore.StoreInUseError:
                code = 0
            except BaseException:  # noqa: BLE001 - any other outcome is a failure
                code = 2
            os.write(w, bytes([code]))
            os._exit(0)
        os.close(w)
        ready, _, _ = select.select([r], [], [], 30)
        if not ready:  # the child hangs on the parent's write lock: the bug
            os.kill(pid, signal.SIGKILL)
        got = os.read(r, 1) if ready else b"hang"
    os.waitpid(pid, 0)
    assert got == b"\x00"
    assert [m.doc_id for m in store.query(1, 0)] == ["a"]
    store.close()
