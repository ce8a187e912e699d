"""simstore.datatrove: the shared-store filter and the four stages under LocalPipelineExecutor."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

pytest.importorskip("datatrove")
pytest.importorskip("orjson")  # datatrove's JSON lines reader and writer

from datatrove.data import Document  # noqa: E402
from datatrove.executor import LocalPipelineExecutor  # noqa: E402
from datatrove.pipeline.readers import JsonlReader  # noqa: E402
from datatrove.pipeline.writers import JsonlWriter  # noqa: E402

import simstore  # noqa: E402
from simstore import SimstoreError, corpus  # noqa: E402
from simstore.datatrove import (  # noqa: E402
    NearDedupBuckets,
    NearDedupCluster,
    NearDedupClusterFilter,
    NearDedupFilter,
    NearDedupSignature,
)

from ..realtext import documents, read_jsonl, write_jsonl  # noqa: E402

TASKS = 4


@pytest.fixture(scope="module")
def docs():
    """~200 real documents with planted near copies."""
    return documents(200)


def _inputs(folder, docs):
    """The documents as TASKS JSON lines files (rank r reads file r)."""
    folder.mkdir()
    per = -(-len(docs) // TASKS)
    for r in range(TASKS):
        write_jsonl(folder / f"part{r}.jsonl", docs[r * per : (r + 1) * per])
    return folder


def _run(pipeline, logs, tasks=TASKS, workers=2):
    return LocalPipelineExecutor(
        pipeline=pipeline, tasks=tasks, workers=workers, logging_dir=str(logs)
    ).run()


def _written(folder):
    out = []
    for name in sorted(os.listdir(folder)):
        with gzip.open(folder / name, "rt", encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f)
    return out


def _stats(logs, name):
    with open(logs / "stats.json") as f:
        return next(s["stats"] for s in json.load(f) if name in s["name"])


def _reader(folder):
    return JsonlReader(str(folder), id_key="id")


def test_shared_store_keeps_each_document_once_across_tasks(tmp_path, docs):
    """Four tasks in two processes, one store: no two kept documents are near, every removed
    one names a kept one, the counters add up; a second dump is deduplicated against it."""
    src = _inputs(tmp_path / "in", docs)
    store = tmp_path / "store"
    _run(
        [
            _reader(src),
            NearDedupFilter(store, exclusion_writer=JsonlWriter(str(tmp_path / "rm"))),
            JsonlWriter(str(tmp_path / "kept")),
        ],
        tmp_path / "logs",
    )
    kept, removed = _written(tmp_path / "kept"), _written(tmp_path / "rm")
    assert len(kept) + len(removed) == len(docs) and len(removed) > 10
    assert len(simstore.find_similar(simstore.signatures([d["text"] for d in kept]), 0.9).i) == 0
    kept_ids = {d["id"] for d in kept}
    assert all(r["metadata"]["simstore_kept_id"] in kept_ids for r in removed)
    stats = _stats(tmp_path / "logs", "simstore")
    assert (stats["total"], stats["forwarded"], stats["dropped_near_duplicate"]) == (
        len(docs),
        len(kept),
        len(removed),
    )
    with simstore.SimStore(store, readonly=True) as s:
        assert sorted(doc_id for doc_id, _ in s.items()) == sorted(kept_ids)
    dump2 = tmp_path / "in2"
    dump2.mkdir()
    write_jsonl(dump2 / "a.jsonl", [dict(d, id=f"2-{d['id']}") for d in docs[:30]])
    _run(
        [_reader(dump2), NearDedupFilter(store), JsonlWriter(str(tmp_path / "kept2"))],
        tmp_path / "logs2",
        tasks=1,
        workers=1,
    )
    assert not (tmp_path / "kept2").exists() or _written(tmp_path / "kept2") == []


def test_exact_filter_keeps_no_pair_at_exact_jaccard(tmp_path, docs):
    """exact=True: the store keeps shingle sets and no two kept documents reach the
    threshold by exact Jaccard."""
    src = _inputs(tmp_path / "in", docs[:120])
    _run(
        [
            _reader(src),
            NearDedupFilter(tmp_path / "store", 0.8, exact=True),
            JsonlWriter(str(tmp_path / "kept")),
        ],
        tmp_path / "logs",
    )
    kept = [d["text"] for d in _written(tmp_path / "kept")]
    sets = simstore.shingle_sets(kept)
    i, j = np.triu_indices(len(kept), 1)
    assert (simstore.exact_jaccard(sets, i, j) < 0.8).all()
    with simstore.SimStore(tmp_path / "store", readonly=True) as s:
        assert s.exact


def test_four_stages_equal_dedup_corpus(tmp_path, docs):
    """Signatures, buckets (16 tasks), cluster, filter, each under LocalPipelineExecutor (one
    worker: the shared-store test covers processes): the kept documents and each removed
    one's representative equal dedup_corpus on the inputs in rank order."""
    src = _inputs(tmp_path / "in", docs)
    sigs, pairs, rm = tmp_path / "sigs", tmp_path / "pairs", tmp_path / "rm"
    _run([_reader(src), NearDedupSignature(str(sigs))], tmp_path / "l1", workers=1)
    _run(
        [NearDedupBuckets(str(sigs), str(pairs), threshold=0.9)],
        tmp_path / "l2",
        tasks=16,
        workers=1,
    )
    _run([NearDedupCluster(str(sigs), str(pairs), str(rm))], tmp_path / "l3", tasks=1, workers=1)
    _run(
        [
            _reader(src),
            NearDedupClusterFilter(str(rm), JsonlWriter(str(tmp_path / "gone"))),
            JsonlWriter(str(tmp_path / "kept")),
        ],
        tmp_path / "l4",
        workers=1,
    )
    both = tmp_path / "all.jsonl"
    write_jsonl(both, [d for r in range(TASKS) for d in read_jsonl(src / f"part{r}.jsonl")])
    corpus.dedup_corpus([str(both)], tmp_path / "k.jsonl", tmp_path / "r.jsonl", threshold=0.9)
    assert [d["id"] for d in _written(tmp_path / "kept")] == [
        d["id"] for d in read_jsonl(tmp_path / "k.jsonl")
    ]
    per = -(-len(docs) // TASKS)
    want = {r["id"]: (r["kept"], r["jaccard"]) for r in read_jsonl(tmp_path / "r.jsonl")}
    got = {}
    for d in _written(tmp_path / "gone"):
        rank, doc = map(int, d["metadata"]["simstore_kept"].split("/"))
        got[d["id"]] = (docs[rank * per + doc]["id"], d["metadata"]["simstore_jaccard"])
    assert got == want and len(got) > 10


def test_bad_documents_and_stage_misuse_are_refused(tmp_path):
    """A document without an id or text, a bucket stage of the wrong size, a filter without
    its removal file: one line each, a SimstoreError."""
    f = NearDedupFilter(tmp_path / "s")
    with pytest.raises(SimstoreError, match="'id' is null"):
        list(f.run(iter([Document(text="a b c", id=None)])))
    with pytest.raises(SimstoreError, match="text must be a str"):
        list(f.run(iter([Document(text=None, id="x")])))
    with pytest.raises(SimstoreError, match="multiple of 16 tasks"):
        NearDedupBuckets(tmp_path, tmp_path).run(None, 0, 3)
    with pytest.raises(SimstoreError, match="run stage 3 first"):
        list(NearDedupClusterFilter(tmp_path).run(iter([]), 0, 1))


def test_copies_pair_with_their_first_only(tmp_path, docs):
    """300 copies of one document: stage 2 writes each copy once a band (no 45,000 pairs)
    and the kept documents still equal dedup_corpus's (stages run in-process)."""
    rows = docs[:40] + [dict(docs[5], id=f"copy-{k}") for k in range(300)] + docs[40:60]
    shards = [rows[:170], rows[170:]]
    sigs, pairs, rm = tmp_path / "sigs", tmp_path / "pairs", tmp_path / "rm"
    as_docs = [[Document(text=d["text"], id=d["id"]) for d in shard] for shard in shards]
    for r, shard in enumerate(as_docs):
        NearDedupSignature(sigs).run(iter(shard), r, len(shards))
    stage2 = NearDedupBuckets(sigs, pairs)
    for r in range(16):
        stage2.run(None, r, 16)
    assert stage2.stats["copies"].total >= 16 * 300  # and the corpus's own copies
    assert stage2.stats["pairs"].total < 16 * len(rows)
    NearDedupCluster(sigs, pairs, rm).run(None, 0, 1)
    kept = [
        d.id
        for r, shard in enumerate(as_docs)
        for d in NearDedupClusterFilter(rm).run(iter(shard), r, len(shards))
    ]
    src = write_jsonl(tmp_path / "all.jsonl", rows)
    corpus.dedup_corpus([str(src)], tmp_path / "k.jsonl", threshold=0.9)
    assert kept == [d["id"] for d in read_jsonl(tmp_path / "k.jsonl")]
