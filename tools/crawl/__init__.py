"""The crawl tools: local web sites, the spider that crawls them, and politeness measured.

``site`` (:mod:`tools.crawl.site`) serves pages of real English on 127.0.0.1 with the
copies, tracking parameters, session ids and calendar traps of real sites; ``spider``
(:mod:`tools.crawl.spider`) is the Scrapy spider, run as its own ``scrapy runspider``
process, that records every page it gets. ``web`` (:mod:`tools.crawl.web`) is a web of
many hosts on 127.0.0.2 on that asks for a crawl delay and answers 429 to the hasty;
``politeness`` turns its request log into figures and ``polite`` runs N crawl processes
on it (simstore's Scheduler, scrapy-redis or plain Scrapy: ``peers``); ``unreachable``
counts how often a crawl knocks on a host that refuses every connection. The crawl tests
(tests/scrapy/) and the crawl benchmarks (``python -m tools.bench crawl``,
``crawl-frontier``) use them; by hand: ``python -m tools.crawl
site|spider|polite|unreachable`` (each has --help).
"""
