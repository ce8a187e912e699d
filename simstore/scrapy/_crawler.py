"""What the middleware and the pipeline share: settings read into a Gate, stats, closing.

Settings (read in :mod:`._settings`; all optional but the path): ``SIMSTORE_PATH``
(the store; unset: the component is disabled), ``SIMSTORE_THRESHOLD``, ``SIMSTORE_K``,
``SIMSTORE_DURABLE``, ``SIMSTORE_EXPIRE``, ``SIMSTORE_MODE`` (docs/crawl.md).

A bad setting refuses the crawl (:func:`~._settings.refuse`): the component is
replaced by a :class:`Refused` one, which touches no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy import signals

from ..exceptions import SimstoreError, SimstoreValueError
from ..store import DocId
from ._gate import NEAR_DUPLICATE, Gate, Verdict
from ._settings import (  # Refused: the one component of a refused crawl, re-exported
    Refused,
    both_checkers,
    expire_setting,
    flag,
    logger,
    mode_setting,
    not_configured_without_path,
    number,
    refusal,
    refuse,
)

PREFIX = "simstore/"


def gate_from_settings(settings: Any) -> Gate:
    """The Gate the SIMSTORE_* settings name; NotConfigured when SIMSTORE_PATH is unset."""
    not_configured_without_path(settings)
    k = number(settings, "SIMSTORE_K", int)
    threshold = number(settings, "SIMSTORE_THRESHOLD", float)
    expire = expire_setting(settings)
    mode_setting(settings)
    durable = flag(settings, "SIMSTORE_DURABLE")
    if both_checkers(settings):
        raise SimstoreValueError(
            "NearDuplicateMiddleware and NearDuplicatePipeline are both enabled on "
            f"{settings.get('SIMSTORE_PATH')}: the pipeline would find every page the "
            "middleware stored 'unchanged' and drop every item; keep one of them")
    return Gate(settings.get("SIMSTORE_PATH"), k=k, threshold=threshold, durable=durable,
                expire=expire, allow_shared=flag(settings, "SIMSTORE_ALLOW_SHARED_STORE"))


class Checker:
    """Base of the middleware and the pipeline: one Gate, crawl stats, closed with the spider."""

    def __init__(self, gate: Gate, stats: Any, settings: Any) -> None:
        self.gate = gate
        self.stats = stats
        self.mode = mode_setting(settings)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        """Open the store named by the settings; close it when the spider closes. A bad
        setting gives a :class:`Refused` component instead (see the module doc)."""
        if refusal(crawler) is not None:
            return Refused(refusal(crawler))
        try:
            obj = cls(gate_from_settings(crawler.settings), crawler.stats, crawler.settings)
        except SimstoreError as exc:
            refuse(crawler, exc)
            return Refused(exc)
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

    def judge(self, doc_ids: Sequence[DocId], texts: Sequence[str | None]
              ) -> list[Verdict | None]:
        """The Gate's verdicts in one transaction; Nones if the store failed (logged)."""
        try:
            return list(self.gate.check_many(doc_ids, texts))
        except SimstoreError as exc:
            logger.error("simstore: %d documents not checked (%s, ...): %s", len(doc_ids),
                         doc_ids[0], exc)
            return [None] * len(doc_ids)

    def tally(self, verdict: Verdict | None) -> None:
        """Count a verdict: simstore/new, changed, unchanged or near_duplicate, or skipped
        (store_error)."""
        if verdict is None:
            self.skip("store_error")
        else:
            self.count(verdict.status)

    def drops(self, verdict: Verdict | None) -> bool:
        """Whether a near-duplicate is dropped (not in "log" mode)."""
        return verdict is not None and verdict.status == NEAR_DUPLICATE and self.mode == "drop"
