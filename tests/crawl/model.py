"""A pure-Python model of :class:`simstore.crawl.Frontier` (no revisits, no expiry), written
from the docstrings and docs/crawl.md, not from the code: the oracle of the crawl tests.

Times are integer milliseconds, read as the frontier reads them (``int(clock() * 1000)``).
Keys are built as docs/crawl.md gives their bytes, so a key the frontier returns can be
compared byte for byte.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field

PRIO_MAX, PRIO_MIN = 2**63 - 1, -(2**63)
RECLAIM_MAX = 256
TAKER_MS = 5000  # a process that took work this recently counts among those taking
NOTE_MS = 1000  # a take notes its time when the one noted is this old
THROTTLED_DELAY_MS = 250
THROTTLE = (429, 503)
DROPPED = b""  # a push's key while its host is given up (the docs: not queued)
_U64 = struct.Struct(">Q")


def host_key(host: str) -> bytes:
    """The 8-byte id of a host: BLAKE2b-64 of its lower-case name."""
    return hashlib.blake2b(host.lower().encode("utf-8", "surrogatepass"), digest_size=8).digest()


def clamp(priority: int) -> int:
    """A priority as the key holds it (int64)."""
    return min(max(priority, PRIO_MIN), PRIO_MAX)


def make_key(host: str, priority: int, seq: int) -> bytes:
    """host id ‖ 2^63-1-priority ‖ seq."""
    return host_key(host) + _U64.pack(PRIO_MAX - clamp(priority)) + _U64.pack(seq)


@dataclass
class MHost:
    """What the model knows of a host."""

    name: str
    next_ms: int = 0
    blocked_ms: int = 0
    delay_ms: int = 0  # its robots.txt Crawl-delay, or what 429/503 made of it
    crawl_ms: int = 0  # its robots.txt Crawl-delay: what delay_ms wanes back to
    known: bool = False  # robots.txt read
    throttled: bool = False
    paused: bool = False
    throttles: int = 0
    failures: int = 0  # episodes in a row of downloads that got no answer
    down: bool = False  # given up (its requests dropped while it is blocked)
    inflight: int = 0
    fetched: int = 0
    n429: int = 0
    n503: int = 0


@dataclass
class MReq:
    """A request: its host, priority (clamped), seq and payload."""

    host: str
    priority: int
    seq: int
    payload: bytes

    @property
    def order(self) -> tuple[int, int]:
        """Highest priority first, then first in first out."""
        return (-self.priority, self.seq)


@dataclass
class MLease:
    """A lease of a request."""

    req: MReq
    deadline: int
    owner: str
    downloaded: bool = False  # its download is over: its host's slot was given back


@dataclass
class Policy:
    """The Politeness fields the model needs."""

    delay: float = 0.0
    concurrency: int = 8
    max_delay: float = 600.0
    backoff: float = 2.0
    robots: bool = False
    margin: float = 0.02
    prefetch: int = 0
    solo_prefetch: int = 0
    max_failures: int = 6


@dataclass
class Model:
    """The frontier's state, and each operation as its docstring says it behaves."""

    policy: Policy
    seq: int = 0
    paused: bool = False
    queue: dict[bytes, MReq] = field(default_factory=dict)
    leases: dict[bytes, MLease] = field(default_factory=dict)
    seen: set[bytes] = field(default_factory=set)
    hosts: dict[str, MHost] = field(default_factory=dict)
    takers: dict[str, int] = field(default_factory=dict)  # owner -> its last take of work

    # --- rules ----------------------------------------------------------------------

    def host(self, name: str) -> MHost:
        return self.hosts.setdefault(name.lower(), MHost(name))

    def delay_ms(self, h: MHost) -> int:
        """A host's spacing: max(policy delay, its own), plus the margin when > 0."""
        d = max(int(self.policy.delay * 1000), h.delay_ms)
        return d + int(self.policy.margin * 1000) if d else 0

    def concurrency(self, h: MHost) -> int:
        if (self.policy.robots and not h.known) or h.throttled or h.failures:
            return 1
        return self.host_limit

    @property
    def host_limit(self) -> int:
        return self.policy.concurrency + max(self.policy.prefetch, self.policy.solo_prefetch)

    def share(self, now: int) -> int:
        """What one process may hold of a host: all of it while it alone takes, else
        concurrency + prefetch split evenly among those taking (rounded up)."""
        n = sum(last + TAKER_MS >= now for last in self.takers.values())
        if n <= 1:
            return self.host_limit
        return -(-(self.policy.concurrency + self.policy.prefetch) // n)

    def held(self, owner: str, host: str) -> int:
        """Owner's requests of host in flight (taken, download not over)."""
        return sum(le.owner == owner and le.req.host.lower() == host.lower()
                   and not le.downloaded for le in self.leases.values())

    def ready_for(self, owner: str, now: int, share: int) -> list[MHost]:
        """The ready hosts owner may take from: it holds less than its share of each, and
        while several processes take, a host has less than concurrency + prefetch in
        flight."""
        shared = self.policy.concurrency + self.policy.prefetch
        return [h for h in self.ready(now)
                if share >= self.host_limit
                or (h.inflight < shared and self.held(owner, h.name) < share)]

    def queued(self, name: str) -> list[MReq]:
        return sorted((r for r in self.queue.values() if r.host.lower() == name.lower()),
                      key=lambda r: r.order)

    def may_go_at(self, h: MHost) -> int | None:
        """From when host h may be asked (None: not by time alone: nothing queued, paused
        or at its concurrency)."""
        if h.paused or h.inflight >= self.concurrency(h) or not self.queued(h.name):
            return None
        return max(h.next_ms, h.blocked_ms)

    def ready(self, now: int) -> list[MHost]:
        return [h for h in self.hosts.values()
                if (at := self.may_go_at(h)) is not None and at <= now]

    def wake(self, now: int) -> float | None:
        times = [at for h in self.hosts.values()
                 if (at := self.may_go_at(h)) is not None and at > now]
        return min(times) / 1000 if times else None

    # --- operations -----------------------------------------------------------------

    def push(self, pushes: list[tuple[int, bytes, bytes | None, bool, str]], now: int
             ) -> list[bytes | None]:
        out: list[bytes | None] = []
        for prio, payload, fp, only_new, host in pushes:
            was = fp is not None and fp in self.seen
            if fp is not None:
                self.seen.add(fp)
            if was and only_new:
                out.append(None)
                continue
            self.seq += 1
            h = self.hosts.get(host.lower())
            if h is not None and h.down and now < h.blocked_ms:  # given up: dropped
                out.append(DROPPED)
                continue
            key = make_key(host, prio, self.seq)
            self.queue[key] = MReq(host, clamp(prio), self.seq, payload)
            self.host(host)
            out.append(key)
        return out

    def ack(self, dones: list[tuple[bytes, int | None]], owner: str) -> int:
        n = 0
        for key, status in dones:
            lease = self.leases.get(key)
            if lease is not None and lease.owner == owner:
                del self.leases[key]
                h = self.host(lease.req.host)
                h.inflight -= not lease.downloaded
            elif lease is None and key in self.queue:
                h = self.host(self.queue.pop(key).host)
            else:
                continue
            n += 1
            if status is not None and status != 0:  # 0: no answer (counted by failed)
                h.fetched += 1
                h.failures = 0
                h.down = False
                if status not in THROTTLE:
                    h.throttles = 0
                    if h.delay_ms > h.crawl_ms:  # a tenth of a 429's addition goes
                        h.delay_ms = h.crawl_ms + int((h.delay_ms - h.crawl_ms) * 0.9)
        return n

    def reclaim(self, now: int) -> list[bytes]:
        expired = sorted((le.deadline, k) for k, le in self.leases.items() if le.deadline < now)
        back = [k for _, k in expired[:RECLAIM_MAX]]
        for k in back:
            self.back(k)
        return back

    def back(self, key: bytes) -> None:
        lease = self.leases.pop(key)
        self.queue[key] = lease.req
        self.host(lease.req.host).inflight -= not lease.downloaded

    def downloaded(self, keys: list[bytes], owner: str) -> int:
        """Owner's leases whose download is over give their host's slot back, once."""
        n = 0
        for k in keys:
            lease = self.leases.get(k)
            if lease is not None and lease.owner == owner and not lease.downloaded:
                lease.downloaded = True
                self.host(lease.req.host).inflight -= 1
                n += 1
        return n

    def take(self, n: int, lease_ms: int, owner: str, now: int
             ) -> tuple[list[tuple[bytes, bytes, str]], float | None, bool]:
        """(key, payload, host) of each request leased, the wake (when fewer than n were
        leased or no host is left that may be asked now) and whether one is left."""
        got: list[tuple[bytes, bytes, str]] = []
        last = self.takers.get(owner)
        if n and (last is None or not last <= now < last + NOTE_MS):
            self.takers[owner] = now
        share = self.share(now) if n else self.host_limit
        while len(got) < n and not self.paused:
            heads = [(self.queued(h.name)[0], h) for h in self.ready_for(owner, now, share)]
            if not heads:
                break
            req, h = min(heads, key=lambda rh: rh[0].order)
            key = next(k for k, r in self.queue.items() if r is req)
            del self.queue[key]
            self.leases[key] = MLease(req, now + lease_ms, owner)
            h.inflight += 1
            h.next_ms = now + self.delay_ms(h)
            got.append((key, req.payload, h.name))
        more = not self.paused and bool(self.ready_for(owner, now, share))
        return got, (self.wake(now) if len(got) < n or not more else None), more

    def release(self, keys: list[bytes], owner: str) -> int:
        mine = [k for k in dict.fromkeys(keys)
                if k in self.leases and self.leases[k].owner == owner]
        for k in mine:
            self.back(k)
        return len(mine)

    def renew(self, keys: list[bytes], owner: str, deadline: int) -> int:
        n = 0
        for k in keys:
            if k in self.leases and self.leases[k].owner == owner:
                self.leases[k].deadline = deadline
                n += 1
        return n

    def robots_read(self, host: str, crawl_delay: float | None, now: int) -> float:
        seconds = 0.0
        if crawl_delay is not None and not math.isnan(crawl_delay):
            seconds = min(max(crawl_delay, 0.0), self.policy.max_delay)
        h = self.host(host)
        h.delay_ms = h.crawl_ms = min(int(seconds * 1000), 2**32 - 1)
        h.known = True
        h.next_ms = max(h.next_ms, now + 2 * self.delay_ms(h))
        return seconds

    def throttle(self, host: str, retry_after: float | None, status: int, now: int) -> float:
        h = self.host(host)
        h.throttles += 1
        if status == 503:
            h.n503 += 1
        else:
            h.n429 += 1
        if retry_after is None:
            wait = min(self.policy.backoff * 2.0 ** (h.throttles - 1), self.policy.max_delay)
        elif math.isnan(retry_after) or retry_after < 0:
            wait = 0.0
        else:
            wait = min(retry_after, self.policy.max_delay)
        if now >= h.blocked_ms:
            h.delay_ms = min(max(2 * h.delay_ms, THROTTLED_DELAY_MS),
                             int(self.policy.max_delay * 1000))
        h.throttled = True
        h.blocked_ms = max(h.blocked_ms, now + int(wait * 1000))
        return wait

    def failed(self, host: str, now: int) -> tuple[float, int | None]:
        """A download got no answer: a new episode unless the host is blocked; backoff
        2 s doubled per episode, given up (queue dropped, max_delay) at max_failures."""
        h = self.host(host)
        if now < h.blocked_ms:
            return (h.blocked_ms - now) / 1000, None
        h.failures += 1
        dropped = None
        if self.policy.max_failures and h.failures >= self.policy.max_failures:
            wait = self.policy.max_delay
            h.down = True
            dropped = self.drop_host(host)
        else:
            wait = min(self.policy.backoff * 2.0 ** (h.failures - 1), self.policy.max_delay)
        h.blocked_ms = now + int(wait * 1000)
        return wait, dropped

    def pause(self, host: str | None, paused: bool) -> None:
        if host is None:
            self.paused = paused
        else:
            self.host(host).paused = paused

    def drop_host(self, host: str) -> int:
        keys = [k for k, r in self.queue.items() if r.host.lower() == host.lower()]
        for k in keys:
            del self.queue[k]
        return len(keys)

    def clear(self) -> None:
        """Everything but the sequence and each host's politeness (nothing in flight)."""
        self.paused = False
        self.queue.clear()
        self.leases.clear()
        self.seen.clear()
        self.takers.clear()
        for h in self.hosts.values():
            h.inflight = 0

    def pending(self, owner: str | None) -> int:
        mine = 0 if owner is None else sum(le.owner == owner for le in self.leases.values())
        return len(self.queue) + len(self.leases) - mine
