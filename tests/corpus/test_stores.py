"""simstore.corpus.open_store: the one door to a corpus run's store."""

from __future__ import annotations

import os

import pytest

from simstore import SimStore
from simstore.corpus import ExactPass, open_store
from simstore.exceptions import NotExactStoreError, SimstoreValueError


def test_a_scratch_store_is_private_and_gone_after(tmp_path):
    """Without a store: a private, not persistent store whose directory is removed on exit."""
    with open_store(threshold=0.9) as opened:
        assert not opened.persistent and opened.store.config.has_signature
        where = opened.store.path
        assert os.path.exists(where)
    assert not os.path.exists(where)


def test_a_new_path_is_removed_when_the_run_fails_before_storing(tmp_path):
    """A path created by the run goes again if the run fails with nothing stored."""
    path = tmp_path / "new"
    with pytest.raises(RuntimeError), open_store(path, threshold=0.9) as opened:
        assert opened.persistent
        raise RuntimeError("the run failed")
    assert not path.exists()
    with open_store(path, threshold=0.9):
        pass
    assert path.exists()


def test_the_callers_store_stays_open_and_a_wrong_kind_is_refused(tmp_path):
    """A SimStore given is not closed; a fingerprint store for a threshold, or a store
    without sets for exact, is refused before any work."""
    with SimStore(tmp_path / "fp") as store:
        with open_store(store, k=3) as opened:
            assert opened.store is store and opened.persistent
        assert len(store) == 0  # still usable
        with pytest.raises(SimstoreValueError, match="keeps fingerprints only"):
            with open_store(store, threshold=0.9):
                pass
    with pytest.raises(NotExactStoreError):
        with open_store(tmp_path / "fp", k=3, exact=True):
            pass


def test_the_exact_pass_keeps_the_first_of_each_group_or_the_largest_value():
    """ExactPass over texts: copies point at the first (input order) or the largest value."""
    words = " ".join(f"w{i}" for i in range(60))
    texts = [words, "other text " * 20, words + " end", words]
    with ExactPass(0.9) as first:
        first.add(texts[:2])
        first.add(texts[2:])
        assert first.decide().rep.tolist() == [0, 1, 0, 0]
    with ExactPass(0.9) as longest:
        longest.add(texts)
        values = [float(len(t)) for t in texts]
        assert longest.decide(values).rep.tolist() == [2, 1, 2, 2]
