"""A host that gives no answer, crawled as users run it (tools.crawl.unreachable): one
``scrapy runspider`` process on the simstore Scheduler, a live host of tools.crawl.web and
40 URLs on an address where nothing listens (every connection refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("scrapy")

from tools.crawl import unreachable  # noqa: E402


@pytest.mark.slow
def test_a_host_that_refuses_every_connection_is_backed_off_then_given_up(tmp_path: Path) -> None:
    """Its first downloads fail together (one episode: the host blocked 2 s for every process),
    then one request at a time; at SIMSTORE_HOST_MAX_FAILURES episodes it is given up and its
    queue dropped: a few connections where plain Scrapy makes 3 a URL (120), the live host's
    pages all fetched and the crawl ending by itself."""
    r = unreachable.crawl(tmp_path, "simstore", pages=20, dead=40,
                          settings={"SIMSTORE_HOST_MAX_FAILURES": 2, "RETRY_TIMES": 2},
                          timeout=120)
    log = Path(r["log"]).read_text(errors="replace")
    assert r["exit"] == 0, log
    assert r["live_pages"] == 20, r
    # the first take's requests of the host (16 at most: what one process alone may hold
    # of a host), then one after the 2 s block
    assert 1 <= r["dead_connections"] <= 17, r
    assert r["given_up"] == 1 and r["no_answer"] == r["dead_connections"], r
    assert "given up for 600 s" in log
