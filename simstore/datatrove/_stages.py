"""Many machines: simstore's near-duplicate rule as datatrove's four MinHash stages.

The layout of datatrove's ``MinhashDedup*`` steps, so the stages run on its Local,
Slurm and Ray executors alike (files through its ``DataFolder``, any fsspec URL):

1. :class:`NearDedupSignature` (any tasks): each task signs its documents and writes,
   per band, ``bucket_BBB/RRRRR.simstore.sig``: one :data:`SIG_RECORD` per document
   (band key, document index, sketch) sorted by key; and ``docs/RRRRR.count``.
2. :class:`NearDedupBuckets` (tasks: a multiple of the bands): each task reads one
   band's files (a slice of its key range when a band has several tasks), pairs the
   documents sharing a key and keeps the pairs whose sketch estimate is >= threshold
   (the check datatrove's LSH leaves out), written as ``BBB_PP.pairs``; copies (same key
   and sketch) are paired with their first one only, in ``BBB_PP.copies``.
3. :class:`NearDedupCluster` (one task): the pairs of every band, each once; the greedy
   representatives in input order (rank, then document: ``add_if_new``'s rule, so
   clusters do not chain as union-find's do), and per rank ``RRRRRR.remove``.
4. :class:`NearDedupClusterFilter` (the tasks of stage 1, same reader): drops the
   documents listed for its rank, through datatrove's exclusion writer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..exceptions import SimstoreValueError
from ..native import core as _core
from ..search.bandpairs import run_pairs
from ..search.greedy import representatives_from_pairs
from ..search.similar import check_threshold
from ..text.fingerprinting import SIGNATURE_CONFIG, FingerprintConfig, check_config
from ..text.minhash import jaccard_table, signatures
from ._deps import (
    DataFolderLike,
    DiskWriter,
    Document,
    DocumentsPipeline,
    PipelineStep,
    StatHints,
    batched,
    get_datafolder,
)
from ._filter import check_documents

PAIR_RECORD = np.dtype(
    [("ra", "<u4"), ("da", "<u4"), ("rb", "<u4"), ("db", "<u4"), ("jaccard", "<f4")]
)
REMOVE_RECORD = np.dtype(
    [("doc", "<u4"), ("rep_rank", "<u4"), ("rep_doc", "<u4"), ("jaccard", "<f4")]
)
SIGN_BATCH = 1000  # documents signed by one C call


def sig_record(config: FingerprintConfig) -> np.dtype:
    """One document in one band's file: its band key, index in its task, sketch."""
    words = config.sketch_bits // 64
    return np.dtype([("key", "<u8"), ("doc", "<u4"), ("sketch", "<u8", (words,))])


def _folder(where: DataFolderLike | os.PathLike[str]) -> Any:
    """datatrove's DataFolder of a path, URL or DataFolder (a PathLike taken as its path)."""
    return get_datafolder(os.fspath(where) if isinstance(where, os.PathLike) else where)


def _read(folder: Any, path: str, dtype: np.dtype) -> np.ndarray:
    with folder.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=dtype)


def _write(folder: Any, path: str, records: np.ndarray) -> None:
    with folder.open(path, "wb") as f:
        f.write(records.tobytes())


def _pairs(
    ranks: np.ndarray, docs: np.ndarray, a: np.ndarray, b: np.ndarray, jaccard: np.ndarray
) -> np.ndarray:
    """Records of the pairs of rows (a, b): each side's rank and document index."""
    out = np.empty(len(a), dtype=PAIR_RECORD)
    out["ra"], out["da"], out["rb"], out["db"] = ranks[a], docs[a], ranks[b], docs[b]
    out["jaccard"] = jaccard
    return out


def identical_heads(keys: np.ndarray, order: np.ndarray, sketches: np.ndarray) -> np.ndarray:
    """Each row's head: the first row (by ``order``) with its key and sketch, itself if none.

    Copies are paired with their head only, so a key shared by 10,000 copies of one page
    gives 10,000 records, not 50 million pairs. Rows are grouped by a 64-bit hash of the
    sketch, then compared with their head in full (a collision stays its own head).
    """
    n = len(keys)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in sketches.T:
            h = (h ^ col) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    by = np.lexsort((order, h, keys))
    new = np.ones(n, dtype=bool)
    new[1:] = (keys[by][1:] != keys[by][:-1]) | (h[by][1:] != h[by][:-1])
    head = np.empty(n, dtype=np.int64)
    head[by] = by[np.maximum.accumulate(np.where(new, np.arange(n), 0))]
    same = (sketches == sketches[head]).all(axis=1) if n else np.ones(0, dtype=bool)
    return np.where(same, head, np.arange(n))


class NearDedupSignature(PipelineStep):
    """Stage 1: each document's band keys and sketch, to files per band and rank."""

    type = "🫂 - DEDUP"
    name = "🔎 simstore stage 1: signatures"

    def __init__(
        self, output_folder: DataFolderLike, config: FingerprintConfig = SIGNATURE_CONFIG
    ) -> None:
        super().__init__()
        self.output_folder = _folder(output_folder)
        self.config = check_config(config)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> None:
        bands, sketches = [], []
        with self.track_time():
            for docs in batched(data or (), SIGN_BATCH):
                check_documents(docs)
                sigs = signatures([d.text for d in docs], self.config, threads=1)
                bands.append(sigs.bands)
                sketches.append(sigs.sketches)
                self.stat_update(StatHints.total, value=len(docs))
            n = sum(len(b) for b in bands)
            rec = np.empty(n, dtype=sig_record(self.config))
            rec["doc"] = np.arange(n, dtype=np.uint32)
            if n:
                rec["sketch"] = np.concatenate(sketches)
            all_bands = np.concatenate(bands) if n else np.empty((0, self.config.bands))
            for b in range(self.config.bands):
                rec["key"] = all_bands[:, b]
                _write(
                    self.output_folder,
                    f"bucket_{b:03d}/{rank:05d}.simstore.sig",
                    rec[np.argsort(rec["key"], kind="stable")],
                )
            with self.output_folder.open(f"docs/{rank:05d}.count", "w") as f:
                f.write(str(n))


class NearDedupBuckets(PipelineStep):
    """Stage 2: the verified pairs of one band (or one slice of its key range)."""

    type = "🫂 - DEDUP"
    name = "🔎 simstore stage 2: buckets"

    def __init__(
        self,
        input_folder: DataFolderLike,
        output_folder: DataFolderLike,
        threshold: float = 0.9,
        config: FingerprintConfig = SIGNATURE_CONFIG,
    ) -> None:
        super().__init__()
        self.input_folder = _folder(input_folder)
        self.output_folder = _folder(output_folder)
        self.threshold = check_threshold(threshold)
        self.config = check_config(config)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        bands = self.config.bands
        if world_size % bands:
            raise SimstoreValueError(
                f"stage 2 needs a multiple of {bands} tasks (one or more per band; got "
                f"{world_size})"
            )
        per_band = world_size // bands
        band, part = divmod(rank, per_band)
        lo, hi = (part << 64) // per_band, ((part + 1) << 64) // per_band
        with self.track_time():
            keys, ranks, docs, sketches = self._load(band, lo, hi)
            head = identical_heads(keys, ranks.astype(np.uint64) << 32 | docs, sketches)
            heads = np.flatnonzero(head == np.arange(len(head)))
            a, b = run_pairs(keys[heads])
            a, b = heads[a], heads[b]
            dist = _core.sketch_distance_pairwise(
                np.ascontiguousarray(sketches[a]), np.ascontiguousarray(sketches[b])
            )
            table = jaccard_table(self.config.sketch_bits)
            est = table[dist]
            ok = est >= self.threshold
            copies = np.flatnonzero(head != np.arange(len(head)))
            name = f"{band:03d}_{part:02d}"
            _write(self.output_folder, f"{name}.pairs", _pairs(ranks, docs, a[ok], b[ok], est[ok]))
            _write(
                self.output_folder,
                f"{name}.copies",
                _pairs(ranks, docs, copies, head[copies], np.full(len(copies), table[0])),
            )
            self.stat_update("candidate_pairs", value=len(ok))
            self.stat_update("pairs", value=int(ok.sum()))
            self.stat_update("copies", value=len(copies))

    def _load(self, band: int, lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """(keys, ranks, documents, sketches) of the band's records with lo <= key < hi."""
        dtype = sig_record(self.config)
        parts, ranks = [], []
        for path in self.input_folder.list_files(subdirectory=f"bucket_{band:03d}"):
            rec = _read(self.input_folder, path, dtype)
            s = int(np.searchsorted(rec["key"], np.uint64(lo)))
            e = len(rec) if hi >= 1 << 64 else int(np.searchsorted(rec["key"], np.uint64(hi)))
            parts.append(rec[s:e])
            ranks.append(np.full(e - s, int(path.rsplit("/", 1)[-1].split(".")[0]), np.uint32))
        rec = np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
        rank = np.concatenate(ranks) if ranks else np.empty(0, dtype=np.uint32)
        return rec["key"], rank, rec["doc"], np.ascontiguousarray(rec["sketch"])


class NearDedupCluster(PipelineStep):
    """Stage 3 (one task): the greedy representatives over every pair; removals per rank."""

    type = "🫂 - DEDUP"
    name = "🔎 simstore stage 3: clusters"

    def __init__(
        self,
        signatures_folder: DataFolderLike,
        input_folder: DataFolderLike,
        output_folder: DataFolderLike,
    ) -> None:
        super().__init__()
        self.signatures_folder = _folder(signatures_folder)
        self.input_folder = _folder(input_folder)
        self.output_folder = _folder(output_folder)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        if world_size != 1:
            raise SimstoreValueError(f"stage 3 runs as one task (got {world_size})")
        with self.track_time():
            counts = self._counts()
            offsets = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            n = int(offsets[-1])
            group = np.arange(n, dtype=np.int64)
            c = self._records("*.copies")
            np.minimum.at(group, offsets[c["ra"]] + c["da"], offsets[c["rb"]] + c["db"])
            same = float(c["jaccard"][0]) if len(c) else 1.0
            p = self._records("*.pairs")
            x, y = group[offsets[p["ra"]] + p["da"]], group[offsets[p["rb"]] + p["db"]]
            m = np.uint64(max(n, 1))
            code, first = np.unique(
                np.minimum(x, y).astype(np.uint64) * m + np.maximum(x, y).astype(np.uint64),
                return_index=True,
            )
            i, j = (code // m).astype(np.int64), (code % m).astype(np.int64)
            jac = p["jaccard"][first].astype(np.float64)
            keep = i != j
            i, j, jac = i[keep], j[keep], jac[keep]
            rep, via = representatives_from_pairs(n, i, j, -jac, group=group)
            gone = np.flatnonzero(rep != np.arange(n))
            near = np.where(
                via[gone] >= 0, jac[np.maximum(via[gone], 0)] if len(jac) else same, same
            )
            self.stat_update("to_remove", value=len(gone))
            self._write(offsets, gone, rep[gone], near)

    def _records(self, pattern: str) -> np.ndarray:
        """Every stage-2 record of files matching ``pattern``, in one array."""
        files = self.input_folder.list_files(glob_pattern=pattern)
        parts = [_read(self.input_folder, f, PAIR_RECORD) for f in files]
        return np.concatenate(parts) if parts else np.empty(0, dtype=PAIR_RECORD)

    def _counts(self) -> np.ndarray:
        files = self.signatures_folder.list_files(subdirectory="docs")
        counts = np.zeros(len(files), dtype=np.int64)
        for path in files:
            r = int(path.rsplit("/", 1)[-1].split(".")[0])
            if r >= len(counts):
                raise SimstoreValueError(
                    f"stage 3: docs/ holds {path!r} but not every rank "
                    "below it: did a stage 1 task fail?"
                )
            with self.signatures_folder.open(path, "r") as f:
                counts[r] = int(f.read())
        return counts

    def _write(
        self, offsets: np.ndarray, gone: np.ndarray, rep: np.ndarray, jac: np.ndarray
    ) -> None:
        ranks = len(offsets) - 1
        at = np.searchsorted(offsets, gone, side="right") - 1
        rep_rank = np.searchsorted(offsets, rep, side="right") - 1
        for r in range(ranks):
            sel = np.flatnonzero(at == r)
            out = np.empty(len(sel), dtype=REMOVE_RECORD)
            out["doc"] = gone[sel] - offsets[r]
            out["rep_rank"] = rep_rank[sel]
            out["rep_doc"] = rep[sel] - offsets[rep_rank[sel]]
            out["jaccard"] = jac[sel]
            _write(self.output_folder, f"{r:06d}.remove", out)


class NearDedupClusterFilter(PipelineStep):
    """Stage 4: drop the documents stage 3 listed for this rank."""

    type = "🫂 - DEDUP"
    name = "🔎 simstore stage 4: filter"

    def __init__(
        self, input_folder: DataFolderLike, exclusion_writer: DiskWriter | None = None
    ) -> None:
        super().__init__()
        self.input_folder = _folder(input_folder)
        self.exclusion_writer = exclusion_writer

    def run(
        self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
    ) -> Iterator[Document]:
        path = f"{rank:06d}.remove"
        if not self.input_folder.isfile(path):
            raise SimstoreValueError(
                f"stage 4: no {path} in {self.input_folder.path!r}: run "
                "stage 3 first, with as many stage-1 tasks as here"
            )
        gone = _read(self.input_folder, path, REMOVE_RECORD)
        where = {int(d): k for k, d in enumerate(gone["doc"].tolist())}
        writer = self.exclusion_writer
        with writer if writer else contextlib.nullcontext() as excluded:
            for idx, doc in enumerate(data or ()):
                self.stat_update(StatHints.total)
                k = where.get(idx)
                if k is None:
                    self.stat_update(StatHints.forwarded)
                    yield doc
                    continue
                g = gone[k]
                doc.metadata["simstore_kept"] = f"{int(g['rep_rank'])}/{int(g['rep_doc'])}"
                doc.metadata["simstore_jaccard"] = round(float(g["jaccard"]), 4)
                self.stat_update(StatHints.dropped)
                if excluded is not None:
                    excluded.write(doc, rank)
