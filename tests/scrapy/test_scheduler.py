"""The Scrapy components on the store's crawl frontier (DupeFilter, Scheduler) without a
crawl: a fake engine slot, the frontier read back. The frontier itself is tested in
tests/crawl/."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore.crawl import Frontier

scrapy = pytest.importorskip("scrapy")

from scrapy.core.downloader import Slot  # noqa: E402
from scrapy.http import Request  # noqa: E402

from simstore.scrapy import DupeFilter, NearDuplicateMiddleware, Scheduler  # noqa: E402
from simstore.scrapy._settings import (  # noqa: E402
    crawl_settings,
    lease_setting,
    politeness_setting,
    refusal,
)
from tests.scrapy.crawlers import Spider, crawler_of  # noqa: E402


def test_dupefilter_is_rfpdupefilter_on_the_store(tmp_path, caplog):
    """DupeFilter is an RFPDupeFilter (same fingerprints, its log and count of the
    filtered requests), and a second instance (another process, a later run) sees them."""
    crawler = crawler_of(tmp_path / "store")
    df = DupeFilter.from_crawler(crawler)
    assert isinstance(df, scrapy.dupefilters.RFPDupeFilter)
    r = Request("http://x/a?b=1&a=2")
    assert not df.request_seen(r) and df.request_seen(Request("http://x/a?a=2&b=1"))
    assert not df.request_seen(Request("http://x/a", method="POST"))
    caplog.set_level("DEBUG", logger="scrapy.dupefilters")  # RFPDupeFilter's own log
    df.log(r, Spider.from_crawler(crawler))
    df.log(r, Spider.from_crawler(crawler))
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    assert caplog.text.count("Filtered duplicate request") == 1
    df.close("finished")
    again = DupeFilter.from_crawler(crawler_of(tmp_path / "store"))
    assert again.request_seen(Request("http://x/a?b=1&a=2"))
    again.close("finished")


@pytest.mark.parametrize("raw,ok", [(None, 60.0), ("", 60.0), ("2.5", 2.5), (7, 7.0),
                                    ("1", 1.0), ("86400", 86400.0), ("0", None), ("-1", None),
                                    ("nan", None), ("inf", None), ("soon", None),
                                    ("1e-9", None), ("0.5", None), ("1e300", None)])
def test_lease_setting(raw, ok):
    """SIMSTORE_LEASE: seconds from 1 to 86400, default 60; anything else (a lease that
    would refetch a site many times, one that overflows a deadline) is refused naming it."""
    s = scrapy.settings.Settings({"SIMSTORE_LEASE": raw})
    if ok is None:
        with pytest.raises(simstore.SimstoreValueError, match="SIMSTORE_LEASE"):
            lease_setting(s)
    else:
        assert lease_setting(s) == ok


_READ = [  # (setting, CrawlSettings attribute, raw value or None for unset, value or None)
    *[("SIMSTORE_ROBOTS_MAX_AGE", "robots_max_age", raw, ok) for raw, ok in [
        (None, 86400.0), ("12h", 43200.0), ("0", 0.0), ("banana", None), ("-1d", None)]],
    *[("SIMSTORE_REVISIT_CONDITIONAL", "conditional", raw, ok) for raw, ok in [
        (None, True), ("False", False), ("0", False), (True, True), ("maybe", None),
        ("2", None)]],
]


@pytest.mark.parametrize("name,attr,raw,ok", _READ)
def test_a_crawl_setting_is_read_or_refused_by_name(name, attr, raw, ok):
    """SIMSTORE_ROBOTS_MAX_AGE: an age (default 1 day, 0: a robots.txt is never shared);
    SIMSTORE_REVISIT_CONDITIONAL: a flag, on by default. Anything else is refused naming
    the setting."""
    s = scrapy.settings.Settings({"SIMSTORE_PATH": "/nowhere/store"}
                                | ({} if raw is None else {name: raw}))
    if ok is None:
        with pytest.raises(simstore.SimstoreValueError, match=name):
            crawl_settings(s, "Scheduler")
    else:
        assert getattr(crawl_settings(s, "Scheduler"), attr) == ok


def test_a_refused_scheduler_touches_no_store(tmp_path):
    """A bad setting refuses the crawl: the scheduler gives nothing and creates no store."""
    crawler = crawler_of(tmp_path / "store", SIMSTORE_LEASE="0")
    sched = Scheduler.from_crawler(crawler)
    assert "SIMSTORE_LEASE" in str(refusal(crawler))
    assert sched.next_request() is None and not sched.has_pending_requests()
    assert not (tmp_path / "store").exists()


def test_a_refusal_elsewhere_leaves_the_frontier_as_it_was(tmp_path):
    """A middleware refused before the scheduler is built: the scheduler opens no store, so
    a queued frontier keeps every request."""
    with simstore.SimStore(tmp_path / "store") as s:
        Frontier(s).push_many([(0, b"\x02{}", b"fp%d" % i, True, "x") for i in range(3)])
    crawler = crawler_of(tmp_path / "store", SIMSTORE_MODE="Log",
                         DOWNLOADER_MIDDLEWARES={"simstore.scrapy.NearDuplicateMiddleware": 575})
    assert isinstance(NearDuplicateMiddleware.from_crawler(crawler),
                      simstore.scrapy._crawler.Refused)
    sched = Scheduler.from_crawler(crawler)
    assert sched.next_request() is None
    with simstore.SimStore(tmp_path / "store") as s:
        assert len(Frontier(s)) == 3


_ODD = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(),
                 st.text(max_size=8), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.one_of(
    _ODD, st.fixed_dictionaries({}, optional={"delay": _ODD, "concurrency": _ODD,
                                              "randomize_delay": _ODD}))))
def test_download_slots_become_host_rules_or_a_refusal_naming_them(slots):
    """Any DOWNLOAD_SLOTS: each entry's delay (seconds >= 0) and concurrency (an int >= 1)
    become its host's rule, as given (a number written as text too); anything else is a
    SimstoreValueError naming DOWNLOAD_SLOTS, never another exception."""
    s = scrapy.settings.Settings({"DOWNLOAD_SLOTS": slots})
    try:
        rules = politeness_setting(s).hosts
    except simstore.SimstoreValueError as exc:
        assert "DOWNLOAD_SLOTS" in str(exc)
        return
    assert set(rules) == {k.lower() for k in slots}
    for name, entry in slots.items():
        if name != name.lower() and name.lower() in slots:
            continue  # the entry in lower case wins, as Scrapy's slots match it
        delay = float(entry["delay"]) if entry.get("delay") is not None else None
        assert rules[name.lower()].delay == delay


@pytest.mark.parametrize("raw", [{"AUTOTHROTTLE_TARGET_CONCURRENCY": "nan"},
                                 {"AUTOTHROTTLE_START_DELAY": "-0.5"},
                                 {"AUTOTHROTTLE_MAX_DELAY": "0"},
                                 {"AUTOTHROTTLE_ENABLED": "sometimes"}])
def test_odd_autothrottle_settings_are_refused_by_name(raw):
    s = scrapy.settings.Settings({"AUTOTHROTTLE_ENABLED": True, **raw})
    with pytest.raises(simstore.SimstoreValueError, match=next(iter(raw))):
        politeness_setting(s)


def engine_for(crawler):
    """The two things the Scheduler reads of Scrapy's engine: its in-progress set, its wake."""
    wakes = []
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(
        inprogress=set(), nextcall=SimpleNamespace(schedule=lambda: wakes.append(1))))
    return crawler.engine._slot, wakes


def opened(tmp_path, slots=None, **settings):
    """A Scheduler opened on a store of tmp_path with these settings, under a fake engine
    whose downloader has ``slots``: (crawler, scheduler, engine slot, spider)."""
    crawler = crawler_of(tmp_path / "store", **settings)
    sched = Scheduler.from_crawler(crawler)
    slot, _ = engine_for(crawler)
    crawler.engine.downloader = SimpleNamespace(active=set(), slots={} if slots is None
                                                else slots)
    spider = Spider.from_crawler(crawler)
    sched.open(spider)
    return crawler, sched, slot, spider


def hand_all(sched, slot, handed: list[str]) -> list[str]:
    """Take every request the Scheduler hands out now (each stays in progress); their
    host names appended to handed."""
    while (r := sched.next_request()) is not None:
        slot.inprogress.add(r)
        handed.append(r.url.split("/")[2])
    return handed


def test_scheduler_acknowledges_a_request_only_when_the_engine_is_done(tmp_path):
    """A dequeued request stays leased while the engine has it in progress; once out, the
    next pop acknowledges it in its transaction. Children enqueued meanwhile are queued."""
    crawler = crawler_of(tmp_path / "store", SIMSTORE_LEASE=30)
    sched = Scheduler.from_crawler(crawler)
    slot, _ = engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    assert sched.enqueue_request(Request("http://x/1", priority=1))
    assert sched.enqueue_request(Request("http://x/1"))  # filtered when written
    assert sched.enqueue_request(Request("http://x/1", dont_filter=True))
    first = sched.next_request()
    slot.inprogress.add(first)
    assert first.url == "http://x/1" and first.priority == 1
    assert len(sched.frontier.leases()) == 2  # both taken in one commit: there is room
    assert sched.enqueue_request(Request("http://x/child"))
    slot.inprogress.discard(first)
    second = sched.next_request()
    slot.inprogress.add(second)
    third = sched.next_request()  # one commit: the child written, the first acked, a take
    slot.inprogress.add(third)
    assert (second.url, third.url) == ("http://x/1", "http://x/child")
    assert len(sched.frontier.leases()) == 2 and len(sched.frontier) == 0
    assert not sched.has_pending_requests()
    st = crawler.stats.get_stats()
    assert (st["simstore/frontier/enqueued"], st["simstore/frontier/filtered"],
            st["simstore/frontier/dequeued"]) == (3, 1, 3)
    sched.close("shutdown")  # second and third are still in progress: their leases go back
    with simstore.SimStore(tmp_path / "store") as s:
        f = Frontier(s)
        assert (len(f), f.leases()) == (2, [])


def test_scheduler_takes_a_batch_ahead_of_the_free_slots(tmp_path):
    """With every download slot busy, the Scheduler holds a batch (a quarter of
    CONCURRENT_REQUESTS) taken ahead: a slot freed gets a request at once, with no commit
    awaited, and nothing is acknowledged before the engine is done with it."""
    crawler = crawler_of(tmp_path / "store", SIMSTORE_LEASE=30, CONCURRENT_REQUESTS=8)
    sched = Scheduler.from_crawler(crawler)
    slot, _ = engine_for(crawler)
    active: set = set()
    crawler.engine.downloader = SimpleNamespace(active=active)
    sched.open(Spider.from_crawler(crawler))
    for i in range(40):  # one host each: no host's limit binds
        assert sched.enqueue_request(Request(f"http://h{i}.example/"))
    out = []
    for _ in range(8):
        r = sched.next_request()
        slot.inprogress.add(r)
        active.add(r)
        out.append(r)
    stats = crawler.stats.get_stats()
    commits = stats["simstore/frontier/commits"]
    assert len(sched.frontier.leases()) == 8 + 2  # the 8 downloading and 2 ahead
    done = out.pop(0)
    active.discard(done)
    slot.inprogress.discard(done)
    nxt = sched.next_request()  # one of the two ahead: handed out without a commit
    assert nxt is not None and nxt not in out
    assert crawler.stats.get_value("simstore/frontier/commits") == commits
    slot.inprogress.add(nxt)
    active.add(nxt)
    # 8 downloading, 1 still ahead, and the one done, leased until a commit acknowledges it
    assert len(sched.frontier.leases()) == 8 + 1 + 1
    sched.close("shutdown")
    with simstore.SimStore(tmp_path / "store") as s:
        f = Frontier(s)
        assert (len(f), f.leases()) == (40 - 1, [])  # all back but the one done


@pytest.mark.parametrize("how", ["429", "no answer"])
def test_a_blocked_hosts_requests_taken_ahead_go_back_to_the_frontier(tmp_path, how):
    """Requests of a host taken ahead and not yet handed out go back to the queue when the
    host is blocked (a 429 with Retry-After, a download with no answer): handed out, they
    would leave inside the block. The other hosts' stay."""
    from scrapy.exceptions import DownloadConnectionRefusedError
    from scrapy.http import Response

    crawler = crawler_of(tmp_path / "store", SIMSTORE_LEASE=30, CONCURRENT_REQUESTS=8,
                         CONCURRENT_REQUESTS_PER_DOMAIN=2)
    sched = Scheduler.from_crawler(crawler)
    slot, _ = engine_for(crawler)
    crawler.engine.downloader = SimpleNamespace(active=set())
    spider = Spider.from_crawler(crawler)
    sched.open(spider)
    for i in range(10):
        assert sched.enqueue_request(Request(f"http://a.example/{i}"))
    assert sched.enqueue_request(Request("http://b.example/0"))
    first = sched.next_request()
    assert first.url == "http://a.example/0"
    slot.inprogress.add(first)
    ahead = [r for r in sched._ready if "a.example" in r.url]
    assert ahead  # taken ahead of its download slots
    if how == "429":
        sched._downloaded(Response(first.url, status=429, headers={"Retry-After": "30"}),
                          first, spider)
    else:
        try:
            raise DownloadConnectionRefusedError("refused")
        except DownloadConnectionRefusedError:
            sched._left(first, spider)  # as Scrapy's downloader sends it: in its `finally`
    assert [r.url for r in sched._ready if "a.example" in r.url] == []
    assert sched.frontier.hosts()[0]["blocked_until"] is not None
    leased = {k for k, _, _ in sched.frontier.leases()}
    assert len(leased) == len(sched._held)  # only what this process still holds
    assert crawler.stats.get_value("simstore/frontier/given_back") == len(ahead)
    nxt = sched.next_request()  # a.example waits out its block; b.example goes
    assert nxt is not None and nxt.url == "http://b.example/0"
    sched.close("shutdown")
    with simstore.SimStore(tmp_path / "store") as s:
        f = Frontier(s)
        # b.example's request done (not in progress), the rest back: the first too
        assert len(f) == 11 - 1 and f.leases() == []


def test_links_to_a_given_up_host_are_counted_as_dropped_not_as_duplicates(tmp_path):
    """While a host is given up, a request for it is dropped by the frontier: counted in
    simstore/hosts/given_up_requests, not in simstore/frontier/filtered (nor logged as a
    duplicate); other hosts' requests are queued as usual."""
    crawler = crawler_of(tmp_path / "store", SIMSTORE_HOST_MAX_FAILURES=1)
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    crawler.engine.downloader = SimpleNamespace(active=set())
    sched.open(Spider.from_crawler(crawler))
    assert sched.frontier.failed("dead.example")[1] == 0  # given up at its first episode
    for i in range(3):
        assert sched.enqueue_request(Request(f"http://dead.example/{i}"))
    assert sched.enqueue_request(Request("http://live.example/"))
    assert sched.enqueue_request(Request("http://live.example/"))  # a duplicate
    assert sched.next_request().url == "http://live.example/"
    st = crawler.stats.get_stats()
    assert (st["simstore/hosts/given_up_requests"], st["simstore/frontier/filtered"],
            st["simstore/frontier/enqueued"]) == (3, 1, 1)
    sched.close("shutdown")

def test_scheduler_keeps_unserializable_requests_in_memory(tmp_path):
    """A request whose callback is not a spider method stays in this process (counted); its
    fingerprint is still shared, so a copy of it is filtered."""
    crawler = crawler_of(tmp_path / "store")
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    assert sched.enqueue_request(Request("http://x/disk"))
    assert sched.enqueue_request(Request("http://x/mem", callback=lambda r: None))
    assert sched.enqueue_request(Request("http://x/mem", callback=lambda r: None))
    assert len(sched) == 3 and len(sched.frontier) == 0  # none written yet
    assert sorted(sched.next_request().url for _ in range(2)) == ["http://x/disk",
                                                                   "http://x/mem"]
    assert sched.next_request() is None
    st = crawler.stats.get_stats()
    assert (st["simstore/frontier/unserializable"], st["simstore/frontier/filtered"]) == (1, 1)
    assert sched.frontier.seen_many([sched.df.fingerprint(Request("http://x/mem"))]) == [True]
    sched.close("finished")


def test_scheduler_waits_for_work_other_processes_hold(tmp_path):
    """While another owner holds a lease, the scheduler has pending requests and keeps the
    spider open on idle; once that lease is acknowledged it lets the spider close."""
    crawler = crawler_of(tmp_path / "store")
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    sched.enqueue_request(Request("http://x/1"))
    sched._flush(0)  # written
    other = sched.frontier.pop(30, "another process")
    assert sched.next_request() is None and sched.has_pending_requests()
    with pytest.raises(scrapy.exceptions.DontCloseSpider):
        sched._idle()
    sched.frontier.ack([other.key], "another process")
    assert not sched.has_pending_requests()
    sched._idle()
    sched.close("finished")


def test_scheduler_and_middleware_share_the_store_handle(tmp_path):
    """In one process the scheduler takes the middleware's open store (LMDB allows one
    handle), and the store closes when both let go."""
    crawler = crawler_of(tmp_path / "store")
    mw = NearDuplicateMiddleware.from_crawler(crawler)
    sched = Scheduler.from_crawler(crawler)
    assert sched.store is mw.gate.store
    mw.spider_closed()
    sched.open(Spider.from_crawler(crawler))
    sched.close("finished")
    with pytest.raises(simstore.StoreClosedError):
        len(mw.gate.store)


def test_a_wait_on_other_processes_leases_is_explained(tmp_path, caplog, monkeypatch):
    """Nothing to take while another process holds leases: one INFO line names the owner,
    how many it holds and how old the oldest is (issue 55 item 14)."""
    monkeypatch.setattr(simstore.scrapy._scheduler, "WAIT_QUIET", 0.0)
    crawler = crawler_of(tmp_path / "store")
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    sched.enqueue_request(Request("http://x/1"))
    sched._flush(0)
    sched.frontier.pop(30, "host/4242/dead")
    caplog.set_level("INFO", logger="simstore.scrapy")
    assert sched.next_request() is None
    waits = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(waits) == 1 and "1 requests leased by host/4242/dead" in waits[0]
    sched.close("shutdown")


def test_a_rerun_with_nothing_to_do_says_so(tmp_path, caplog):
    """A finished crawl run again: its start request is seen, nothing is taken, and closing
    says the crawl in this store is done and how to fetch again."""
    for run in range(2):
        crawler = crawler_of(tmp_path / "store")
        sched = Scheduler.from_crawler(crawler)
        slot, _ = engine_for(crawler)
        sched.open(Spider.from_crawler(crawler))
        sched.enqueue_request(Request("http://x/", meta={"is_start_request": True},
                                      dont_filter=True))
        if run == 0:
            slot.inprogress.add(sched.next_request())
            slot.inprogress.clear()
        else:
            caplog.set_level("INFO", logger="simstore.scrapy")
            assert sched.next_request() is None
        sched.close("finished")
    assert "the crawl in this store is done" in caplog.text


@pytest.mark.parametrize("meta,learnt", [
    ({"download_latency": 0.3}, 2.65),  # (5 + 0.3) / 2, Scrapy's rule from the start delay
    ({"download_latency": 0.3, "autothrottle_dont_adjust_delay": True}, 5.0),
    ({}, 5.0),  # no latency measured
    ({"download_latency": "0.3"}, 5.0),  # not a number: not learnt from, no error
])
def test_with_autothrottle_a_hosts_delay_is_learnt_from_the_answers(tmp_path, meta, learnt):
    """AUTOTHROTTLE_ENABLED: the latency Scrapy measured for an answer goes to the
    frontier with its acknowledgement, unless its meta says not to learn from it; and
    this process's download slot keeps DOWNLOAD_DELAY (Scrapy's extension set 5 s), so a
    request leaves when the frontier lets it go."""
    download_slot = Slot(8, 5.0, 0.0)  # as Scrapy's AutoThrottle makes it: the start delay
    crawler, sched, slot, spider = opened(tmp_path, {"x": download_slot},
                                          AUTOTHROTTLE_ENABLED=True, DOWNLOAD_DELAY=0.25)
    assert sched.enqueue_request(Request("http://x/1"))
    request = sched.next_request()
    slot.inprogress.add(request)
    request.meta.update(meta, download_slot="x")
    crawler.signals.send_catch_log(scrapy.signals.request_reached_downloader,
                                   request=request, spider=spider)
    assert download_slot.delay == 0.25
    download_slot.delay = 4.0  # what Scrapy's AutoThrottle sets on an answer
    response = scrapy.http.HtmlResponse(request.url, body=b"<html></html>", request=request)
    crawler.signals.send_catch_log(scrapy.signals.response_downloaded, response=response,
                                   request=request, spider=spider)
    assert download_slot.delay == 0.25
    crawler.signals.send_catch_log(scrapy.signals.response_received, response=response,
                                   request=request, spider=spider)
    slot.inprogress.discard(request)
    sched._tick()  # the acknowledgement's commit
    assert sched.frontier.hosts()[0]["delay"] == learnt
    sched.close("finished")


def test_download_slots_give_a_host_its_own_concurrency_in_this_process_too(tmp_path):
    """DOWNLOAD_SLOTS {"x": {"concurrency": 1}}: the frontier lets x have one request in
    flight, and the Scheduler hands this process one of x's at a time, while a host
    without an entry gets the crawl's 4 at once."""
    _, sched, slot, _ = opened(tmp_path, CONCURRENT_REQUESTS_PER_DOMAIN=4,
                               DOWNLOAD_SLOTS={"x": {"concurrency": 1, "delay": 0}})
    for i in range(6):
        assert sched.enqueue_request(Request(f"http://x/{i}"))
        assert sched.enqueue_request(Request(f"http://y/{i}"))
    handed = hand_all(sched, slot, [])
    assert handed.count("x") == 1 and handed.count("y") == 4, handed
    sched.close("shutdown")


def test_with_autothrottle_a_slot_keeps_the_crawl_delay_read_here(tmp_path, monkeypatch):
    """A robots.txt's Crawl-delay read in this process stays its download slot's floor
    (the request that made Scrapy fetch robots.txt waits it), while the delays Scrapy's
    AutoThrottle sets are taken back; the floors kept stay bounded."""
    from simstore.scrapy import _scheduler

    slots = {"x": Slot(8, 5.0, 0.5)}
    crawler, sched, _, spider = opened(tmp_path, slots, AUTOTHROTTLE_ENABLED=True,
                                       ROBOTSTXT_OBEY=True)
    robots = Request("http://x/robots.txt", meta={"download_slot": "x"})
    answer = scrapy.http.TextResponse(robots.url, body=b"User-agent: *\nCrawl-delay: 0.4\n",
                                      request=robots)
    crawler.signals.send_catch_log(scrapy.signals.response_downloaded, response=answer,
                                   request=robots, spider=spider)
    page = Request("http://x/1", meta={"download_slot": "x"})
    slots["x"].delay = 3.0  # AutoThrottle's
    crawler.signals.send_catch_log(scrapy.signals.request_reached_downloader,
                                   request=page, spider=spider)
    assert slots["x"].delay == 0.4 and slots["x"].jitter == 0.0
    monkeypatch.setattr(_scheduler, "KEPT", 8)
    for i in range(40):
        sched._note_crawl_delay(f"h{i}", 1.0)
    assert len(sched._crawl_delays) <= 8 and "h39" in sched._crawl_delays
    sched.close("finished")


def test_per_ip_groups_the_host_names_of_one_address(tmp_path, monkeypatch):
    """CONCURRENT_REQUESTS_PER_IP = 2: two host names Scrapy's DNS cache resolved to one
    address are one host in the frontier (one queue, one limit: 2 downloads at once
    between them); a name not resolved yet stays a host of its own, as in Scrapy's slots."""
    from scrapy.resolver import dnscache

    monkeypatch.setitem(dnscache, "a.example", "10.0.0.1")
    monkeypatch.setitem(dnscache, "b.example", "10.0.0.1")
    _, sched, slot, _ = opened(tmp_path, CONCURRENT_REQUESTS_PER_IP=2)
    for i in range(4):
        for name in ("a", "b", "c"):
            assert sched.enqueue_request(Request(f"http://{name}.example/{i}"))
    handed = hand_all(sched, slot, [])
    assert sum(h != "c.example" for h in handed) == 2, handed
    assert handed.count("c.example") == 2, handed
    rows = {h["host"]: h for h in sched.frontier.hosts()}
    assert set(rows) == {"10.0.0.1", "c.example"}
    assert rows["10.0.0.1"]["queued"] + rows["10.0.0.1"]["in_flight"] == 8
    sched.close("shutdown")


def test_a_spiders_own_download_slot_is_one_host_in_the_frontier(tmp_path):
    """Requests of two host names under one ``meta["download_slot"]`` are one host in the
    frontier, as in Scrapy's own slots: a robots.txt read for one of the names gives the
    slot its Crawl-delay (and lets it go past one request at a time), and DOWNLOAD_SLOTS's
    concurrency 1 for the slot holds for both names, where a host without an entry gets
    the crawl's."""
    crawler, sched, slot, spider = opened(tmp_path, ROBOTSTXT_OBEY=True,
                                          DOWNLOAD_SLOTS={"site": {"concurrency": 1}})
    for i in range(3):
        for name in ("a", "b"):
            assert sched.enqueue_request(Request(f"http://{name}.example/{i}",
                                                 meta={"download_slot": "site"}))
        assert sched.enqueue_request(Request(f"http://c.example/{i}"))
    handed = hand_all(sched, slot, [])  # one of each: no robots.txt read yet
    for name in ("a", "c"):
        robots = Request(f"http://{name}.example/robots.txt")
        answer = scrapy.http.TextResponse(robots.url, request=robots,
                                          body=b"User-agent: *\nCrawl-delay: 0\n")
        crawler.signals.send_catch_log(scrapy.signals.response_downloaded, response=answer,
                                       request=robots, spider=spider)
    sched._tick()  # the next look: the robots.txt answers let hosts go
    hand_all(sched, slot, handed)
    assert sum(h != "c.example" for h in handed) == 1 and handed.count("c.example") == 3
    rows = {h["host"]: h for h in sched.frontier.hosts()}
    assert set(rows) == {"site", "c.example", "a.example"}
    assert rows["site"]["crawl_delay"] == 0.0  # read: not None
    assert rows["site"]["queued"] + rows["site"]["in_flight"] == 6
    sched.close("shutdown")


def _answer(crawler, sched, slot, spider, status: int, headers: dict, meta: dict
            ) -> list[str]:
    """Hand out the one request due, answer it (meta: what a middleware noted on it),
    acknowledge it; the validators it asked with (If-None-Match, If-Modified-Since)."""
    request = sched.next_request()
    slot.inprogress.add(request)
    request.meta.update(meta)
    asked = [request.headers.get(h, b"").decode() for h in ("If-None-Match",
                                                            "If-Modified-Since")]
    response = scrapy.http.HtmlResponse(request.url, status=status, headers=headers,
                                        body=b"<html>same</html>", request=request)
    crawler.signals.send_catch_log(scrapy.signals.response_received, response=response,
                                   request=request, spider=spider)
    slot.inprogress.discard(request)
    sched._tick()  # the acknowledgement's commit
    return asked


@pytest.mark.parametrize("conditional", [True, False])
def test_a_revisit_asks_with_the_validators_of_the_last_answer(tmp_path, conditional):
    """SIMSTORE_REVISIT: a page answered with an ETag and a Last-Modified is revisited as
    a conditional GET carrying them (If-None-Match, If-Modified-Since); an answer 304 is
    counted (simstore/frontier/not_modified) and keeps them, unless the middleware found
    the page gone from the store (meta simstore_refetch: asked whole next time); an
    answer without validators drops them. SIMSTORE_REVISIT_CONDITIONAL = False asks
    plainly every time."""
    etag, modified = '"v1"', "Mon, 02 Jan 2026 10:00:00 GMT"
    validators = {"ETag": etag, "Last-Modified": modified}
    run = {"SIMSTORE_REVISIT": "adaptive", "SIMSTORE_REVISIT_MIN": "0.1",
           "SIMSTORE_REVISIT_CONDITIONAL": conditional}
    refetch = {"simstore_refetch": True}
    asks = []
    for i, (status, headers, meta) in enumerate([
            (200, validators, {}), (304, {}, refetch), (200, validators, {}),
            (304, {"ETag": etag}, {}), (200, {}, {})]):
        if i:
            time.sleep(0.1 * 2 ** (i - 1) + 0.05)  # due again: each answer is unchanged
        crawler, sched, slot, spider = opened(tmp_path, **run)
        if not asks:
            assert sched.enqueue_request(Request("http://x/1"))
        asks.append(_answer(crawler, sched, slot, spider, status, headers, meta))
        counted = crawler.stats.get_value("simstore/frontier/not_modified", 0)
        assert counted == (status == 304)
        sched.close("finished")
    plain, both = ["", ""], [etag, modified]
    assert asks == ([plain, both, plain, both, both] if conditional else [plain] * 5)
