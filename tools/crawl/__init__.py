"""The crawl tools: a local web site that repeats itself, and the spider that crawls it.

``site`` (:mod:`tools.crawl.site`) serves pages of real English on 127.0.0.1 with the
copies, tracking parameters, session ids and calendar traps of real sites; ``spider``
(:mod:`tools.crawl.spider`) is the Scrapy spider, run as its own ``scrapy runspider``
process, that records every page it gets. The crawl tests (tests/scrapy/) and the crawl
benchmarks (``python -m tools.bench crawl``, ``crawl-frontier``) use both; run either by
hand with ``python -m tools.crawl site|spider`` (each has --help).
"""
