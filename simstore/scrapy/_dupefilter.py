"""DupeFilter: Scrapy's request dupefilter with its seen set in the store, shared by processes.

``DUPEFILTER_CLASS = "simstore.scrapy.DupeFilter"`` behaves as Scrapy's
``RFPDupeFilter`` (same fingerprints, the crawler's ``REQUEST_FINGERPRINTER_CLASS``;
``DUPEFILTER_DEBUG``; the stat ``dupefilter/filtered``), but the fingerprints live in
the frontier's ``crawl.<name>.seen`` database of ``SIMSTORE_PATH``: every crawler
process on the machine, and every later run into the store, sees them. Each check is
one commit. Also the settings the frontier components share, read in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy.utils.request import referer_str

from ..exceptions import SimstoreValueError
from ..store import SimStore
from ..store.frontier import DEFAULT_NAME, Frontier, check_name
from ._crawler import _optional, expire_setting
from ._stores import acquire, release

logger = logging.getLogger("simstore.scrapy")


def open_frontier(settings: Any, component: str) -> tuple[SimStore, Frontier]:
    """The process's store of SIMSTORE_PATH (shared) and its frontier SIMSTORE_FRONTIER
    (a request seen longer ago than SIMSTORE_EXPIRE counts as unseen)."""
    path = settings.get("SIMSTORE_PATH")
    if not path:
        raise SimstoreValueError(f"setting SIMSTORE_PATH is not set ({component} needs the store)")
    raw_name = settings.get("SIMSTORE_FRONTIER") or DEFAULT_NAME
    try:
        name = check_name(raw_name)
    except SimstoreValueError:
        raise SimstoreValueError(
            f"setting SIMSTORE_FRONTIER must be 1-40 letters, digits, '_' or '-' "
            f"(got {raw_name!r})") from None
    expire = expire_setting(settings)
    store = acquire(path, k=_optional(settings, "SIMSTORE_K", int),
                    durable=settings.getbool("SIMSTORE_DURABLE", False))
    try:
        return store, Frontier(store, name, expire=expire)
    except BaseException:
        release(store)
        raise


class DupeFilter:
    """Filters requests whose fingerprint is in the store's shared seen set (RFPDupeFilter's
    behaviour, every process and every run of the store sharing one set)."""

    def __init__(self, store: SimStore | None, frontier: Frontier, fingerprinter: Any,
                 stats: Any, debug: bool = False) -> None:
        self.store = store  # released by close(); None: the caller's
        self.frontier = frontier
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.debug = debug
        self.logdupes = True

    @classmethod
    def from_crawler(cls, crawler: Any) -> DupeFilter:
        """The dupefilter of SIMSTORE_PATH's frontier SIMSTORE_FRONTIER (default "default")."""
        store, frontier = open_frontier(crawler.settings, "simstore.scrapy.DupeFilter")
        return cls(store, frontier, crawler.request_fingerprinter, crawler.stats,
                   crawler.settings.getbool("DUPEFILTER_DEBUG"))

    def fingerprint(self, request: Any) -> bytes:
        """The request's fingerprint (the crawler's request fingerprinter)."""
        return bytes(self.fingerprinter.fingerprint(request))

    def request_seen(self, request: Any) -> bool:
        """Whether the request was seen (by any process); it is seen from now on. A seen
        one (most links of a crawl) costs a read, a new one a commit."""
        fp = self.fingerprint(request)
        if self.frontier.seen_contains(fp):
            return True
        return self.frontier.seen_add_many([fp])[0]

    def open(self) -> None:
        """Nothing to do: the store is open from from_crawler on."""

    def close(self, reason: str = "") -> None:
        """Let go of the store (idempotent)."""
        if self.store is not None:
            store, self.store = self.store, None
            release(store)

    def log(self, request: Any, spider: Any) -> None:
        """Log a filtered request at DEBUG (all with DUPEFILTER_DEBUG, else the first) and
        count it in ``dupefilter/filtered``."""
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s (referer: %(referer)s)",
                         {"request": request, "referer": referer_str(request)},
                         extra={"spider": spider})
        elif self.logdupes:
            logger.debug("Filtered duplicate request: %(request)s - no more duplicates will be "
                         "shown (see DUPEFILTER_DEBUG to show all duplicates)",
                         {"request": request}, extra={"spider": spider})
            self.logdupes = False
        self.stats.inc_value("dupefilter/filtered")
