"""The crawl, framework-free: a frontier shared by every process on a store.

:class:`Frontier` keeps a crawl's queue, leases, seen set, hosts and revisits in
named databases of the store (``crawl.*``, docs/crawl.md gives every byte):
a take is host-fair and polite across processes (:class:`Politeness`, with each host's
delay learnt from its latencies by :class:`AutoThrottle`), a
lease never outlives its deadline unnoticed, and fetched URLs come due again by
what changed (:class:`Revisit`). :mod:`simstore.scrapy` is a thin adapter over it,
and ``simstore-cli crawl`` shows and steers it.
"""

from __future__ import annotations

from .calls import DROPPED, NO_ANSWER
from .frontier import DEFAULT_NAME, Done, Frontier, Popped, Push, Taken, check_name
from .payload import PayloadError
from .records import host_of_url
from .rules import AutoThrottle, HostRule, Politeness, Revisit, parse_crawl_delay, parse_retry_after

__all__ = ["DEFAULT_NAME", "DROPPED", "NO_ANSWER", "AutoThrottle", "Done", "Frontier", "HostRule",
           "PayloadError", "Politeness", "Popped", "Push", "Revisit", "Taken", "check_name",
           "host_of_url", "parse_crawl_delay", "parse_retry_after"]
