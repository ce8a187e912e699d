"""A similarity lookup reading its candidates' records in LMDB's map (simstore/store/docsmap.py,
csrc ss_similar_one) answers exactly as the lookup through LMDB, and as the rule.

The oracle is the same lookup with every record fetched by py-lmdb (``in_map=False``), and
the brute-force rule (a shared band key and the sketch estimate) over the docs that should
be stored. The stores hold every kind of record the walk meets: docs in sorted levels and
recent ones, removed docs (stale band entries), replaced docs, text ids long enough to put
their record on overflow pages, times for ``since``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from simstore import SIGNATURE_CONFIG, SimStore
from simstore.native import lmdbmap
from simstore.store import reads

from ..oracles import shares_band, sketch_estimate
from ..strategies import planted_texts


def _rule(want: dict, q, t: float, since: int | None) -> list:
    """The doc ids the rule names for signature q among want (doc id -> (sig, at ms)),
    best first (the estimate down; ties in any order: compared as sets per estimate)."""
    rows = []
    for doc_id, (sig, at) in want.items():
        if since is not None and at < since:
            continue
        if shares_band(q.bands, sig.bands):
            est = sketch_estimate(q.sketch, sig.sketch)
            if est >= t:
                rows.append((est, doc_id))
    return sorted(rows, key=lambda r: -r[0])


def _by_estimate(matches) -> list:
    return sorted(((m.jaccard, m.doc_id) for m in matches), key=lambda r: (-r[0], str(r[1])))


@pytest.fixture
def no_fallback(monkeypatch):
    """Count the lookups that fetched their records through LMDB."""
    calls = []
    real = reads._hits_via_lmdb

    def spy(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(reads, "_hits_via_lmdb", spy)
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_map_answers_as_lmdb_and_the_rule(tmp_path, seed, no_fallback):
    rng = np.random.default_rng(seed)
    texts = planted_texts(seed, 40, 4, words=50)
    want: dict = {}
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sigs = s.signatures(texts)
        half = len(texts) // 2
        long_ids = {i: f"doc-{i}-" + "x" * 5000 for i in range(0, half, 7)}  # overflow pages
        ids = [long_ids.get(i, i) for i in range(len(texts))]
        s.add_many(ids[:half], sigs[:half], at=1_000.0)
        want.update({ids[i]: (sigs[i], 1_000_000) for i in range(half)})
        for i in range(half, len(texts)):  # recent docs, one commit each
            s.add(ids[i], sigs[i], at=2_000.0)
            want[ids[i]] = (sigs[i], 2_000_000)
        for i in rng.choice(len(texts), 25, replace=False).tolist():  # stale band entries
            s.remove(ids[i])
            want.pop(ids[i], None)
        for i in rng.choice(half, 5, replace=False).tolist():  # replaced: a new internal id
            j = int(rng.integers(len(texts)))
            s.add(ids[i], sigs[j], at=3_000.0)
            want[ids[i]] = (sigs[j], 3_000_000)
        h = s._h
        assert h.docmap is not None
        for q in [*sigs[::3], s.signature("nothing like any stored text")]:
            for t, since in ((0.9, None), (0.7, None), (0.5, 1_500_000), (1.0, None)):
                with s._env.reading() as txn:
                    fast = reads.similar(h, txn, q.fingerprint, q.sketch, q.bands, t, since,
                                         in_map=True)
                    slow = reads.similar(h, txn, q.fingerprint, q.sketch, q.bands, t, since)
                assert fast == slow
                assert _by_estimate(fast) == sorted(_rule(want, q, t, since),
                                                    key=lambda r: (-r[0], str(r[1])))
        calls_before = len(no_fallback)
        assert s.similar(sigs[0], 0.9) == s.similar(sigs[0], 0.9)
    # every in-map lookup answered without falling back (the slow ones are the oracle's)
    assert calls_before == sum(1 for _ in sigs[::3]) * 4 + 4


def test_add_if_new_in_a_batch_sees_the_batchs_writes(tmp_path):
    """Inside batch() the docs written so far are not in the map yet: add_if_new there
    must find them (it reads through LMDB), and outside it finds the committed ones."""
    texts = planted_texts(9, 3, 2, words=40)
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sig = s.signature(texts[0])
        with s.batch():
            assert s.add_if_new("a", sig) == []
            assert [m.doc_id for m in s.add_if_new("b", sig)] == ["a"]
        assert [m.doc_id for m in s.add_if_new("c", sig)] == ["a"]
        assert sorted(s.doc_ids()) == ["a"]


def test_a_tree_the_map_cannot_read_falls_back_to_lmdb(tmp_path, monkeypatch, no_fallback):
    """A docs record in the main database that names a wrong depth: the walk turns it down
    and the lookup answers through LMDB, the same."""
    texts = planted_texts(11, 20, 3, words=40)
    with SimStore(tmp_path / "s", config=SIGNATURE_CONFIG, durable=False) as s:
        sigs = s.signatures(texts)
        s.add_many(range(len(texts)), sigs)
        want = [s.similar(q, 0.8) for q in sigs[:10]]
        assert not no_fallback
        real = lmdbmap.tree_of_record

        def deeper(raw, tree):
            ok = real(raw, tree)
            tree.depth += 1
            return ok

        monkeypatch.setattr(lmdbmap, "tree_of_record", deeper)
        assert [s.similar(q, 0.8) for q in sigs[:10]] == want
        assert len(no_fallback) == 10


def _churn(path: str, seed: int, stop) -> None:
    """Another process's writes: adds, replacements and removals, commits of one doc and
    bulk ones that flush, merge and grow the map."""
    rng = np.random.default_rng(seed)
    texts = planted_texts(seed, 30, 3, words=40)
    with SimStore(path, durable=False) as s:
        sigs = s.signatures(texts)
        i = 0
        while not stop.is_set():
            j = int(rng.integers(len(texts)))
            if i % 50 == 0:
                s.add_many([f"b{i}-{x}" for x in range(300)], s.signatures([texts[j]] * 300))
            elif i % 3 == 0:
                s.remove(f"d{int(rng.integers(max(i, 1)))}")
            else:
                s.add(f"d{i}", sigs[j])
            i += 1


def test_the_map_agrees_with_lmdb_while_another_process_writes(tmp_path):
    """Readers here, a writer there growing the map and merging: in each read transaction
    the lookup in the map and the one through LMDB give the same answer (the map path
    reads only that transaction's snapshot), and the map path answers almost always."""
    import multiprocessing

    path = str(tmp_path / "s")
    texts = planted_texts(21, 30, 3, words=40)
    SimStore(path, config=SIGNATURE_CONFIG, durable=False, map_size=1 << 21).close()
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    child = ctx.Process(target=_churn, args=(path, 21, stop))
    child.start()
    fell_back = asked = 0
    try:
        with SimStore(path) as s:
            sigs = s.signatures(texts)
            h = s._h
            while not len(s) and child.is_alive():  # the writer's first commit
                time.sleep(0.05)
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                for q in sigs[:: 7]:
                    with s._env.reading() as txn:
                        prober, more = h.bands.parts(txn, q.bands)
                        got = h.docmap.similar(txn, prober, more, (q.bands, q.sketch), h.codec,
                                               reads.max_distance(64 * h.codec.sketch_words,
                                                                  0.8), None)
                        fast = reads.similar(h, txn, q.fingerprint, q.sketch, q.bands, 0.8,
                                             in_map=True)
                        slow = reads.similar(h, txn, q.fingerprint, q.sketch, q.bands, 0.8)
                    assert fast == slow
                    asked += 1
                    fell_back += got is None
                assert child.is_alive()
    finally:
        stop.set()
        child.join(30)
    assert child.exitcode == 0
    assert asked > 100 and fell_back <= asked // 10
