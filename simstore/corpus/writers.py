"""Writing corpus outputs: kept documents in their input's format, and the removed report.

Each output is written to a temporary file beside its destination
(:class:`simstore._files.TempFile`: a random name created exclusively, never
through a link) and renamed over it when the run succeeds, so a failed or
interrupted run never leaves half a file under the final name. The temporaries
are made when the writers are, before any input is read, so a path that cannot
be written is refused first. JSONL outputs are compressed by their suffix
(``.gz``, ``.bz2``, ``.xz``).
"""

from __future__ import annotations

import bz2
import json
import lzma
from collections.abc import Callable
from functools import partial
from typing import IO, Any

from .._files import TempFile
from ..exceptions import SimstoreValueError
from .compressed import GzipWriter, WriteBehind
from .parquet import ROW_GROUP_BYTES, ParquetOut
from .readers import Chunk
from .records import SpilledLine
from .sources import JSONL_SUFFIXES, PARQUET_SUFFIXES, ReadOptions, Source, _suffixes

# Level 1 (gzip -1): on JSON lines of real text zlib makes 59 MB/s for a 0.32 ratio, where
# the default 9 gives 19 MB/s for 0.275 (level 6: 20 MB/s); ISA-L's level 1 (compressed.DEFLATE,
# when installed) 314 MB/s for the same ratio. Writing .gz then costs less than reading it.
GZIP_LEVEL = 1
_OPENERS: dict[str, Callable[[IO[bytes]], Any]] = {
    ".gz": partial(GzipWriter, level=GZIP_LEVEL),
    ".bz2": partial(bz2.open, mode="wb"),
    ".xz": partial(lzma.open, mode="wb"),
}


def output_kind(path: str, sources: list[Source]) -> str:
    """parquet or jsonl: from the output's suffix, else from the inputs (all Parquet: Parquet)."""
    comp, ext = _suffixes(path)
    if ext in PARQUET_SUFFIXES and not comp:
        kind = "parquet"
    elif ext in (*JSONL_SUFFIXES, ".json") or comp:
        kind = "jsonl"
    else:
        kind = "parquet" if sources and all(s.kind == "parquet" for s in sources) else "jsonl"
    if kind == "parquet" and any(s.kind != "parquet" for s in sources):
        raise SimstoreValueError(
            f"{path!r}: Parquet output needs Parquet inputs only; write JSONL "
            "(e.g. -o kept.jsonl) when some inputs are JSONL or text files"
        )
    return kind


def _text_stream(out: TempFile) -> IO[bytes]:
    """The temporary's file, compressed by the destination's suffix (on a helper thread)."""
    comp, _ = _suffixes(out.path)
    opener = _OPENERS.get(comp)
    if opener is None:
        return out.file
    return WriteBehind(opener(out.file))  # type: ignore[return-value]


def _json_line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False, default=str) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (read from a JSON escape): keep it escaped
        return (json.dumps(obj, default=str) + "\n").encode("ascii")


class KeptWriter:
    """Kept documents: JSONL lines as read (all fields), Parquet rows, or {id, text} lines."""

    def __init__(self, out: TempFile, kind: str, id_field: str, text_field: str,
                 row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        self.out = out
        self.kind = kind
        self.id_field, self.text_field = id_field, text_field
        self._fh: IO[bytes] | None = None
        self._pq: ParquetOut | None = None
        if kind == "parquet":
            self._pq = ParquetOut(self.out.file, row_group_bytes, text_field)
        else:
            self._fh = _text_stream(self.out)
        self.written = 0

    def write(self, chunk: Chunk, keep: list[int]) -> None:
        """Write the chunk's documents at positions `keep` (in order)."""
        if not keep:
            return
        self.written += len(keep)
        if self._pq is not None:
            assert chunk.source is not None
            for run in chunk.batch_runs(keep):
                self._pq.write(run, chunk.source.name, chunk.group_rows)
            return
        assert self._fh is not None
        if chunk.kind == "jsonl":
            _write_lines(self._fh, [chunk.raw[i] for i in keep])
        elif chunk.kind == "parquet":
            rows = [r for run in chunk.batch_runs(keep) for r in run.to_pylist()]
            self._fh.write(b"".join(_json_line(r) for r in rows))
        else:
            self._fh.write(b"".join(
                _json_line({self.id_field: chunk.ids[i], self.text_field: chunk.texts[i]})
                for i in keep))

    def close(self, commit: bool) -> None:
        closers: list[Any] = [] if self._pq is None else [self._pq]
        if self._fh is not None and self._fh is not self.out.file:
            closers.append(self._fh)
        _finish(self.out, closers, commit)


def _write_lines(fh: IO[bytes], lines: list[bytes | bytearray | SpilledLine]) -> None:
    """Lines kept as read, in order: those in memory joined in runs, a spilled one copied."""
    run: list[bytes | bytearray] = []
    for line in lines:
        if isinstance(line, SpilledLine):
            fh.write(b"".join(run))
            run = []
            line.write_to(fh)
        else:
            run.append(line)
    fh.write(b"".join(run))


def _finish(out: TempFile, closers: list[Any], commit: bool) -> None:
    """Close a writer's streams, then publish its output (commit) or drop it; an output
    whose streams fail to close is dropped."""
    try:
        for c in closers:
            c.close()
    except BaseException:
        out.discard()
        raise
    if commit:
        out.commit()
    else:
        out.discard()


class RemovedWriter:
    """One JSON line per removed document: its id, where it was read, the kept one, how near."""

    def __init__(self, out: TempFile) -> None:
        self.out = out
        self._fh = _text_stream(self.out)
        self.written = 0

    def write(self, record: dict[str, Any]) -> None:
        self.written += 1
        self._fh.write(_json_line(record))

    def close(self, commit: bool) -> None:
        _finish(self.out, [] if self._fh is self.out.file else [self._fh], commit)


class Outputs:
    """The kept file and the removed report of one run, committed or discarded together.

    Made before the run reads any input: each path is checked and its temporary
    created at once (an OutputPathError names the flag); :meth:`start` opens the
    writers once the inputs' format is known.
    """

    def __init__(self, output: str, removed: str | None,
                 row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        self.kept_path, self.removed_path = output, removed
        self.row_group_bytes = row_group_bytes
        self._kept_tmp = TempFile(output, "-o")
        try:
            self._removed_tmp = TempFile(removed, "--removed") if removed else None
        except BaseException:
            self._kept_tmp.discard()
            raise
        self._kept: KeptWriter | None = None
        self.removed: RemovedWriter | None = None
        self.closed = False

    def start(self, kind: str, opts: ReadOptions) -> Outputs:
        self._kept = KeptWriter(self._kept_tmp, kind, opts.id_field, opts.text_field,
                                self.row_group_bytes)
        if self._removed_tmp is not None:
            self.removed = RemovedWriter(self._removed_tmp)
        return self

    @property
    def kept(self) -> KeptWriter:
        assert self._kept is not None, "Outputs.start() first"
        return self._kept

    def close(self, commit: bool) -> None:
        """Commit both (the removed report first, then the kept file) or discard both;
        once (later calls do nothing)."""
        if self.closed:
            return
        self.closed = True
        commit = commit and self._kept is not None
        try:
            if self.removed is not None:
                self.removed.close(commit)
            elif self._removed_tmp is not None:
                self._removed_tmp.discard()
        except BaseException:
            self._kept_tmp.discard()
            raise
        if self._kept is not None:
            self._kept.close(commit)
        else:
            self._kept_tmp.discard()
