"""NearDuplicateMiddleware: a downloader middleware that ignores pages already seen in content.

Enable it at 575: responses pass middlewares from high orders to low, so it then
sees them decompressed (``HttpCompressionMiddleware``, 590), after redirects (600)
and meta refreshes (580), and before retries of error statuses (550), which it skips:
``DOWNLOADER_MIDDLEWARES = {"simstore.scrapy.NearDuplicateMiddleware": 575}``.

Each HTML response's text goes through the store's ``add_if_new``: a new page is
stored and passed on; a page near the one stored under its own URL (a recrawl, a resumed
crawl) is passed on as unchanged, a changed one stored anew and passed on; a page near
one stored under another URL raises ``IgnoreRequest``, so its links are never followed.
``meta["dont_simstore"]`` skips a request; ``response.meta["simstore"]`` tells the spider
the verdict (e.g. to yield no item for an unchanged page). A 304 (Not Modified, the
answer to a revisit's conditional GET) is unchanged, its page's time of storage
refreshed; a page the store no longer holds gets ``meta["simstore_refetch"]``, and
the Scheduler asks for it whole at its next revisit. Responses with no text worth
checking are counted and passed on.
"""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request, Response
from scrapy.utils.misc import load_object

from ..crawl.rules import NOT_MODIFIED
from ._commit import Committer, awaitable
from ._crawler import Checker
from ._gate import REFETCH_KEY, Gate, Verdict
from ._page import page_text, text_or_reason
from ._settings import logger

META_KEY = "dont_simstore"
VERDICT_KEY = "simstore"  # response.meta: the page's verdict, for spiders that want it
DEFAULT_MAX_BYTES = 5 * 2**20


class NearDuplicateMiddleware(Checker):
    """Drops responses whose text is near a page already in the store (shared by processes).

    Settings besides the store's: ``SIMSTORE_MAX_BYTES`` (bodies above it are
    skipped, default 5 MiB), ``SIMSTORE_TEXT`` (a callable, or its import path,
    response -> text; default :func:`simstore.scrapy.page_text`). The text is read
    in the reactor thread (from the tree the spider's selectors reuse); signatures
    and transactions run in a worker thread, pages that wait together in one
    transaction (:mod:`simstore.scrapy._commit`).
    """

    def __init__(self, gate: Gate, stats: Any, settings: Any) -> None:
        super().__init__(gate, stats, settings)
        self.max_bytes = settings.getint("SIMSTORE_MAX_BYTES", DEFAULT_MAX_BYTES)
        self.extract = load_object(settings.get("SIMSTORE_TEXT") or page_text)
        self.committer = Committer(self.judge)

    async def process_response(self, request: Request, response: Response,
                               spider: Any = None) -> Response:
        """The response, unless its text is near a stored page's (then IgnoreRequest). A
        304 (Not Modified: a revisit's conditional GET) is unchanged, the stored page's
        time of storage refreshed."""
        check, text = self.to_check(request, response)
        if not check:
            return response
        verdict = await awaitable(self.committer.submit(response.url, text))
        return self.settle(response, verdict, spider, request)

    def to_check(self, request: Request, response: Response) -> tuple[bool, str | None]:
        """Whether the response is checked, and its text (None: a 304, as stored)."""
        if response.status == NOT_MODIFIED and not request.meta.get(META_KEY):
            return True, None
        text = self.screen(request, response)
        return text is not None, text

    def screen(self, request: Request, response: Response) -> str | None:
        """The text to check, or None for a response passed on unchecked (counted)."""
        if request.meta.get(META_KEY):
            self.skip("dont_simstore")
            return None
        text, reason = text_or_reason(response, self.max_bytes, self.extract)
        if reason:
            self.skip(reason)
            return None
        return text

    def settle(self, response: Response, verdict: Verdict | None, spider: Any = None,
               request: Request | None = None) -> Response:
        """Count the verdict, note it in ``response.meta["simstore"]`` (new, changed,
        unchanged or near_duplicate); the response unless a near-duplicate to drop
        (IgnoreRequest)."""
        self.tally(verdict)
        request = request if request is not None else response.request
        if verdict is not None and request is not None:  # (the engine sets response.request
            request.meta[VERDICT_KEY] = verdict.status   # after the middlewares)
            if verdict.refetch:
                request.meta[REFETCH_KEY] = True
        if verdict is None or verdict.passes:
            return response
        logger.debug("Near-duplicate page %s (%s with %s)", response.url, verdict.why,
                     verdict.kept, extra={"spider": spider})
        if not self.drops(verdict):
            return response
        raise IgnoreRequest(f"near-duplicate of {verdict.kept} ({verdict.why})")

    def spider_closed(self, spider: Any = None) -> None:
        """Let the worker finish, then close the store."""
        self.committer.close()
        super().spider_closed(spider)
