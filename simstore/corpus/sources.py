"""Finding the files of a corpus: sources, kinds, decompression, walking, standard input.

Inputs are expanded once into :class:`Source` files (:func:`find_sources`):
a directory is walked in sorted order; symbolic links, binary files and
``exclude`` globs are skipped (and counted in :class:`Skipped`). A file's kind
comes from its name: ``.jsonl``/``.ndjson`` (optionally ``.gz``, ``.bz2``,
``.xz``) is JSON lines, ``.parquet``/``.pq`` is Parquet, anything else is one
text document whose id is its path. Standard input (``-``) is spooled to a
temporary file (:class:`Inputs`), so it can be read twice like any file, and
must be JSON lines (or, for ``fingerprint``, one text).
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import lzma
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from .._files import TempFile
from ..exceptions import SimstoreValueError
from ._arrow import pyarrow

COMPRESSED: dict[str, Callable[[IO[bytes]], Any]] = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    ".bz2": lambda raw: bz2.BZ2File(raw, "rb"),
    ".xz": lambda raw: lzma.LZMAFile(raw, "rb"),
}
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
BINARY_SUFFIXES = frozenset(
    ".png .jpg .jpeg .gif .bmp .ico .tif .tiff .webp .svgz .pdf .ps .eps .dvi .zip .tar .tgz "
    ".tbz2 .txz .7z .rar .jar .war .whl .egg .deb .rpm .iso .img .exe .dll .so .dylib .o .a "
    ".pyc .pyo .class .bin .dat .db .sqlite .mo .gmo .woff .woff2 .ttf .otf .eot .mp3 .mp4 "
    ".ogg .oga .wav .flac .avi .mkv .mov .webm .gpg .pgp .der .p12 .xlsx .docx .pptx .odt "
    ".ods .odp .npy .npz .pkl .pickle .arrow .feather .h5 .lmdb .mdb".split()
)
SNIFF_BYTES = 8192
CHUNK_DOCS = 1000
CHUNK_BYTES = 16 << 20
# The largest record read (a JSON line, a text file, a Parquet row's text), in bytes: a
# larger one is a bad record, found without holding it whole. A record costs several times
# its size while parsed and fingerprinted; a .gz of a few hundred KB can hold gigabytes.
MAX_RECORD_BYTES = 64 << 20
# What reading damaged compressed input raises (truncated or corrupt gzip, bz2, xz data).
DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


def size_text(n: int) -> str:
    """A byte count as a person writes it: 64 MiB, 512 KiB, 1000 bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def too_large(limit: int, what: str = "a record") -> str:
    """The reason given for a record over ``limit`` bytes."""
    return f"{what} of more than {size_text(limit)} (--max-record-bytes sets the limit)"


class BadInputError(SimstoreValueError):
    """A record of the input cannot be read; ``where`` is ``file:line`` (or ``file:row N``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class Source:
    """One input file: its path, the name used in messages, its kind and size on disk."""

    path: str
    name: str
    kind: str  # "jsonl" | "parquet" | "text"
    size: int

    @property
    def doc_id(self) -> str:
        """The id of a text file's one document: its path ("-" for standard input)."""
        return "-" if self.name == "<stdin>" else self.path


@dataclass
class Skipped:
    """Files left out while walking the inputs."""

    symlinks: int = 0
    binary: int = 0
    excluded: int = 0
    other: int = 0  # sockets, fifos, devices

    def total(self) -> int:
        return self.symlinks + self.binary + self.excluded + self.other

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.symlinks, "symbolic links (--follow-symlinks to read them)"),
            (self.binary, "binary files"), (self.excluded, "excluded by --exclude"),
            (self.other, "special files")) if n]
        return ", ".join(parts)


@dataclass
class ReadOptions:
    """How to find documents in the inputs."""

    id_field: str = "id"
    text_field: str = "text"
    keep_field: str | None = None  # a numeric field read as each document's value
    force_jsonl: bool = False
    follow_symlinks: bool = False
    exclude: Sequence[str] = ()
    encoding_errors: str = "strict"  # or "replace"
    chunk_docs: int = CHUNK_DOCS
    chunk_bytes: int = CHUNK_BYTES
    max_record_bytes: int = MAX_RECORD_BYTES
    with_rows: bool = False  # keep each record as read (raw JSONL lines, Parquet rows)


# --------------------------------------------------------------------------- finding files


def _suffixes(name: str) -> tuple[str, str]:
    """(the compression suffix or '', the suffix under it) in lower case."""
    low = name.lower()
    root, ext = os.path.splitext(low)
    if ext in COMPRESSED:
        return ext, os.path.splitext(root)[1]
    return "", ext


def kind_of(name: str, force_jsonl: bool = False) -> str:
    """jsonl, parquet or text, from a file name."""
    comp, ext = _suffixes(name)
    if force_jsonl or ext in JSONL_SUFFIXES:
        return "jsonl"
    if ext in PARQUET_SUFFIXES and not comp:
        return "parquet"
    return "text"


def open_binary(path: str) -> IO[bytes]:
    """A file opened for reading bytes, decompressed by its suffix."""
    comp, _ = _suffixes(path)
    raw = open(path, "rb")  # noqa: SIM115 - handed to the caller
    if not comp:
        return raw
    return COMPRESSED[comp](raw)


def is_binary(path: str) -> bool:
    """A known binary suffix (also under .gz/.bz2/.xz, e.g. .pdf.gz, .tar.gz) or a NUL byte
    in the first 8 KB of the (decompressed) content."""
    comp, ext = _suffixes(path)
    if ext in BINARY_SUFFIXES or (comp and path.lower().endswith((".tgz", ".tbz2", ".txz"))):
        return True
    try:
        with open_binary(path) as fh:
            head = fh.read(SNIFF_BYTES)
    except (*DECOMPRESS_ERRORS, ValueError):
        return False  # unreadable: reported when it is read
    return b"\0" in head


def _excluded(path: str, name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns)


def _source(path: str, opts: ReadOptions, name: str | None = None) -> Source:
    kind = kind_of(path, opts.force_jsonl)
    size = os.path.getsize(path)
    if kind == "parquet":
        size = _parquet_column_bytes(path, (opts.id_field, opts.text_field)) or size
    return Source(path, name or path, kind, size)


def _parquet_column_bytes(path: str, columns: Sequence[str]) -> int | None:
    """Uncompressed bytes of the columns per the file's metadata: a Parquet file's progress
    counts text, as a JSON-lines file's does (None: no pyarrow or unreadable, said later)."""
    try:
        meta = pyarrow().parquet.read_metadata(path)
    except Exception:  # noqa: BLE001 - reading the file reports its problem properly
        return None
    names = set(columns)
    return sum(
        col.total_uncompressed_size
        for g in (meta.row_group(i) for i in range(meta.num_row_groups))
        for col in (g.column(j) for j in range(g.num_columns))
        if col.path_in_schema in names
    )


def _walk(top: str, opts: ReadOptions, skipped: Skipped) -> Iterator[Source]:
    seen_dirs: set[str] = set()
    for root, dirs, files in os.walk(top, followlinks=opts.follow_symlinks):
        real = os.path.realpath(root)
        if real in seen_dirs:  # a symlink loop or a second way to one directory
            dirs[:] = []
            continue
        seen_dirs.add(real)
        keep = []
        for d in sorted(dirs):
            full = os.path.join(root, d)
            if _excluded(full, d, opts.exclude):
                skipped.excluded += 1
            elif os.path.islink(full) and not opts.follow_symlinks:
                skipped.symlinks += 1
            else:
                keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            full = os.path.join(root, name)
            if _excluded(full, name, opts.exclude):
                skipped.excluded += 1
            elif os.path.islink(full) and not opts.follow_symlinks:
                skipped.symlinks += 1
            elif not os.path.isfile(full):
                skipped.other += 1
            else:
                src = _source(full, opts)
                if src.kind == "text" and is_binary(full):
                    skipped.binary += 1
                else:
                    yield src


def find_sources(inputs: Sequence[str], opts: ReadOptions, skipped: Skipped) -> list[Source]:
    """The files of the inputs, in order ("-" is left to :class:`Inputs`)."""
    out: list[Source] = []
    for path in inputs:
        if os.path.isdir(path):
            out.extend(_walk(path, opts, skipped))
        elif os.path.isfile(path):  # named explicitly: read even through a symlink
            src = _source(path, opts)
            if src.kind == "text" and is_binary(path):
                skipped.binary += 1
            else:
                out.append(src)
        elif os.path.exists(path):
            raise SimstoreValueError(f"input {path!r} is not a file or a directory")
        else:
            raise SimstoreValueError(f"input {path!r} does not exist")
    return out


def spool(stream: IO[bytes]) -> TempFile:
    """Copy a stream (standard input) to a new temporary file in TMPDIR (its ``tmp``; the
    caller discards it): a hidden name, flock-held while it is open, so a run killed with
    ``kill -9`` leaves it to the next spool, which removes it."""
    out = TempFile(os.path.join(tempfile.gettempdir(), "simstore-stdin"), "standard input")
    try:
        shutil.copyfileobj(stream, out.file, 1 << 20)
        out.file.flush()
    except BaseException:
        out.discard()
        raise
    return out


class Inputs:
    """The sources of a list of inputs; standard input is spooled to a temporary file.

    A context manager: the spool file is removed on exit.
    """

    def __init__(self, inputs: Sequence[str], opts: ReadOptions, stdin: IO[bytes] | None = None,
                 stdin_text: bool = False):
        self.opts = opts
        self.stdin_text = stdin_text
        self.skipped = Skipped()
        self._spool: TempFile | None = None
        if list(inputs).count("-") > 1:
            raise SimstoreValueError("standard input ('-') can be given once")
        self.sources: list[Source] = []
        try:
            for path in inputs:
                if path == "-":
                    self.sources.append(self._stdin(stdin))
                else:
                    self.sources.extend(find_sources([path], opts, self.skipped))
        except BaseException:
            self.close()  # a refused input: the spool goes at once
            raise

    def _stdin(self, stdin: IO[bytes] | None) -> Source:
        self._spool = spool(stdin if stdin is not None else sys.stdin.buffer)
        path = self._spool.tmp
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES).lstrip()
        if head and not head.startswith(b"{") and not self.opts.force_jsonl:
            if self.stdin_text:
                return Source(path, "<stdin>", "text", os.path.getsize(path))
            first = head[:1].decode("latin-1")
            raise SimstoreValueError(
                "<stdin>:1: "
                f"standard input must be JSON lines ({{\"{self.opts.id_field}\": ..., "
                f"\"{self.opts.text_field}\": ...}} a line), but it starts with {first!r}; "
                "to read plain text, save it to a file and give the file's path"
            )
        return Source(path, "<stdin>", "jsonl", os.path.getsize(path))

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.sources)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.discard()
            self._spool = None

    def __enter__(self) -> Inputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
