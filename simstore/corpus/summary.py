"""What a corpus run did: each document's outcome, and the counts the API returns.

:func:`simstore.corpus.index_corpus` returns an :class:`IndexSummary`,
:func:`simstore.corpus.dedup_corpus` a :class:`CorpusSummary`; both count a chunk at
a time from the outcomes of its documents (``NEW``, ``STORED``, ``NEAR``,
``REPEATED``), and :class:`simstore.corpus.Interrupted` carries the one counted so far.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .records import Chunk
from .sources import Skipped

# A document's outcome: NEW (added / kept), STORED (its id was stored before this run
# met it), NEAR (a near-duplicate of a stored or kept one), REPEATED (its id came earlier
# in the input).
NEW, STORED, NEAR, REPEATED = 0, 1, 2, 3


@dataclass
class IndexSummary:
    """What :func:`index_corpus` did: documents new, already stored, near-duplicates skipped."""

    new: int = 0
    already_stored: int = 0
    near_duplicates: int = 0
    bad: int = 0
    skipped: Skipped = field(default_factory=Skipped)
    documents: int = 0
    bytes: int = 0
    seconds: float = 0.0
    last: str | None = None  # where the last committed document was read

    def count(self, c: Chunk, status: Sequence[int], near: Mapping[int, Any],
              on_near: Callable[[Any, str, Any], None] | None = None) -> None:
        """Add a committed chunk: NEW are new, NEAR skipped (``on_near(id, where, match)``
        hears of each, ``near[i]`` its match), the rest already stored."""
        _read(self, c)
        for i, s in enumerate(status):
            if s == NEW:
                self.new += 1
            elif s == NEAR:
                self.near_duplicates += 1
                if on_near is not None:
                    on_near(c.ids[i], c.location(i), near[i])
            else:
                self.already_stored += 1

    def as_dict(self) -> dict[str, Any]:
        return {"new": self.new, "already_stored": self.already_stored,
                "near_duplicates_skipped": self.near_duplicates, "bad_records": self.bad,
                "skipped_files": self.skipped.total(), "documents": self.documents,
                "bytes": self.bytes, "seconds": round(self.seconds, 3), "last": self.last}


@dataclass
class CorpusSummary:
    """What :func:`dedup_corpus` did."""

    kept: int = 0  # written to the output: new ones and already_stored ones
    removed: int = 0  # near-duplicates and repeated ids
    already_stored: int = 0  # kept: first occurrences of ids the store already held
    repeated: int = 0  # removed: their id came earlier in this run
    keep_missing: int = 0  # keep=FIELD: documents without a value for it (ranked last)
    bad: int = 0
    skipped: Skipped = field(default_factory=Skipped)
    documents: int = 0
    bytes: int = 0
    seconds: float = 0.0
    output: str = ""
    removed_report: str | None = None
    last: str | None = None

    def count(self, c: Chunk, status: Sequence[int]) -> None:
        """Add a written chunk: kept = NEW + STORED (already_stored counts the STORED),
        removed = NEAR + REPEATED (repeated counts those)."""
        _read(self, c)
        for s in status:
            if s == NEW:
                self.kept += 1
            elif s == STORED:
                self.kept += 1
                self.already_stored += 1
            elif s == NEAR:
                self.removed += 1
            else:
                self.removed += 1
                self.repeated += 1

    def as_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "removed": self.removed, "new": self.kept - self.already_stored,
                "already_stored": self.already_stored, "repeated_ids": self.repeated,
                "keep_field_missing": self.keep_missing,
                "bad_records": self.bad, "skipped_files": self.skipped.total(),
                "documents": self.documents, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "output": self.output,
                "removed_report": self.removed_report}


def _read(summary: IndexSummary | CorpusSummary, c: Chunk) -> None:
    """The chunk's documents and bytes, and where its last document was read."""
    summary.documents += len(c)
    summary.bytes += c.nbytes
    if len(c):
        summary.last = c.location(len(c) - 1)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a corpus run; ``summary`` counts the committed chunks only."""

    def __init__(self, summary: IndexSummary | CorpusSummary) -> None:
        super().__init__("interrupted")
        self.summary = summary
