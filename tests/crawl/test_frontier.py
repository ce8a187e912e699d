"""simstore.crawl.Frontier's known answers: a lease measured from after the write lock,
reclaim by deadline whatever the number of live leases, keys never reused across clear(),
and odd arguments refused by name before anything is written."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

import simstore
from simstore.crawl import DROPPED, Done, Frontier, Politeness, Push, Revisit
from simstore.exceptions import SimstoreError

from ..testlib import lmdb_env
from .clock import Clock

_HOLD = r"""
import sys, time, simstore
with simstore.SimStore(sys.argv[1], durable=False) as s:
    with s.batch():
        s.add("holder", 1)
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
"""


def test_a_take_that_waited_for_the_write_lock_gets_a_full_lease(tmp_path):
    """Issue 55 item 3: another process holds the write lock for 1 s; the take waits, and its
    lease's deadline is measured from after the wait (never born expired)."""
    path = str(tmp_path / "store")
    with simstore.SimStore(path, durable=False) as s:
        f = Frontier(s)
        f.push(0, b"r", host="a.example")
        holder = subprocess.Popen([sys.executable, "-c", _HOLD, path, "1.0"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        t0 = time.time()
        got = f.take(1, 2.0, "me")
        waited = time.time() - t0
        holder.wait(30)
        [(key, deadline_ms, owner)] = f.leases()
    assert got.popped[0].key == key and owner == "me"
    assert waited >= 0.8, "the take did not wait for the lock: the test proves nothing"
    assert deadline_ms / 1000 >= t0 + waited - 0.05 + 2.0


def test_an_expired_lease_behind_300_live_ones_is_reclaimed(store):
    """Issue 55 item 4: 300 live leases whose keys sort first do not hide an expired one:
    the next take moves it back and leases it again."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(concurrency=1000))
    f.push_many([Push(9, b"hi%d" % i, None, True, f"h{i % 7}.example") for i in range(300)])
    assert len(f.take(300, 3600, "alive").popped) == 300
    f.push(-5, b"low", host="a.example")
    [low] = f.take(1, 1.0, "killed").popped
    clock.t += 2
    taken = f.take(5, 60, "next")
    assert taken.reclaimed == 1 and [p.payload for p in taken.popped] == [b"low"]
    assert f.counts()["leased"] == 301 and low.key in {k for k, _, o in f.leases() if o == "next"}


def test_reclaim_is_bounded_and_oldest_first(store):
    """More than 256 expired leases come back 256 a call, the earliest deadline first, and
    every one within a few calls."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(concurrency=10_000))
    f.push_many([Push(0, b"%d" % i, None, True, "h.example") for i in range(600)])
    order = []
    for i in range(600):  # deadlines in reverse key order
        [p] = f.take(1, 600.0 - i * 0.5, "dead").popped
        order.append((600.0 - i * 0.5, p.key))
    clock.t += 10_000
    first = {k for _, k in sorted(order)[:256]}
    assert f.reclaim() == 256
    assert {k for k, _, _ in f.leases()}.isdisjoint(first)
    assert f.reclaim() == 256 and f.reclaim() == 88 and f.reclaim() == 0
    assert len(f) == 600


def test_clear_never_reuses_keys_and_a_late_ack_keeps_the_new_crawl(store):
    """Issue 55 item 5: after clear() the keys go on growing, and the old holder's late ack
    of its key deletes nothing of the new crawl."""
    f = Frontier(store)
    old = f.push_many([Push(0, b"old%d" % i, None, True, "a.example") for i in range(3)])
    held = f.take(3, 60, "old-holder").popped
    f.clear()
    new = f.push_many([Push(0, b"new%d" % i, None, True, "a.example") for i in range(3)])
    assert not set(old) & set(new) and min(new) > max(old)
    assert f.ack([p.key for p in held], "old-holder") == 0
    assert f.release([p.key for p in held], "old-holder") == 0
    assert len(f) == 3 and f.pending() == 3


def test_clear_keeps_each_hosts_next_allowed_time(store):
    """A host asked just before clear() is not asked again before its delay is over: the
    host is the same web server whichever crawl asks it."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(delay=5.0, margin=0.0))
    f.push(0, b"a", host="a.example")
    assert f.take(1, 60, "p").popped
    f.clear()
    f.push(0, b"b", host="a.example")
    assert f.take(1, 60, "p").popped == []


def test_a_hosts_delay_comes_back_to_its_crawl_delay_after_a_429(store):
    """A 429 doubles a host's delay; each answer after it takes a tenth of what was added
    away, so the delay comes back to the robots.txt Crawl-delay, never below it."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(margin=0.0, robots=True))
    f.robots_read("a.example", 0.2)
    f.throttle("a.example", 1.0)

    def delay() -> float:
        return next(h["delay"] for h in f.hosts() if h["host"] == "a.example")

    assert delay() == 0.4 and f.hosts()[0]["crawl_delay"] == 0.2
    extra = 200
    for i in range(30):
        f.push(0, b"p%d" % i, host="a.example")
        clock.t += 2.0
        got = f.take(1, 60, "p").popped
        assert got
        f.ack([Done(got[0].key, 200)], "p")
        extra = int(extra * 0.9)
        assert delay() == (200 + extra) / 1000
    assert 0.2 < delay() < 0.21
    f.throttle("a.example", None, 503)  # a new episode doubles what is in force
    assert delay() == 2 * (200 + extra) / 1000


def test_a_host_that_gives_no_answer_backs_off_then_is_given_up(store):
    """Downloads that get no answer block their host for every process: 2 s, 4 s, ... an
    episode (failures while it is blocked are the same one), one request at a time; at
    max_failures episodes in a row its queue is dropped and so is what is queued for it
    until the block ends. An answer ends the count."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(margin=0.0, max_failures=3))
    f.push(0, b"a0", host="a.example")
    for i in range(6):
        f.push(0, b"b%d" % i, host="b.example")

    def row(host: str) -> dict:
        return next(h for h in f.hosts() if h["host"] == host)

    got = f.take(3, 60, "p").popped
    assert [p.payload for p in got] == [b"a0", b"b0", b"b1"]
    assert f.failed("b.example") == (2.0, None)
    clock.t += 0.5
    assert f.failed("b.example") == (1.5, None)  # in flight together: the same episode
    assert row("b.example")["failures"] == 1
    f.ack([Done(p.key, 0) for p in got], "p")
    assert f.take(5, 60, "p").popped == []  # blocked
    clock.t += 1.5
    got = f.take(5, 60, "p").popped
    assert [p.payload for p in got] == [b"b2"]  # one at a time while it fails
    assert f.failed("b.example") == (4.0, None)
    f.ack([Done(got[0].key, 0)], "p")
    clock.t += 4.0
    got = f.take(5, 60, "p").popped
    assert [p.payload for p in got] == [b"b3"]
    assert f.failed("b.example") == (600.0, 2)  # the third episode: given up, b4 b5 dropped
    f.ack([Done(got[0].key, 0)], "p")
    r = row("b.example")
    assert (r["queued"], r["failures"], r["down"]) == (0, 3, True)
    assert f.push(0, b"b6", host="b.example") == DROPPED  # dropped while given up
    assert f.push(0, b"a1", host="a.example") is not None
    clock.t += 600.0
    key = f.push(0, b"b7", host="b.example")
    assert key is not None
    got = f.take(5, 60, "p").popped
    assert sorted(p.payload for p in got) == [b"a1", b"b7"]
    f.ack([Done(p.key, 200) for p in got], "p")  # it answers: counted from zero again
    r = row("b.example")
    assert (r["failures"], r["down"], r["fetched"]) == (0, False, 1)
    assert f.failed("b.example") == (2.0, None)


def test_a_revisit_that_gets_no_answer_stays_due_after_its_interval(store):
    """A URL due again whose download gets no answer (Done status NO_ANSWER) is due again one
    interval later; a request dropped with no outcome (status None) leaves the schedule."""
    clock = Clock()
    f = Frontier(store, clock=clock, revisit=Revisit(60, 600))
    for fp in (b"u1", b"u2"):
        f.push(0, b"p" + fp, fp, host="a.example")
    got = f.take(2, 30, "p").popped
    f.ack([Done(p.key, 200, b"u" + p.payload[-1:], digest=1) for p in got], "p")
    assert f.counts()["due"] == 2
    clock.t += 61
    assert f.queue_due() == 2 and f.counts()["due"] == 0
    got = sorted(f.take(2, 30, "p").popped, key=lambda p: p.payload)
    f.ack([Done(got[0].key, 0, b"u1"), Done(got[1].key, None, b"u2")], "p")
    assert f.counts()["due"] == 1
    clock.t += 59
    assert f.queue_due() == 0
    clock.t += 2
    assert f.queue_due() == 1
    assert [p.payload for p in f.take(2, 30, "p").popped] == [b"pu1"]


def test_a_304_counts_as_unchanged_and_a_revisit_goes_out_as_its_answer_asked(store):
    """Known answers of conditional revisits: a 304 (Not Modified) doubles the interval and
    keeps the digest of the page as last fetched (so a later 200 with the old text is
    unchanged too); ``Done.again`` is the payload the URL is queued with when due, and a
    Done without it keeps the payload the request was taken with."""
    clock = Clock()
    f = Frontier(store, clock=clock, revisit=Revisit(60, 6000))

    def fetch(status, **kw):
        [p] = f.take(1, 30, "p").popped
        f.ack([Done(p.key, status, b"u", **kw)], "p")
        return p.payload

    def due_after(seconds):
        clock.t += seconds - 1
        assert f.queue_due() == 0  # not yet
        clock.t += 1
        assert f.queue_due() == 1

    f.push(0, b"plain", b"u", host="a.example")
    assert fetch(200, digest=7, again=b"if-none-match 1") == b"plain"
    due_after(60)  # the first interval: the minimum
    assert fetch(304, digest=99) == b"if-none-match 1"  # the digest of an empty body: unused
    due_after(120)  # unchanged: doubled
    assert fetch(200, digest=7, again=b"if-none-match 2") == b"if-none-match 1"
    due_after(240)  # the digest kept through the 304 still matches: unchanged again
    assert fetch(200, digest=8) == b"if-none-match 2"
    due_after(120)  # changed: halved, and with no `again` the payload taken is kept
    assert fetch(304) == b"if-none-match 2"
    due_after(240)


def test_processes_taking_together_share_a_host_and_one_alone_takes_it_all(store):
    """One process alone may hold concurrency + solo_prefetch of a host; once another
    takes too, the host may have concurrency + prefetch in flight, each process half of
    it: the first takes nothing more until it is under its share, the second gets what
    the host has room for; when the second has not taken for TAKER_MS, the first may
    fill the host again."""
    clock = Clock()
    f = Frontier(store, clock=clock,
                 politeness=Politeness(concurrency=4, prefetch=0, solo_prefetch=4))
    f.push_many([Push(0, b"%d" % i, None, True, "a.example") for i in range(40)])
    first = f.take(10, 60, "p1").popped
    assert len(first) == 8  # alone: concurrency 4 + solo_prefetch 4
    assert f.take(10, 60, "p2").popped == []  # the host is full; p2 now takes too
    clock.t += 0.1
    # p1's downloads of 5 are over: it holds 3, over its share of 2, and takes none
    got = f.take(10, 60, "p1", downloaded=[p.key for p in first[:5]])
    assert got.popped == [] and not got.more and got.takers == 2
    assert len(f.take(10, 60, "p2").popped) == 1  # the host at 4 in flight (3 + 1)
    got = f.take(10, 60, "p1", downloaded=[p.key for p in first[5:7]])
    assert len(got.popped) == 1 and not got.more  # p1 back to its share of 2
    got = f.take(10, 60, "p2")
    assert len(got.popped) == 1 and not got.more  # p2 at its share too: 2 + 2
    clock.t += 6  # p2 takes no more: p1 is alone again
    got = f.take(10, 60, "p1")
    assert len(got.popped) == 4 and got.takers == 1  # up to 8 in flight on the host


def test_a_process_notes_its_take_once_a_second(store):
    """A take rewrites its owner's record only when the one stored is a second old (a
    page less for most takes to flush): a process counts among those taking for 4 to 5 s
    after its last take, and a take a second on keeps it counted."""
    clock = Clock()
    f = Frontier(store, clock=clock)
    f.push_many([Push(0, b"%d" % i, None, True, f"h{i}.example") for i in range(40)])
    assert f.take(1, 60, "p1").takers == 1  # noted at 0
    clock.t += 0.5
    assert f.take(1, 60, "p1").takers == 1  # not noted: 0 stays
    clock.t += 4.7  # 5.2 s after p1's note, 4.7 s after its last take
    assert f.take(1, 60, "p2").takers == 1
    assert f.take(1, 60, "p1").takers == 2  # noted at 5.2, p2 at 5.2
    for _ in range(8):  # p1 takes every 0.9 s, noted every other take: counted all along
        clock.t += 0.9
        f.take(1, 60, "p1")
        assert f.take(1, 60, "p2").takers == 2
    clock.t -= 3600  # a clock gone back an hour: p1's note is rewritten, not kept ahead
    f.take(1, 60, "p1")
    clock.t += 5.1
    assert f.take(1, 60, "p2").takers == 1


@pytest.mark.parametrize("takers,downloads,share", [(1, 8, 16), (2, 4, 6), (3, 2, 4),
                                                     (4, 2, 3), (9, 1, 2), (20, 1, 1)])
def test_a_hosts_limits_split_among_the_processes_taking(takers, downloads, share):
    """concurrency 8, prefetch 4, solo_prefetch 8: each of n processes downloads 8 // n
    (at least 1: together never more than 8 while n <= 8) and may hold ceil(12 / n)
    taken; one alone holds 16."""
    p = Politeness(concurrency=8, prefetch=4, solo_prefetch=8)
    assert p.downloads(takers) == downloads and p.share(takers) == share
    assert takers > 8 or takers * p.downloads(takers) <= 8


def test_a_process_at_its_share_of_one_host_takes_from_the_next(store):
    """A host a process holds its share of is passed over, not waited on: the take goes
    on to the next host with work, in the hosts' order."""
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(concurrency=4, prefetch=0))
    f.push_many([Push(0, b"a%d" % i, None, True, "a.example") for i in range(6)]
                + [Push(0, b"b%d" % i, None, True, "b.example") for i in range(6)])
    f.take(1, 60, "p2")  # a second process taking: the share is 2 a host
    got = f.take(8, 60, "p1")
    # a.example still has a free slot (3 of 4 in flight), but p1 holds its share of it
    assert [p.host for p in got.popped] == ["a.example"] * 2 + ["b.example"] * 2
    assert not got.more
    assert [p.host for p in f.take(8, 60, "p2").popped] == ["a.example"] + ["b.example"] * 2


def test_a_robots_txt_is_kept_for_every_process_while_young_enough(store):
    """robots_read with an origin keeps the answer (its first 512 KiB) with the host's
    delay, in one commit; robots_txt gives it back while it is younger than max_age,
    per origin (scheme, host and port), and a later answer replaces it."""
    clock = Clock()
    f = Frontier(store, clock=clock)
    assert f.robots_txt("http://a.example", 3600) is None
    f.robots_read("a.example", 2.0, origin="http://a.example", status=200,
                  body=b"User-agent: *\nCrawl-delay: 2\n")
    assert f.robots_txt("http://a.example", 3600) == (200, b"User-agent: *\nCrawl-delay: 2\n")
    assert f.robots_txt("https://a.example", 3600) is None
    assert f.robots_txt("http://a.example:8080", 3600) is None
    clock.t += 3601
    assert f.robots_txt("http://a.example", 3600) is None  # too old: fetch it again
    f.robots_read("a.example", None, origin="http://a.example", status=404, body=b"x" * (1 << 20))
    assert f.robots_txt("http://a.example", 3600) == (404, b"x" * (512 * 1024))
    f.robots_read("b.example", 1.0)  # no origin: nothing kept
    assert f.robots_txt("http://b.example", 3600) is None


# --- odd arguments (issue 55 item 10) ---------------------------------------------------

def _txnid(store) -> int:
    return lmdb_env(store).info()["last_txnid"]


ODD = {  # case -> (call on a Frontier, the argument the error names)
    "priority NaN": (lambda f: f.push(math.nan, b"p"), "priority"),
    "priority inf": (lambda f: f.push(math.inf, b"p"), "priority"),
    "priority str": (lambda f: f.push("x", b"p"), "priority"),
    "payload str": (lambda f: f.push(0, "p"), "payload"),
    "host int": (lambda f: f.push(0, b"p", host=5), "host"),
    "fp int 2**40": (lambda f: f.push(0, b"p", 2**40), "fp"),
    "fp 0 bytes": (lambda f: f.push(0, b"p", b""), "fp"),
    "fp 512 bytes": (lambda f: f.push(0, b"p", b"x" * 512), "fp"),
    "push_many one bad": (lambda f: f.push_many([Push(0, b"ok"), Push(0, b"p", b"")]), "fp"),
    "seen fp 0 bytes": (lambda f: f.seen_add_many([b"ok", b""]), "fp"),
    "lease inf": (lambda f: f.take(1, math.inf, "o"), "lease_seconds"),
    "lease NaN": (lambda f: f.take(1, math.nan, "o"), "lease_seconds"),
    "lease 0": (lambda f: f.take(1, 0, "o"), "lease_seconds"),
    "lease -1": (lambda f: f.take(1, -1, "o"), "lease_seconds"),
    "lease str": (lambda f: f.take(1, "60", "o"), "lease_seconds"),
    "renew lease inf": (lambda f: f.renew([b"k" * 24], math.inf, "o"), "lease_seconds"),
    "n -1": (lambda f: f.take(-1, 60, "o"), "'n'"),
    "n True": (lambda f: f.take(True, 60, "o"), "'n'"),
    "owner None": (lambda f: f.take(1, 60, None), "owner"),
    "owner empty": (lambda f: f.take(1, 60, ""), "owner"),
    "owner surrogate": (lambda f: f.take(1, 60, "\ud800"), "owner"),
    "ack owner None": (lambda f: f.ack([b"k" * 24], None), "owner"),
    "take bad push": (lambda f: f.take(1, 60, "o", push=[Push(0, b"p", b"")]), "fp"),
    "ack key str": (lambda f: f.ack(["k"], "o"), "key"),
    "release key int": (lambda f: f.release([5], "o"), "key"),
    "throttle retry_after str": (lambda f: f.throttle("a.example", "x"), "retry_after"),
    "throttle host int": (lambda f: f.throttle(5, 1.0), "host"),
    "robots host None": (lambda f: f.robots_read(None, 1.0), "host"),
    "robots origin int": (lambda f: f.robots_read("a", 1.0, origin=5), "origin"),
    "robots status 1000": (lambda f: f.robots_read("a", 1.0, origin="http://a", status=1000),
                           "status"),
    "robots body str": (lambda f: f.robots_read("a", 1.0, origin="http://a", body="x"), "body"),
    "robots_txt origin None": (lambda f: f.robots_txt(None, 60), "origin"),
    "robots_txt max_age 0": (lambda f: f.robots_txt("http://a", 0), "max_age"),
    "pause host int": (lambda f: f.pause(5), "host"),
    "drop_host int": (lambda f: f.drop_host(5), "host"),
    "queue_due limit str": (lambda f: f.queue_due("x"), "limit"),
    "ack again str": (lambda f: f.ack([Done(b"k" * 24, 200, again="p")], "o"), "again"),
}


@pytest.mark.parametrize("case", list(ODD))
def test_an_odd_argument_is_refused_by_name_before_any_write(store, case):
    """Each odd argument raises a SimstoreError naming it, and the store is not written."""
    call, name = ODD[case]
    f = Frontier(store, clock=Clock())
    f.push(0, b"there", b"fp0", host="a.example")
    before, counts = _txnid(store), f.counts()
    with pytest.raises(SimstoreError, match=name):
        call(f)
    assert _txnid(store) == before and f.counts() == counts


def test_a_revisit_digest_out_of_range_is_refused_before_any_write(store):
    """A Done whose digest is not a 64-bit unsigned int is a SimstoreError naming 'digest'
    (never a struct.error from inside the transaction)."""
    f = Frontier(store, clock=Clock(), revisit=Revisit(60, 600))
    f.push(0, b"p", b"fp", host="a.example")
    [p] = f.take(1, 60, "o").popped
    before = _txnid(store)
    for digest in (2**64, -1, "x"):
        with pytest.raises(SimstoreError, match="digest"):
            f.ack([Done(p.key, 200, fp=b"fp", digest=digest)], "o")
    assert _txnid(store) == before and f.counts()["leased"] == 1


@pytest.mark.parametrize("expire,ok", [(math.inf, True), (math.nan, False), (0, False),
                                       (-1, False), ("1d", False), (True, False)])
def test_expire_inf_means_forever_and_nan_is_refused(store, expire, ok):
    """expire=inf is accepted and means a fingerprint never expires; NaN, 0, -1, a str or a
    bool are a SimstoreError naming 'expire'."""
    if not ok:
        with pytest.raises(SimstoreError, match="expire"):
            Frontier(store, expire=expire)
        return
    clock = Clock()
    f = Frontier(store, clock=clock, expire=expire)
    f.seen_add_many([b"fp"])
    clock.t += 1e9
    assert f.seen_contains(b"fp")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, "now", None])
def test_a_clock_that_is_not_a_time_is_refused_before_any_write(store, value):
    """A clock returning NaN, inf, a negative number or a non-number makes every write a
    SimstoreError naming the clock, and nothing is written."""
    good = Frontier(store)
    good.push(0, b"p", host="a.example")
    f = Frontier(store, clock=lambda: value)
    before = _txnid(store)
    for call in (lambda: f.take(1, 60, "o"), lambda: f.push(0, b"q")):
        with pytest.raises(SimstoreError, match="clock"):
            call()
    assert _txnid(store) == before and len(good) == 1
