"""simstore.crawl.Frontier against the pure-Python model of tests/crawl/model.py, on an
injected clock: random sequences of every operation, each result and view compared, and
the crawl's promises (one live holder, politeness, concurrency, no idle take, fairness,
keys never reused) checked on their own beside the model."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import simstore
from simstore.crawl import Done, Frontier, Politeness, Push

from .clock import Clock
from .model import Model, Policy

# tmpfs where there is one: a commit's flush costs nothing there
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
HOSTS = ["", "a.example", "b.example", "c.example"]
OWNERS = ["p1", "p2"]
hosts = st.sampled_from(HOSTS)
owners = st.sampled_from(OWNERS)
priorities = st.sampled_from([0, 0, 1, -1, 5, 2**63 - 1, -(2**63), 2**70])
fps = st.none() | st.sampled_from([b"f0", b"f1", b"f2", b"f3"])
pushes = st.builds(Push, priority=priorities, payload=st.binary(max_size=6), fp=fps,
                   only_new=st.booleans(), host=hosts)
leases = st.sampled_from([0.5, 1.0, 5.0, 30.0])
statuses = st.sampled_from([None, 0, 200, 304, 404, 429, 503])


class FrontierMachine(RuleBasedStateMachine):
    """A frontier and its model under one clock."""

    @initialize(delay=st.sampled_from([0.0, 0.0, 0.5, 2.0]),
                concurrency=st.sampled_from([1, 2, 8]), robots=st.booleans(),
                margin=st.sampled_from([0.0, 0.02]), prefetch=st.sampled_from([0, 0, 2]),
                solo_prefetch=st.sampled_from([0, 0, 1, 4]),
                max_failures=st.sampled_from([0, 1, 2, 6]))
    def open(self, delay: float, concurrency: int, robots: bool, margin: float,
             prefetch: int, solo_prefetch: int, max_failures: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="frontier-model-", dir=SCRATCH)
        self.store = simstore.SimStore(self.dir + "/s", durable=False)
        self.clock = Clock(1_700_000_000.0)
        polite = Politeness(delay=delay, concurrency=concurrency, robots=robots, margin=margin,
                            prefetch=prefetch, solo_prefetch=solo_prefetch,
                            max_failures=max_failures)
        self.f = Frontier(self.store, clock=self.clock, politeness=polite)
        self.m = Model(Policy(delay, concurrency, robots=robots, margin=margin,
                              prefetch=prefetch, solo_prefetch=solo_prefetch,
                              max_failures=max_failures))
        self.keys: list[bytes] = []  # every key the frontier gave, in order
        self.starts: dict[str, tuple[int, int]] = {}  # host -> (last start, its delay)
        self.blocked: dict[str, int] = {}  # host -> blocked until (ms), across clear()

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers -----------------------------------------------------------------------

    def given(self, keys: list[bytes | None]) -> None:
        """New keys are new: never one given before (clear() included). None (seen) and
        DROPPED (host given up) are no keys."""
        new = [k for k in keys if k]
        assert not set(new) & set(self.keys), "a key was reused"
        assert len(set(new)) == len(new)
        self.keys.extend(new)

    def pick(self, data: st.DataObject, most: int = 3) -> list[bytes]:
        pool = self.keys[-12:] + [b"\0" * 24]
        return data.draw(st.lists(st.sampled_from(pool), max_size=most))

    def dones(self, data: st.DataObject) -> tuple[list[Done | bytes], list[tuple]]:
        out: list[Done | bytes] = []
        for k in self.pick(data):
            status = data.draw(statuses)
            out.append(k if status is None and data.draw(st.booleans()) else Done(k, status))
        return out, [(d, None) if isinstance(d, bytes) else (d.key, d.status) for d in out]

    def check_take_promises(self, popped: list, n: int, owner: str, now: int,
                            live_before: dict[bytes, str]) -> None:
        """The promises of a take, each on its own (the model aside)."""
        for p in popped:
            assert p.key not in live_before, "a request held by a live lease was taken"
            name = p.host.lower()
            last = self.starts.get(name)
            assert last is None or now >= last[0] + last[1], (
                f"host {name!r} asked at {now} before its last start {last[0]} + delay {last[1]}")
            assert now >= self.blocked.get(name, 0), f"host {name!r} asked inside its block"
            h = self.m.hosts[name]
            assert h.inflight <= self.m.concurrency(h), f"host {name!r} over its concurrency"
            self.starts[name] = (now, self.m.delay_ms(h))
        share = self.m.share(now)
        for p in popped:
            assert self.m.held(owner, p.host) <= share, (
                f"{owner} holds more than its share {share} of {p.host!r}")
        if len(popped) < n and not self.m.paused:
            assert not self.m.ready_for(owner, now, share), (
                "a take left a request queued that this process may take")

    # --- rules -------------------------------------------------------------------------

    @rule(items=st.lists(pushes, max_size=4), single=st.booleans())
    def push(self, items: list[Push], single: bool) -> None:
        if single and items:
            p = items[0]
            got = [self.f.push(p.priority, p.payload, p.fp, only_new=p.only_new, host=p.host)]
            items = items[:1]
        else:
            got = self.f.push_many(items)
        want = self.m.push([(p.priority, p.payload, p.fp, p.only_new, p.host) for p in items],
                           self.clock.ms)
        assert got == want
        self.given(got)

    @rule(n=st.sampled_from([0, 1, 2, 3, 10]), lease=leases, owner=owners,
          items=st.lists(pushes, max_size=2), data=st.data())
    def take(self, n: int, lease: float, owner: str, items: list[Push], data) -> None:
        dones, mdones = self.dones(data)
        left = self.pick(data)
        now = self.clock.ms
        live_before = {k: le.owner for k, le in self.m.leases.items() if le.deadline >= now}
        taken = self.f.take(n, lease, owner, push=items, done=dones, downloaded=left)
        want_pushed = self.m.push([(p.priority, p.payload, p.fp, p.only_new, p.host)
                                   for p in items], now)
        self.m.ack(mdones, owner)
        self.m.downloaded(left, owner)
        live_before = {k: o for k, o in live_before.items() if k in self.m.leases}
        reclaimed = self.m.reclaim(now)
        want, wake, more = self.m.take(n, int(lease * 1000), owner, now)
        assert taken.pushed == want_pushed
        self.given(taken.pushed)
        assert taken.reclaimed == len(reclaimed)
        assert [(p.key, p.payload, p.host) for p in taken.popped] == want
        assert taken.wake == wake
        assert taken.more == more
        self.check_take_promises(taken.popped, n, owner, now, live_before)

    @rule(owner=owners, data=st.data())
    def ack(self, owner: str, data) -> None:
        dones, mdones = self.dones(data)
        assert self.f.ack(dones, owner) == self.m.ack(mdones, owner)

    @rule(owner=owners, data=st.data())
    def release(self, owner: str, data) -> None:
        keys = self.pick(data)
        assert self.f.release(keys, owner) == self.m.release(keys, owner)

    @rule(owner=owners, lease=leases, data=st.data())
    def renew(self, owner: str, lease: float, data) -> None:
        keys = self.pick(data)
        got = self.f.renew(keys, lease, owner)
        assert got == self.m.renew(keys, owner, self.clock.ms + int(lease * 1000))

    @rule()
    def reclaim(self) -> None:
        assert self.f.reclaim() == len(self.m.reclaim(self.clock.ms))

    @rule(host=hosts, retry_after=st.sampled_from([None, None, 0, 0.3, 1.5, 30, 1e9]),
          status=st.sampled_from([429, 503]))
    def throttle(self, host: str, retry_after: float | None, status: int) -> None:
        now = self.clock.ms
        wait, capped = self.f.throttle(host, retry_after, status)
        assert wait == self.m.throttle(host, retry_after, status, now)
        assert capped == (retry_after is not None and retry_after > 600)
        self.blocked[host] = max(self.blocked.get(host, 0), now + int(wait * 1000))

    @rule(host=hosts)
    def failed(self, host: str) -> None:
        now = self.clock.ms
        assert self.f.failed(host) == self.m.failed(host, now)
        self.blocked[host] = max(self.blocked.get(host, 0), self.m.host(host).blocked_ms)

    @rule(host=hosts, delay=st.sampled_from([None, 0, 0.25, 1.0, 3.0, float("nan"), -1.0]))
    def robots_read(self, host: str, delay: float | None) -> None:
        got, _ = self.f.robots_read(host, delay)
        assert got == self.m.robots_read(host, delay, self.clock.ms)

    @rule(host=st.none() | hosts, paused=st.booleans())
    def pause(self, host: str | None, paused: bool) -> None:
        (self.f.pause if paused else self.f.resume)(host)
        self.m.pause(host, paused)

    @rule(host=hosts)
    def drop_host(self, host: str) -> None:
        assert self.f.drop_host(host) == self.m.drop_host(host)

    @precondition(lambda self: len(self.keys) > 0)
    @rule()
    def clear(self) -> None:
        self.f.clear()
        self.m.clear()  # the hosts keep their politeness: the same servers

    @rule(dt=st.sampled_from([0, 1, 10, 250, 499, 520, 1000, 2100, 5000, 60_000]))
    def advance(self, dt: int) -> None:
        self.clock.t += dt / 1000

    # --- views -------------------------------------------------------------------------

    @invariant()
    def views_agree(self) -> None:
        if not hasattr(self, "f"):
            return
        c = self.f.counts()
        assert c == {"queued": len(self.m.queue), "leased": len(self.m.leases),
                     "seen": len(self.m.seen), "due": 0}
        assert len(self.f) == len(self.m.queue)
        for owner in (None, *OWNERS):
            assert self.f.pending(owner) == self.m.pending(owner)
        rows = {r["host"]: r for r in self.f.hosts()}
        assert set(rows) == {h.name for h in self.m.hosts.values()}
        for h in self.m.hosts.values():
            r = rows[h.name]
            got = (r["queued"], r["in_flight"], r["paused"], r["fetched"], r["answers_429"],
                   r["answers_503"], r["failures"], r["down"])
            assert got == (len(self.m.queued(h.name)), h.inflight, h.paused, h.fetched,
                           h.n429, h.n503, h.failures, h.down), h.name
        assert sorted(k for k, _, _ in self.f.leases()) == sorted(self.m.leases)


_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much]


class TestFrontierModel(FrontierMachine.TestCase):  # type: ignore[misc,valid-type]
    """Random sequences of every frontier operation agree with the model and keep its promises."""

    settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                        suppress_health_check=_SUPPRESS)


@pytest.mark.stress
class TestFrontierModelLong(FrontierMachine.TestCase):  # type: ignore[misc,valid-type]
    """The same model check with 2000 sequences of up to 80 steps."""

    settings = settings(max_examples=2000, stateful_step_count=80, deadline=None,
                        suppress_health_check=_SUPPRESS)
