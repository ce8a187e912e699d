"""What the middleware and the pipeline share: settings read into a Gate, stats, closing.

Settings (all optional but the path): ``SIMSTORE_PATH`` (the store; unset: the
component is disabled), ``SIMSTORE_THRESHOLD`` (Jaccard, default 0.9 in a similarity
store), ``SIMSTORE_K`` (a Hamming check instead), ``SIMSTORE_DURABLE`` (fsync every
commit; default False: a killed crawler loses nothing either way, only an OS crash
may lose the last commits, and waiting for fsync holds Scrapy's download slots),
``SIMSTORE_EXPIRE`` (an age such as ``"30d"``: pages stored longer ago no longer count,
and a page near one of them is kept anew), ``SIMSTORE_MODE`` (``"drop"``, the default:
near-duplicates are dropped; ``"log"``: counted and logged, never dropped).

A bad setting ends the crawl at its start with one ERROR line naming the setting and the
finish reason ``simstore_refused``: the component is replaced by a :class:`Refused` one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from scrapy import signals
from scrapy.exceptions import DropItem, IgnoreRequest, NotConfigured

from .._validate import parse_duration
from ..exceptions import SimstoreError, SimstoreValueError
from ..store import DocId
from ._gate import NEAR_DUPLICATE, Gate, Verdict

logger = logging.getLogger("simstore.scrapy")

PREFIX = "simstore/"
REFUSED = "simstore_refused"  # the finish reason of a crawl whose settings were refused
MODES = ("drop", "log")


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


def expire_setting(settings: Any) -> float | None:
    """SIMSTORE_EXPIRE in seconds, or None when unset."""
    raw = settings.get("SIMSTORE_EXPIRE")
    if raw is None or raw == "":
        return None
    try:
        return parse_duration(raw, "SIMSTORE_EXPIRE")
    except SimstoreError:
        raise SimstoreValueError(
            f"setting SIMSTORE_EXPIRE must be an age: seconds, or a number with a unit s, m, "
            f"h, d or w such as '30d' (got {raw!r})") from None


def mode_setting(settings: Any) -> str:
    """SIMSTORE_MODE: "drop" (default) or "log"."""
    raw = settings.get("SIMSTORE_MODE") or "drop"
    if raw not in MODES:
        raise SimstoreValueError(
            f"setting SIMSTORE_MODE must be one of {', '.join(map(repr, MODES))} (got {raw!r})")
    return str(raw)


def gate_from_settings(settings: Any) -> Gate:
    """The Gate the SIMSTORE_* settings name; NotConfigured when SIMSTORE_PATH is unset."""
    path = settings.get("SIMSTORE_PATH")
    if not path:
        raise NotConfigured("SIMSTORE_PATH is not set")
    k = _optional(settings, "SIMSTORE_K", int)
    threshold = _optional(settings, "SIMSTORE_THRESHOLD", float)
    expire = expire_setting(settings)
    mode_setting(settings)
    return Gate(path, k=k, threshold=threshold,
                durable=settings.getbool("SIMSTORE_DURABLE", False), expire=expire)


class Refused:
    """The middleware or pipeline of a crawl whose settings (or store) were refused: at
    spider_opened one ERROR line says why and the crawl closes; nothing passes meanwhile."""

    def __init__(self, crawler: Any, error: SimstoreError) -> None:
        self.crawler = crawler
        self.error = error

    def spider_opened(self, spider: Any = None) -> None:
        logger.error("simstore: %s", self.error, extra={"spider": spider})
        engine = self.crawler.engine
        close = getattr(engine, "close_spider_async", None)
        if close is not None:
            close(reason=REFUSED)
        else:  # pragma: no cover - Scrapy before 2.14
            engine.close_spider(spider, REFUSED)

    def process_request(self, request: Any, spider: Any = None) -> None:
        raise IgnoreRequest(f"simstore refused its settings: {self.error}")

    def process_item(self, item: Any, spider: Any = None) -> Any:
        raise DropItem(f"simstore refused its settings: {self.error}")


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
        try:
            obj = cls(gate_from_settings(crawler.settings), crawler.stats, crawler.settings)
        except SimstoreError as exc:
            refused = Refused(crawler, exc)
            crawler.signals.connect(refused.spider_opened, signal=signals.spider_opened)
            return refused
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
        """Count a verdict: simstore/new, changed, unchanged or near_duplicate, or skipped
        (store_error)."""
        if verdict is None:
            self.skip("store_error")
        else:
            self.count(verdict.status)

    def drops(self, verdict: Verdict | None) -> bool:
        """Whether a near-duplicate is dropped (not in "log" mode)."""
        return verdict is not None and verdict.status == NEAR_DUPLICATE and self.mode == "drop"
