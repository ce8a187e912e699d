"""NearDuplicateMiddleware: a downloader middleware that ignores pages already seen in content.

Enable it at 575: responses pass middlewares from high orders to low, so it then
sees them decompressed (``HttpCompressionMiddleware``, 590), after redirects (600)
and meta refreshes (580), and before retries of error statuses (550), which it skips:
``DOWNLOADER_MIDDLEWARES = {"simstore.scrapy.NearDuplicateMiddleware": 575}``.

Each HTML response's text goes through the store's ``add_if_new``: a new page is
stored and passed on; a near-duplicate raises ``IgnoreRequest``, so its links are
never followed. ``meta["dont_simstore"]`` skips a request. Responses with no text
worth checking are counted and passed on.
"""

from __future__ import annotations

from typing import Any

from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request, Response
from scrapy.utils.misc import load_object

from ._crawler import Checker, logger
from ._gate import Gate
from ._page import page_text, text_or_reason

META_KEY = "dont_simstore"
DEFAULT_MAX_BYTES = 5 * 2**20


class NearDuplicateMiddleware(Checker):
    """Drops responses whose text is near a page already in the store (shared by processes).

    Settings besides the store's: ``SIMSTORE_MAX_BYTES`` (bodies above it are
    skipped, default 5 MiB), ``SIMSTORE_TEXT`` (a callable, or its import path,
    response -> text; default :func:`simstore.scrapy.page_text`).
    """

    def __init__(self, gate: Gate, stats: Any, settings: Any) -> None:
        super().__init__(gate, stats, settings)
        self.max_bytes = settings.getint("SIMSTORE_MAX_BYTES", DEFAULT_MAX_BYTES)
        self.extract = load_object(settings.get("SIMSTORE_TEXT") or page_text)

    def process_response(self, request: Request, response: Response,
                         spider: Any = None) -> Response:
        """The response, unless its text is near a stored page's (then IgnoreRequest)."""
        if request.meta.get(META_KEY):
            self.skip("dont_simstore")
            return response
        text, reason = text_or_reason(response, self.max_bytes, self.extract)
        if reason:
            self.skip(reason)
            return response
        verdict = self.decide(response.url, text)
        if verdict is None or verdict.new:
            return response
        logger.debug("Near-duplicate page %s (%s with %s)", response.url, verdict.why,
                     verdict.kept, extra={"spider": spider})
        raise IgnoreRequest(f"near-duplicate of {verdict.kept} ({verdict.why})")
