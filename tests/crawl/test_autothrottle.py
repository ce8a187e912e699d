"""AutoThrottle in the frontier: a host's delay learnt from the latencies every process
sees, by Scrapy's rule (its own extension is the oracle), and held for all of them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from simstore.crawl import AutoThrottle, Done, Frontier, Politeness
from simstore.exceptions import SimstoreError

from .clock import Clock

HOST = "a.example"


def _frontier(store, clock, **kw) -> Frontier:
    auto = AutoThrottle(**{"target": 1.0, "start": 5.0, "max": 60.0, **kw.pop("auto", {})})
    return Frontier(store, clock=clock, politeness=Politeness(margin=0.0, auto=auto, **kw))


def _delay(f: Frontier) -> float:
    return next(h["delay"] for h in f.hosts() if h["host"] == HOST)


def _answer(f: Frontier, clock: Clock, latency: float | None, status: int = 200,
            owner: str = "p") -> None:
    """Take the host's next request (at its next allowed time) and acknowledge it."""
    f.push(0, b"x%d" % clock.ms, host=HOST)
    wake = f.next_wake()
    if wake is not None and wake > clock.t:
        clock.t = wake
    got = f.take(1, 60, owner).popped
    assert got, "the host's request could not be taken at its next allowed time"
    f.ack([Done(got[0].key, status, latency=latency)], owner)


# --- the rule, against Scrapy's own AutoThrottle ----------------------------------------------


@pytest.mark.parametrize("delay_ms,latency,ok,floor_ms,want", [
    (5000, 0.2, True, 0, 2600),  # half way down to the latency
    (2600, 4.0, True, 0, 4000),  # up to it at once
    (2600, 0.2, False, 0, 2600),  # an error page never lowers it
    (2600, 4.0, False, 0, 4000),  # but may raise it
    (1000, 0.1, True, 800, 800),  # never below the floor
    (50_000, 90.0, True, 0, 60_000),  # nor above max
    (1000, 90.0, True, 70_000, 70_000),  # the floor wins over max
])
def test_the_rule_known_answers(delay_ms, latency, ok, floor_ms, want):
    assert AutoThrottle().next_ms(delay_ms, latency, ok, floor_ms) == want


def test_a_target_of_two_asks_for_half_the_latency():
    assert AutoThrottle(target=2.0).next_ms(500, 1.0, True, 0) == 500
    assert AutoThrottle(target=2.0).next_ms(1500, 1.0, True, 0) == 1000


@settings(max_examples=200, deadline=None)
@given(target=st.sampled_from([0.5, 1.0, 2.0, 8.0]),
       start=st.floats(0, 10), floor=st.floats(0, 2), top=st.floats(2, 60),
       answers=st.lists(st.tuples(st.floats(0, 100), st.sampled_from([200, 200, 301, 404, 500])),
                        min_size=1, max_size=40))
def test_the_rule_follows_scrapys_autothrottle(target, start, floor, top, answers):
    """Oracle: Scrapy's AutoThrottle._adjust_delay on a download slot, from max(start,
    floor), over any answers; the frontier keeps milliseconds, so within a few."""
    throttle = pytest.importorskip("scrapy.extensions.throttle")
    ext = SimpleNamespace(target_concurrency=target, mindelay=floor, maxdelay=top)
    slot = SimpleNamespace(delay=max(start, floor))
    rule = AutoThrottle(target=target, start=start, max=top)
    ms = int(max(start, floor) * 1000)
    for latency, status in answers:
        throttle.AutoThrottle._adjust_delay(ext, slot, latency, SimpleNamespace(status=status))
        ms = rule.next_ms(ms, latency, status == 200, int(floor * 1000))
        assert abs(ms - slot.delay * 1000) <= 3, (ms, slot.delay)


def test_odd_rules_are_refused():
    for kw in ({"target": 0}, {"target": -1.0}, {"start": -1.0}, {"max": 0},
               {"max": math.nan}, {"target": math.inf}, {"start": "5"}):
        with pytest.raises(SimstoreError):
            AutoThrottle(**kw)
    with pytest.raises(SimstoreError, match="auto"):
        Politeness(auto="yes")  # type: ignore[arg-type]


# --- in the frontier ----------------------------------------------------------------------------


def test_a_host_starts_at_the_start_delay_then_learns(store):
    """Before any answer the host waits the start delay; the first answer (latency 0.2 s)
    brings it to 2.6 s and moves its next allowed time with it (last start + 2.6 s)."""
    clock = Clock()
    f = _frontier(store, clock)
    for i in range(3):
        f.push(0, b"p%d" % i, host=HOST)
    t0 = clock.t
    first = f.take(1, 60, "p").popped
    assert first and f.take(1, 60, "p").popped == []
    assert f.next_wake() == pytest.approx(t0 + 5.0) and _delay(f) == 5.0
    clock.t += 0.2
    f.ack([Done(first[0].key, 200, latency=0.2)], "p")
    assert _delay(f) == 2.6
    assert f.next_wake() == pytest.approx(t0 + 2.6)
    clock.t = t0 + 2.59
    assert f.take(1, 60, "p").popped == []
    clock.t = t0 + 2.6
    assert f.take(1, 60, "p").popped


def test_the_delay_converges_to_latency_over_target_for_every_process(store):
    """Answers taken by two owners in turn teach one delay: latency / target."""
    clock = Clock()
    f = _frontier(store, clock, auto={"target": 2.0})
    for i in range(20):
        _answer(f, clock, 0.4, owner="p1" if i % 2 else "p2")
    assert _delay(f) == pytest.approx(0.2, abs=0.002)


def test_a_slower_host_gets_a_longer_delay_at_once_and_errors_never_lower_it(store):
    clock = Clock()
    f = _frontier(store, clock, auto={"start": 0.5})
    _answer(f, clock, 0.1)
    assert _delay(f) == 0.3
    _answer(f, clock, 3.0)
    assert _delay(f) == 3.0
    _answer(f, clock, 0.01, status=404)
    assert _delay(f) == 3.0


def test_the_floor_is_download_delay_and_crawl_delay_and_max_caps_the_rest(store):
    clock = Clock()
    f = _frontier(store, clock, delay=0.3, robots=True, auto={"start": 0.0, "max": 2.0})
    f.robots_read(HOST, 0.5)
    for _ in range(10):
        _answer(f, clock, 0.001)
    assert _delay(f) == 0.5  # the Crawl-delay, not the latency
    _answer(f, clock, 50.0)
    assert _delay(f) == 2.0
    f.robots_read(HOST, 0.25)  # robots.txt read again: the learnt delay stays
    assert _delay(f) == 2.0


def test_a_host_that_answered_429_comes_down_no_faster_than_the_wane(store):
    """After a 429 doubled the delay, fast answers lower it by a tenth of the extra at a
    time (the 429's lesson), not half way each time."""
    clock = Clock()
    f = _frontier(store, clock, robots=True, auto={"start": 0.0})
    f.robots_read(HOST, 0.2)
    f.throttle(HOST, 1.0)
    assert _delay(f) == 0.4
    clock.t += 2.0
    _answer(f, clock, 0.001)
    assert _delay(f) == 0.38


def test_without_autothrottle_a_latency_changes_nothing(store):
    clock = Clock()
    f = Frontier(store, clock=clock, politeness=Politeness(margin=0.0))
    _answer(f, clock, 3.0)
    assert _delay(f) == 0.0


def test_what_a_host_taught_outlives_the_handle(store):
    """A new handle (a later run, another process) starts from the learnt delay, not the
    start delay."""
    clock = Clock()
    f = _frontier(store, clock)
    for _ in range(12):
        _answer(f, clock, 0.1)
    learnt = _delay(f)
    assert learnt < 0.2
    assert _delay(_frontier(store, clock)) == learnt


@pytest.mark.parametrize("latency", [-1.0, math.nan, math.inf, "0.1", True])
def test_an_odd_latency_is_refused_before_any_write(store, latency):
    clock = Clock()
    f = _frontier(store, clock)
    f.push(0, b"p", host=HOST)
    got = f.take(1, 60, "p").popped
    with pytest.raises(SimstoreError, match="latency"):
        f.ack([Done(got[0].key, 200, latency=latency)], "p")
    assert f.counts()["leased"] == 1 and _delay(f) == 5.0


def test_a_huge_start_or_max_is_capped_by_max_delay(store):
    """AutoThrottle's own values never block a host beyond the frontier's cap on any wait
    (``max_delay``, SIMSTORE_MAX_HOST_DELAY)."""
    clock = Clock()
    f = _frontier(store, clock, max_delay=30.0, auto={"start": 1e300, "max": 1e300})
    f.push(0, b"p", host=HOST)
    f.push(0, b"q", host=HOST)
    t0 = clock.t
    got = f.take(1, 60, "p").popped
    assert f.next_wake() == pytest.approx(t0 + 30.0)
    f.ack([Done(got[0].key, 200, latency=1e200)], "p")
    assert _delay(f) == 30.0
