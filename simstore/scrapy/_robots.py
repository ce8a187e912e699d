"""RobotsTxtMiddleware: Scrapy's robots.txt middleware, each robots.txt fetched once a crawl.

Scrapy's own middleware fetches an origin's robots.txt in every process; with the
Scheduler, the first process that reads it keeps the answer in the frontier (beside the
host's Crawl-delay, in the same commit) and every other process builds its parser from
that copy while it is younger than ``SIMSTORE_ROBOTS_MAX_AGE`` (default 1 day; 0: never
shared). Enable it in place of Scrapy's::

    DOWNLOADER_MIDDLEWARES = {
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "simstore.scrapy.RobotsTxtMiddleware": 100,
    }

Without the Scheduler (another scheduler, or none yet) it is Scrapy's middleware as is.
"""

from __future__ import annotations

from typing import Any

from scrapy import signals
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as _ScrapyRobots
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler

from ..crawl.calls import MAX_LEASE
from ..exceptions import SimstoreError
from ._scheduler import Scheduler
from ._settings import logger

STATS = "simstore/robots/"


class RobotsTxtMiddleware(_ScrapyRobots):
    """Scrapy's RobotsTxtMiddleware, reading a robots.txt another process of the crawl
    fetched from the store instead of fetching it again (stat ``simstore/robots/shared``)."""

    async def robot_parser(self, request: Any) -> Any:
        url = urlparse_cached(request)
        netloc = url.netloc
        if netloc not in self._parsers:
            body = self._shared(f"{url.scheme}://{netloc}")
            if body is not None:
                rp = build_from_crawler(self._parserimpl, self.crawler, body)
                self._parsers[netloc] = rp
                self._stats.inc_value(STATS + "shared")
                await self.crawler.signals.send_catch_log_async(
                    signal=signals.robots_parsed, robotparser=rp, request=request)
                return rp
        return await super().robot_parser(request)

    def _shared(self, origin: str) -> bytes | None:
        """The body of origin's robots.txt as a process of the crawl fetched it, if young
        enough; None to fetch it here."""
        scheduler = getattr(getattr(self.crawler, "engine", None), "scheduler", None)
        if not isinstance(scheduler, Scheduler) or not scheduler.robots_max_age:
            return None
        try:
            got = scheduler.frontier.robots_txt(origin, min(scheduler.robots_max_age, MAX_LEASE))
        except SimstoreError as exc:
            logger.warning("simstore: the stored robots.txt of %s not read (%s); fetched",
                           origin, exc, extra={"spider": self.crawler.spider})
            return None
        return None if got is None else got[1]
