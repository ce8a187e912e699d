"""A long text's set in an exact store: coded as it is made, compared as it is read, with
the values of the whole-set path, in less than 4x the record's size.

Its code a step at a time (:func:`simstore.native.jaccard.encode_one`) is the code of
``encode_sets``; the exact Jaccard of a code against a stored one read in parts of any
size is ``jaccard_pairs``'; a store whose every set takes the long path (the limits
shrunk) stores the same pieces and answers ``similar`` / ``add_if_new`` as one that takes
none (what a record near the size cap costs: ``tests/test_record_cost.py``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from simstore import SIGNATURE_CONFIG
from simstore.native import jaccard as native_sets
from simstore.store import SimStore, inputs
from simstore.text import longtext

from ..testlib import handles, reading

# (set, its code): pinned, so a change of the codec cannot pass unseen (stored sets
# depend on it); the last value needs the escape (a gap of 2^63 with k = 61)
KNOWN = [
    ([1, 5, 2**40, 2**63, 2**64 - 1],
     "01053d0000000000000004000000000000003000003ffffffffebbffffdffffffffffdffffffffffffffe0"),
    ([5, 7, 2**63], "01033d0000000000000014000000000000001effffffffffffffc0"),
]


def _set(rng: np.random.Generator, n: int, span: int | None) -> np.ndarray:
    high = 2**64 - 1 if span is None else span
    return np.unique(rng.integers(0, high, n, dtype=np.uint64, endpoint=span is None))


def _parts(code: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(code):
        k = rng.choice([1, 2, 3, 7, 13, 500, 1572, 1 << 20])
        out.append(code[i : i + k])
        i += k
    return out


def _pair(a: np.ndarray, b: np.ndarray, t: float) -> float:
    one = np.zeros(1, dtype=np.int64)
    return float(native_sets.jaccard_pairs(a, np.array([0, len(a)]), b, np.array([0, len(b)]),
                                           one, one, t)[0])


@pytest.mark.parametrize(("values", "code"), KNOWN)
def test_a_code_made_a_step_at_a_time_is_the_known_code(values, code):
    """encode_one gives the pinned bytes of encode_sets, whatever its step."""
    a = np.array(values, dtype=np.uint64)
    assert native_sets.encode_sets(a, np.array([0, len(a)]))[0].hex() == code
    for step in (1, 2, 1 << 20):
        assert bytes(native_sets.encode_one(a, step=step)).hex() == code


def test_codes_compared_in_parts_give_jaccard_pairs_values():
    """jaccard_of_codes on random sets cut anywhere equals jaccard_pairs (and is below t
    exactly when it is); a truncated, longer or damaged code is refused as decode does."""
    rng, cut = np.random.default_rng(5), random.Random(1)
    for trial in range(300):
        span = cut.choice([None, 50, 10**6, 2**40])
        a = _set(rng, cut.choice([1, 2, 5, 100, 3000]), span)
        if trial % 50 == 0:
            a = np.unique(np.r_[a, np.uint64(2**63), np.uint64(2**64 - 1)])
        b = (np.union1d(a[: len(a) // 2], _set(rng, cut.choice([1, 10, 3000]), span))
             if cut.random() < 0.7 else _set(rng, cut.choice([1, 7]), span))
        steps = []
        ca = native_sets.encode_one(a, steps.append, step=cut.choice([1, 3, 1 << 20]))
        assert steps[-1] == len(a)
        cb = native_sets.encode_sets(b, np.array([0, len(b)]))[0]
        assert native_sets.code_size(ca) == len(a)
        got = native_sets.jaccard_of_codes(ca, iter(_parts(cb, cut)), 0.0)
        assert got == _pair(a, b, 0.0)
        t = cut.choice([0.3, 0.9])
        got = native_sets.jaccard_of_codes(ca, iter(_parts(cb, cut)), t)
        assert got is not None and (got >= t) == (_pair(a, b, t) >= t)
        assert native_sets.jaccard_of_codes(ca, iter(_parts(cb[:-1], cut)), 0.0) is None
        assert native_sets.jaccard_of_codes(ca, iter(_parts(cb + b"\0", cut)), 0.0) is None
        bad = bytearray(cb)
        bad[cut.randrange(len(bad))] ^= 1 << cut.randrange(8)
        refused = native_sets.decode_sets(bytes(bad), np.array([0, len(bad)]))[2] >= 0
        streamed = native_sets.jaccard_of_codes(ca, iter(_parts(bytes(bad), cut)), 0.0)
        assert (streamed is None) == refused


def _texts(rng: random.Random) -> list[str]:
    words = [f"w{i}" for i in range(300)]
    base = [" ".join(rng.choice(words) for _ in range(rng.randrange(40, 200)))
            for _ in range(12)]
    near = [b.replace(b.split()[0], "x", 1) + " tail" for b in base[:6]]
    return base + near + base[:2]


def _run(path, texts: list[str]) -> tuple[list, list, list]:
    """What a store answers: similar of each text, add_if_new of each (a new id), and the
    shingles database's rows."""
    with SimStore(path, config=SIGNATURE_CONFIG, exact=True) as store:
        for i, t in enumerate(texts[:10]):
            store.add(i, t)
        sims = [[(m.doc_id, m.jaccard) for m in store.similar(t, 0.5)] for t in texts]
        news = [[(m.doc_id, m.jaccard) for m in store.add_if_new(100 + i, t, threshold=0.7)]
                for i, t in enumerate(texts)]
        with reading(store) as txn:
            rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(handles(store).shingles)]
    return sims, news, rows


def test_a_store_of_long_sets_answers_as_one_of_short_ones(tmp_path, monkeypatch):
    """Every set made in blocks, coded a step at a time with its pages handed back and
    compared piece by piece: the same pieces stored, the same matches and exact Jaccard."""
    texts = _texts(random.Random(3))
    want = _run(tmp_path / "short", texts)
    monkeypatch.setattr(inputs, "LONG_SET", 0)
    monkeypatch.setattr(longtext, "LONG_TEXT_CHARS", 30)
    monkeypatch.setattr(longtext, "BLOCK_CHARS", 7)
    got = _run(tmp_path / "long", texts)
    found = [j for rows in want[0] + want[1] for _, j in rows]
    assert len(found) > 30 and sum(0.7 < j < 1 for j in found) >= 6  # near copies too
    assert got == want
