"""Real crawls by ``scrapy runspider`` processes sharing one store's crawl frontier
(``SCHEDULER = "simstore.scrapy.Scheduler"``) on a local site (127.0.0.1 only): from one
start URL they fetch every page once between them, and a crawler killed with SIGKILL
loses no page, to the others or to a rerun."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("scrapy")

import simstore  # noqa: E402
from simstore.crawl import Frontier  # noqa: E402
from tools.crawl.site import Site, serve  # noqa: E402

from .crawlers import TIMEOUT, Crawler  # noqa: E402

SCHED = {"SCHEDULER": "simstore.scrapy.Scheduler", "SIMSTORE_LEASE": 3}


def site_paths(site: Site) -> set[str]:
    """Every page of a site without variants: home, sections, articles."""
    return ({"/"} | {f"/section/{s}" for s in site.sections()}
            | {f"/article/{a.n}" for a in site.items})


def crawlers(tmp: Path, url: str, n: int, store: Path, prefix: str = "c",
             **settings: object) -> list[Crawler]:
    """n crawlers of the same start URL on one store's frontier."""
    return [Crawler(tmp, f"{prefix}{i}", [url + "/"], None, SIMSTORE_PATH=store,
                    **{**SCHED, **settings}) for i in range(n)]


def release_when_ready(hold: threading.Event, cs: list[Crawler]) -> None:
    """Let the site answer once every crawler's spider is built (or one died)."""
    deadline = time.monotonic() + TIMEOUT
    while not all(c.ready() for c in cs):
        assert all(c.proc.poll() is None for c in cs), cs[0].output()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    hold.set()


def fetched(srv, agents: set[str] | None = None) -> Counter:
    """Fetches per path (of the given agents)."""
    with srv.lock:
        return Counter(f.target for f in srv.log if agents is None or f.agent in agents)


def finished(c: Crawler) -> dict:
    st = c.stats()
    assert st["finish_reason"] == "finished", c.output()[-3000:]
    assert "log_count/ERROR" not in st, c.output()[-3000:]
    return st


def crawl_together(tmp: Path, n: int, articles: int, **settings: object) -> None:
    site = Site(articles=articles, variants=False)
    hold = threading.Event()
    with serve(site, delay=0.01, hold=hold) as (url, srv):
        cs = crawlers(tmp, url, n, tmp / "store", CONCURRENT_REQUESTS=4,
                      CONCURRENT_REQUESTS_PER_DOMAIN=16, **settings)  # a host's, all processes
        release_when_ready(hold, cs)
        assert [c.wait() for c in cs] == [0] * n
        count = fetched(srv)
        per_agent = Counter(f.agent for f in srv.log)
    assert set(count) == site_paths(site)
    assert [p for p, k in count.items() if k > 1] == []
    assert len(per_agent) == n  # every crawler took a share
    stats = [finished(c) for c in cs]
    assert sum(st["simstore/frontier/dequeued"] for st in stats) == len(count)
    assert sum(st.get("simstore/frontier/enqueued", 0) for st in stats) == len(count)


@pytest.mark.parametrize("reactor", [None, "twisted.internet.selectreactor.SelectReactor"])
def test_two_crawlers_from_one_start_url_fetch_each_page_once(tmp_path, reactor):
    """Two crawlers with the same start URL on one store finish the site between them, each
    page fetched once overall (the server's log), each crawler fetching a share; on
    asyncio's reactor and on a plain Twisted one."""
    crawl_together(tmp_path, 2, 120, **({"TWISTED_REACTOR": reactor} if reactor else {}))


@pytest.mark.slow
def test_four_crawlers_from_one_start_url_fetch_each_page_once(tmp_path):
    """Four crawlers with the same start URL on one store: every page fetched once overall."""
    crawl_together(tmp_path, 4, 200)


def test_one_crawler_commits_once_for_several_pages(tmp_path):
    """One crawler of a one-host site at Scrapy's default concurrency: every page once, in
    at most one commit per 2 pages (children, acknowledgements, freed slots and takes of
    several pages share one; one commit a page before the host's limit held takes back),
    never more than CONCURRENT_REQUESTS_PER_DOMAIN downloads of the host at once."""
    site = Site(articles=200, variants=False)
    hold = threading.Event()
    with serve(site, delay=0.01, hold=hold) as (url, srv):
        cs = crawlers(tmp_path, url, 1, tmp_path / "store")
        release_when_ready(hold, cs)
        assert cs[0].wait() == 0
        count = fetched(srv)
    assert set(count) == site_paths(site) and max(count.values()) == 1
    st = finished(cs[0])
    assert 0 < st["simstore/frontier/commits"] <= len(count) / 2, st
    # CONCURRENT_REQUESTS_PER_DOMAIN (8) holds though it takes up to 16 of the host:
    # Scrapy's slot alone would start all it is given on the asyncio reactor
    assert srv.most_busy <= 8, srv.most_busy


def test_crawlers_on_one_host_at_scrapys_defaults_share_it(tmp_path):
    """Three crawlers of a one-host site at Scrapy's default concurrency (16 a process, 8 a
    host): the host's slots are shared, not kept by the process that frees them (each
    takes its share of concurrency + prefetch), so each process makes >= 15 % of the
    requests; the host answers at most 8 at once once they all take (each process
    downloads its part of them, rounded down), 12 while they join; every page is
    fetched once."""
    site = Site(articles=240, variants=False)
    hold = threading.Event()
    with serve(site, delay=0.03, hold=hold) as (url, srv):
        cs = crawlers(tmp_path, url, 3, tmp_path / "store")
        release_when_ready(hold, cs)
        assert [c.wait() for c in cs] == [0] * 3
        count = fetched(srv)
        per_agent = Counter(f.agent for f in srv.log)
    assert set(count) == site_paths(site) and max(count.values()) == 1
    shares = {c.agent: per_agent[c.agent] / sum(per_agent.values()) for c in cs}
    assert min(shares.values()) >= 0.15, shares
    # once they take together each downloads 8 // 3 = 2 at once; at most 12 (8 and the
    # prefetch of 4) while a process that was alone lets go of what it held
    assert srv.most_busy <= 12, srv.most_busy
    later = srv.busy_log[len(srv.busy_log) // 5:]
    assert max(later) <= 8, (max(later), srv.busy_log)


def kill_when_busy(victim: Crawler, srv, pages: int) -> None:
    """SIGKILL the crawler once it has fetched `pages` pages (so it holds leases)."""
    deadline = time.monotonic() + TIMEOUT
    while len(fetched(srv, {victim.agent})) < pages:
        assert victim.proc.poll() is None, victim.output()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL


@pytest.mark.slow
def test_a_crawler_killed_mid_crawl_loses_no_page(tmp_path):
    """SIGKILL of one of three crawlers mid-crawl: the others still fetch every page of the
    site, taking back the killed one's leased requests when their leases run out; only
    those can be fetched twice."""
    site = Site(articles=150, variants=False)
    hold = threading.Event()
    with serve(site, delay=0.05, hold=hold) as (url, srv):
        cs = crawlers(tmp_path, url, 3, tmp_path / "store", CONCURRENT_REQUESTS=4)
        release_when_ready(hold, cs)
        kill_when_busy(cs[0], srv, 10)
        with simstore.SimStore(tmp_path / "store", durable=False) as s:
            held = [k for k, _, owner in Frontier(s).leases() if f"/{cs[0].proc.pid}/" in owner]
        assert [c.wait() for c in cs[1:]] == [0, 0]
        count = fetched(srv)
        twice = {p for p, k in count.items() if k > 1}
    assert set(count) == site_paths(site)
    assert len(twice) <= len(held)
    assert all(count[p] == 2 for p in twice)
    stats = [finished(c) for c in cs[1:]]
    assert sum(st.get("simstore/frontier/reclaimed", 0) for st in stats) == len(held) > 0


@pytest.mark.slow
def test_a_killed_crawl_rerun_alone_finishes_the_site(tmp_path):
    """A lone crawler killed mid-crawl, run again on the same store with the same start URL:
    the rerun resumes the frontier (its start URL is filtered as seen) and fetches the rest
    of the site; only the killed run's leased requests are fetched twice."""
    site = Site(articles=100, variants=False)
    store = tmp_path / "store"
    with serve(site, delay=0.05) as (url, srv):
        first = crawlers(tmp_path, url, 1, store, prefix="first", CONCURRENT_REQUESTS=4)[0]
        kill_when_busy(first, srv, 20)
        before = fetched(srv)
        with simstore.SimStore(store, durable=False) as s:
            queued, held = len(Frontier(s)), len(Frontier(s).leases())
        assert queued > 0 and held > 0
        again = crawlers(tmp_path, url, 1, store, prefix="again")[0]
        assert again.wait() == 0
        count = fetched(srv)
        rerun = fetched(srv, {again.agent})
    assert set(count) == site_paths(site) and set(before) < set(count)
    assert "/" not in rerun
    assert sum(k > 1 for k in count.values()) <= held
    st = finished(again)
    assert st["simstore/frontier/reclaimed"] == held
    assert st["dupefilter/filtered"] >= 1
    with simstore.SimStore(store, durable=False) as s:
        assert (len(Frontier(s)), Frontier(s).leases()) == (0, [])
        assert s.verify() == []


def test_the_frontier_and_the_middleware_share_one_store_handle(tmp_path):
    """Scheduler and NearDuplicateMiddleware on one store path in one process (one LMDB
    handle, shared): the full site with its copies and traps ends by itself, each distinct
    page kept once, no request fetched twice."""
    site = Site(articles=12)
    with serve(site) as (url, srv):
        c = Crawler(tmp_path, "both", [url + "/"], tmp_path / "store", **SCHED)
        assert c.wait() == 0, c.output()[-3000:]
        count = fetched(srv)
    st = finished(c)
    assert st["simstore/new"] == len(site.distinct_ids())
    assert max(count.values()) == 1
    assert st["simstore/frontier/dequeued"] == sum(count.values())


@pytest.mark.parametrize("lease", ["0", "soon"])
def test_a_bad_lease_stops_the_crawl_at_start_with_one_line(tmp_path, lease):
    """SIMSTORE_LEASE <= 0 or not a number: the crawl closes at start (finish reason
    simstore_refused, exit code 1) with one ERROR line naming the setting, and fetches
    nothing."""
    site = Site(articles=3, variants=False)
    with serve(site) as (url, srv):
        c = crawlers(tmp_path, url, 1, tmp_path / "store", SIMSTORE_LEASE=lease)[0]
        assert c.wait() == 1
        assert fetched(srv) == Counter()
    lines = [ln for ln in c.output().splitlines() if "SIMSTORE_LEASE" in ln]
    assert len(lines) == 1 and "ERROR" in lines[0], c.output()[-3000:]
    assert "Traceback" not in c.output()
    assert c.stats()["finish_reason"] == "simstore_refused"


@pytest.mark.slow
def test_per_ip_counts_two_names_of_one_address_as_one_host(tmp_path):
    """CONCURRENT_REQUESTS_PER_IP: localhost and 127.0.0.1 name one server. Once Scrapy's
    DNS cache has localhost's address, the links found under it are queued under that
    address: one host in the frontier (its first request leaves before the lookup, as in
    Scrapy's own slots). Without the setting they are two hosts."""
    site = Site(articles=12, variants=False)
    with serve(site) as (url, srv):
        port = url.rsplit(":", 1)[1]
        starts = [f"http://localhost:{port}/", f"http://127.0.0.1:{port}/"]
        fetched_by: dict[str, dict[str, int]] = {}
        for per_ip in (1, 0):
            store = tmp_path / f"store{per_ip}"
            c = Crawler(tmp_path, f"ip{per_ip}", starts, None, SIMSTORE_PATH=store,
                        CONCURRENT_REQUESTS_PER_IP=per_ip, **SCHED)
            assert c.wait() == 0, c.output()[-3000:]
            finished(c)
            with simstore.SimStore(store) as s:
                fetched_by[f"ip{per_ip}"] = {h["host"]: h["fetched"] for h in Frontier(s).hosts()}
    grouped, named = fetched_by["ip1"], fetched_by["ip0"]
    assert grouped.get("localhost", 0) <= 2 and grouped["127.0.0.1"] > 2 * len(site.items)
    assert named["localhost"] > len(site.items) and named["127.0.0.1"] > len(site.items)
