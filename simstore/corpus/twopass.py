"""dedup_corpus with keep="longest" or keep=FIELD: decide on arrays, then write.

Pass 1 streams the input and keeps only arrays: each document's id, where it
was read (source index, line), its value (length or field) and, for the
documents that are candidates, their fingerprints or signatures; with a
persistent store, the first occurrence of an id the store holds is kept as it
is (written, not decided again), later occurrences of any id are removed as
repeated, and documents near a stored one are removed (the stored one was kept
earlier). Then
:func:`simstore.corpus.representative_clusters` picks representatives in
priority order (largest value first, ties in input order). Pass 2 reads the
input again and writes the kept documents and the removed report, adding the
kept ones to the persistent store chunk by chunk (one transaction each,
written outputs and store in step).
"""

from __future__ import annotations

import json
import math
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..exceptions import SimstoreValueError
from ..search.greedy import Representatives, representative_clusters
from ..store import SimStore
from ..text.minhash import Signatures
from .ingest import CorpusRun, Mode, _items, committing, tally
from .parquet import pyarrow
from .readers import Chunk, ignore_bad
from .seen import SeenIds
from .sources import Inputs, Source, open_binary
from .summary import NEAR, NEW, REPEATED, STORED, Interrupted


class Pass1:
    """Arrays gathered by the first pass."""

    def __init__(self, inp: Inputs) -> None:
        self.src_index = {s.name: i for i, s in enumerate(inp.sources)}
        self.names = [s.name + (":row " if s.kind == "parquet" else ":") for s in inp.sources]
        self.ids: list[Any] = []
        self.src = array("l")
        self.line = array("q")
        self.value = array("d")
        self.status = array("b")
        self.cand = array("q")  # positions decided by the pair search
        self.parts: list[Any] = []  # candidates' fingerprints / signatures, per chunk
        self.stored_near: dict[int, Any] = {}  # position -> the stored match

    def where(self, pos: int) -> str:
        line = self.line[pos]
        name = self.names[self.src[pos]]
        return name.rsplit(":", 1)[0] if line == 0 else f"{name}{line}"

    def add_chunk(self, c: Chunk, keep: str) -> int:
        base = len(self.ids)
        self.ids.extend(c.ids)
        if c.kind == "text":
            self.src.extend(self.src_index[w] for w in c.where)
            self.line.extend([0] * len(c))
        else:
            assert c.source is not None
            self.src.extend([self.src_index[c.source.name]] * len(c))
            self.line.extend(c.where)
        self.value.extend([float(len(t)) for t in c.texts] if keep == "longest" else c.values)
        self.status.extend([STORED] * len(c))
        return base


def _match_stored(store: SimStore, mode: Mode, item: Any) -> Any:
    found: list[Any]
    if mode.threshold is not None:
        found = store.similar(item, mode.threshold)
    else:
        found = store.query(item.fingerprint if hasattr(item, "fingerprint") else item, mode.k)
    return found[0] if found else None


def _first_pass(run: CorpusRun, store: SimStore) -> Pass1:
    inp, mode, persistent = run.inp, run.mode, run.persistent
    p = Pass1(inp)
    sim = store.config.has_signature
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-fingerprint")

    def settle(base: int, fresh: list[int], items: Any) -> None:
        keep_rows = []
        for j, i in enumerate(fresh):
            pos = base + i
            if persistent:
                m = _match_stored(store, mode, items[j] if sim else int(items[j]))
                if m is not None:
                    p.status[pos] = NEAR
                    p.stored_near[pos] = m
                    continue
            p.status[pos] = NEW
            p.cand.append(pos)
            keep_rows.append(j)
        if keep_rows:
            rows = np.array(keep_rows, dtype=np.int64)
            p.parts.append(items[rows])

    pending = None
    seen = SeenIds()  # a persistent run decides the first occurrence of each id
    try:
        with run.progress.bar("reading (pass 1 of 2)", inp.total_bytes) as bar:
            docs = 0
            for c in run.chunks(with_rows=False):
                base = p.add_chunk(c, run.keep)
                fresh = []
                for i, d in enumerate(c.ids):
                    if persistent:
                        st = REPEATED if not seen.first(d) else STORED if d in store else None
                        if st is not None:
                            p.status[base + i] = st
                            continue
                    fresh.append(i)
                fut = pool.submit(_items, store, [c.texts[i] for i in fresh])
                if pending is not None:
                    settle(pending[0], pending[1], pending[2].result())
                pending = (base, fresh, fut)
                docs += len(c)
                bar.update(c.nbytes, docs=docs)
            if pending is not None:
                settle(pending[0], pending[1], pending[2].result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return p


def _concat(parts: list[Any], sim: bool) -> Any:
    if sim:
        return Signatures.concat(parts) if parts else None
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def two_pass(run: CorpusRun) -> None:
    """keep="longest" / FIELD (see the module docstring)."""
    store, mode = run.store, run.mode
    assert store is not None
    try:
        p = _first_pass(run, store)
    except KeyboardInterrupt:
        raise Interrupted(run.summary) from None
    if run.keep != "longest":
        run.summary.keep_missing = check_keep_field(p, run.inp, run.keep)
    sim = store.config.has_signature
    items = _concat(p.parts, sim)
    p.parts.clear()
    cand = np.array(p.cand, dtype=np.int64)
    reps = None
    if len(cand):
        vals = np.frombuffer(p.value, dtype=np.float64)[cand]
        order = np.lexsort((np.arange(len(cand)), -vals))
        with run.progress.step(f"choosing representatives among {len(cand):,} documents"):
            if mode.threshold is not None:
                reps = representative_clusters(items, threshold=mode.threshold, order=order)
            else:
                fps = items.fingerprints if sim else items
                reps = representative_clusters(fps, k=mode.k, order=order)
    write_pass(run, Decisions.of(p, reps, items))


@dataclass(frozen=True)
class Decisions:
    """What pass 2 writes from: pass 1's arrays, the representatives chosen among its
    candidates, and the candidates' fingerprints or signatures (``items``, in candidate
    order: what a persistent store is given; None when no store is kept)."""

    p: Pass1
    reps: Representatives | None  # None: no candidates
    items: Any
    cand: np.ndarray  # candidate -> position in the input
    local: np.ndarray  # position in the input -> candidate, or -1

    @classmethod
    def of(cls, p: Pass1, reps: Representatives | None, items: Any) -> Decisions:
        cand = np.array(p.cand, dtype=np.int64)
        local = np.full(len(p.ids), -1, dtype=np.int64)
        local[cand] = np.arange(len(cand))
        return cls(p, reps, items, cand, local)


def write_pass(run: CorpusRun, d: Decisions) -> None:
    """Pass 2: read the input again and write the kept documents and the removed report
    (a persistent store gets the kept ones, chunk by chunk, in step with the outputs)."""
    pos = 0
    with committing(run.out, run.summary), run.progress.bar(
            "writing (pass 2 of 2)", run.inp.total_bytes) as bar:
        for c in run.chunks(with_rows=True, on_bad=ignore_bad):
            status = _second_chunk(run, d, c, pos)
            pos += len(c)
            tally(run.summary, bar, c, status)


def _second_chunk(run: CorpusRun, d: Decisions, c: Chunk, base: int) -> list[int]:
    """Decide and write one chunk of pass 2; each document's outcome."""
    p, local, cand, reps, out = d.p, d.local, d.cand, d.reps, run.out
    status = []
    kept: list[int] = []
    records = []
    for i in range(len(c)):
        pos = base + i
        s = p.status[pos]
        rec: dict[str, Any] = {"id": c.ids[i], "source": c.location(i)}
        if s == NEW:
            assert reps is not None
            li = int(local[pos])
            r = int(reps.rep[li])
            if r == li:
                kept.append(i)
                status.append(NEW)
                continue
            g = int(cand[r])
            rec.update(reason="near-duplicate", kept=p.ids[g], kept_source=p.where(g))
            if reps.jaccard is not None:
                rec["jaccard"] = round(float(reps.jaccard[li]), 4)
            else:
                rec["distance"] = int(reps.distance[li])
            status.append(NEAR)
        elif s == NEAR:
            m = p.stored_near[pos]
            rec.update(reason="near-duplicate", kept=m.doc_id)
            if hasattr(m, "jaccard"):
                rec["jaccard"] = round(float(m.jaccard), 4)
            else:
                rec["distance"] = int(m.distance)
            status.append(NEAR)
        elif s == STORED:  # stored before this run: kept, as it was then
            kept.append(i)
            status.append(STORED)
            continue
        else:
            rec.update(reason="repeated id", kept=c.ids[i])
            status.append(REPEATED)
        records.append(rec)
    if not run.persistent:
        out.kept.write(c, kept)
        if out.removed is not None:
            for rec in records:
                out.removed.write(rec)
        return status
    store = run.store
    assert store is not None
    with store.batch():
        new = [i for i in kept if p.status[base + i] == NEW]
        if new:
            rows = local[np.array([base + i for i in new], dtype=np.int64)]
            store.add_many([c.ids[i] for i in new], d.items[rows])
        out.kept.write(c, kept)
        if out.removed is not None:
            for rec in records:
                out.removed.write(rec)
    return status


def check_keep_inputs(inp: Inputs, keep: str) -> None:
    """keep=FIELD reads a field of each record: text-file inputs have none."""
    texts = [s.name for s in inp.sources if s.kind == "text"]
    if texts:
        raise SimstoreValueError(
            f"--keep {keep}: {texts[0]!r} is a text file, whose documents have no fields; "
            "use --keep first or longest, or give JSON lines / Parquet")


def check_keep_field(p: Pass1, inp: Inputs, keep: str) -> int:
    """How many documents lack a numeric ``keep`` value (missing or null: ranked last);
    when all of them do, the field is surely misspelt: SimstoreValueError."""
    missing = sum(1 for v in p.value if v == -math.inf)
    if missing and missing == len(p.value):
        fields = _first_fields(inp.sources[0]) if inp.sources else []
        raise SimstoreValueError(
            f"--keep {keep}: no record has a value for {keep!r}; the first record's fields "
            f"are {', '.join(map(repr, fields)) or 'none'} (nothing was written)")
    return missing


def _first_fields(src: Source) -> list[str]:
    """The field names of a JSON lines / Parquet source's first record ([] if unreadable)."""
    try:
        if src.kind == "parquet":
            return list(pyarrow().parquet.ParquetFile(src.path).schema_arrow.names)
        with open_binary(src.path) as fh:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    return list(obj) if isinstance(obj, dict) else []
    except Exception:  # noqa: BLE001 - a hint only: the error stands without it
        return []
    return []
