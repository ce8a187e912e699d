"""DupeFilter: Scrapy's RFPDupeFilter with its seen set in the store, shared by processes.

``DUPEFILTER_CLASS = "simstore.scrapy.DupeFilter"`` is Scrapy's ``RFPDupeFilter``
(its fingerprints, the crawler's ``REQUEST_FINGERPRINTER_CLASS``, its log and the stat
``dupefilter/filtered``), but the fingerprints live in the frontier's seen set of
``SIMSTORE_PATH``: every crawler process on the machine, and every later run into the
store, sees them. A seen request costs a read, a new one a commit.
"""

from __future__ import annotations

from typing import Any

from scrapy.dupefilters import RFPDupeFilter

from ..crawl import Frontier
from ..exceptions import SimstoreError
from ..store import SimStore
from ._settings import CrawlSettings, crawl_settings, refusal, refuse
from ._stores import acquire, release


def open_frontier(cfg: CrawlSettings) -> tuple[SimStore, Frontier]:
    """The process's store of the settings (shared) and its frontier."""
    store = acquire(cfg.path, k=cfg.k, durable=cfg.durable, allow_shared=cfg.allow_shared)
    try:
        return store, Frontier(store, cfg.name, expire=cfg.expire,
                               politeness=cfg.politeness, revisit=cfg.revisit)
    except BaseException:
        release(store)
        raise


class DupeFilter(RFPDupeFilter):
    """RFPDupeFilter whose seen set is the store's frontier's (every process and run)."""

    def __init__(self, store: SimStore | None, frontier: Frontier, debug: bool = False, *,
                 fingerprinter: Any = None) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.store = store  # released by close(); None: the caller's
        self.frontier = frontier

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        """The dupefilter of SIMSTORE_PATH's frontier SIMSTORE_FRONTIER (default
        "default"); a refused crawl gets Scrapy's own, which touches no store."""
        debug = crawler.settings.getbool("DUPEFILTER_DEBUG")
        if refusal(crawler) is None:
            try:
                store, frontier = open_frontier(
                    crawl_settings(crawler.settings, "simstore.scrapy.DupeFilter"))
                return cls(store, frontier, debug, fingerprinter=crawler.request_fingerprinter)
            except SimstoreError as exc:
                refuse(crawler, exc)
        return RFPDupeFilter(None, debug, fingerprinter=crawler.request_fingerprinter)

    def fingerprint(self, request: Any) -> bytes:
        """The request's fingerprint (the crawler's request fingerprinter)."""
        return bytes(self.fingerprinter.fingerprint(request))

    def request_seen(self, request: Any) -> bool:
        """Whether the request was seen (by any process); it is seen from now on."""
        fp = self.fingerprint(request)
        if self.frontier.seen_contains(fp):
            return True
        return self.frontier.seen_add_many([fp])[0]

    def close(self, reason: str = "") -> None:
        """Let go of the store (idempotent)."""
        if self.store is not None:
            store, self.store = self.store, None
            release(store)
