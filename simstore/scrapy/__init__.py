"""simstore inside Scrapy: many crawler processes, one store, no near-duplicate pages followed.

Needs the ``scrapy`` extra (``pip install 'simstore[scrapy]'``); ``import simstore``
never imports Scrapy. :class:`NearDuplicateMiddleware` (a downloader middleware)
checks each HTML response's text; :class:`NearDuplicatePipeline` checks an item
field. Both take the store from ``SIMSTORE_PATH`` and the rule from the store
(Jaccard >= 0.9 in a similarity store) or the settings; see README "Scrapy".
:class:`Scheduler` and :class:`DupeFilter` keep the crawl's frontier (queue, leases,
seen set) in the same store, shared by every crawler process: docs/crawl.md.
:class:`RobotsTxtMiddleware` (with the Scheduler) fetches each robots.txt once a crawl.
"""

from __future__ import annotations

from ._dupefilter import DupeFilter
from ._gate import Gate, Verdict
from ._middleware import META_KEY, VERDICT_KEY, NearDuplicateMiddleware
from ._page import page_text
from ._pipeline import NearDuplicatePipeline
from ._robots import RobotsTxtMiddleware
from ._scheduler import Scheduler

__all__ = ["META_KEY", "VERDICT_KEY", "DupeFilter", "Gate", "NearDuplicateMiddleware",
           "NearDuplicatePipeline", "RobotsTxtMiddleware", "Scheduler", "Verdict", "page_text"]
