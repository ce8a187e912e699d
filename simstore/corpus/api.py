"""The corpus workflow: index a corpus into a store, or write a deduplicated copy of it.

Inputs are text files, directories of them, JSON lines (``.jsonl``, ``.ndjson``,
plain or ``.gz``/``.bz2``/``.xz``), Parquet files and ``-`` (JSON lines on
standard input); see :mod:`simstore.corpus.readers`. Memory stays bounded: documents
are read, fingerprinted and committed in chunks (``chunk_docs``: 1,000 documents
by default, 250 for :func:`dedup_corpus`'s private store; at most ~16 MB of text).

- :func:`index_corpus` adds a corpus to a store, chunk by chunk, each chunk one
  write transaction; ids already stored are skipped without fingerprinting, so
  an interrupted run continues where it stopped when run again.
- :func:`dedup_corpus` writes the kept documents (in their input's format) and
  a report of the removed ones, each naming its kept representative and how
  near it is. Through a persistent ``store`` it is incremental: documents
  whose id the store held before the run are kept (written out again, not
  decided again), new near-duplicates of stored ones go, and the store
  remembers each removed id with its report record (:mod:`simstore.store.decisions`):
  a rerun writes that record again without deciding the document. So the same
  call run again after an interruption (Ctrl-C, kill -9), or over a grown
  input, writes the kept corpus and the report of one uninterrupted run: none
  is lost, none written twice.
- :func:`representative_clusters`: clusters that do not chain (pure, arrays).
- :func:`to_arrow`: a store's (id, fp) as a pyarrow Table.

Bad records (a ``file:line`` each) raise :class:`BadInputError` before anything
is written, unless ``skip_bad`` is set: then ``on_bad(where, reason)`` hears of
each one and it is left out.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._validate import check_int
from ..exceptions import OutputPathError, SimstoreValueError
from ..search.greedy import Representatives, representative_clusters
from ..search.similar import check_threshold
from ..store import SimStore
from ..store.decisions import Decisions
from .exact import exact_dedup
from .ingest import CorpusRun, Decided, Mode, Stream, committing, nearness, tally
from .parquet import ROW_GROUP_BYTES, MissingDependencyError, store_table
from .progress import SILENT, Progress
from .readers import Chunk, bad_handler, check_all, iter_chunks
from .sources import BadInputError, Inputs, ReadOptions
from .stores import open_store
from .summary import NEAR, NEW, REPEATED, STORED, CorpusSummary, IndexSummary, Interrupted
from .twopass import check_keep_inputs, two_pass
from .writers import Outputs, output_kind

__all__ = [
    "BadInputError", "CorpusSummary", "IndexSummary", "Interrupted", "MissingDependencyError",
    "Progress", "Representatives", "dedup_corpus", "index_corpus", "representative_clusters",
    "to_arrow",
]

KEEP_POLICIES = ("first", "longest")
# Default documents per chunk of dedup_corpus's streaming pass into its private scratch
# store (keep="first", no ``store``): those commits need not be durable, and small chunks
# hold fewer texts, dirty pages and copy-on-write pages: less memory at the same speed
# (docs/bench/journal.md, "Corpus"). Persistent stores keep CHUNK_DOCS (each chunk's
# commit is durable: an fsync).
SCRATCH_CHUNK_DOCS = 250


def _read_options(kw: dict[str, Any], **given: Any) -> ReadOptions:
    """The ReadOptions of the ``read`` keywords over ``given`` ones; a None value in ``read``
    means the given or default one."""
    names = ("id_field", "text_field", "force_jsonl", "follow_symlinks", "exclude",
             "encoding_errors", "chunk_docs", "max_record_bytes")
    if kw.get("max_record_bytes") is not None:
        check_int(kw["max_record_bytes"], "max_record_bytes", 1)
    return ReadOptions(**{**given, **{k: kw[k] for k in names if kw.get(k) is not None}})


def index_corpus(
    store: SimStore, inputs: Sequence[str], *, k: int | None = None,
    threshold: float | None = None, skip_bad: bool = False,
    on_bad: Callable[[str, str], None] | None = None,
    on_near: Callable[[Any, str, Any], None] | None = None,
    progress: Progress | None = None, **read: Any,
) -> IndexSummary:
    """Add a corpus to ``store`` in chunks (one write transaction each); see the module doc.

    k / threshold: add only documents with no stored near-duplicate (add_if_new),
    else add all. ``on_near(doc_id, where, match)`` hears of each skipped
    near-duplicate. ``read``: id_field, text_field, force_jsonl, follow_symlinks,
    exclude, encoding_errors, chunk_docs, max_record_bytes (a larger record is a bad one;
    64 MiB). Raises :class:`Interrupted` on Ctrl-C.
    """
    if threshold is not None:
        threshold = check_threshold(threshold)
    progress = progress or SILENT
    summary = IndexSummary()
    opts = _read_options(read)
    start = time.monotonic()
    with Inputs(inputs, opts, read.get("stdin")) as inp:
        summary.skipped = inp.skipped
        if not skip_bad:
            check_all(inp, opts, progress)
        handler = bad_handler(skip_bad, on_bad, summary)
        stream = Stream(store, Mode(k, threshold))
        try:
            with progress.bar("indexing", inp.total_bytes) as bar:
                for dec in stream.run(iter_chunks(inp.sources, opts, handler)):
                    summary.count(dec.chunk, dec.status, dec.near, on_near)
                    bar.update(dec.chunk.nbytes, docs=summary.documents, new=summary.new,
                               near=summary.near_duplicates)
        except KeyboardInterrupt:
            summary.seconds = time.monotonic() - start
            raise Interrupted(summary) from None
    summary.seconds = time.monotonic() - start
    return summary


def dedup_corpus(
    inputs: Sequence[str] | str | os.PathLike[str], output: str | os.PathLike[str],
    removed: str | os.PathLike[str] | None = None, *,
    threshold: float | None = None, k: int | None = None,
    store: SimStore | str | os.PathLike[str] | None = None, keep: str = "first",
    skip_bad: bool = False, on_bad: Callable[[str, str], None] | None = None,
    progress: Progress | None = None, exact: bool = False,
    row_group_bytes: int = ROW_GROUP_BYTES, **read: Any,
) -> CorpusSummary:
    """Write the corpus without near-duplicates to ``output``; see the module docstring.

    Similar means estimated Jaccard >= threshold (default 0.9), or Hamming
    distance <= k when k is given. keep: "first" (input order, one streaming
    pass, the crawler's rule), "longest" (most characters first) or the name of
    a numeric field/column (largest first; missing or null last); those two read
    the input twice and hold ~2 KB per document at the peak (signature arrays
    and the batch pair search; never the texts). Output format:
    Parquet for a ``.parquet`` output or all-Parquet inputs, else JSON lines
    (input lines copied as they are; text files as {id, text}). ``removed``: a
    JSON line per removed document. Outputs appear complete or not at all;
    after Ctrl-C a persistent store keeps the committed chunks (Ctrl-C waits
    for the chunk in flight) and the same call again finishes the job (see the
    module docstring). keep="first" decides each chunk with one ``add_if_new_many`` call;
    without ``store`` it commits chunks of ``chunk_docs`` = 250 unless given
    (SCRATCH_CHUNK_DOCS: less memory, see docs/bench/journal.md "Corpus").
    exact: decide by exact Jaccard of the shingle sets. Without ``store`` both
    keep policies read the input twice (see :mod:`simstore.corpus.exact`); with
    one (keep="first" only), the store must keep shingle sets (a new path is
    created with ``exact=True``; another store is refused with
    :class:`NotExactStoreError`) and decides each chunk as ``add_if_new_many`` does.
    row_group_bytes: a Parquet output's row groups hold the input's rows per group, or
    fewer when the next row would take one over this many bytes of Arrow data (4 MiB):
    a group is built in memory before it is written.
    """
    if k is not None and threshold is not None:
        raise SimstoreValueError("give 'threshold' (Jaccard) or 'k' (Hamming), not both")
    if k is None:
        threshold = check_threshold(0.9 if threshold is None else threshold)
    if not isinstance(keep, str) or not keep:
        raise SimstoreValueError("'keep' must be 'first', 'longest' or a field name")
    row_group_bytes = check_int(row_group_bytes, "row_group_bytes", 1)
    if exact and k is not None:
        raise SimstoreValueError("'exact' (--exact) needs a Jaccard 'threshold', not 'k'")
    if exact and store is not None and keep != "first":
        raise SimstoreValueError(
            "'exact' (--exact) with a store keeps the first document of a group only "
            "(keep='first'); without a store every keep policy works")
    progress = progress or SILENT
    inputs = _input_list(inputs)
    output = os.fspath(output)
    removed = None if removed is None else os.fspath(removed)
    _check_outputs(inputs, output, removed)
    out = Outputs(output, removed, row_group_bytes)  # every path checked before input is read
    try:
        return _dedup(inputs, out, threshold=threshold, k=k, store=store, keep=keep,
                      skip_bad=skip_bad, on_bad=on_bad, progress=progress, read=read, exact=exact)
    finally:
        out.close(False)  # a failure anywhere: no temporary stays


def _input_list(inputs: Sequence[str] | str | os.PathLike[str]) -> list[str]:
    """The inputs as a list of paths (one str or PathLike is one input)."""
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    return [os.fspath(p) for p in inputs]


def _dedup(inputs: list[str], out: Outputs, *, threshold: float | None, k: int | None,
           store: SimStore | str | os.PathLike[str] | None, keep: str, skip_bad: bool,
           on_bad: Callable[[str, str], None] | None, progress: Progress,
           read: dict[str, Any], exact: bool) -> CorpusSummary:
    """dedup_corpus once its arguments are checked and its outputs made: the run, from
    opening the store to the published outputs."""
    scratch_chunks = keep == "first" and store is None and not exact
    opts = _read_options(read, keep_field=None if keep in KEEP_POLICIES else keep,
                         **({"chunk_docs": SCRATCH_CHUNK_DOCS} if scratch_chunks else {}))
    summary = CorpusSummary(output=out.kept_path, removed_report=out.removed_path)
    start = time.monotonic()

    def run(handle: SimStore | None, persistent: bool) -> None:
        with Inputs(inputs, opts, read.get("stdin")) as inp:
            summary.skipped = inp.skipped
            kind = output_kind(out.kept_path, inp.sources)
            if keep not in KEEP_POLICIES:
                check_keep_inputs(inp, keep)
            r = CorpusRun(inp, opts, out.start(kind, opts), summary, keep, skip_bad,
                          bad_handler(skip_bad, on_bad, summary), progress,
                          Mode(k, threshold, check_stored=persistent), handle, persistent)
            if exact and handle is None:
                exact_dedup(r)
            elif keep == "first":
                _first(r)
            else:
                two_pass(r)

    if exact and store is None:
        run(None, False)
        summary.seconds = time.monotonic() - start
        return summary
    with open_store(store, k=k, threshold=threshold, exact=exact) as opened:
        run(opened.store, opened.persistent)
    summary.seconds = time.monotonic() - start
    return summary


def _check_outputs(inputs: list[str], output: str, removed: str | None) -> None:
    """Outputs must be new names: not an input, not each other."""
    real = {os.path.realpath(p) for p in inputs if p != "-"}
    outs = [os.path.realpath(output)] + ([os.path.realpath(removed)] if removed else [])
    if len(set(outs)) != len(outs):
        raise OutputPathError(f"-o and --removed name one file ({output!r}); give two files")
    for flag, path, out in zip(["-o", "--removed"], [output, removed], outs, strict=False):
        if out in real or any(out.startswith(r + os.sep) for r in real):
            raise OutputPathError(f"{flag} {path!r} is also an input; give a new file name")


def _first(run: CorpusRun) -> None:
    """keep="first": one streaming pass of add_if_new, writing as each chunk commits."""
    persistent, out, summary = run.persistent, run.out, run.summary
    assert run.store is not None
    if persistent and not run.skip_bad:
        check_all(run.inp, run.opts, run.progress)
    keys = _ScratchKeys()
    # a persistent store remembers what each run decided, so a rerun decides nothing twice
    memory = Decisions(run.store) if persistent and run.mode.dedup else None
    stream = Stream(run.store, run.mode, None if persistent else keys, track=True,
                    memory=memory)

    def write(dec: Decided) -> None:
        c = dec.chunk
        out.kept.write(c, [i for i, s in enumerate(dec.status) if s in (NEW, STORED)])
        if out.removed is not None:
            for i, s in enumerate(dec.status):
                if s in (NEAR, REPEATED):
                    out.removed.write(_removed_record(c, i, dec, None if persistent else keys))

    with committing(out, summary), run.progress.bar("deduplicating",
                                                    run.inp.total_bytes) as bar:
        for dec in stream.run(run.chunks(with_rows=True), write):
            tally(summary, bar, dec.chunk, dec.status)


class _ScratchKeys:
    """Doc ids of the private scratch store: JSON ``[sequence, id, where, source number]``.

    Input ids need not be unique, and a match names the kept document and where it
    was read; a source's name is kept once here, not in every key (shorter records,
    a smaller store).
    """

    def __init__(self) -> None:
        self.seq = 0
        self.prefixes: list[str] = []  # "file:" / "file:row " / "" (text files: the path)
        self._number: dict[str, int] = {}

    def __call__(self, chunk: Chunk) -> list[Any]:
        if not len(chunk):
            return []
        loc, where = chunk.location(0), str(chunk.where[0])
        prefix = loc[: len(loc) - len(where)]  # a chunk is read from one source
        n = self._number.setdefault(prefix, len(self.prefixes))
        if n == len(self.prefixes):
            self.prefixes.append(prefix)
        base, self.seq = self.seq, self.seq + len(chunk)
        ids, places = chunk.ids, chunk.where
        return [json.dumps([base + i, ids[i], places[i], n], ensure_ascii=False)
                for i in range(len(chunk))]

    def decode(self, key: str) -> tuple[Any, str]:
        """(input id, where it was read) of a key."""
        _, doc_id, where, n = json.loads(key)
        return doc_id, f"{self.prefixes[n]}{where}"


def _removed_record(c: Chunk, i: int, dec: Decided,
                    scratch: _ScratchKeys | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": c.ids[i], "source": c.location(i)}
    if dec.status[i] == REPEATED:
        rec.update(reason="repeated id", kept=c.ids[i])
        return rec
    rec["reason"] = "near-duplicate"
    known = dec.records.get(i)
    if known is not None:  # as the store remembers it (this run's decision or an earlier's)
        rec["kept"] = known["kept"]
        if "kept_source" in known:
            rec["kept_source"] = known["kept_source"]
        rec.update((key, known[key]) for key in ("jaccard", "distance") if key in known)
        return rec
    m = dec.near[i]
    if scratch is None:
        rec["kept"] = m.doc_id
    else:
        rec["kept"], rec["kept_source"] = scratch.decode(m.doc_id)
    rec.update(nearness(m))
    return rec


def to_arrow(store: SimStore) -> Any:
    """Every (id, fingerprint) of the store as a pyarrow Table: id (int64 or string), fp (uint64).

    Needs pyarrow (``pip install 'simstore[parquet]'``).
    """
    return store_table(store.items())
