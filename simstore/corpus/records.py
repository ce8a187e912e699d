"""One corpus record's pieces shared by every reader: chunks, bad-record signals, id checks."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from ..exceptions import SimstoreError
from ..store.format import DocId, encode_id

if TYPE_CHECKING:
    from .sources import Source


class SpilledLine:
    """A long JSON line kept to be written out, in an unnamed temporary file (TMPDIR) till
    then: a line of tens of MB is not held beside its text and the text's shingles."""

    def __init__(self, line: bytes | bytearray) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed with this object
        self._file.write(line)
        if not line.endswith(b"\n"):
            self._file.write(b"\n")

    def write_to(self, out: IO[bytes]) -> None:
        """Copy the line (with its newline) to out, a MiB at a time."""
        self._file.seek(0)
        shutil.copyfileobj(self._file, out, 1 << 20)

    def __del__(self) -> None:
        self._file.close()


class BadRecord(Exception):
    """One record is bad (the reason); the reader adds where."""


@dataclass
class Chunk:
    """Documents read together; where[i] is a line/row number, or a path for text files."""

    kind: str
    source: Source | None
    ids: list[DocId] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    where: list[Any] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    raw: list[bytes | bytearray | SpilledLine] = field(default_factory=list)
    batch: Any = None  # pyarrow RecordBatch the chunk's rows were read as (Parquet, with_rows)
    rows: list[int] | None = None  # batch row of each document when bad rows were left out
    group_rows: int = 0  # rows per row group of the Parquet input (its largest group)
    nbytes: int = 0  # input bytes consumed, for progress

    def __len__(self) -> int:
        return len(self.ids)

    def batch_runs(self, keep: list[int]) -> list[Any]:
        """The batch's rows of documents ``keep`` (in order) as zero-copy slices, one per run
        of adjacent rows: no copy, no ``take`` (which would load pyarrow.compute)."""
        rows = keep if self.rows is None else [self.rows[i] for i in keep]
        runs = []
        start = prev = rows[0] if rows else 0
        for r in rows[1:]:
            if r != prev + 1:
                runs.append(self.batch.slice(start, prev + 1 - start))
                start = r
            prev = r
        if rows:
            runs.append(self.batch.slice(start, prev + 1 - start))
        return runs

    def location(self, i: int) -> str:
        """``file:line`` of document i (``file:row N`` for Parquet, the path of a text file)."""
        if self.kind == "text":
            return str(self.where[i])
        assert self.source is not None
        sep = ":row " if self.kind == "parquet" else ":"
        return f"{self.source.name}{sep}{self.where[i]}"


OnBad = Callable[[str, str], None]


def load_json(text: str) -> Any:
    """json.loads with every failure a BadRecord: invalid JSON, nesting too deep for the
    parser, an integer of more digits than Python converts."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        sep = " " if exc.msg.endswith(" at") else " at "  # "... starting at" + column
        raise BadRecord(f"invalid JSON ({exc.msg}{sep}column {exc.colno})") from None
    except RecursionError:
        raise BadRecord("invalid JSON (nested too deeply to read)") from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string ..."
        raise BadRecord(f"invalid JSON ({str(exc).split(';')[0]})") from None


def check_doc_id(value: Any, name: str) -> DocId:
    """A document id as the store takes it (a non-empty str or an int), else BadRecord."""
    if value is None:
        raise BadRecord(f"{name!r} is null")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadRecord(f"{name!r} must be a str or an int (got {type(value).__name__} "
                   f"{value!r:.40})")
    try:
        encode_id(value)
    except SimstoreError as exc:
        raise BadRecord(f"{name!r}: {exc}") from None
    return value


def keep_value(value: Any, name: str) -> float:
    """A keep-field value: a number; missing or null ranks last."""
    if value is None:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"{name!r} must be a number (got {type(value).__name__} {value!r:.40})")
    return float(value)
