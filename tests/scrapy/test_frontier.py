"""The crawl frontier in a store (simstore.store.frontier) against an in-memory model, its leases
on an injected clock, processes killed with SIGKILL, and the Scrapy components on top of it
(DupeFilter, Scheduler) without a crawl."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import simstore
from simstore.store.frontier import (
    FRONTIER_VERSION,
    META_DB,
    RECLAIM_EVERY,
    Frontier,
    key_priority,
    parse_lease,
    queue_key,
)

# --------------------------------------------------------------------------- the frontier


@pytest.fixture
def store(tmp_path):
    s = simstore.SimStore(tmp_path / "store", durable=False)
    yield s
    s.close()


class Clock:
    """A settable clock (seconds)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_queue_keys_sort_highest_priority_first_then_fifo():
    """Key order is priority descending, then sequence ascending, over the whole int64 range."""
    prios = [2**63 - 1, 10**12, 5, 1, 0, -1, -7, -(2**63)]
    keys = [queue_key(p, s) for p in prios for s in (1, 2, 2**40)]
    assert keys == sorted(keys)
    assert [key_priority(queue_key(p, 3)) for p in prios] == prios
    assert key_priority(queue_key(2**70, 1)) == 2**63 - 1  # clamped


def test_pop_order_and_the_seen_set(store):
    """Pops come by priority then first-in first-out; a seen fingerprint is not queued
    again unless only_new=False; seen_add_many says what was seen before."""
    f = Frontier(store)
    assert f.push(0, b"a", b"fa") and f.push(5, b"b", b"fb") and f.push(0, b"c")
    assert f.push(1, b"a again", b"fa") is None
    assert f.push(1, b"d", b"fa", only_new=False)
    assert f.seen_add_many([b"fb", b"new", b"new"]) == [True, False, True]
    assert f.seen_contains(b"new") and f.seen_count() == 3
    got = [f.pop(10, "me").payload for _ in range(4)]
    assert got == [b"b", b"d", b"a", b"c"] and f.pop(10, "me") is None


def test_lease_expiry_hands_a_request_out_again(store):
    """A lease not acknowledged by its deadline goes back to the queue (its old place) and is
    popped by another owner; the first owner's late ack then leaves the new lease alone;
    renew keeps a lease, release gives it back at once."""
    clock = Clock()
    f = Frontier(store, clock=clock)
    f.push(0, b"x")
    f.push(0, b"y")
    x = f.pop(5, "a")
    assert f.pending("a") == 1 and f.pending("b") == 2 and len(f) == 1
    clock.t += 4.5
    assert f.pop(5, "b").payload == b"y"
    clock.t += 0.5
    assert f.pop(5, "b") is None  # x's lease runs to its deadline, now, inclusive
    clock.t += 0.002
    again = f.pop(5, "b")
    assert again == x and f.reclaimed == 1
    assert f.ack([x.key], "a") == 0 and len(f.leases()) == 2
    f.renew([x.key], 100, "b")
    clock.t += 50
    assert f.pop(5, "c").payload == b"y" and f.reclaimed == 2  # y ran out, x was renewed
    assert f.release([x.key], "b") == 1
    assert [k for k, _, who in f.leases()] == [queue_key(0, 2)]


def test_an_ack_after_the_lease_ran_out_drops_the_requeued_entry(store):
    """A request whose lease ran out and went back to the queue, then acknowledged by its
    owner (the work was done), is not handed out again."""
    clock = Clock()
    f = Frontier(store, clock=clock)
    f.push(0, b"x")
    x = f.pop(1, "a")
    clock.t += 2
    assert f.reclaim() == 1 and len(f) == 1
    assert f.ack([x.key], "a") == 1 and len(f) == 0 and f.pop(1, "b") is None


def test_the_frontier_databases_and_version_record(store):
    """The frontier's databases are named crawl.*, hold the version record and records as
    docs/crawl.md says, and the store still verifies."""
    clock = Clock(1.5)
    f = Frontier(store, "jobs", clock=clock)
    f.push(3, b"payload", b"\x01" * 20)
    popped = f.pop(2, "owner-1")
    env = store._env.env
    with store._env.reading() as txn:
        names = sorted(bytes(k) for k, _ in txn.cursor() if bytes(k).startswith(b"crawl."))
        meta = env.open_db(META_DB, txn=txn, create=False)
        assert json.loads(txn.get(b"version", db=meta)) == {"frontier": FRONTIER_VERSION}
        assert int.from_bytes(txn.get(b"seq.jobs", db=meta), "big") == 1
        leases = env.open_db(b"crawl.jobs.leases", txn=txn, create=False)
        raw = txn.get(popped.key, db=leases)
    assert names == [b"crawl.jobs.leases", b"crawl.jobs.queue", b"crawl.jobs.seen", META_DB]
    assert popped.key == (2**63 - 1 - 3).to_bytes(8, "big") + (1).to_bytes(8, "big")
    assert raw == (3500).to_bytes(8, "big") + (7).to_bytes(2, "big") + b"owner-1" + b"payload"
    assert parse_lease(raw) == (3500, b"owner-1", b"payload")
    assert store.verify() == []


def test_frontiers_of_one_store_are_apart(store):
    """Two frontier names in one store share nothing: queue, leases and seen set."""
    a, b = Frontier(store, "a"), Frontier(store, "b")
    a.push(0, b"x", b"fp")
    assert b.push(0, b"y", b"fp") is not None
    assert (len(a), len(b)) == (1, 1) and a.pop(5, "o").payload == b"x"
    assert b.pending() == 1


def test_a_newer_frontier_version_is_refused(store):
    """A frontier whose version record says another version is refused, not read."""
    Frontier(store)

    def bump(txn):
        meta = store._env.env.open_db(META_DB, txn=txn)
        txn.put(b"version", b'{"frontier": 2}', db=meta)
    store._env.write(bump)
    with pytest.raises(simstore.FormatVersionError, match="version 2"):
        Frontier(store)


@pytest.mark.parametrize("name", ["", "a b", "x" * 41, "é", None])
def test_bad_frontier_names_are_refused(store, name):
    """A frontier name must be 1-40 letters, digits, '_' or '-'."""
    with pytest.raises(simstore.SimstoreValueError, match="frontier name"):
        Frontier(store, name)


class FrontierMachine(RuleBasedStateMachine):
    """Frontier vs a model (a dict queue, a dict of leases, a set, a clock); every answer is
    compared, including which entry each pop hands out."""

    @initialize()
    def open(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="simstore-frontier-")
        self.store = simstore.SimStore(f"{self.dir}/s", durable=False)
        self.clock = Clock(500.0)
        self.f = Frontier(self.store, clock=self.clock)
        self.queue: dict[bytes, tuple[int, int, bytes]] = {}  # key -> (priority, seq, payload)
        self.leases: dict[bytes, tuple[int, str, tuple[int, int, bytes]]] = {}
        self.seen: set[bytes] = set()
        self.seq = 0
        self.next_scan = 0.0
        self.keys: list[bytes] = []

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _now_ms(self) -> int:
        return int(self.clock.t * 1000)

    def _reclaim(self) -> int:
        now = self._now_ms()
        expired = [k for k, (deadline, _, _) in self.leases.items() if deadline < now]
        for k in expired:
            self.queue[k] = self.leases.pop(k)[2]
        return len(expired)

    @rule(priority=st.integers(-3, 3), payload=st.binary(max_size=8),
          fp=st.none() | st.sampled_from([b"f1", b"f2", b"f3", b"f4"]), only_new=st.booleans())
    def push(self, priority, payload, fp, only_new) -> None:
        key = self.f.push(priority, payload, fp, only_new=only_new)
        was_seen = fp is not None and fp in self.seen
        if fp is not None:
            self.seen.add(fp)
        if was_seen and only_new:
            assert key is None
            return
        self.seq += 1
        assert key is not None and key not in self.keys
        self.keys.append(key)
        self.queue[key] = (priority, self.seq, payload)

    @rule(owner=st.sampled_from(["a", "b"]), lease=st.sampled_from([0.5, 1.0, 3.0]))
    def pop(self, owner, lease) -> None:
        now = self.clock.t
        before = self.f.reclaimed
        got = self.f.pop(lease, owner)
        scan = now >= self.next_scan
        reclaimed = self._reclaim() if scan or not self.queue else 0
        if scan or reclaimed:
            self.next_scan = now + RECLAIM_EVERY
        assert self.f.reclaimed - before == reclaimed
        if not self.queue:
            assert got is None
            return
        key = min(self.queue, key=lambda k: (-self.queue[k][0], self.queue[k][1]))
        assert got is not None and got.key == key and got.payload == self.queue[key][2]
        self.leases[key] = (self._now_ms() + int(lease * 1000), owner, self.queue.pop(key))

    @precondition(lambda self: self.keys)
    @rule(owner=st.sampled_from(["a", "b"]), data=st.data())
    def ack(self, owner, data) -> None:
        key = data.draw(st.sampled_from(self.keys))
        n = self.f.ack([key], owner)
        if key in self.leases and self.leases[key][1] == owner:
            del self.leases[key]
            assert n == 1
        elif key in self.queue:
            del self.queue[key]
            assert n == 1
        else:
            assert n == 0

    @precondition(lambda self: self.keys)
    @rule(owner=st.sampled_from(["a", "b"]), data=st.data())
    def release(self, owner, data) -> None:
        key = data.draw(st.sampled_from(self.keys))
        mine = key in self.leases and self.leases[key][1] == owner
        assert self.f.release([key], owner) == mine
        if mine:
            self.queue[key] = self.leases.pop(key)[2]

    @precondition(lambda self: self.keys)
    @rule(owner=st.sampled_from(["a", "b"]), lease=st.sampled_from([1.0, 2.0]), data=st.data())
    def renew(self, owner, lease, data) -> None:
        key = data.draw(st.sampled_from(self.keys))
        mine = key in self.leases and self.leases[key][1] == owner
        assert self.f.renew([key], lease, owner) == mine
        if mine:
            self.leases[key] = (int((self.clock.t + lease) * 1000), owner, self.leases[key][2])

    @rule(fps=st.lists(st.sampled_from([b"f1", b"f2", b"f5"]), max_size=3))
    def seen_add_many(self, fps) -> None:
        want = []
        for fp in fps:
            want.append(fp in self.seen)
            self.seen.add(fp)
        assert self.f.seen_add_many(fps) == want

    @rule(dt=st.sampled_from([0.001, 0.25, 0.5, 1.0, 2.5]))
    def advance(self, dt) -> None:
        self.clock.t += dt

    @rule()
    def reclaim(self) -> None:
        assert self.f.reclaim() == self._reclaim()

    @invariant()
    def counts_agree(self) -> None:
        if not hasattr(self, "f"):
            return
        assert len(self.f) == len(self.queue)
        assert self.f.seen_count() == len(self.seen)
        for owner in ("a", "b"):
            others = sum(who != owner for _, who, _ in self.leases.values())
            assert self.f.pending(owner) == len(self.queue) + others
        assert [(k, d, w) for k, d, w in self.f.leases()] == sorted(
            (k, d, w) for k, (d, w, _) in self.leases.items())


TestFrontierModel = FrontierMachine.TestCase
TestFrontierModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- SIGKILL

_CHILD = r"""
import sys, time, simstore
from simstore.store.frontier import Frontier
s = simstore.SimStore(sys.argv[1], durable=False)
f = Frontier(s)
if sys.argv[2] == "push":
    i = 0
    while True:
        f.push(i % 3, b"item-%d" % i, b"fp-%d" % i)
        print(i, flush=True)
        i += 1
else:
    for _ in range(3):
        print(f.pop(float(sys.argv[3]), "child").payload.decode(), flush=True)
    time.sleep(600)
"""


def child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE,
                            text=True)


def test_a_push_returned_before_a_kill_is_kept(tmp_path):
    """A child pushing one request per commit is killed with SIGKILL mid-stream: every push
    it returned from is in the queue and the seen set, and the store verifies."""
    path = str(tmp_path / "store")
    simstore.SimStore(path).close()
    p = child(path, "push")
    done = [int(p.stdout.readline()) for _ in range(300)]
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    with simstore.SimStore(path) as s:
        f = Frontier(s)
        got = set()
        while (x := f.pop(60, "parent")) is not None:
            got.add(x.payload)
        assert {b"item-%d" % i for i in done} <= got
        assert f.seen_add_many([b"fp-%d" % i for i in done]) == [True] * len(done)
        assert s.verify() == []


def test_leases_of_a_killed_process_are_handed_out_again(tmp_path):
    """A child holding three leases is killed with SIGKILL: nothing else can take them until
    their deadline, then the next pop hands each out again, none lost, none twice."""
    path = str(tmp_path / "store")
    with simstore.SimStore(path) as s:
        Frontier(s).push_many([(0, b"r%d" % i, None, True) for i in range(5)])
    p = child(path, "pop", "30")
    held = {p.stdout.readline().strip().encode() for _ in range(3)}
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    clock = Clock(time.time())  # the child's leases run on the real clock
    with simstore.SimStore(path) as s:
        f = Frontier(s, clock=clock)
        first = {f.pop(10**7, "parent").payload for _ in range(2)}
        assert f.pop(60, "parent") is None and f.pending("parent") == 3
        clock.t += 10**6
        again = {f.pop(60, "parent").payload for _ in range(3)}
        assert f.pop(60, "parent") is None
    assert held == again and first | again == {b"r%d" % i for i in range(5)}


# --------------------------------------------------------------------------- Scrapy parts

scrapy = pytest.importorskip("scrapy")

from scrapy.http import Request  # noqa: E402
from scrapy.utils.test import get_crawler  # noqa: E402

from simstore.scrapy import DupeFilter, NearDuplicateMiddleware, Scheduler  # noqa: E402
from simstore.scrapy._scheduler import REFUSED, lease_setting  # noqa: E402


class Spider(scrapy.Spider):
    name = "t"

    def parse(self, response):
        pass


def crawler_of(tmp_path, **settings):
    return get_crawler(Spider, settings_dict={"SIMSTORE_PATH": str(tmp_path / "store"),
                                              **settings})


def test_dupefilter_is_rfpdupefilter_on_the_store(tmp_path, caplog):
    """DupeFilter filters as RFPDupeFilter does (same fingerprints), counts and logs the
    filtered requests, and a second instance (another process, a later run) sees them."""
    crawler = crawler_of(tmp_path)
    df = DupeFilter.from_crawler(crawler)
    r = Request("http://x/a?b=1&a=2")
    assert not df.request_seen(r) and df.request_seen(Request("http://x/a?a=2&b=1"))
    assert not df.request_seen(Request("http://x/a", method="POST"))
    caplog.set_level("DEBUG", logger="simstore.scrapy")
    df.log(r, Spider.from_crawler(crawler))
    df.log(r, Spider.from_crawler(crawler))
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    assert caplog.text.count("Filtered duplicate request") == 1
    df.close("finished")
    again = DupeFilter.from_crawler(crawler_of(tmp_path))
    assert again.request_seen(Request("http://x/a?b=1&a=2"))
    again.close("finished")


@pytest.mark.parametrize("raw,ok", [(None, 60.0), ("", 60.0), ("2.5", 2.5), (7, 7.0),
                                    ("0", None), ("-1", None), ("nan", None), ("inf", None),
                                    ("soon", None)])
def test_lease_setting(raw, ok):
    """SIMSTORE_LEASE: seconds > 0, default 60; anything else is refused naming it."""
    s = scrapy.settings.Settings({"SIMSTORE_LEASE": raw})
    if ok is None:
        with pytest.raises(simstore.SimstoreValueError, match="SIMSTORE_LEASE"):
            lease_setting(s)
    else:
        assert lease_setting(s) == ok


def test_a_refused_scheduler_closes_the_spider(tmp_path):
    """A bad setting gives a scheduler that closes the spider at open with a reason."""
    sched = Scheduler.from_crawler(crawler_of(tmp_path, SIMSTORE_LEASE="0"))
    with pytest.raises(scrapy.exceptions.CloseSpider) as err:
        sched.spider_opened()
    assert err.value.reason == REFUSED and not (tmp_path / "store").exists()


def engine_for(crawler):
    """The two things the Scheduler reads of Scrapy's engine: its in-progress set, its wake."""
    wakes = []
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(
        inprogress=set(), nextcall=SimpleNamespace(schedule=lambda: wakes.append(1))))
    return crawler.engine._slot, wakes


def test_scheduler_acknowledges_a_request_only_when_the_engine_is_done(tmp_path):
    """A dequeued request stays leased while the engine has it in progress; once out, the
    next pop acknowledges it in its transaction. Children enqueued meanwhile are queued."""
    crawler = crawler_of(tmp_path, SIMSTORE_LEASE=30)
    sched = Scheduler.from_crawler(crawler)
    slot, _ = engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    assert sched.enqueue_request(Request("http://x/1", priority=1))
    assert not sched.enqueue_request(Request("http://x/1"))
    assert sched.enqueue_request(Request("http://x/1", dont_filter=True))
    first = sched.next_request()
    slot.inprogress.add(first)
    assert first.url == "http://x/1" and first.priority == 1
    assert len(sched.frontier.leases()) == 1
    assert sched.enqueue_request(Request("http://x/child"))
    slot.inprogress.discard(first)
    second = sched.next_request()
    slot.inprogress.add(second)
    assert [who for _, _, who in sched.frontier.leases()] == [sched.owner]  # first acked
    assert len(sched) == 1 and sched.has_pending_requests()
    st = crawler.stats.get_stats()
    assert (st["simstore/frontier/enqueued"], st["simstore/frontier/filtered"],
            st["simstore/frontier/dequeued"]) == (3, 1, 2)
    sched.close("shutdown")  # second is still in progress: its lease goes back
    with simstore.SimStore(tmp_path / "store") as s:
        f = Frontier(s)
        assert (len(f), f.leases()) == (2, [])


def test_scheduler_keeps_unserializable_requests_in_memory(tmp_path):
    """A request whose callback is not a spider method stays in this process (counted), and
    comes out first; its fingerprint is still shared."""
    crawler = crawler_of(tmp_path)
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    assert sched.enqueue_request(Request("http://x/disk"))
    assert sched.enqueue_request(Request("http://x/mem", callback=lambda r: None))
    assert not sched.enqueue_request(Request("http://x/mem", callback=lambda r: None))
    assert len(sched) == 2 and len(sched.frontier) == 1
    assert [sched.next_request().url for _ in range(2)] == ["http://x/mem", "http://x/disk"]
    assert crawler.stats.get_value("simstore/frontier/unserializable") == 1
    sched.close("finished")


def test_scheduler_waits_for_work_other_processes_hold(tmp_path):
    """While another owner holds a lease, the scheduler has pending requests and keeps the
    spider open on idle; once that lease is acknowledged it lets the spider close."""
    crawler = crawler_of(tmp_path)
    sched = Scheduler.from_crawler(crawler)
    engine_for(crawler)
    sched.open(Spider.from_crawler(crawler))
    sched.enqueue_request(Request("http://x/1"))
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
    crawler = crawler_of(tmp_path)
    mw = NearDuplicateMiddleware.from_crawler(crawler)
    sched = Scheduler.from_crawler(crawler)
    assert sched.store is mw.gate.store
    mw.spider_closed()
    sched.open(Spider.from_crawler(crawler))
    sched.close("finished")
    with pytest.raises(simstore.StoreClosedError):
        len(mw.gate.store)
