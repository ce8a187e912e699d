"""Reading corpora in bounded memory: (id, text) chunks from text files, JSONL and Parquet.

:func:`iter_chunks` reads the sources (:mod:`simstore.corpus.sources`) in order as
:class:`Chunk` values of at most ``chunk_docs`` documents and about
``chunk_bytes`` of text; a JSONL or Parquet chunk never spans two files. A bad
record (undecodable bytes, invalid JSON, a missing or null id, an id the store
refuses, truncated compressed data) is handed to ``on_bad(where, reason)`` with
``where`` = ``file:line`` (``file:row N`` in Parquet): the caller raises
:class:`BadInputError` (:func:`raise_bad`) or skips it. :func:`check_all` is the
validation pass: everything read and parsed, nothing kept.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator, Sequence
from typing import IO

from ..store.format import DocId
from .compressed import GzipReadAhead
from .parquet import parquet_chunks
from .progress import Progress
from .records import (
    BadRecord,
    Chunk,
    OnBad,
    SpilledLine,
    check_doc_id,
    keep_value,
    load_json,
)
from .sources import (
    COMPRESSED,
    DECOMPRESS_ERRORS,
    BadInputError,
    Inputs,
    ReadOptions,
    Source,
    _suffixes,
    open_binary,
    too_large,
)
from .summary import CorpusSummary, IndexSummary

_PIECE = 1 << 20  # bytes of a line read at a time (a longer line is gathered piece by piece)

__all__ = ["BadInputError", "Chunk", "Inputs", "OnBad", "ReadOptions", "Source", "check_all",
           "check_doc_id", "iter_chunks", "raise_bad"]


def decode_line(line: bytes | bytearray, opts: ReadOptions) -> str:
    """One JSON line as text, else BadRecord."""
    try:
        return line.decode("utf-8", opts.encoding_errors)
    except UnicodeDecodeError as exc:
        raise BadRecord(f"not valid UTF-8 at byte {exc.start + 1} of the line") from None


def parse_line(s: str, opts: ReadOptions) -> tuple[DocId, str, float]:
    """(id, text, keep value) of one JSON line (decoded), else BadRecord."""
    obj = load_json(s)
    if not isinstance(obj, dict):
        raise BadRecord(f"a line must be a JSON object (got {type(obj).__name__})")
    if opts.id_field not in obj:
        raise BadRecord(f"no {opts.id_field!r} field (--id-field names it)")
    doc_id = check_doc_id(obj[opts.id_field], opts.id_field)
    text = obj.get(opts.text_field)
    if not isinstance(text, str):
        if opts.text_field not in obj:
            raise BadRecord(f"no {opts.text_field!r} field (--text-field names it)")
        raise BadRecord(f"{opts.text_field!r} must be a string (got {type(text).__name__})")
    value = keep_value(obj.get(opts.keep_field), opts.keep_field) if opts.keep_field else 0.0
    return doc_id, text, value


# --------------------------------------------------------------------------- chunks


def iter_chunks(sources: Sequence[Source], opts: ReadOptions, on_bad: OnBad) -> Iterator[Chunk]:
    """The documents of the sources, in order, in chunks (see the module docstring)."""
    text_chunk = Chunk("text", None)
    size = 0
    for src in sources:
        if src.kind == "text":
            got = _text_document(src, opts, on_bad)
            text_chunk.nbytes += src.size
            if got is not None:
                text_chunk.ids.append(src.doc_id)
                text_chunk.texts.append(got)
                text_chunk.where.append(src.name)
                text_chunk.values.append(0.0)
                size += len(got)
            if len(text_chunk) >= opts.chunk_docs or size >= opts.chunk_bytes:
                yield text_chunk
                text_chunk, size = Chunk("text", None), 0
            continue
        if src.kind == "jsonl":
            yield from _jsonl_chunks(src, opts, on_bad)
        else:
            yield from parquet_chunks(src, opts, on_bad)
    if len(text_chunk) or text_chunk.nbytes:
        yield text_chunk


def _text_document(src: Source, opts: ReadOptions, on_bad: OnBad) -> str | None:
    limit = opts.max_record_bytes
    try:
        with open_binary(src.path) as fh:
            data = fh.read(limit + 1)
    except DECOMPRESS_ERRORS as exc:
        on_bad(src.name, f"cannot read it ({exc})")
        return None
    if len(data) > limit:
        on_bad(src.name, too_large(limit, "a text file"))
        return None
    try:
        return data.decode("utf-8", opts.encoding_errors)
    except UnicodeDecodeError as exc:
        on_bad(src.name, f"not valid UTF-8 at byte {exc.start + 1} "
                         "(--encoding-errors replace reads it anyway)")
        return None


def _jsonl_chunks(src: Source, opts: ReadOptions, on_bad: OnBad) -> Iterator[Chunk]:
    raw = open(src.path, "rb")  # noqa: SIM115 - closed below
    comp, _ = _suffixes(src.path)
    stream: IO[bytes] = raw
    if comp == ".gz":
        stream = io.BufferedReader(GzipReadAhead(raw), 1 << 20)
    elif comp:
        stream = COMPRESSED[comp](raw)
    chunk = Chunk("jsonl", src)
    size = 0
    pos = 0
    lineno = 0
    keep_raw = opts.with_rows
    try:
        lines = bounded_lines(stream, opts.max_record_bytes)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                break
            except DECOMPRESS_ERRORS as exc:
                on_bad(f"{src.name}:{lineno + 1}",
                       f"cannot read on: the compressed data is truncated or corrupt ({exc})")
                break
            lineno += 1
            if line is None:
                on_bad(f"{src.name}:{lineno}", too_large(opts.max_record_bytes))
                continue
            if not line or line.isspace():  # (strip() would copy the line)
                continue
            # the line goes before its text is parsed out (a long one: to a file, when
            # kept), so a record is held once as bytes and once as text at most
            nbytes = len(line)
            try:
                decoded = decode_line(line, opts)
            except BadRecord as exc:
                on_bad(f"{src.name}:{lineno}", str(exc))
                continue
            row = _kept(line) if keep_raw else None
            del line
            try:
                doc_id, text, value = parse_line(decoded, opts)
            except BadRecord as exc:
                on_bad(f"{src.name}:{lineno}", str(exc))
                continue
            finally:
                del decoded
            chunk.ids.append(doc_id)
            chunk.texts.append(text)
            chunk.where.append(lineno)
            chunk.values.append(value)
            if row is not None:
                chunk.raw.append(row)
            size += nbytes
            if len(chunk.ids) >= opts.chunk_docs or size >= opts.chunk_bytes:
                now = raw.tell()
                chunk.nbytes, pos = now - pos, now
                yield chunk
                chunk, size = Chunk("jsonl", src), 0
    finally:
        end = src.size
        stream.close()
        raw.close()
    chunk.nbytes = end - pos
    yield chunk


def _kept(line: bytes | bytearray) -> bytes | bytearray | SpilledLine:
    """A line as kept to be written out (with its newline): a line longer than a piece
    in a temporary file (:class:`SpilledLine`)."""
    if len(line) > _PIECE:
        return SpilledLine(line)
    return line if line.endswith(b"\n") else line + b"\n"


def bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes | bytearray | None]:
    """The stream's lines (with their newline); None for one of more than ``limit`` bytes
    before its newline, read on to its end in pieces: never more than ``limit`` bytes and
    a piece held."""
    while True:
        line = stream.readline(_PIECE)
        if not line:
            return
        if line.endswith(b"\n") or len(line) < _PIECE:  # whole: a newline, or the end
            yield line if len(line) - line.endswith(b"\n") <= limit else None
            continue
        yield _long_line(stream, line, limit)


def _long_line(stream: IO[bytes], head: bytes, limit: int) -> bytearray | None:
    """The rest of a line begun with ``head`` (a full piece); None when it passes limit."""
    buf: bytearray | None = bytearray(head)
    while True:
        piece = stream.readline(_PIECE)
        if buf is not None:
            buf += piece
            if len(buf) - buf.endswith(b"\n") > limit:
                buf = None  # too long: read on to the newline, keeping nothing
        if not piece or piece.endswith(b"\n"):
            return buf


# --------------------------------------------------------------------------- passes


def raise_bad(where: str, reason: str) -> None:
    """The strict on_bad: a bad record stops the run."""
    raise BadInputError(where, reason)


def ignore_bad(where: str, reason: str) -> None:
    """The on_bad of a second pass: the first pass reported every bad record already."""


def bad_handler(
    skip_bad: bool, on_bad: OnBad | None, summary: IndexSummary | CorpusSummary
) -> OnBad:
    """raise_bad, or (skip_bad) count the record in summary.bad and tell on_bad."""
    if not skip_bad:
        return raise_bad

    def skip(where: str, reason: str) -> None:
        summary.bad += 1
        if on_bad is not None:
            on_bad(where, reason)
    return skip


def check_all(inp: Inputs, opts: ReadOptions, progress: Progress) -> int:
    """The validation pass: read and parse everything, keep nothing; BadInputError at the
    first bad record. Returns the number of documents."""
    bare = dataclasses.replace(opts, with_rows=False)  # a copy: opts is never changed
    n = 0
    with progress.bar("checking input", inp.total_bytes) as bar:
        for chunk in iter_chunks(inp.sources, bare, raise_bad):
            n += len(chunk)
            bar.update(chunk.nbytes, docs=n)
    return n
