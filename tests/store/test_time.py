"""Each doc's time of storage: ``at=``, ``since=``, ``touch``, ``stored_at`` and ``expire``,
held against a brute-force model of (id -> fingerprint, time)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simstore
from simstore import SIGNATURE_CONFIG, SimStore
from tests.oracles import brute_matches
from tests.testlib import sound

DAY = 86400.0
T0 = 1_700_000_000.0


def _since(model: dict, since: float) -> dict:
    return {d: fp for d, (fp, at) in model.items() if at >= since}


ops = st.lists(st.tuples(
    st.sampled_from(["add", "touch", "touch_many", "remove", "expire"]),
    st.integers(0, 11),  # doc
    st.integers(0, 7),  # fingerprint choice
    st.integers(0, 60),  # day
), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, since_day=st.integers(0, 60), k=st.integers(0, 5))
def test_since_and_expire_match_a_model(tmp_path_factory, ops, since_day, k):
    """After random adds, touches (one or many at once), removes and expiries at given times, every query with
    and without ``since`` equals brute force over the model, and stored_at is each doc's
    last time of storage."""
    fps = [0, 1, 3, 7, 0xFF, 1 << 63, (1 << 64) - 1, 0x0F0F]
    model: dict[str, tuple[int, float]] = {}
    path = tmp_path_factory.mktemp("t") / "s"
    with SimStore(path, k=5) as s:
        for op, doc, f, day in ops:
            d, at = f"d{doc}", T0 + day * DAY
            if op == "add":
                s.add(d, fps[f], at=at)
                if d in model and model[d][0] != fps[f]:
                    del model[d]  # a changed doc moves to the end of insertion order
                model[d] = (fps[f], at)
            elif op == "touch":
                assert s.touch(d, at=at) == (d in model)
                if d in model:
                    model[d] = (model[d][0], at)
            elif op == "touch_many":  # this doc, the one after it and one never stored
                ds = [d, f"d{(doc + 1) % 12}", "never"]
                assert s.touch_many(ds, at=at) == [x in model for x in ds]
                for x in ds[:2]:
                    if x in model:
                        model[x] = (model[x][0], at)
            elif op == "remove":
                assert s.remove(d) == (d in model)
                model.pop(d, None)
            else:
                gone = [x for x, (_, t) in model.items() if t < at]
                assert s.expire(before=at, batch=2) == len(gone)
                for x in gone:
                    del model[x]
        since = T0 + since_day * DAY
        for q in fps:
            assert s.query(q, k) == brute_matches({d: fp for d, (fp, _) in model.items()}, q, k)
            assert s.query(q, k, since=since) == brute_matches(_since(model, since), q, k)
            assert s.query(q, 9, since=since) == brute_matches(_since(model, since), q, 9)
        for d, (_, at) in model.items():
            assert s.stored_at(d) == pytest.approx(at, abs=1e-3)
        assert s.stored_at("never") is None
        assert len(s) == len(model)
        assert sound(s) == []


def test_add_if_new_since_ignores_older_docs(tmp_path):
    """add_if_new with since= stores a doc near only older ones (and leaves them), and
    refuses one near a doc stored since then."""
    with SimStore(tmp_path / "s", k=3) as s:
        s.add("old", 0b1000, at=T0)
        assert s.add_if_new("new", 0b1001, at=T0 + 40 * DAY, since=T0 + 10 * DAY) == []
        assert "old" in s and "new" in s
        found = s.add_if_new("newer", 0b1011, at=T0 + 41 * DAY, since=T0 + 10 * DAY)
        assert [m.doc_id for m in found] == ["new"]
        assert "newer" not in s


def test_similarity_store_since(tmp_path):
    """similar() and add_if_new() in a similarity store and an exact one count only docs
    stored since ``since``."""
    text = "the quick brown fox jumps over the lazy dog and runs far away " * 4
    for exact in (False, True):
        with SimStore(tmp_path / f"s{exact}", config=SIGNATURE_CONFIG, exact=exact or None) as s:
            item = text if exact else s.signature(text)
            s.add("a", item, at=T0)
            assert [m.doc_id for m in s.similar(item)] == ["a"]
            assert s.similar(item, since=T0 + 1) == []
            assert s.add_if_new("b", item, at=T0 + 5, since=T0 + 1) == []
            assert [m.doc_id for m in s.add_if_new("c", item, since=T0 + 1)] == ["b"]
            assert sorted(m.doc_id for m in s.similar(item)) == ["a", "b"]
            assert s.expire(before=T0 + 1) == 1
            assert s.verify() == []


def test_add_many_at_and_default_now(tmp_path):
    """add_many stamps every doc with ``at``; without it, with the time of the call."""
    with SimStore(tmp_path / "s") as s:
        s.add_many(range(100), list(range(100)), at=T0)
        assert {s.stored_at(i) for i in range(100)} == {T0}
        before = time.time()
        s.add_many(range(100, 110), list(range(100, 110)))
        assert before - 1 <= s.stored_at(105) <= time.time() + 1
        s.add_many(range(50), list(range(50)), at=T0 + DAY)  # unchanged: a new time only
        assert s.stored_at(3) == T0 + DAY
        assert s.expire(before=T0 + 1) == 50
        assert sorted(s.snapshot()[0]) == list(range(50)) + list(range(100, 110))


def test_readd_unchanged_keeps_place_and_refreshes_time(tmp_path):
    """Adding a doc again unchanged keeps its place in insertion order and gives it the
    new time; a changed one moves to the end."""
    with SimStore(tmp_path / "s", k=3) as s:
        s.add("a", 1, at=T0)
        s.add("b", 1, at=T0)
        s.add("a", 1, at=T0 + 5)
        assert [m.doc_id for m in s.query(1, 0)] == ["a", "b"]
        assert s.stored_at("a") == T0 + 5
        s.add("a", 3, at=T0 + 6)
        assert [m.doc_id for m in s.query(1, 1)] == ["b", "a"]


def test_expire_durations(tmp_path):
    """expire(older_than=) takes seconds or '30d'-style durations, relative to now."""
    now = time.time()
    with SimStore(tmp_path / "s") as s:
        s.add_many(["d40", "d20"], [1, 2], at=now - 40 * DAY)
        s.add("d20", 2, at=now - 20 * DAY)
        s.add("h1", 3, at=now - 3600)
        assert s.expire("30d") == 1
        assert s.expire(older_than=21 * DAY) == 0
        assert s.expire("2w") == 1
        assert s.expire("30m") == 1
        assert len(s) == 0


@pytest.mark.parametrize("age", [1.7976931348623157e305, "1e300w", 2e9 * DAY])
def test_an_age_beyond_the_epoch_expires_nothing(tmp_path, age):
    """No doc is older than the epoch: such an age removes nothing (it once overflowed)."""
    with SimStore(tmp_path / "s") as s:
        s.add("old", 1, at=1.0)
        assert s.expire(older_than=age) == 0
        assert len(s) == 1


@pytest.mark.parametrize("kwargs", [
    {}, {"older_than": "banana"}, {"older_than": 0}, {"older_than": -5}, {"older_than": "3x"},
    {"older_than": "nan"}, {"older_than": "30d", "before": 5.0}, {"before": -1},
    {"before": float("inf")}, {"older_than": True}, {"before": "yesterday"},
])
def test_expire_refuses_bad_arguments(tmp_path, kwargs):
    """A missing, conflicting, non-positive or unreadable age or time is a clear error."""
    with SimStore(tmp_path / "s") as s:
        with pytest.raises(simstore.SimstoreError) as info:
            s.expire(**kwargs)
        assert "older_than" in str(info.value) or "before" in str(info.value)


@pytest.mark.parametrize("at", [-1, float("nan"), float("inf"), "now", True, 1e300])
def test_bad_times_refused(tmp_path, at):
    """at= and since= must be finite, non-negative seconds since the epoch."""
    with SimStore(tmp_path / "s") as s:
        with pytest.raises(simstore.SimstoreError):
            s.add("a", 1, at=at)
        with pytest.raises(simstore.SimstoreError):
            s.query(1, since=at)
        assert len(s) == 0


def test_expire_keeps_a_doc_stored_again_meanwhile(tmp_path):
    """A doc seen as old by expire's scan but stored again before its commit is kept."""
    from simstore.store import format as F, writes as W

    with SimStore(tmp_path / "s") as s:
        s.add("a", 1, at=T0)
        s.add("a", 2, at=T0 + 10)  # the doc as it is now
        enc = F.encode_id("a")
        assert s._write(W.expire, [enc], F.at_ms(T0 + 5)) == 0
        assert s.get("a") == 2


def test_cli_expire(tmp_path, capsys):
    """simstore-cli expire removes what is older than the age given; a bad age exits 1
    with one line naming the option."""
    from simstore.cli import main

    path = tmp_path / "s"
    now = time.time()
    with SimStore(path) as s:
        s.add_many(["a", "b"], [1, 2], at=now - 40 * DAY)
        s.add("c", 3)
    assert main(["expire", str(path), "--older-than", "banana"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--older-than" in err
    assert main(["expire", str(path), "--older-than", "30d", "--json"]) == 0
    assert '"removed": 2' in capsys.readouterr().out
    with SimStore(path) as s:
        assert s.snapshot()[0] == ["c"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 3)), max_size=12),
       new=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 3)), min_size=1, max_size=12),
       since_day=st.integers(0, 4))
def test_add_if_new_many_since_equals_one_by_one(tmp_path_factory, old, new, since_day):
    """add_if_new_many(since=) returns and stores exactly what add_if_new(since=) called
    in input order does, on stores with docs of several ages."""
    fps = [0, 0b1, 0b111, 0xFFFF, 1 << 40, (1 << 40) | 3, 0xF0F0F0, 0xF0F0F1]
    stores = []
    for name in ("many", "one"):
        s = SimStore(tmp_path_factory.mktemp(name) / "s", k=3)
        for i, (f, day) in enumerate(old):
            s.add(f"old{i}", fps[f % 8], at=T0 + day * DAY)
        stores.append(s)
    since = T0 + since_day * DAY
    ids = [f"new{i % 5}" for i in range(len(new))]
    got = stores[0].add_if_new_many(ids, [fps[f % 8] for f, _ in new], 2, since=since,
                                    at=T0 + 9 * DAY)
    want = [stores[1].add_if_new(d, fps[f % 8], 2, since=since, at=T0 + 9 * DAY)
            for d, (f, _) in zip(ids, new, strict=True)]
    assert got == want
    assert dict(stores[0].items()) == dict(stores[1].items())
    for d in dict(stores[1].items()):
        assert stores[0].stored_at(d) == stores[1].stored_at(d)
    for s in stores:
        s.close()
