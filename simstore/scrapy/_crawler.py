"""What the middleware and the pipeline share: settings read into a Gate, stats, closing.

Settings (all optional but the path): ``SIMSTORE_PATH`` (the store; unset: the
component is disabled), ``SIMSTORE_THRESHOLD`` (Jaccard, default 0.9 in a similarity
store), ``SIMSTORE_K`` (a Hamming check instead), ``SIMSTORE_DURABLE`` (fsync every
commit; default False: a killed crawler loses nothing either way, only an OS crash
may lose the last commits, and waiting for fsync holds Scrapy's download slots).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..exceptions import SimstoreError, SimstoreValueError
from ..store import DocId
from ._gate import Gate, Verdict

logger = logging.getLogger("simstore.scrapy")

PREFIX = "simstore/"


def _optional(settings: Any, name: str, kind: type) -> Any:
    """A setting converted to kind, or None when unset or empty."""
    raw = settings.get(name)
    if raw is None or raw == "":
        return None
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise SimstoreValueError(
            f"setting {name} must be {'an int' if kind is int else 'a number'} (got {raw!r})"
        ) from None


def gate_from_settings(settings: Any) -> Gate:
    """The Gate the SIMSTORE_* settings name; NotConfigured when SIMSTORE_PATH is unset."""
    path = settings.get("SIMSTORE_PATH")
    if not path:
        raise NotConfigured("SIMSTORE_PATH is not set")
    return Gate(
        path,
        k=_optional(settings, "SIMSTORE_K", int),
        threshold=_optional(settings, "SIMSTORE_THRESHOLD", float),
        durable=settings.getbool("SIMSTORE_DURABLE", False),
    )


class Checker:
    """Base of the middleware and the pipeline: one Gate, crawl stats, closed with the spider."""

    def __init__(self, gate: Gate, stats: Any, settings: Any) -> None:
        self.gate = gate
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        """Open the store named by the settings; close it when the spider closes."""
        obj = cls(gate_from_settings(crawler.settings), crawler.stats, crawler.settings)
        crawler.signals.connect(obj.spider_closed, signal=signals.spider_closed)
        logger.info("simstore: store %s, a page is a near-duplicate at %s",
                    obj.gate.store.path, obj.gate.rule)
        return obj

    def spider_closed(self, spider: Any = None) -> None:
        """Close the store."""
        self.gate.close()

    def count(self, key: str) -> None:
        """Add one to the crawl stat simstore/KEY."""
        self.stats.inc_value(PREFIX + key)

    def skip(self, reason: str) -> None:
        """Count a document passed on unchecked: simstore/skipped and simstore/skipped/REASON."""
        self.count("skipped")
        self.count("skipped/" + reason)

    def judge(self, doc_ids: Sequence[DocId], texts: Sequence[str]) -> list[Verdict | None]:
        """The Gate's verdicts in one transaction; Nones if the store failed (logged)."""
        try:
            return list(self.gate.check_many(doc_ids, texts))
        except SimstoreError as exc:
            logger.error("simstore: %d documents not checked (%s, ...): %s", len(doc_ids),
                         doc_ids[0], exc)
            return [None] * len(doc_ids)

    def tally(self, verdict: Verdict | None) -> None:
        """Count a verdict: simstore/new, simstore/near_duplicate, or skipped (store_error)."""
        if verdict is None:
            self.skip("store_error")
        else:
            self.count("new" if verdict.new else "near_duplicate")
