"""SimStore.recrawl_many against its oracle: the calls it stands for, one after another.

The oracle is the sequence a crawler's gate made before: ``id in store`` per doc, with
``since`` a ``similar`` / ``query`` per stored id, ``add_if_new_many``, then ``touch`` of
each doc whose matches name its own id. Two stores built alike get the same groups, one
through the sequence and one through ``recrawl_many``: both must answer the same and end
the same (ids, fingerprints, times of storage). Base docs are stored at two times, so
with ``since`` some are too old to count; groups recrawl stored ids with near texts,
add new ones and repeat ids.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from simstore import SIGNATURE_CONFIG, SimStore

from .test_add_if_new_many import _fps, _ids, _texts

_OLD, _RECENT, _SINCE = 1000.0, 5000.0, 3000.0


def _sequence(s: SimStore, ids: list, items, k, threshold, since, at) -> list[tuple]:
    """What recrawl_many stands for, in separate calls."""
    def near(j: int) -> list:
        if k is None and s.config.has_signature:
            return s.similar(items[j], threshold)
        fp = items[j].fingerprint if hasattr(items[j], "fingerprint") else int(items[j])
        return s.query(fp, k)

    known = [d in s for d in ids]
    own = [was and since is not None and any(m.doc_id == d for m in near(j))
           for j, (d, was) in enumerate(zip(ids, known, strict=True))]
    kw = {} if threshold is None else {"threshold": threshold}
    found = s.add_if_new_many(ids, items, k, since=since, at=at, **kw)
    with s.batch():
        for d, f in zip(ids, found, strict=True):
            if any(m.doc_id == d for m in f):
                s.touch(d, at=at)
    return list(zip(found, known, own, strict=True))


def _base(s: SimStore, ids: list, items, removed: list) -> None:
    """Half the base docs stored long ago, half recently, then a few removed."""
    half = len(ids) // 2
    s.add_many(ids[:half], items[:half], at=_OLD)
    s.add_many(ids[half:], items[half:], at=_RECENT)
    s.remove_many(removed)


def _state(s: SimStore) -> tuple:
    ids, fps = s.snapshot()
    return ids, fps.tolist(), [s.stored_at(d) for d in ids]


def _run(tmp_path, name, items, k, threshold, seed, opts: dict) -> None:
    """Both stores through the same base and two groups, compared after each group."""
    rng = random.Random(seed)
    since = [None, _SINCE][seed % 2]
    seq = SimStore(tmp_path / f"{name}-seq", durable=False, **opts)
    one = SimStore(tmp_path / f"{name}-one", durable=False, **opts)
    base_ids = [f"s{i}" for i in range(20)] + list(range(20))
    for s in (seq, one):
        _base(s, base_ids, items[:40], base_ids[5:8])
    unchanged = own_old = 0
    for call, (a, b) in enumerate(((40, 90), (90, 140))):
        ids = _ids(rng, b - a, base_ids, pool=60)
        for j in range(0, len(ids), 4):  # recrawls: stored ids given their own near texts
            ids[j] = base_ids[(a - 40 + j) % 40]
        at = 6000.0 + call
        want = _sequence(seq, ids, items[a:b], k, threshold, since, at)
        kwt = {} if threshold is None else {"threshold": threshold}
        got = one.recrawl_many(ids, items[a:b], k, since=since, at=at, **kwt)
        assert [tuple(r) for r in got] == want
        assert _state(one) == _state(seq)
        named = [any(m.doc_id == d for m in r.found) for d, r in zip(ids, got, strict=True)]
        unchanged += sum(named)
        own_old += sum(r.near_own and not n for r, n in zip(got, named, strict=True))
    assert unchanged > 0  # some recrawls were unchanged, so touches were compared
    if since is not None:
        assert own_old > 0  # some own versions were near but too old to count
    seq.close()
    one.close()


def _recrawl_texts(rng: random.Random) -> list[str]:
    """40 base texts, then 100 texts of which each base text has a near copy, in order."""
    base = _texts(rng, 40, bases=40)
    out = list(base)
    for i in range(100):
        words = base[i % 40].split()
        words[rng.randrange(len(words))] = "changed"
        out.append(" ".join(words) if i % 5 else _texts(rng, 1, bases=1)[0])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_similarity_store_equals_the_sequence(tmp_path, seed):
    """In a similarity store recrawl_many answers and writes as the gate's old calls did."""
    rng = random.Random(100 + seed)
    with SimStore(tmp_path / "cfg", config=SIGNATURE_CONFIG, durable=False) as s:
        sigs = s.signatures(_recrawl_texts(rng))
    _run(tmp_path, "s", sigs, None, rng.choice([0.8, 0.9]), seed,
         {"config": SIGNATURE_CONFIG, "k": 3})


@pytest.mark.parametrize("seed", range(6))
def test_hamming_store_equals_the_sequence(tmp_path, seed):
    """In a fingerprint store (k from the tables and k above them) the same holds."""
    nrng = np.random.default_rng(seed)
    base = _fps(nrng, 40)
    later = [base[i % 40] ^ np.uint64(1 << int(nrng.integers(0, 64))) if i % 5 else
             nrng.integers(0, 2**63, dtype=np.uint64) for i in range(100)]
    fps = np.concatenate([base, np.array(later, dtype=np.uint64)])
    _run(tmp_path, "h", fps, [None, 2, 9][seed % 3], None, seed, {"k": 4})


@pytest.mark.parametrize("seed", range(2))
def test_exact_store_equals_the_sequence(tmp_path, seed):
    """In an exact store (texts, exact Jaccard) the same holds."""
    rng = random.Random(200 + seed)
    _run(tmp_path, "e", _recrawl_texts(rng), None, 0.8, seed, {"exact": True})


def test_an_own_version_too_old_is_stored_again_and_named_near(tmp_path):
    """An id whose version is older than since: stored anew (found []), near_own True."""
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sigs = s.signatures(_texts(random.Random(1), 4, bases=4))
        s.add("a", sigs[0], at=_OLD)
        assert s.recrawl_many([], s.signatures([])) == []
        got = s.recrawl_many(["a", "b"], sigs[:2], since=_SINCE, at=_RECENT + 1)
        assert [(r.found, r.known, r.near_own) for r in got] == [
            ([], True, True), ([], False, False)]
        assert s.stored_at("a") == s.stored_at("b") == _RECENT + 1
