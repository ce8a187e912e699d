"""Durability modes: the LMDB flags each opens with, how handles sharing one environment
combine them, and the values ``durable=`` takes (tools.stress powerloss proves what the
flags keep after an OS crash: tests/store/test_powerloss.py)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from simstore import SimStore
from simstore.exceptions import InvalidConfigError, SimstoreTypeError, StoreInUseError
from simstore.store.env.durability import flush_after, lmdb_flags, refusal


@pytest.mark.parametrize(("durable", "name", "sync", "metasync"), [
    (True, "full", True, True),
    (False, "normal", True, False),
    ("unsafe", "unsafe", False, False),
    ("normal", "normal", True, False),
])
def test_each_mode_opens_lmdb_with_its_flushes(tmp_path, durable, name, sync, metasync) -> None:
    """durable=False flushes data at commit (sync on, metasync off); only 'unsafe' skips it."""
    with SimStore(tmp_path / "s", durable=durable) as s:
        s.add("a", 1)
        flags = s._env.env.flags()
        assert (s.durability, flags["sync"], flags["metasync"]) == (name, sync, metasync)


def test_a_pickled_handle_keeps_its_mode(tmp_path) -> None:
    """Pickling reopens with the same durability (a worker never gets a weaker one)."""
    with SimStore(tmp_path / "s", durable="unsafe") as s:
        assert pickle.loads(pickle.dumps(s)).durability == "unsafe"


@pytest.mark.parametrize(("value", "error"), [
    ("fast", InvalidConfigError), (None, SimstoreTypeError), (1.5, SimstoreTypeError),
    ("", InvalidConfigError),
])
def test_durable_refuses_what_names_no_mode(tmp_path, value, error) -> None:
    """durable= takes a bool or a mode name; anything else is refused before any file is made."""
    with pytest.raises(error, match="'durable' must be"):
        SimStore(tmp_path / "s", durable=value)
    assert not (tmp_path / "s").exists()


def test_a_safe_handle_never_joins_an_unsafe_environment(tmp_path) -> None:
    """Its commits would go through MDB_NOSYNC, which no later flush makes safe: refused."""
    with SimStore(tmp_path / "s", durable="unsafe") as first:
        first.add("a", 1)
        for mode in (True, False):
            with pytest.raises(StoreInUseError, match="durable='unsafe'"):
                SimStore(tmp_path / "s", durable=mode)
        with SimStore(tmp_path / "s", durable="unsafe") as second:
            assert second["a"] == 1


class _CountingEnv:
    """An lmdb environment that counts its forced flushes."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.flushes = 0

    def sync(self, force: bool = False) -> None:
        self.flushes += 1
        self._env.sync(force)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


@contextmanager
def counting_flushes(store: SimStore) -> Iterator[_CountingEnv]:
    """The store's shared lmdb environment counting the flushes simstore forces."""
    shared = store._env.shared
    real = shared.env
    shared.env = counting = _CountingEnv(real)
    try:
        yield counting
    finally:
        shared.env = real


def test_a_full_handle_flushes_the_meta_page_of_a_normal_environment(tmp_path) -> None:
    """A durable=True handle joining a durable=False environment flushes after each of its
    commits; the durable=False handle does not."""
    with SimStore(tmp_path / "s", durable=False) as normal, \
            SimStore(tmp_path / "s", durable=True) as full:
        with counting_flushes(normal) as counting:
            normal.add("a", 1)
            assert counting.flushes == 0
            full.add("b", 2)
            full.remove("a")
            assert counting.flushes == 2
        assert dict(full.items()) == {"b": 2}


def test_the_rules_rank_the_modes() -> None:
    """full > normal > unsafe: a stronger handle flushes what the environment skips; only an
    unsafe environment is refused, and only to a stronger handle."""
    modes = ("unsafe", "normal", "full")
    for i, mode in enumerate(modes):
        for j, env_mode in enumerate(modes):
            assert flush_after(mode, env_mode) == (i > j)
            assert (refusal(mode, env_mode) is None) == (env_mode != "unsafe" or i == 0)
    assert lmdb_flags("normal") == {"sync": True, "metasync": False}


def _fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths os.fsync is called on from now on (read back from /proc/self/fd)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_new_store_and_a_compacted_copy_are_flushed_before_they_are_named(
        tmp_path, monkeypatch) -> None:
    """A power loss after SimStore() or compact() returns cannot lose the name or the
    copy's data: the directory a store is renamed into is flushed, and a compacted copy's
    files and directory before its rename."""
    seen = _fsynced(monkeypatch)
    with SimStore(tmp_path / "s") as s:
        assert str(tmp_path) in seen
        s.add("a", 1)
        seen.clear()
        s.compact(tmp_path / "copy")
    copies = [p for p in seen if ".simstore-tmp-" in p]
    assert any(p.endswith("data.mdb") for p in copies) and any(
        not p.endswith(".mdb") for p in copies)
    assert seen[-1] == str(tmp_path)
    with SimStore(tmp_path / "copy", readonly=True) as c:
        assert c["a"] == 1
