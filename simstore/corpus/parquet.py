"""Parquet and Arrow through pyarrow (the optional ``parquet`` extra), imported on first use."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import SimstoreError
from ._arrow import MissingDependencyError, pyarrow  # noqa: F401 - the error re-exported
from .records import BadRecord, Chunk, check_doc_id, keep_value
from .sources import too_large

if TYPE_CHECKING:
    from .records import OnBad
    from .sources import ReadOptions, Source

_READ_BUFFER = 256 << 10  # bytes read at a time per column (a larger page is read whole)


def _is_string(t: Any) -> bool:
    pa = pyarrow()
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _larger_than(texts: Any, limit: int) -> set[int]:
    """Rows of a string array whose UTF-8 text takes more than ``limit`` bytes (read from
    its offsets: no copy)."""
    if not len(texts):
        return set()
    wide = pyarrow().types.is_large_string(texts.type)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if wide else np.int32)
    sizes = np.diff(offsets[texts.offset : texts.offset + len(texts) + 1])
    return set(np.flatnonzero(sizes > limit).tolist())


def parquet_chunks(src: Source, opts: ReadOptions, on_bad: OnBad) -> Iterator[Chunk]:
    """The rows of one Parquet file as chunks; each row's where is its 1-based row number.

    Progress (chunk.nbytes) is the source's size (its columns' uncompressed bytes) spread
    over its rows.
    """

    pa = pyarrow()
    try:
        # Pages read through a buffer, not whole column chunks: memory stays bounded by
        # the batch even when a row group holds the whole file.
        pf = pa.parquet.ParquetFile(src.path, buffer_size=_READ_BUFFER, pre_buffer=False)
    except (OSError, pa.ArrowException) as exc:
        on_bad(src.name, f"not a readable Parquet file ({exc})")
        yield Chunk("parquet", src, nbytes=src.size)
        return
    schema = pf.schema_arrow
    wanted = [opts.id_field, opts.text_field] + ([opts.keep_field] if opts.keep_field else [])
    for col in dict.fromkeys(wanted):
        if col not in schema.names:
            on_bad(src.name, f"no column {col!r} (columns: {', '.join(schema.names)})")
            yield Chunk("parquet", src, nbytes=src.size)
            return
    id_type = schema.field(opts.id_field).type
    problem = None
    if not (_is_string(id_type) or pa.types.is_integer(id_type)):
        problem = f"column {opts.id_field!r} must hold strings or integers (it holds {id_type})"
    elif not _is_string(schema.field(opts.text_field).type):
        problem = f"column {opts.text_field!r} must hold strings"
    if problem:
        on_bad(src.name, problem)
        yield Chunk("parquet", src, nbytes=src.size)
        return
    meta = pf.metadata
    total = max(meta.num_rows, 1)
    group_rows = max((meta.row_group(i).num_rows for i in range(meta.num_row_groups)),
                     default=0)
    columns = None if opts.with_rows else list(dict.fromkeys(wanted))
    row = 0
    done = 0
    batches = pf.iter_batches(batch_size=opts.chunk_docs, columns=columns, use_threads=False)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (OSError, pa.ArrowException) as exc:
            on_bad(f"{src.name}:row {row + 1}", f"cannot read on ({exc})")
            break
        chunk = Chunk("parquet", src, group_rows=group_rows)
        ids = batch.column(opts.id_field).to_pylist()
        big = _larger_than(batch.column(opts.text_field), opts.max_record_bytes)
        texts = batch.column(opts.text_field).to_pylist()
        values = (batch.column(opts.keep_field).to_pylist() if opts.keep_field
                  else [0.0] * len(ids))
        good = []
        for i, (doc_id, text, value) in enumerate(zip(ids, texts, values, strict=True)):
            try:
                check_doc_id(doc_id, opts.id_field)
                if text is None:
                    raise BadRecord(f"{opts.text_field!r} is null")
                if i in big:
                    raise BadRecord(too_large(opts.max_record_bytes, "a text"))
                v = keep_value(value, opts.keep_field) if opts.keep_field else 0.0
            except BadRecord as exc:
                on_bad(f"{src.name}:row {row + i + 1}", str(exc))
                continue
            good.append(i)
            chunk.ids.append(doc_id)
            chunk.texts.append(text)
            chunk.where.append(row + i + 1)
            chunk.values.append(v)
        if opts.with_rows:
            chunk.batch = batch
            chunk.rows = None if len(good) == len(ids) else good
        row += len(ids)
        now = src.size * row // total
        chunk.nbytes, done = now - done, now
        yield chunk
    yield Chunk("parquet", src, nbytes=src.size - done)


# The default cap of an output row group's Arrow data: a group is built in memory before
# it is written, so the cap bounds a Parquet run's peak memory against a JSON-lines run's
# (``python -m tools.bench corpus-memory``, docs/bench/corpus-memory-1000mb.json).
ROW_GROUP_BYTES = 4 << 20
# Rows encoded between two checks of the page size: a page closes at the first check past
# 1 MiB, so pages stay near 1 MiB (Arrow's default 1,024 makes 6 MB pages of 6 KB
# documents, and a reader holds a whole page decompressed).
WRITE_BATCH_ROWS = 64


class ParquetOut:
    """Kept rows written to one Parquet file; every input must share the first's schema.

    Row groups hold as many rows as the input's (its largest group), or fewer when the
    next row would take the group over ``row_group_bytes`` of Arrow data (a row larger
    than that is a group alone): a group is built in memory, so an input written as one
    huge group must not make one. Rows wait as zero-copy slices of the batches read.
    The text column gets no statistics: the footer holds every group's, in memory until
    the file is closed, and a document's text as its min or max is ~8 KB a group.
    """

    def __init__(self, sink: Any, row_group_bytes: int = ROW_GROUP_BYTES,
                 text_column: str = "text") -> None:
        self.sink = sink
        self.row_group_bytes = row_group_bytes
        self.text_column = text_column
        self._writer: Any = None
        self._schema: Any = None
        self._parts: list[Any] = []
        self._rows = 0
        self._bytes = 0

    def write(self, batch: Any, name: str, group_rows: int) -> None:
        """Add rows (a RecordBatch) read from input ``name``, whose groups hold
        ``group_rows`` rows; a full row group is written at once."""
        batch = self._conformed(batch, name)
        limit = group_rows or sys.maxsize
        while batch.num_rows:
            n = min(batch.num_rows, limit - self._rows)
            if self._bytes + batch.slice(0, n).nbytes > self.row_group_bytes:
                n = _rows_within(batch, n, self.row_group_bytes - self._bytes)
                if n == 0 and self._parts:
                    self._flush()
                    continue
                n = max(n, 1)
            part = batch.slice(0, n)
            self._parts.append(part)
            self._rows += n
            self._bytes += part.nbytes
            batch = batch.slice(n)
            if self._rows >= limit or batch.num_rows:
                self._flush()

    def _conformed(self, batch: Any, name: str) -> Any:
        """The batch in the output's schema (the first input's), else SimstoreError."""
        pa = pyarrow()
        if self._schema is None:
            self._schema = batch.schema
            stats = [n for n in self._schema.names if n != self.text_column]
            self._writer = pa.parquet.ParquetWriter(
                self.sink, self._schema, write_batch_size=WRITE_BATCH_ROWS,
                write_statistics=stats, use_dictionary=stats)
        elif not batch.schema.equals(self._schema):
            try:
                table = pa.Table.from_batches([batch]).cast(self._schema)
            except (pa.ArrowException, ValueError):
                raise SimstoreError(
                    f"{name}: its columns differ from the first Parquet input's "
                    f"({self._schema}); Parquet output needs one schema (write JSONL instead)"
                ) from None
            return table.to_batches()[0]  # one batch in, one out
        return batch

    def _flush(self) -> None:
        """Write the waiting rows as one row group."""
        if not self._parts:
            return
        table = pyarrow().Table.from_batches(self._parts, self._schema)
        self._parts, self._rows, self._bytes = [], 0, 0
        self._writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> None:
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None


def _rows_within(batch: Any, most: int, room: int) -> int:
    """The most leading rows of ``batch`` (at most ``most``) whose Arrow data fits in
    ``room`` bytes (a slice's size grows with its rows: a binary search)."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if batch.slice(0, mid).nbytes <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def write_items(items: Iterator[tuple[Any, int]], path: str,
                tick: Callable[[int], None] | None = None, chunk: int = 100_000) -> int:
    """Write (id, fingerprint) pairs to a Parquet file (id, fp: uint64), chunk by chunk."""
    pa = pyarrow()
    writer = None
    n = 0
    ids: list[Any] = []
    fps: list[int] = []

    def flush() -> None:
        nonlocal writer
        table = pa.table({"id": id_array(ids), "fp": pa.array(fps, type=pa.uint64())})
        if writer is None:
            writer = pa.parquet.ParquetWriter(path, table.schema)
        elif not table.schema.equals(writer.schema):
            raise SimstoreError(
                "the store holds both int and str ids; a Parquet column holds one type "
                "(export as JSONL or TSV instead)")
        writer.write_table(table)
        if tick is not None:
            tick(len(ids))
        ids.clear()
        fps.clear()

    try:
        for doc_id, fp in items:
            ids.append(doc_id)
            fps.append(fp)
            n += 1
            if len(ids) >= chunk:
                flush()
        if ids or writer is None:
            flush()
    finally:
        if writer is not None:
            writer.close()
    return n


def store_table(items: Iterator[tuple[Any, int]]) -> Any:
    """A pyarrow Table (id, fp: uint64) of (id, fingerprint) pairs."""
    pa = pyarrow()
    ids, fps = [], []
    for doc_id, fp in items:
        ids.append(doc_id)
        fps.append(fp)
    return pa.table({"id": id_array(ids), "fp": pa.array(fps, type=pa.uint64())})


def id_array(ids: list[Any]) -> Any:
    """An Arrow column of doc ids: int64 when all are ints, string when all are strs."""
    pa = pyarrow()
    kinds = {type(d) for d in ids}
    if kinds <= {int}:
        try:
            return pa.array(ids, type=pa.int64())
        except (OverflowError, pa.ArrowException):
            raise SimstoreError("an int id does not fit in 64 bits: an Arrow/Parquet int64 "
                                "column cannot hold it (export as JSONL or TSV instead)") from None
    if kinds <= {str}:
        return pa.array(ids, type=pa.string())
    raise SimstoreError(
        "the store holds both int and str ids; an Arrow/Parquet column holds one type "
        "(export as JSONL or TSV instead)"
    )
