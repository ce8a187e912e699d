"""A host's own politeness (Scrapy's DOWNLOAD_SLOTS): its delay and concurrency held by
the frontier for every process, the other hosts left at the crawl's."""

from __future__ import annotations

import pytest

from simstore.crawl import AutoThrottle, Done, Frontier, HostRule, Politeness, Push
from simstore.exceptions import SimstoreError

from .clock import Clock

SLOW, FAST = "slow.example", "fast.example"


def _frontier(store, clock, **kw) -> Frontier:
    rules = {"Slow.Example": HostRule(delay=2.0, concurrency=1)}  # any case
    return Frontier(store, clock=clock, politeness=Politeness(
        delay=0.5, concurrency=4, prefetch=0, solo_prefetch=0, margin=0.0, hosts=rules,
        **kw))


def _fill(f: Frontier) -> None:
    f.push_many([Push(0, b"s%d" % i, None, True, SLOW) for i in range(10)]
                + [Push(0, b"f%d" % i, None, True, FAST) for i in range(10)])


def test_a_host_with_its_own_rule_keeps_its_delay_and_the_others_the_crawls(store):
    clock = Clock()
    f = _frontier(store, clock)
    _fill(f)
    t0 = clock.t
    got = f.take(10, 60, "p1").popped
    assert sorted(p.host for p in got) == [FAST, SLOW]  # one start of each, then delays
    f.ack([Done(p.key, 200) for p in got], "p1")
    clock.t = t0 + 0.5
    assert [p.host for p in f.take(10, 60, "p2").popped] == [FAST]  # the crawl's 0.5 s
    clock.t = t0 + 1.99
    assert [p.host for p in f.take(10, 60, "p1").popped] == [FAST]
    clock.t = t0 + 2.0
    assert [p.host for p in f.take(10, 60, "p2").popped] == [SLOW]  # its own 2 s
    rows = {h["host"]: h for h in f.hosts()}
    assert (rows[SLOW]["delay"], rows[FAST]["delay"]) == (2.0, 0.5)


def test_a_host_with_its_own_concurrency_has_that_many_in_flight_across_processes(store):
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(
        concurrency=4, prefetch=0, hosts={SLOW: HostRule(concurrency=1)}))
    _fill(f)
    got = f.take(10, 60, "p1").popped
    assert [p.host for p in got].count(SLOW) == 1 and [p.host for p in got].count(FAST) == 4
    assert f.take(10, 60, "p2").popped == []  # both at their limits, whoever asks
    slow = next(p for p in got if p.host == SLOW)
    f.take(0, 60, "p1", downloaded=[slow.key])  # its download is over: its slot is free
    assert [p.host for p in f.take(10, 60, "p2").popped] == [SLOW]


def test_per_host_limits_split_among_processes_as_the_crawls_do():
    """A host's own concurrency scales what a process may hold of it: half of it more
    taken ahead among several processes, and for one alone what the crawl allows beyond
    the crawl's concurrency."""
    p = Politeness(concurrency=8, prefetch=4, solo_prefetch=8, hosts={SLOW: HostRule(None, 2)})
    own = p.for_host(SLOW.upper())
    assert (own.concurrency, own.prefetch, own.solo_prefetch) == (2, 1, 14)
    assert (own.host_limit, own.shared_limit, own.share(2), own.downloads(2)) == (16, 3, 2, 1)
    assert p.for_host(FAST) is p and own.delay == p.delay


def test_autothrottle_floors_a_host_at_its_own_delay(store):
    clock = Clock()
    f = _frontier(store, clock, auto=AutoThrottle(start=0.0))
    f.push(0, b"s", host=SLOW)
    got = f.take(1, 60, "p").popped
    f.ack([Done(got[0].key, 200, latency=0.01)], "p")
    assert next(h["delay"] for h in f.hosts() if h["host"] == SLOW) == 2.0


@pytest.mark.parametrize("kw", [{"delay": -1.0}, {"delay": float("nan")}, {"concurrency": 0},
                                {"concurrency": 1.5}, {"concurrency": True}, {"delay": "2"}])
def test_an_odd_host_rule_is_refused(kw):
    with pytest.raises(SimstoreError):
        HostRule(**kw)


@pytest.mark.parametrize("hosts", [{5: HostRule()}, {"a": (1.0, 1)}, [("a", HostRule())]])
def test_odd_hosts_are_refused(hosts):
    with pytest.raises(SimstoreError, match="hosts"):
        Politeness(hosts=hosts)


def test_a_name_in_lower_case_wins_over_the_same_name_in_another_case():
    """Host names reach the frontier (and Scrapy's slots) in lower case: of two rules for
    one name, the one written in lower case is the rule, in either order."""
    for rules in ({"a.example": HostRule(1.0), "A.Example": HostRule(2.0)},
                  {"A.Example": HostRule(2.0), "a.example": HostRule(1.0)}):
        p = Politeness(hosts=rules)
        assert p.hosts == {"a.example": HostRule(1.0)} and p.for_host("A.EXAMPLE").delay == 1.0
    assert Politeness(hosts={"A.Example": HostRule(2.0)}).for_host("a.example").delay == 2.0
