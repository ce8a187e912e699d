"""SimStore.add_if_new_many against its oracle: add_if_new called one by one, in input order.

Two stores are built by the same operations; one gets the chunk doc by doc through
add_if_new, the other in one add_if_new_many call. Both must answer the same
(every doc's match list, equal as values: ids, fingerprints, distances, Jaccard
estimates, order) and end the same (ids in insertion order, fingerprints, what
similar() and query() find). Chunks plant near and exact copies, ids already
stored and ids repeated within the chunk.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import simstore
from simstore import SIGNATURE_CONFIG, SimStore
from simstore.exceptions import (
    InvalidConfigError,
    InvalidDistanceError,
    InvalidDocIdError,
    ReadOnlyError,
    SimstoreTypeError,
    SimstoreValueError,
)

from ..oracles import hamming

_WORDS = [f"w{i}" for i in range(4000)]


def _texts(rng: random.Random, n: int, bases: int = 6) -> list[str]:
    """n texts around a few base texts (0-9 words replaced each), some exact copies."""
    base = [rng.sample(_WORDS, 120) for _ in range(bases)]
    out = []
    for _ in range(n):
        words = list(rng.choice(base))
        for _ in range(rng.randrange(0, 10)):
            words[rng.randrange(len(words))] = rng.choice(_WORDS)
        out.append(" ".join(words))
    return out


def _fps(rng: np.random.Generator, n: int) -> np.ndarray:
    """Fingerprints around a few centres (0-7 bits flipped), with exact copies."""
    centres = rng.integers(0, 2**63, size=5, dtype=np.uint64)
    out = []
    for _ in range(n):
        fp = int(centres[rng.integers(0, len(centres))])
        for b in rng.choice(64, int(rng.integers(0, 8)), replace=False):
            fp ^= 1 << int(b)
        out.append(fp)
    return np.array(out, dtype=np.uint64)


def _ids(rng: random.Random, n: int, stored: list, pool: int) -> list:
    """Chunk ids: mostly fresh, some already stored, some repeated in the chunk (str and int)."""
    out: list = []
    for i in range(n):
        r = rng.random()
        if stored and r < 0.15:
            out.append(rng.choice(stored))
        elif out and r < 0.3:
            out.append(rng.choice(out))
        else:
            out.append(f"c{rng.randrange(pool)}" if i % 3 else rng.randrange(pool))
    return out


def _pair(tmp_path, name: str, **kw) -> tuple[SimStore, SimStore]:
    """Two stores made alike."""
    return (SimStore(tmp_path / f"{name}-seq", durable=False, **kw),
            SimStore(tmp_path / f"{name}-bulk", durable=False, **kw))


def _base(s: SimStore, ids: list, items, removed: list) -> None:
    """The stored docs before the calls: bulk adds, one update (it moves), removals."""
    half = len(ids) // 2
    s.add_many(ids[:half], items[:half])
    s.add_many(ids[half:], items[half:])
    s.add(ids[0], items[-1])
    s.remove_many(removed)


def _state(s: SimStore) -> tuple[list, list[int]]:
    ids, fps = s.snapshot()
    return ids, fps.tolist()


def _same_store(a: SimStore, b: SimStore, probes, **kw) -> None:
    assert _state(a) == _state(b)
    for p in probes:
        if a.config.has_signature and "k" not in kw:
            assert a.similar(p, **kw) == b.similar(p, **kw)
        else:
            fp = p.fingerprint if isinstance(p, simstore.Signature) else int(p)
            assert a.query(fp, kw.get("k")) == b.query(fp, kw.get("k"))


@pytest.mark.parametrize("seed", range(8))
def test_similarity_store_equals_add_if_new_one_by_one(tmp_path, seed):
    rng = random.Random(seed)
    t = rng.choice([0.7, 0.8, 0.9, 0.95])
    seq, bulk = _pair(tmp_path, "s", config=SIGNATURE_CONFIG, k=3)
    texts = _texts(rng, 140)
    sigs = seq.signatures(texts)
    base_ids = [f"s{i}" for i in range(20)] + list(range(20))
    for s in (seq, bulk):
        _base(s, base_ids, sigs[:40], base_ids[5:8])
    for a, b in ((40, 90), (90, 140)):  # two calls: the second sees the first's docs
        ids = _ids(rng, b - a, base_ids, pool=60)
        want = [seq.add_if_new(ids[i], sigs[a + i], threshold=t) for i in range(b - a)]
        got = bulk.add_if_new_many(ids, sigs[a:b], threshold=t)
        assert got == want
        assert any(w == [] for w in want) and any(w != [] for w in want)
    _same_store(seq, bulk, sigs[::7], threshold=t)
    if seed == 0:
        assert bulk.verify() == []


@pytest.mark.parametrize("seed", range(8))
def test_hamming_store_equals_add_if_new_one_by_one(tmp_path, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    seq, bulk = _pair(tmp_path, "h", k=4)
    fps = _fps(nrng, 160)
    # default k (the store's), a smaller k, and a k above the layout's (the scan path)
    k = [None, 2, 4, 9, 20][seed % 5]
    base_ids = [f"b{i}" for i in range(30)]
    for s in (seq, bulk):
        _base(s, base_ids, fps[:30], base_ids[10:13])
    for a, b in ((30, 95), (95, 160)):
        ids = _ids(rng, b - a, base_ids, pool=70)
        want = [seq.add_if_new(ids[i], int(fps[a + i]), k) for i in range(b - a)]
        got = bulk.add_if_new_many(ids, fps[a:b], k)
        assert got == want
    _same_store(seq, bulk, fps[::9], k=k)
    # the oracle's own rule, spelled out for the first doc of the last call
    if want[0]:
        kk = 4 if k is None else k
        assert all(hamming(m.fingerprint, fps[95]) == m.distance <= kk for m in want[0])


def test_hamming_check_in_a_similarity_store(tmp_path):
    """k given with Signatures in a similarity store: a Hamming check, signatures still stored."""
    rng = random.Random(5)
    seq, bulk = _pair(tmp_path, "hs", config=SIGNATURE_CONFIG, k=3)
    sigs = seq.signatures(_texts(rng, 60))
    ids = _ids(rng, 60, [], pool=50)
    want = [seq.add_if_new(ids[i], sigs[i], k=3) for i in range(60)]
    assert bulk.add_if_new_many(ids, sigs, k=3) == want
    _same_store(seq, bulk, sigs[::5], threshold=0.8)


def test_calls_inside_a_batch_and_with_map_growth(tmp_path):
    """Two calls inside one batch() and a map too small for them (grown, ops replayed)."""
    rng = random.Random(7)
    kw = {"config": SIGNATURE_CONFIG, "k": 3, "map_size": 1 << 16}
    seq, bulk = _pair(tmp_path, "g", **kw)
    sigs = seq.signatures(_texts(rng, 400, bases=40))
    ids = [f"d{i}" for i in range(400)]
    want = [seq.add_if_new(ids[i], sigs[i]) for i in range(400)]
    with bulk.batch():
        got = bulk.add_if_new_many(ids[:150], sigs[:150])
        got += bulk.add_if_new_many(ids[150:], sigs[150:])
    assert got == want
    _same_store(seq, bulk, sigs[::13], threshold=0.9)


def test_a_later_near_copy_names_the_earlier_doc_of_the_call(tmp_path):
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        text = " ".join(_WORDS[:200])
        sigs = s.signatures([text, text.replace("w7 ", "x7 "), " ".join(_WORDS[300:500])])
        got = s.add_if_new_many(["a", "b", "c"], sigs)
        assert got[0] == [] and got[2] == []
        assert [m.doc_id for m in got[1]] == ["a"] and got[1][0].jaccard >= 0.9
        assert sorted(s.doc_ids()) == ["a", "c"]
    with SimStore(tmp_path / "h", durable=False) as h:
        assert h.add_if_new_many([1, 2, 3], [0b1, 0b11, 1 << 40], k=1) == [
            [], [simstore.Match(1, 0b1, 1)], []]


def test_empty_input_changes_nothing(tmp_path):
    with SimStore(tmp_path / "h", durable=False) as h:
        h.add("x", 5)
        assert h.add_if_new_many([], []) == []
        assert h.add_if_new_many([], np.empty(0, np.uint64), k=3) == []
        assert _state(h) == (["x"], [5])
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        assert s.add_if_new_many([], s.signatures([])) == []
        assert len(s) == 0


def test_bad_input_raises_and_writes_nothing(tmp_path):
    with SimStore(tmp_path / "h", durable=False) as h:
        h.add("x", 5)
        cases = [
            (lambda: h.add_if_new_many(["a", "b"], [1]), InvalidConfigError),
            (lambda: h.add_if_new_many(["a", ""], [1, 2]), InvalidDocIdError),
            (lambda: h.add_if_new_many(["a", 1.5], [1, 2]), SimstoreTypeError),
            (lambda: h.add_if_new_many("ab", [1, 2]), SimstoreTypeError),
            (lambda: h.add_if_new_many(["a", "b"], [1, -2]), SimstoreValueError),
            (lambda: h.add_if_new_many(["a"], [1], k=65), InvalidDistanceError),
            (lambda: h.add_if_new_many(["a"], [1], threshold=0.9), InvalidConfigError),
        ]
        for call, err in cases:
            with pytest.raises(err):
                call()
        assert _state(h) == (["x"], [5])
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sigs = s.signatures(["a b c d", "e f g h"])
        with pytest.raises(SimstoreTypeError):
            s.add_if_new_many(["a", "b"], sigs.fingerprints)
        with pytest.raises(InvalidConfigError):
            s.add_if_new_many(["a", "b"], sigs, threshold=1.5)
        with pytest.raises(SimstoreTypeError):
            s.add_if_new_many(["a", "b"], sigs, threshold="0.9")
        other = simstore.signatures(["a b c d", "e f g h"], dataclasses.replace(SIGNATURE_CONFIG, seed=1))
        with pytest.raises(simstore.exceptions.InvalidSignatureError):
            s.add_if_new_many(["a", "b"], other)
        assert len(s) == 0
    with SimStore(tmp_path / "h", readonly=True) as ro, pytest.raises(ReadOnlyError):
        ro.add_if_new_many(["y"], [7])


def test_one_transaction_all_or_nothing(tmp_path, monkeypatch):
    """A failure while the kept docs are written leaves the store as before the call."""
    from simstore.store import dedup_many as _dedup_bulk

    with SimStore(tmp_path / "h", durable=False) as h:
        h.add("x", 5)

        def boom(*args, **kw):
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(_dedup_bulk, "add_many", boom)
        with pytest.raises(RuntimeError):
            h.add_if_new_many(["a", "x", "b"], [2**40 - 1, 2**64 - 1, (2**20 - 1) << 30])
        assert _state(h) == (["x"], [5])
