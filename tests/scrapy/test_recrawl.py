"""Real crawls (``scrapy runspider`` on a local 127.0.0.1 site) run again into the store
they filled: a crawl killed with SIGKILL resumes to the end (a page is never its own
near-duplicate), and a recrawl "40 days later" with SIMSTORE_EXPIRE refetches the site and
keeps the changed pages."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

pytest.importorskip("scrapy")

import simstore  # noqa: E402
from simstore.crawl import Frontier  # noqa: E402
from tools.crawl.site import Site, serve  # noqa: E402

from .crawlers import TIMEOUT, Crawler  # noqa: E402
from .test_crawl import checked  # noqa: E402

DAY = 86400.0
SCHED = {"SCHEDULER": "simstore.scrapy.Scheduler", "SIMSTORE_LEASE": 3}


def finished(c: Crawler) -> dict:
    st = c.stats()
    assert st["finish_reason"] == "finished", c.output()[-3000:]
    assert "log_count/ERROR" not in st, c.output()[-3000:]
    return st


def age_store(path, days: float) -> None:
    """Move every doc's time of storage, and every seen request's, `days` into the past."""
    with simstore.SimStore(path) as s:
        ids = s.snapshot()[0]
        with s.batch():
            for d in ids:
                s.touch(d, at=s.stored_at(d) - days * DAY)
        env = s._env
        with env.lock:
            lenv = env.live()
            names = [bytes(k) for k, _ in env.begin(False).cursor()]
            seen = [n for n in names if n.startswith(b"crawl.") and n.endswith(b".seen")]
            with lenv.begin(write=True) as txn:
                for name in seen:
                    db = lenv.open_db(name, txn=txn)
                    rows = [(bytes(k), int.from_bytes(v, "big")) for k, v in txn.cursor(db=db)]
                    for k, ms in rows:
                        txn.put(k, int(ms - days * DAY * 1000).to_bytes(8, "big"), db=db)


@pytest.mark.slow
@pytest.mark.parametrize("frontier", [False, True])
def test_a_killed_crawl_rerun_resumes_to_the_end(tmp_path, frontier):
    """SIGKILL mid-crawl, then the same crawl again: its start page and every page stored
    before the kill pass as unchanged (their links followed), so between the two runs every
    distinct page reaches the spider, and the rerun ends by itself with no near-duplicate
    of a page under its own URL."""
    site = Site(articles=30)
    store = tmp_path / "store"
    extra = SCHED if frontier else {}
    with serve(site, delay=0.01) as (url, srv):
        first = Crawler(tmp_path, "first", [url + "/"], store, CONCURRENT_REQUESTS=2, **extra)
        deadline = time.monotonic() + TIMEOUT
        while len(first.fetches(srv)) < 12:
            assert first.proc.poll() is None, first.output()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first.proc.send_signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        before = set(checked(first.pages()))
        assert before and before != site.distinct_ids()
        rerun = Crawler(tmp_path, "rerun", [url + "/"], store, **extra)
        assert rerun.wait() == 0, rerun.output()[-3000:]
    st = finished(rerun)
    got = set(checked(rerun.pages()))
    assert before | got == site.distinct_ids()
    if not frontier:  # the whole site again: what the first run kept is unchanged
        assert st["simstore/unchanged"] >= len(before & got) > 0
    assert "Near-duplicate page" not in rerun.output()  # (DEBUG is off: never logged)
    with simstore.SimStore(store) as s:
        assert len(s) == len(site.distinct_ids())
        assert s.verify() == []


@pytest.mark.slow
@pytest.mark.parametrize("frontier", [False, True])
def test_a_recrawl_40_days_later_keeps_the_changed_pages(tmp_path, frontier):
    """A crawl, its store aged 40 days, then a recrawl of the site's next edition with
    SIMSTORE_EXPIRE = 30d: every distinct page is fetched again; the edited articles are
    stored anew with their new text (changed, with the pages that show them), the others
    pass as unchanged; nothing is
    dropped as a duplicate of its own older version."""
    store = tmp_path / "store"
    extra = SCHED if frontier else {}
    first_site = Site(articles=12, variants=False)
    later = Site(articles=12, variants=False, edition=2)
    edited = {f"article-{a.n}" for a in later.items[::3]}
    with serve(first_site) as (url, srv):  # one server: the same URLs, two editions
        first = Crawler(tmp_path, "first", [url + "/"], store, **extra)
        assert first.wait() == 0, first.output()[-3000:]
        pages = set(checked(first.pages()))  # (a site without variants: no misc pages)
        assert {f"article-{a.n}" for a in first_site.items} <= pages
        age_store(store, 40)
        with srv.lock:
            srv.site, srv.log = later, []
        again = Crawler(tmp_path, "again", [url + "/"], store, SIMSTORE_EXPIRE="30d", **extra)
        assert again.wait() == 0, again.output()[-3000:]
        fetched = Counter(f.target for f in srv.log)
    st = finished(again)
    assert set(checked(again.pages())) == pages
    # (the start URL twice, as in any Scrapy crawl: its start request is not recorded seen)
    assert max(n for path, n in fetched.items() if path != "/") == 1
    # the edited articles changed, and the section pages that show their first lines
    assert len(edited) <= st["simstore/changed"] < len(pages)
    assert st["simstore/changed"] + st["simstore/unchanged"] == len(checked(again.pages()))
    assert st.get("simstore/near_duplicate", 0) == 0
    with simstore.SimStore(store) as s:
        assert len(s) == len(pages)
        article = later.items[0]
        text = " ".join(article.paras)
        hits = s.similar(s.signature(text), 0.8)
        assert any(h.doc_id.endswith(f"/article/{article.n}") for h in hits)
        now = time.time()
        assert all(now - 600 < s.stored_at(d) for d in s.snapshot()[0])
        if frontier:
            assert len(Frontier(s)) == 0
