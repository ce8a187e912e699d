"""Real crawls of a local site (127.0.0.1 only) by ``scrapy runspider`` processes sharing one
store: each distinct page reaches a spider once, copies and traps cost a fetch or two, and a
crawler killed with SIGKILL leaves the store to the other."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

pytest.importorskip("scrapy")

import simstore  # noqa: E402
from tools.crawl.site import SKIPPED, Site, serve  # noqa: E402

from .crawlers import TIMEOUT, Crawler  # noqa: E402


def checked(pages: list[dict]) -> list[str]:
    """The page ids of the pages a deduplicating crawl checks (not the skipped ones)."""
    return [p["page"] for p in pages if p["page"] and not p["page"].startswith("bad-")]


def kept(pages: list[dict]) -> list[str]:
    """The page ids of the pages a spider got as new (stored by its crawl), not as unchanged
    (stored before, by another crawler or run)."""
    return [p["page"] for p in pages
            if p["page"] and not p["page"].startswith("bad-") and p["verdict"] == "new"]


def followed_only_from_kept_pages(crawler: Crawler, srv) -> list[str]:
    """Fetches whose referring page never reached this crawler's spider (should be none)."""
    kept = {p["url"] for p in crawler.pages()}
    return [f.target for f in crawler.fetches(srv) if f.referer and f.referer not in kept]


@pytest.mark.slow
def test_two_crawlers_keep_each_page_once(tmp_path):
    """Two concurrent crawls from different seeds, one store: every distinct page is kept
    (verdict new) by exactly one spider (the other may get it as unchanged: it is never its
    own near-duplicate), no link of a dropped copy is followed, the calendar trap costs at
    most three fetches per crawler, odd responses are skipped and counted."""
    site = Site(articles=36)
    store = tmp_path / "store"
    with serve(site, delay=0.005, together=2) as (url, srv):
        sections = [f"{url}/section/{s}" for s in site.sections()]
        a = Crawler(tmp_path, "crawler-a", [url + "/"] + sections[:3], store)
        b = Crawler(tmp_path, "crawler-b", sections[3:], store)
        assert (a.wait(), b.wait()) == (0, 0), a.output()[-3000:] + b.output()[-3000:]
        ids = Counter(kept(a.pages()) + kept(b.pages()))
        assert set(ids) == site.distinct_ids()
        assert [i for i, n in ids.items() if n > 1] == []
        for c in (a, b):
            st = c.stats()
            assert st["finish_reason"] == "finished" and "log_count/ERROR" not in st
            assert followed_only_from_kept_pages(c, srv) == []
            assert sum("/calendar/" in f.target for f in c.fetches(srv)) <= 3
            fetched = Counter(f.target.split("?")[0].removeprefix("/misc/")
                              for f in c.fetches(srv))
            for name, reason in SKIPPED.items():
                assert st.get(f"simstore/skipped/{reason}", 0) == fetched[name], name
        new = [c.stats().get("simstore/new", 0) for c in (a, b)]
        assert sum(new) == len(site.distinct_ids()) and min(new) > 0  # both crawled
        assert sum(c.stats()["simstore/near_duplicate"] for c in (a, b)) > len(ids)
    with simstore.SimStore(store) as s:
        assert len(s) == len(site.distinct_ids())
        assert s.verify() == []


@pytest.mark.slow
def test_without_the_middleware_the_traps_are_endless(tmp_path):
    """The control: the same spider without the middleware fetches session-id copies and
    calendar months until a page limit stops it."""
    site = Site(articles=12)
    with serve(site) as (url, srv):
        c = Crawler(tmp_path, "control", [url + "/"], None, CLOSESPIDER_PAGECOUNT=300)
        assert c.wait() == 0, c.output()[-3000:]
        assert c.stats()["finish_reason"] == "closespider_pagecount"
        fetched = c.fetches(srv)
    trapped = [f for f in fetched if "sid=" in f.target or "/calendar/" in f.target]
    assert len(fetched) >= 300 and len(trapped) > 0.8 * len(fetched)
    assert max(site.sid_depth(f.target.partition("sid=")[2]) for f in trapped) > 5


@pytest.mark.slow
def test_a_crawler_killed_mid_crawl_leaves_the_store_to_the_other(tmp_path):
    """SIGKILL of one of two crawlers mid-crawl: the other goes on, finishes cleanly, no page
    was kept by both spiders, and the store verifies and still decides."""
    site = Site(articles=36)
    store = tmp_path / "store"
    with serve(site, delay=0.005, together=2) as (url, srv):
        a = Crawler(tmp_path, "crawler-a", [url + "/"], store, CONCURRENT_REQUESTS=2)
        b = Crawler(tmp_path, "crawler-b", [f"{url}/section/{site.sections()[-1]}"], store,
                    CONCURRENT_REQUESTS=2)
        deadline = time.monotonic() + TIMEOUT
        while min(len(a.fetches(srv)), len(b.fetches(srv))) < 15:
            assert a.proc.poll() is None and b.proc.poll() is None, "a crawl ended too soon"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        a.proc.send_signal(signal.SIGKILL)
        assert a.wait() == -signal.SIGKILL
        served_b = len(b.fetches(srv))
        assert b.wait() == 0, b.output()[-3000:]
        assert len(b.fetches(srv)) > served_b
    st = b.stats()
    assert st["finish_reason"] == "finished" and "log_count/ERROR" not in st
    assert "simstore/skipped/store_error" not in st
    got_a, got_b = kept(a.pages()), kept(b.pages())
    assert set(got_a) & set(got_b) == set()
    assert len(set(got_b)) == len(got_b) and st["simstore/new"] == len(got_b)
    with simstore.SimStore(store) as s:
        assert s.verify() == []
        assert len(s) >= len(got_a) + len(got_b)
        text = " ".join(site.items[0].paras)
        assert s.add_if_new("http://new/", s.signature("Fresh words. " + text[::-1])) == []
        assert s.add_if_new("http://copy/", s.signature("Fresh words. " + text[::-1] + " x"))


@pytest.mark.slow
def test_the_middleware_on_a_plain_twisted_reactor(tmp_path):
    """With a reactor that is not asyncio's, the middleware awaits Twisted Deferreds: the
    crawl still keeps each distinct page once."""
    site = Site(articles=12)
    with serve(site) as (url, _):
        c = Crawler(tmp_path, "plain", [url + "/"], tmp_path / "store",
                    TWISTED_REACTOR="twisted.internet.selectreactor.SelectReactor")
        assert c.wait() == 0, c.output()[-3000:]
    assert "SelectReactor" in c.output()
    ids = Counter(kept(c.pages()))
    assert set(ids) == site.distinct_ids() and max(ids.values()) == 1
    assert c.stats()["simstore/new"] == len(ids)
