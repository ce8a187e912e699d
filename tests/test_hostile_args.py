"""Hostile numbers, paths and types to the public API raise simstore's own errors, naming
the argument: never OverflowError or a bare ValueError (issue #48 item 11)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import simstore
from simstore import SIGNATURE_CONFIG, SimStore, SimstoreError

HOSTILE = [
    10**40,
    -(10**40),
    10**400,
    -(10**400),
    float("nan"),
    float("inf"),
    float("-inf"),
    -1,
    0,
    1.5,
    True,
    "x",
    "",
    b"1",
    None,
    object(),
    complex(1, 1),
    Decimal("NaN"),
    Fraction(10**400, 3),
    np.float64("nan"),
    np.int64(-1),
    np.uint64(2**64 - 1),
    [1],
]
hostile = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(min_value=2**63),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A fingerprint store and a similarity store, each with a doc."""
    base = tmp_path_factory.mktemp("hostile")
    fp = SimStore(base / "fp")
    fp.add("a", 7)
    sim = SimStore(base / "sim", config=SIGNATURE_CONFIG)
    sim.add("a", sim.signature("one two three four five six"))
    yield fp, sim
    fp.close()
    sim.close()


SIG = simstore.signature("one two three four five six", SIGNATURE_CONFIG)
SIGS = simstore.signatures(["a b c d", "a b c e"], SIGNATURE_CONFIG)

CALLS = {
    "query k": lambda fp, sim, v: fp.query(7, v),
    "query fp": lambda fp, sim, v: fp.query(v),
    "query since": lambda fp, sim, v: fp.query(7, since=v),
    "query_many k": lambda fp, sim, v: fp.query_many([7], v),
    "add at": lambda fp, sim, v: fp.add("b", 9, at=v),
    "add fp": lambda fp, sim, v: fp.add("b", v),
    "touch at": lambda fp, sim, v: fp.touch("a", at=v),
    "touch_many at": lambda fp, sim, v: fp.touch_many(["a"], at=v),
    "touch_many ids": lambda fp, sim, v: fp.touch_many(v),
    "add_if_new k": lambda fp, sim, v: fp.add_if_new("c", 7, v),
    "add_if_new since": lambda fp, sim, v: fp.add_if_new("c", 7, since=v),
    "add_if_new threshold": lambda fp, sim, v: sim.add_if_new("c", SIG, threshold=v),
    "add_if_new_many threshold": lambda fp, sim, v: sim.add_if_new_many(["c"], [SIG], threshold=v),
    "similar threshold": lambda fp, sim, v: sim.similar("one two three", v),
    "similar since": lambda fp, sim, v: sim.similar("one two three", since=v),
    "similar_pairs threshold": lambda fp, sim, v: list(sim.similar_pairs(v)),
    "expire older_than": lambda fp, sim, v: fp.expire(v),
    "expire before": lambda fp, sim, v: fp.expire(before=v),
    "expire batch": lambda fp, sim, v: fp.expire("3650d", batch=v),
    "pairs k": lambda fp, sim, v: list(fp.pairs(v)),
    "clusters k": lambda fp, sim, v: fp.clusters(v),
    "open k": lambda fp, sim, v: SimStore(fp.path, k=v),
    "open expected_size": lambda fp, sim, v: SimStore(fp.path, expected_size=v),
    "open map_size": lambda fp, sim, v: SimStore(fp.path, map_size=v),
    "open max_readers": lambda fp, sim, v: SimStore(fp.path, max_readers=v),
    "find_all k": lambda fp, sim, v: simstore.find_all([1, 2, 3], v),
    "clusters() k": lambda fp, sim, v: simstore.clusters([1, 2, 3], v),
    "find_similar threshold": lambda fp, sim, v: simstore.find_similar(SIGS, v),
    "similar_clusters threshold": lambda fp, sim, v: simstore.similar_clusters(SIGS, v),
}


def _outcome(fp, sim, call, value) -> str | None:
    """None when the call worked or raised a SimstoreError, else what it raised."""
    try:
        got = CALLS[call](fp, sim, value)
    except SimstoreError:
        return None
    except Exception as exc:  # noqa: BLE001 - any other class is the failure reported
        return f"{call}({value!r:.30}): {type(exc).__name__}: {exc}"
    if isinstance(got, SimStore) and got is not fp:
        got.close()
    return None


def test_every_call_with_every_hostile_value(stores) -> None:
    """Each numeric argument with each value of HOSTILE: a SimstoreError or a result."""
    fp, sim = stores
    bad = [_outcome(fp, sim, c, v) for c in CALLS for v in HOSTILE]
    assert [b for b in bad if b] == []


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=st.sampled_from(sorted(CALLS)), value=hostile)
def test_hostile_numbers_raise_simstore_errors(stores, call, value) -> None:
    """Random huge, negative and non-finite numbers: a SimstoreError or a result (never
    OverflowError, a bare ValueError or TypeError)."""
    fp, sim = stores
    assert _outcome(fp, sim, call, value) is None


@pytest.mark.parametrize("value", ["x", float("nan"), float("inf"), -1, 0, 10**400, None.__class__])
def test_verify_timeout_is_checked(stores, value) -> None:
    """verify(timeout=...) refuses what is not a finite number of seconds > 0, by name."""
    fp, _ = stores
    with pytest.raises(SimstoreError, match="'timeout'"):
        fp.verify(timeout=value)


@pytest.mark.parametrize(
    "call",
    [
        lambda p: SimStore(p),
        lambda p: simstore.upgrade(p),
        lambda p: SimStore(p + "ok").compact(p),
    ],
)
def test_a_nul_in_a_path_is_named(tmp_path, call) -> None:
    """A NUL in a path is refused as a SimstoreValueError naming the argument."""
    p = str(tmp_path / "a\0b")
    with pytest.raises(simstore.SimstoreValueError, match="without NUL"):
        call(p)


def test_a_huge_threshold_is_named() -> None:
    """The issue's cases: 10**40 and 10**400 as a threshold name it and the allowed range."""
    for value in (10**40, 10**400):
        with pytest.raises(simstore.InvalidConfigError, match=r"'threshold' must be in \(0, 1\]"):
            simstore.find_similar(SIGS, value)
