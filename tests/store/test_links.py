"""A store never follows a symbolic link planted among its files (issue #48 item 10)."""

from __future__ import annotations

import os

import pytest

from simstore import SimStore, StoreAccessError, StoreError, upgrade


@pytest.mark.parametrize("name", ["simstore.lock", "lock.mdb", "data.mdb"])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_planted_link_is_refused_and_its_target_never_created(tmp_path, name, readonly):
    """Each file of the store planted as a link to a missing file: the open is refused
    with StoreAccessError naming the file, and the link's target is not created."""
    path = tmp_path / "s"
    with SimStore(path) as s:
        s.add("a", 7)
    target = tmp_path / "victim"
    if name == "data.mdb":
        os.rename(path / name, tmp_path / "real.mdb")
    else:
        os.unlink(path / name)
    os.symlink(target, path / name)
    with pytest.raises(StoreAccessError, match=f"{name} is a symbolic link"):
        SimStore(path, readonly=readonly)
    assert not os.path.lexists(target)


def test_upgrade_refuses_a_planted_lock_link(tmp_path):
    """upgrade() takes the same lock: a linked simstore.lock is refused, target uncreated."""
    path = tmp_path / "s"
    SimStore(path).close()
    os.unlink(path / "simstore.lock")
    os.symlink(tmp_path / "victim", path / "simstore.lock")
    with pytest.raises(StoreError, match="symbolic link"):
        upgrade(path)
    assert not os.path.lexists(tmp_path / "victim")
