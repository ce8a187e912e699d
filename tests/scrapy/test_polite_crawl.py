"""A polite crawl by two ``scrapy runspider`` processes on the simstore Scheduler, measured by the
hosts of tools.crawl.web (127.0.0.2-5 only): the figures issue 56's "done" asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("scrapy")

from tools.crawl import polite  # noqa: E402


@pytest.mark.slow
def test_polite_crawl_simstore_scheduler(tmp_path: Path) -> None:
    """Two processes on one store keep each host's crawl delay, heed Retry-After, fetch every page
    once and share the work."""
    opts = polite.Options(procs=2, hosts=4, pages=20, delay="0.2", retry_after=2.0, limited=1,
                          scheduler="simstore", timeout=40)
    r = polite.run(opts, tmp_path)["crawl"]
    assert all(p["end"] == "exit" and p["exit"] == 0 for p in r["processes"]), r["processes"]
    assert r["gaps_kept_pct"] >= 95, r
    assert r["answers_429"] <= 5, r
    assert r["inside_retry_after"] == 0, r
    assert r["once_pct"] >= 99, r
    assert len(r["agents"]) == 2 and r["min_share_pct"] >= 15, r
    # simstore.scrapy.RobotsTxtMiddleware: one process fetched each robots.txt, the
    # other read it from the store
    assert r["robots"] == 4, r
    assert sum(p["robots_shared"] for p in r["processes"]) >= 1, r["processes"]


@pytest.mark.slow
def test_revisits_fetch_what_changed_and_leave_the_rest(tmp_path: Path) -> None:
    """With SIMSTORE_REVISIT=adaptive, a second revisit round refetches every page that keeps
    changing and no page that did not, and a gone page is asked only as often as it was due;
    revisits are conditional GETs, so the pages that did not change answer 304."""
    opts = polite.Options(procs=2, hosts=2, pages=20, delay="0.05", limited=0, revisit=True,
                          revisit_rounds=2, scheduler="simstore", timeout=40)
    r = polite.run(opts, tmp_path)
    first, second = r["revisit 1"]["revisit"], r["revisit 2"]["revisit"]
    assert first["changed_refetched_pct"] == 100.0  # everything was due once
    # conditional GETs: what changed came whole, what did not was answered 304, no body
    assert first["changed_whole"] == first["changed"], first
    assert r["revisit 1"]["answers_304"] == first["unchanged_refetched"] > 0, first
    # each 304 counted by the Scheduler, and unchanged for the middleware (its page renewed)
    procs = r["revisit 1"]["processes"]
    assert sum(p["not_modified"] for p in procs) == r["revisit 1"]["answers_304"], procs
    assert sum(p["unchanged"] for p in procs) >= r["revisit 1"]["answers_304"], procs
    assert second["changed"] > 0 and second["changed_refetched_pct"] >= 90, second
    assert second["unchanged_refetched"] <= 0.1 * second["unchanged"], second
    assert r["revisit 2"]["fetched_twice"] == 0 and r["revisit 2"]["answers_429"] == 0


@pytest.mark.slow
def test_autothrottle_holds_across_processes(tmp_path: Path) -> None:
    """AUTOTHROTTLE_ENABLED with three processes on hosts that take 0.1 s to answer: each
    host is asked as AutoThrottle asks one process to (target 1: one request at a time,
    on average no more), not three times as hard, as Scrapy's own AutoThrottle in each
    process does (docs/benchmarks.md has both)."""
    opts = polite.Options(procs=3, hosts=4, pages=30, delay="0", limited=0, latency=0.1,
                          scheduler="simstore", timeout=60,
                          settings={"AUTOTHROTTLE_ENABLED": "True",
                                    "AUTOTHROTTLE_START_DELAY": "0.5"})
    r = polite.run(opts, tmp_path)["crawl"]
    assert all(p["end"] == "exit" and p["exit"] == 0 for p in r["processes"]), r["processes"]
    assert r["once_pct"] == 100.0, r
    assert r["in_flight_mean"] <= 1.0 and r["in_flight_max"] <= 2, r
    assert len(r["agents"]) == 3 and r["min_share_pct"] >= 15, r


@pytest.mark.slow
def test_download_slots_hold_across_processes(tmp_path: Path) -> None:
    """DOWNLOAD_SLOTS gives 127.0.0.2 a delay of 0.3 s (no jitter) and one request at a
    time: three processes together keep it, and leave 127.0.0.3 at the crawl's (no delay),
    where each process holding the slot for itself kept few of the gaps (docs/crawl.md)."""
    slots = '{"127.0.0.2": {"delay": 0.3, "concurrency": 1, "randomize_delay": false}}'
    opts = polite.Options(procs=3, hosts=2, pages=20, delay="0", limited=0, gap=0.3,
                          scheduler="simstore", timeout=60,
                          settings={"DOWNLOAD_SLOTS": slots})
    r = polite.run(opts, tmp_path)["crawl"]
    assert all(p["end"] == "exit" and p["exit"] == 0 for p in r["processes"]), r["processes"]
    assert r["once_pct"] == 100.0, r
    slow, fast = r["hosts"]["127.0.0.2"], r["hosts"]["127.0.0.3"]
    assert slow["gaps_kept_pct"] >= 95, slow
    assert fast["gaps_kept_pct"] < 50, fast  # the crawl's own: not slowed by the entry
