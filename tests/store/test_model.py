"""Model-based test: random API sequences against a dict + brute-force oracle."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from simstore.store import Match, SimStore

from ..oracles import brute_matches
from ..strategies import fingerprints, near_neighbour

doc_ids = st.one_of(st.integers(-5, 40), st.sampled_from(["a", "b", "é", "x" * 600, "y" * 600]))


class StoreMachine(RuleBasedStateMachine):
    """SimStore vs an insertion-ordered dict {doc_id: fp}; every answer is compared."""

    fps = Bundle("fps")

    @initialize(k=st.integers(0, 5))
    def open_store(self, k: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="simstore-model-")
        self.path = f"{self.dir}/s"
        self.store = SimStore(self.path, k=k, expected_size=1000, durable=False)
        self.model: dict = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _put(self, doc_id, fp: int) -> None:
        # a re-added id with a changed fingerprint moves to the end of insertion
        # order (it gets a new internal id); with the same one it stays put
        if self.model.get(doc_id, fp) != fp:
            del self.model[doc_id]
        self.model[doc_id] = fp

    @rule(target=fps, fp=fingerprints)
    def new_fp(self, fp: int) -> int:
        return fp

    @rule(target=fps, base=fps, data=st.data())
    def neighbour(self, base: int, data) -> int:
        return data.draw(near_neighbour(base, 8))

    @rule(doc_id=doc_ids, fp=fps)
    def add(self, doc_id, fp: int) -> None:
        self.store.add(doc_id, fp)
        self._put(doc_id, fp)

    @rule(items=st.lists(st.tuples(doc_ids, fps), max_size=12))
    def add_many(self, items) -> None:
        self.store.add_many([d for d, _ in items], [fp for _, fp in items])
        last = {d: (n, fp) for n, (d, fp) in enumerate(items)}  # the last duplicate wins
        # stored ids are updated first, then the new ones appended (each in call order)
        ordered = sorted(last.items(), key=lambda kv: (kv[0] not in self.model, kv[1][0]))
        for d, (_, fp) in ordered:
            self._put(d, fp)

    @rule(doc_id=doc_ids)
    def remove(self, doc_id) -> None:
        assert self.store.remove(doc_id) == (doc_id in self.model)
        self.model.pop(doc_id, None)

    @rule(ids=st.lists(doc_ids, max_size=6))
    def remove_many(self, ids) -> None:
        want = len({d for d in ids if d in self.model})
        assert self.store.remove_many(ids) == want
        for d in ids:
            self.model.pop(d, None)

    @rule(q=fps, dk=st.integers(-1, 4))
    def query(self, q: int, dk: int) -> None:
        k = max(0, self.store.k + dk)
        assert self.store.query(q, k) == brute_matches(self.model, q, k)

    @rule(qs=st.lists(fps, max_size=4))
    def query_many(self, qs) -> None:
        k = self.store.k
        assert self.store.query_many(qs, k) == [brute_matches(self.model, q, k) for q in qs]

    @rule(doc_id=doc_ids, fp=fps, dk=st.integers(-1, 2))
    def add_if_new(self, doc_id, fp: int, dk: int) -> None:
        k = max(0, self.store.k + dk)
        want = brute_matches(self.model, fp, k)
        assert self.store.add_if_new(doc_id, fp, k) == want
        if not want:
            self._put(doc_id, fp)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = SimStore(self.path, durable=False)

    @precondition(lambda self: hasattr(self, "store"))
    @rule(k=st.integers(0, 6))
    def rebuild(self, k: int) -> None:
        self.store.rebuild(k=k)
        assert self.store.k == k

    @invariant()
    def contents_agree(self) -> None:
        if not hasattr(self, "store"):
            return
        assert len(self.store) == len(self.model)
        assert sorted(self.store.items(), key=repr) == sorted(self.model.items(), key=repr)


_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much]


class TestStoreModel(StoreMachine.TestCase):  # type: ignore[misc,valid-type]
    """Random add/add_many/remove/query/add_if_new/reopen/rebuild sequences match the model."""

    settings = settings(max_examples=150, stateful_step_count=30, deadline=None,
                        suppress_health_check=_SUPPRESS)


@pytest.mark.stress
class TestStoreModelLong(StoreMachine.TestCase):  # type: ignore[misc,valid-type]
    """The same model check with 3000 sequences of up to 60 steps."""

    settings = settings(max_examples=3000, stateful_step_count=60, deadline=None,
                        suppress_health_check=_SUPPRESS)

def test_scan_after_add_if_new_above_store_k_sees_the_new_doc(tmp_path) -> None:
    """A k > store-k scan inside add_if_new must not cache its pre-commit snapshot (stale [] bug)."""
    with SimStore(tmp_path / "s", k=0) as s:
        assert s.add_if_new("a", 0, k=1) == []
        assert s.query(0, 1) == [Match("a", 0, 0)]
        assert s.add_if_new("b", 1, k=1) == [Match("a", 0, 1)]
        s.add("c", 3)
        assert [m.doc_id for m in s.query(0, 2)] == ["a", "c"]
