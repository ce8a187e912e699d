"""Parquet and Arrow through pyarrow (the optional ``parquet`` extra), imported on first use."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..exceptions import SimstoreError
from .records import BadRecord, Chunk, check_doc_id, keep_value

if TYPE_CHECKING:
    from .records import OnBad
    from .sources import ReadOptions, Source


_READ_BUFFER = 1 << 20


class MissingDependencyError(SimstoreError, ImportError):
    """An optional dependency (pyarrow, for Parquet and Arrow) is not installed."""


def pyarrow() -> Any:
    """The pyarrow module, or MissingDependencyError saying how to install it."""
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401 - loads pa.parquet
    except ImportError:
        raise MissingDependencyError(
            "Parquet and Arrow need pyarrow: pip install 'simstore[parquet]'"
        ) from None
    return pa


def _is_string(t: Any) -> bool:
    pa = pyarrow()
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


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
    total = max(pf.metadata.num_rows, 1)
    columns = None if opts.with_rows else list(dict.fromkeys(wanted))
    row = 0
    done = 0
    batches = pf.iter_batches(batch_size=opts.chunk_docs, columns=columns)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (OSError, pa.ArrowException) as exc:
            on_bad(f"{src.name}:row {row + 1}", f"cannot read on ({exc})")
            break
        chunk = Chunk("parquet", src)
        ids = batch.column(opts.id_field).to_pylist()
        texts = batch.column(opts.text_field).to_pylist()
        values = (batch.column(opts.keep_field).to_pylist() if opts.keep_field
                  else [0.0] * len(ids))
        good = []
        for i, (doc_id, text, value) in enumerate(zip(ids, texts, values, strict=True)):
            try:
                check_doc_id(doc_id, opts.id_field)
                if text is None:
                    raise BadRecord(f"{opts.text_field!r} is null")
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
            chunk.batch = batch if len(good) == len(ids) else batch.take(good)
        row += len(ids)
        now = src.size * row // total
        chunk.nbytes, done = now - done, now
        yield chunk
    yield Chunk("parquet", src, nbytes=src.size - done)


class ParquetOut:
    """Kept rows written to one Parquet file; every input must share the first's schema."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer: Any = None
        self._schema: Any = None

    def write(self, batch: Any, name: str) -> None:
        pa = pyarrow()
        if self._writer is None:
            self._schema = batch.schema
            self._writer = pa.parquet.ParquetWriter(self.path, self._schema)
        elif not batch.schema.equals(self._schema):
            try:
                batch = pa.Table.from_batches([batch]).cast(self._schema)
            except (pa.ArrowException, ValueError):
                raise SimstoreError(
                    f"{name}: its columns differ from the first Parquet input's "
                    f"({self._schema}); Parquet output needs one schema (write JSONL instead)"
                ) from None
        self._writer.write(batch)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


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
