"""The spider of crawl tests and benchmarks: follows every link, notes every page it gets.

Run by ``scrapy runspider tools/crawl/spider.py -a start=URL[,URL] -a record=FILE
-a stats=FILE`` (:func:`command` builds it; by hand: ``python -m tools.crawl spider``).
Each response that reaches the spider appends one JSON line (url, page id) to
``record`` at once (so a killed crawl leaves what it saw), and the crawl's stats are
written to ``stats`` when it closes. Settings keep it local and quiet: no cookies
(Scrapy's cookie middleware could fetch the public suffix list), no telnet console,
no robots.txt unless ``-s ROBOTSTXT_OBEY=True`` asks for it (Scrapy ranks command-line
settings above a spider's ``custom_settings``, so every ``-s`` here wins).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import scrapy
from scrapy.http import TextResponse


class SiteSpider(scrapy.Spider):
    """Every page of the site at ``start``, one record line per response."""

    name = "site"
    custom_settings = {
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "REMOTE_CONTROL_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, start: str = "", record: str = "", stats: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_urls = [u for u in start.split(",") if u]
        self._record = os.open(record or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._stats = stats

    def parse(self, response: Any) -> Any:
        """Note the page; follow its links."""
        page = None
        if isinstance(response, TextResponse):
            page = response.css('meta[name="page-id"]::attr(content)').get()
        line = json.dumps({"url": response.url, "page": page,
                           "verdict": response.meta.get("simstore")}) + "\n"
        os.write(self._record, line.encode())
        if isinstance(response, TextResponse):
            yield from response.follow_all(css="a")

    def closed(self, reason: str) -> None:
        """Write the crawl's stats."""
        os.close(self._record)
        if self._stats:
            stats = dict(self.crawler.stats.get_stats())
            stats["finish_reason"] = reason
            # Scrapy sets its own elapsed time after this method: start to now instead
            started = stats.get("start_time")
            if isinstance(started, datetime):
                stats["crawl_seconds"] = (datetime.now(timezone.utc) - started).total_seconds()
            with open(self._stats, "w", encoding="utf-8") as f:
                json.dump(stats, f, default=str)


MIDDLEWARE = '{"simstore.scrapy.NearDuplicateMiddleware": 575}'


def command(starts: list[str], record: str, stats: str, settings: dict[str, Any]) -> list[str]:
    """The ``scrapy runspider`` command line of this spider (settings as ``-s NAME=VALUE``)."""
    import sys

    cmd = [sys.executable, "-m", "scrapy", "runspider", __file__, "-a",
           "start=" + ",".join(starts), "-a", f"record={record}", "-a", f"stats={stats}"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    return cmd
