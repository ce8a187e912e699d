"""simstore.corpus: representative clusters against a brute-force oracle, dedup_corpus, index_corpus."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

import simstore
from simstore import corpus
from simstore.corpus.readers import iter_chunks, raise_bad
from simstore.corpus.sources import ReadOptions, Source

from ..oracles import hamming, shares_band, sketch_estimate

# --------------------------------------------------------------------------- oracles


def brute_representatives_hamming(fps: list[int], k: int, order: list[int]) -> tuple[list, list]:
    """The crawler's greedy rule spelled out: each item joins the nearest earlier
    representative within k (ties: the earliest), else it is one."""
    rank = {m: r for r, m in enumerate(order)}
    reps: list[int] = []
    rep, dist = [0] * len(fps), [0] * len(fps)
    for m in order:
        near = [(hamming(fps[m], fps[r]), rank[r], r) for r in reps
                if hamming(fps[m], fps[r]) <= k]
        if near:
            d, _, r = min(near)
            rep[m], dist[m] = r, d
        else:
            reps.append(m)
            rep[m], dist[m] = m, 0
    return rep, dist


def brute_representatives_similar(sigs: simstore.Signatures, t: float, order: list[int]
                                  ) -> tuple[list, list]:
    """The same rule by the similarity test of a store: a shared band key and sketch
    estimate >= t; nearest = highest estimate (ties: the earliest)."""
    rank = {m: r for r, m in enumerate(order)}
    reps: list[int] = []
    rep, jac = [0] * len(sigs), [1.0] * len(sigs)
    for m in order:
        near = []
        for r in reps:
            if shares_band(sigs.bands[m], sigs.bands[r]):
                est = sketch_estimate(sigs.sketches[m], sigs.sketches[r])
                if est >= t:
                    near.append((-est, rank[r], r))
        if near:
            e, _, r = min(near)
            rep[m], jac[m] = r, -e
        else:
            reps.append(m)
            rep[m] = m
    return rep, jac


def _clustered_fps(rng: np.random.Generator, n: int) -> np.ndarray:
    """Fingerprints around three centres, a few bits flipped each, with exact copies."""
    centres = rng.integers(0, 2**63, size=3, dtype=np.uint64)
    out = []
    for _ in range(n):
        fp = int(centres[rng.integers(0, 3)])
        for b in rng.choice(64, int(rng.integers(0, 6)), replace=False):
            fp ^= 1 << int(b)
        out.append(fp)
    return np.array(out, dtype=np.uint64)


def _near_texts(rng: random.Random, n: int, edits: int = 6) -> list[str]:
    words = [f"w{i}" for i in range(3000)]
    bases = [rng.sample(words, 150) for _ in range(3)]
    texts = []
    for _ in range(n):
        b = list(rng.choice(bases))
        for _ in range(rng.randrange(0, edits)):
            b[rng.randrange(len(b))] = rng.choice(words)
        texts.append(" ".join(b))
    return texts


# --------------------------------------------------------------------------- representatives


@pytest.mark.parametrize("seed", range(40))
def test_representatives_equal_the_hamming_oracle(seed):
    """Greedy representatives by Hamming distance equal brute force, in input or shuffled order."""
    rng = np.random.default_rng(seed)
    fps = _clustered_fps(rng, int(rng.integers(0, 60)))
    k = int(rng.integers(0, 7))
    order = rng.permutation(len(fps)) if seed % 2 else np.arange(len(fps))
    got = corpus.representative_clusters(fps, k=k, order=order)
    rep, dist = brute_representatives_hamming([int(x) for x in fps], k, order.tolist())
    assert got.rep.tolist() == rep
    assert got.distance.tolist() == dist
    assert got.jaccard is None


@pytest.mark.parametrize("seed", range(15))
def test_representatives_equal_the_similarity_oracle(seed):
    """Greedy representatives by estimated Jaccard equal brute force over the store's rule."""
    rng = random.Random(seed)
    texts = _near_texts(rng, rng.randrange(0, 35))
    texts += texts[:3]  # exact copies
    sigs = simstore.signatures(texts)
    t = rng.choice([0.8, 0.9, 0.95])
    order = np.random.default_rng(seed).permutation(len(texts))
    got = corpus.representative_clusters(sigs, threshold=t, order=order)
    rep, jac = brute_representatives_similar(sigs, t, order.tolist())
    assert got.rep.tolist() == rep
    assert np.allclose(got.jaccard, jac)


def test_representatives_do_not_chain():
    """a~b~c with a, c far apart: components join all three, representatives keep c apart."""
    fps = np.array([0, 0b111, 0b111111, 0], dtype=np.uint64)
    got = corpus.representative_clusters(fps, k=3)
    assert got.rep.tolist() == [0, 0, 2, 0]
    assert got.distance.tolist() == [0, 3, 0, 0]
    assert simstore.clusters(fps, 3).tolist() == [0, 0, 0, 0]


def test_representatives_of_many_copies_are_cheap():
    """20,000 copies of one fingerprint: one representative, found without 200M pairs."""
    fps = np.full(20_000, 12345, dtype=np.uint64)
    got = corpus.representative_clusters(fps, k=3)
    assert (got.rep == 0).all() and (got.distance == 0).all()


def test_representatives_refuse_bad_arguments():
    """Exactly one of k and threshold; a threshold needs Signatures; order is a permutation."""
    fps = np.arange(3, dtype=np.uint64)
    for kw in ({}, {"k": 3, "threshold": 0.9}):
        with pytest.raises(simstore.SimstoreError):
            corpus.representative_clusters(fps, **kw)
    with pytest.raises(simstore.SimstoreTypeError):
        corpus.representative_clusters(fps, threshold=0.9)
    with pytest.raises(simstore.SimstoreValueError):
        corpus.representative_clusters(fps, k=3, order=[0, 0, 1])


# --------------------------------------------------------------------------- dedup_corpus


def _write_jsonl(path, docs):
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")


def _read_jsonl(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture
def docs():
    """60 documents around three bases, ids d0..d59, with a score and an extra field."""
    rng = random.Random(7)
    texts = _near_texts(rng, 60, edits=12)
    return [{"id": f"d{i}", "text": t, "score": rng.random(), "lang": "x"}
            for i, t in enumerate(texts)]


def test_dedup_corpus_first_keeps_the_greedy_representatives(tmp_path, docs):
    """keep=first keeps exactly the representatives in input order; lines are copied whole."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    s = corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), str(tmp_path / "rm.jsonl"),
                            threshold=0.8)
    sigs = simstore.signatures([d["text"] for d in docs])
    reps = corpus.representative_clusters(sigs, threshold=0.8)
    want = [docs[i] for i in range(len(docs)) if reps.rep[i] == i]
    assert _read_jsonl(tmp_path / "kept.jsonl") == want
    removed = _read_jsonl(tmp_path / "rm.jsonl")
    assert s.kept == len(want) and s.removed == len(removed) == len(docs) - len(want)
    for r in removed:
        i = int(r["id"][1:])
        assert r["kept"] == f"d{reps.rep[i]}" and r["jaccard"] >= 0.8
        assert r["source"] == f"{src}:{i + 1}" and r["kept_source"] == f"{src}:{reps.rep[i] + 1}"


@pytest.mark.parametrize("keep", ["longest", "score"])
def test_dedup_corpus_longest_and_field_policies(tmp_path, docs, keep):
    """keep=longest / FIELD keeps the representatives in that priority order (ties: input)."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), str(tmp_path / "rm.jsonl"),
                        threshold=0.8, keep=keep)
    value = [len(d["text"]) if keep == "longest" else d["score"] for d in docs]
    order = sorted(range(len(docs)), key=lambda i: (-value[i], i))
    reps = corpus.representative_clusters(simstore.signatures([d["text"] for d in docs]),
                                          threshold=0.8, order=order)
    kept = [d["id"] for d in _read_jsonl(tmp_path / "kept.jsonl")]
    assert kept == [f"d{i}" for i in range(len(docs)) if reps.rep[i] == i]
    for r in _read_jsonl(tmp_path / "rm.jsonl"):
        i = int(r["id"][1:])
        assert value[int(r["kept"][1:])] >= value[i]


def test_dedup_corpus_hamming_mode_reports_distances(tmp_path, docs):
    """k=K removes documents within Hamming K of a kept one and reports the distance."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    corpus.dedup_corpus([str(src)], str(tmp_path / "kept.jsonl"), str(tmp_path / "rm.jsonl"),
                        k=6)
    fps = simstore.fingerprints([d["text"] for d in docs])
    reps = corpus.representative_clusters(fps, k=6)
    assert len(_read_jsonl(tmp_path / "kept.jsonl")) == int((reps.rep == np.arange(60)).sum())
    for r in _read_jsonl(tmp_path / "rm.jsonl"):
        i, j = int(r["id"][1:]), int(r["kept"][1:])
        assert r["distance"] == hamming(fps[i], fps[j]) <= 6


def test_dedup_corpus_is_incremental_through_a_store(tmp_path, docs):
    """With a store, a second run removes near-duplicates of the first run's kept documents
    and keeps (writes again, without adding) documents whose id the store holds."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_jsonl(a, docs[:30])
    _write_jsonl(b, [dict(d, id=f"n{i}") for i, d in enumerate(docs[30:])] + docs[:2])
    store = str(tmp_path / "seen")
    s1 = corpus.dedup_corpus([str(a)], str(tmp_path / "k1.jsonl"), threshold=0.8, store=store)
    s2 = corpus.dedup_corpus([str(b)], str(tmp_path / "k2.jsonl"), str(tmp_path / "rm2.jsonl"),
                             threshold=0.8, store=store)
    sigs = simstore.signatures([d["text"] for d in docs])
    reps = corpus.representative_clusters(sigs, threshold=0.8)
    assert s1.kept + s2.kept - s2.already_stored == int((reps.rep == np.arange(60)).sum())
    assert s2.already_stored == 2
    assert {"d0", "d1"} <= {r["id"] for r in _read_jsonl(tmp_path / "k2.jsonl")}
    removed = _read_jsonl(tmp_path / "rm2.jsonl")
    assert {r["reason"] for r in removed} == {"near-duplicate"}
    with simstore.SimStore(store, readonly=True) as st:
        assert len(st) == s1.kept + s2.kept - s2.already_stored


def test_dedup_corpus_two_pass_with_a_store(tmp_path, docs):
    """keep=longest with a store: stored documents count as kept; new kept ones are added."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_jsonl(a, docs[:30])
    _write_jsonl(b, [dict(d, id=f"n{i}") for i, d in enumerate(docs[30:])])
    store = str(tmp_path / "seen")
    s1 = corpus.dedup_corpus([str(a)], str(tmp_path / "k1.jsonl"), threshold=0.8, store=store)
    s2 = corpus.dedup_corpus([str(b)], str(tmp_path / "k2.jsonl"), str(tmp_path / "rm.jsonl"),
                             threshold=0.8, store=store, keep="longest")
    with simstore.SimStore(store, readonly=True) as st:
        assert len(st) == s1.kept + s2.kept
        for d in _read_jsonl(tmp_path / "k2.jsonl"):
            assert st.similar(d["text"], 0.8)[0].doc_id == d["id"]
    stored = {r["kept"] for r in _read_jsonl(tmp_path / "rm.jsonl")
              if not r.get("kept_source")}
    assert stored and all(k.startswith("d") for k in stored)


def test_dedup_corpus_parquet_in_parquet_out(tmp_path, docs):
    """Parquet in gives Parquet out with every column; bad rows name file:row N."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src, row_group_size=16)
    s = corpus.dedup_corpus([str(src)], str(tmp_path / "kept.parquet"), threshold=0.8,
                            chunk_docs=10)
    kept = pq.read_table(tmp_path / "kept.parquet")
    assert kept.column_names == ["id", "text", "score", "lang"] and kept.num_rows == s.kept
    reps = corpus.representative_clusters(simstore.signatures([d["text"] for d in docs]),
                                          threshold=0.8)
    assert kept.column("id").to_pylist() == [f"d{i}" for i in range(60) if reps.rep[i] == i]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a", None], "text": ["x", "y"]}), bad)
    with pytest.raises(corpus.BadInputError, match=r"bad\.parquet:row 2: 'id' is null"):
        corpus.dedup_corpus([str(bad)], str(tmp_path / "k.parquet"))
    assert not (tmp_path / "k.parquet").exists()


def test_to_arrow_gives_ids_and_uint64_fingerprints(tmp_path):
    """to_arrow(store): a Table with the ids and the fingerprints as uint64."""
    pa = pytest.importorskip("pyarrow")
    with simstore.SimStore(tmp_path / "s") as st:
        st.add_many(["a", "b"], [1, 2**64 - 1])
        t = corpus.to_arrow(st)
    assert t.schema.field("fp").type == pa.uint64()
    assert t.to_pylist() == [{"id": "a", "fp": 1}, {"id": "b", "fp": 2**64 - 1}]


# --------------------------------------------------------------------------- index_corpus, chunks


def test_chunks_are_bounded_by_documents_and_bytes(tmp_path):
    """A JSONL input is read in chunks of at most chunk_docs documents / ~chunk_bytes of text."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, [{"id": i, "text": "x" * 1000} for i in range(95)])
    source = Source(str(src), str(src), "jsonl", src.stat().st_size)
    sizes = [len(c) for c in iter_chunks([source], ReadOptions(chunk_docs=20), raise_bad)]
    assert sizes == [20, 20, 20, 20, 15]
    opts = ReadOptions(chunk_docs=1000, chunk_bytes=10_000)
    assert max(len(c) for c in iter_chunks([source], opts, raise_bad)) <= 10


def test_index_corpus_summary_and_interrupt(tmp_path, docs, monkeypatch):
    """index_corpus counts new / already stored / near-duplicates; Ctrl-C keeps committed chunks."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    import simstore.corpus.ingest as ingest

    calls = [0]
    real = ingest._items

    def flaky(store, texts):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(store, texts)

    monkeypatch.setattr(ingest, "_items", flaky)
    with simstore.SimStore(tmp_path / "s") as st:
        with pytest.raises(corpus.Interrupted) as exc:
            corpus.index_corpus(st, [str(src)], chunk_docs=10)
        assert exc.value.summary.new == 20 and len(st) == 20
        assert exc.value.summary.last == f"{src}:20"
        monkeypatch.setattr(ingest, "_items", real)
        s = corpus.index_corpus(st, [str(src)], k=3, chunk_docs=10)
    assert (s.already_stored, s.new + s.near_duplicates) == (20, 40)


def test_dedup_corpus_refuses_to_overwrite_an_input(tmp_path, docs):
    """The kept output may not be an input, nor the same file as the removed report."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs[:3])
    with pytest.raises(simstore.SimstoreValueError, match="also an input"):
        corpus.dedup_corpus([str(src)], str(src))
    with pytest.raises(simstore.SimstoreValueError, match="two files"):
        corpus.dedup_corpus([str(src)], str(tmp_path / "o.jsonl"), str(tmp_path / "o.jsonl"))
    assert len(_read_jsonl(src)) == 3


def test_dedup_corpus_takes_one_path_as_one_input(tmp_path, docs):
    """dedup_corpus("in.jsonl", "out.jsonl") (str or PathLike) reads one input, as a list does."""
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, docs)
    a = corpus.dedup_corpus(str(src), str(tmp_path / "a.jsonl"))
    b = corpus.dedup_corpus(src, tmp_path / "b.jsonl")
    c = corpus.dedup_corpus([str(src)], str(tmp_path / "c.jsonl"))
    assert a.documents == len(docs) and a.kept == b.kept == c.kept
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "c.jsonl").read_bytes()


def test_load_json_says_where_once_and_never_raises_anything_but_bad_record():
    """JSON errors read "… starting at column 8" (not "at at"); depth and digits are BadRecords."""
    from simstore.corpus.records import BadRecord, load_json

    with pytest.raises(BadRecord, match=r"Unterminated string starting at column 8\)$"):
        load_json('{"id": "c')
    with pytest.raises(BadRecord, match=r"Expecting value at column 8\)$"):
        load_json('{"id": }')
    with pytest.raises(BadRecord, match="nested too deeply"):
        load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadRecord, match="4300 digits"):
        load_json("9" * 5000)


def test_seen_ids_equal_a_set_across_merges(monkeypatch):
    """SeenIds.first answers as a Python set does, str and int ids, across merges."""
    from simstore.corpus import seen as seen_mod

    monkeypatch.setattr(seen_mod, "_MERGE_AT", 7)
    rng = np.random.default_rng(5)
    ids = [f"s{v}" if v % 2 else int(v) for v in rng.integers(0, 300, 2000).tolist()]
    s, oracle = seen_mod.SeenIds(), set()
    for d in ids:
        assert s.first(d) == (d not in oracle)
        oracle.add(d)
    assert len(s) == len(oracle)


def test_a_repeated_id_is_decided_at_its_first_occurrence_whatever_the_chunks(tmp_path, docs):
    """With a store, an id's first occurrence is decided and later ones are 'repeated id',
    for chunks of 1, 7 and 1000 documents: the same kept output each time."""
    src = tmp_path / "in.jsonl"
    rows = docs[:40] + [dict(docs[45], id="d3"), dict(docs[50], id="d7")] + docs[40:]
    _write_jsonl(src, rows)
    outs = []
    for chunk in (1, 7, 1000):
        out, rm = tmp_path / f"k{chunk}.jsonl", tmp_path / f"r{chunk}.jsonl"
        corpus.dedup_corpus(src, out, rm, threshold=0.8, store=tmp_path / f"s{chunk}",
                            chunk_docs=chunk)
        outs.append(out.read_bytes())
        reasons = {(r["id"], r["source"]): r["reason"] for r in _read_jsonl(rm)}
        assert reasons[("d3", f"{src}:41")] == reasons[("d7", f"{src}:42")] == "repeated id"
    assert outs[0] == outs[1] == outs[2]
