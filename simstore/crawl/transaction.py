"""One transaction on a frontier's databases: every operation of
:class:`~simstore.crawl.frontier.Frontier`, on the records of :mod:`.records`.

The clock is read when the transaction starts, with the write lock held (no lease is born
expired); each operation keeps the invariants the frontier's docstring lists.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from .calls import DROPPED, NO_ANSWER, Done, Popped, Push, Taken, check_fp
from .records import (
    AUTO,
    DELAY_KNOWN,
    DOWN,
    FRONTIER_VERSION,
    NOWHERE,
    PAUSED,
    READY,
    ROBOTS,
    ROBOTS_MAX,
    THROTTLED,
    U64,
    WAITING,
    Host,
    Lease,
    Url,
    held_key,
    host_id,
    key_host,
    ms,
    queue_key,
    robots_key,
    taker_key,
)
from .rules import (
    GONE_STATUSES,
    NOT_MODIFIED,
    THROTTLE_KEEP,
    THROTTLE_STATUSES,
    THROTTLED_DELAY,
    Politeness,
)

RECLAIM_MAX = 256  # expired leases a transaction moves back, at most (oldest first)
PROMOTE_MAX = 1024  # waiting hosts a transaction lists as ready, at most
TAKER_MS = 5000  # a process that took work this recently is one of those taking now
FORGET_MS = 600_000  # a process silent this long is forgotten (its record dropped)
HOST_KEY = 9  # b"H" + host id; an owner's count of the host's requests is longer
NOTE_MS = 1000  # a take rewrites its owner's record once this old (a page less to flush)
SKIP_MAX = 64  # hosts a take passes over (this process holds its share of each), at most
_U32 = struct.Struct(">I")


class Txn:
    """One transaction on a frontier's databases: the operations of a ``Frontier`` ``f``
    (its rules, clock and keys are read from it)."""

    def __init__(self, f: Any, txn: Any, handles: list[Any]) -> None:
        self.f = f
        self.txn = txn
        self.meta, self.seen, self.queue, self.leases, self.hosts, self.urls = handles
        self.now = f._now()  # read with the write lock held: no lease is born expired
        self.policy = f.politeness
        self.rules = f._rules  # host id -> its own politeness (hosts with a HostRule)
        expire = f.expire
        self.since = None if expire is None else self.now - int(expire * 1000)
        self.skips = SKIP_MAX  # hosts a take may still pass over at the owner's share

    # --- small helpers -------------------------------------------------------------------

    def entries(self, db: Any) -> int:
        return int(self.txn.stat(db)["entries"])

    def is_seen(self, value: bytes | None) -> bool:
        if value is None:
            return False
        return self.since is None or U64.unpack(bytes(value))[0] >= self.since

    def mark_seen(self, fp: bytes) -> bool:
        """Whether fp counted as seen; it is seen (now, unless it counted) after."""
        if self.is_seen(self.txn.get(fp, db=self.seen)):
            return True
        self.txn.put(fp, ms(self.now), db=self.seen)
        return False

    def next_seq(self) -> int:
        raw = self.txn.get(self.f._seq_key, db=self.meta)
        return 1 if raw is None else U64.unpack(bytes(raw))[0] + 1

    def load_host(self, hid: bytes, name: str | None = None) -> Host:
        raw = self.txn.get(b"H" + hid, db=self.hosts)
        if raw is None:
            return Host(name or "")
        return Host.unpack(raw)

    def named_host(self, name: str) -> tuple[bytes, Host]:
        """Host name's id and record, named (a record queued by a revisit has no name)."""
        hid = host_id(name)
        h = self.load_host(hid, name)
        h.name = h.name or name
        return hid, h

    def save_host(self, hid: bytes, h: Host) -> None:
        self.txn.put(b"H" + hid, h.pack(), db=self.hosts)

    def head(self, hid: bytes) -> bytes | None:
        """The first queue key of host hid (highest priority, then oldest)."""
        cur = self.txn.cursor(db=self.queue)
        if not cur.set_range(hid):
            return None
        key = bytes(cur.key())
        return key if key[:8] == hid and len(key) == 24 else None

    def held(self, hid: bytes, owner: bytes) -> int:
        """Owner's requests of host hid in flight."""
        raw = self.txn.get(held_key(hid, owner), db=self.hosts)
        return 0 if raw is None else _U32.unpack(bytes(raw))[0]

    def hold(self, hid: bytes, owner: bytes, step: int) -> None:
        """Count one request of host hid more (step 1) or fewer (-1) in owner's flight."""
        n = max(self.held(hid, owner) + step, 0)
        if n:
            self.txn.put(held_key(hid, owner), _U32.pack(min(n, 2**32 - 1)), db=self.hosts)
        else:
            self.txn.delete(held_key(hid, owner), db=self.hosts)

    def takers(self, owner: bytes) -> int:
        """Note owner's take; how many processes take now (those that took within
        TAKER_MS, owner among them). Owner's record is rewritten when NOTE_MS old, so
        most takes leave it as is; records silent for FORGET_MS are dropped."""
        mine = taker_key(owner)
        n = 1  # owner
        noted = False
        cur = self.txn.cursor(db=self.hosts)
        found = cur.set_range(b"A")
        while found:
            key = bytes(cur.key())
            if key[:1] != b"A":
                break
            last = U64.unpack(bytes(cur.value()))[0]
            if key == mine:
                noted = last <= self.now < last + NOTE_MS
            elif last + FORGET_MS < self.now:
                found = cur.delete()
                continue
            else:
                n += last + TAKER_MS >= self.now
            found = cur.next()
        if not noted:
            self.txn.put(mine, ms(self.now), db=self.hosts)
        return n

    def rule(self, hid: bytes) -> Politeness:
        """The politeness of host hid: the crawl's, or its own (``Politeness.hosts``)."""
        return self.rules.get(hid, self.policy) if self.rules else self.policy

    def base_ms(self, hid: bytes, h: Host) -> int:
        """Host h's delay: its own, at least ``delay``, and with AutoThrottle the start
        delay (at most ``max_delay``) until its first answer is measured."""
        p = self.rule(hid)
        d = max(int(p.delay * 1000), h.delay_ms)
        if p.auto is not None and not h.flags & AUTO:
            d = max(d, int(min(p.auto.start, p.max_delay) * 1000))
        return d

    def delay_ms(self, hid: bytes, h: Host) -> int:
        """The spacing of host h's requests: its delay, plus the margin when it has one."""
        d = self.base_ms(hid, h)
        return d + int(self.policy.margin * 1000) if d else 0

    def place(self, hid: bytes, h: Host) -> None:
        """List host h where it belongs now (invariant 2); the caller saves it."""
        if h.where != NOWHERE:
            self.txn.delete(h.slot, db=self.hosts)
            h.where, h.slot = NOWHERE, b""
        if h.queued <= 0 or h.flags & PAUSED:
            return
        conc = self.rule(hid).host_limit
        if (self.policy.robots and not h.flags & DELAY_KNOWN) or h.flags & THROTTLED \
                or h.failures:
            conc = 1
        if h.inflight >= conc:
            return
        at = max(h.next_ms, h.blocked_ms)
        if at <= self.now:
            head = self.head(hid)
            if head is None:  # the count drifted (a queue entry dropped by hand): mend it
                h.queued = 0
                return
            h.where, h.slot = READY, b"R" + head[8:24] + hid
        else:
            h.where, h.slot = WAITING, b"W" + ms(at) + hid
        self.txn.put(h.slot, b"", db=self.hosts)

    def settle(self, hid: bytes, h: Host) -> None:
        self.place(hid, h)
        self.save_host(hid, h)

    # --- writes --------------------------------------------------------------------------

    def push(self, pushes: list[Push]) -> list[bytes | None]:
        out: list[bytes | None] = []
        seq = None
        for p in pushes:
            if p.fp is not None and self.mark_seen(p.fp) and p.only_new:
                out.append(None)
                continue
            seq = self.next_seq() if seq is None else seq + 1
            out.append(self.enqueue(host_id(p.host), p.host, p.priority, seq, p.payload))
        if seq is not None:
            self.txn.put(self.f._seq_key, U64.pack(seq), db=self.meta)
        return out

    def enqueue(self, hid: bytes, name: str, priority: int, seq: int, payload: bytes
                ) -> bytes:
        """Queue a request: its key, or DROPPED while its host is given up. The
        host is listed anew when it was nowhere or the request comes before its listed
        first one."""
        h = self.load_host(hid, name)
        if h.flags & DOWN and self.now < h.blocked_ms:
            return DROPPED
        key = queue_key(hid, priority, seq)
        self.txn.put(key, payload, db=self.queue)
        h.queued += 1
        if h.where == NOWHERE or (h.where == READY and key[8:24] < h.slot[1:17]):
            self.place(hid, h)
        self.save_host(hid, h)
        return key

    def take(self, n: int, lease_ms: int, owner: bytes, pushes: list[Push],
             dones: list[Done], left: list[bytes]) -> Taken:
        pushed = self.push(pushes) if pushes else []
        if dones:
            self.ack(dones, owner)
        if left:
            self.downloaded(left, owner)
        reclaimed = self.reclaim(RECLAIM_MAX)
        self.promote(PROMOTE_MAX)
        popped: list[Popped] = []
        paused = self.txn.get(self.f._paused_key, db=self.meta) is not None
        takers = self.takers(owner) if n else 1
        cur = self.txn.cursor(db=self.hosts)
        start, self.skips = b"R", SKIP_MAX
        while len(popped) < n and not paused:
            found = self.askable(cur, start, owner, takers)
            if found is None:
                break
            rkey, hid, h, key = found
            start = rkey  # the hosts before it: each at this owner's share
            payload = bytes(self.txn.pop(key, db=self.queue))
            deadline = self.now + lease_ms
            self.txn.put(b"L" + key, Lease(deadline, self.now, owner, payload).pack(),
                         db=self.leases)
            self.txn.put(b"D" + ms(deadline) + key, b"", db=self.leases)
            h.queued = max(h.queued - 1, 0)
            h.inflight += 1
            h.next_ms = self.now + self.delay_ms(hid, h)
            self.settle(hid, h)
            self.hold(hid, owner, 1)  # listed again, if at all, after rkey: its next request
            popped.append(Popped(key, payload, h.name))
        more = not paused and self.askable(cur, start, owner, takers) is not None
        wake = self.first_wait() if len(popped) < n or not more else None
        return Taken(popped, pushed, wake, reclaimed, more, takers)

    def askable(self, cur: Any, start: bytes, owner: bytes, takers: int
                ) -> tuple[bytes, bytes, Host, bytes] | None:
        """The first host listed ready from ``start`` on that owner may take from (it holds
        less than its share of it among ``takers`` processes, and, among several, the host
        has less than its ``shared_limit`` in flight): (its R key, id, record, first queue
        key), or None.
        Index entries out of step are mended on the way; at most ``self.skips`` hosts
        at owner's share are passed over (the take's budget: each one spends it)."""
        while True:
            if not cur.set_range(start):
                return None
            rkey = bytes(cur.key())
            if rkey[:1] != b"R":
                return None
            hid = rkey[17:25]
            h = self.load_host(hid)
            key = self.head(hid)
            if h.slot != rkey or key is None:  # an index entry out of step: mend it
                self.txn.delete(rkey, db=self.hosts)
                if h.slot == rkey:
                    h.where, h.slot = NOWHERE, b""
                    h.queued = 0 if key is None else h.queued
                self.settle(hid, h)
                continue
            p = self.rule(hid)
            share = p.share(takers)
            if share >= p.host_limit or (
                    h.inflight < p.shared_limit and self.held(hid, owner) < share):
                return rkey, hid, h, key
            if self.skips <= 0:
                return None
            self.skips -= 1
            start = rkey + b"\x00"

    def first_wait(self) -> float | None:
        cur = self.txn.cursor(db=self.hosts)
        if cur.set_range(b"W"):
            key = bytes(cur.key())
            if key[:1] == b"W":
                return U64.unpack_from(key, 1)[0] / 1000
        return None

    def until(self, db: Any, kind: bytes, before: int, limit: int) -> list[bytes]:
        """The keys ``kind`` ‖ u64 time ‖ ... of db whose time is before ``before`` (ms), in
        time order, at most limit of them: the due part of a time index."""
        cur = self.txn.cursor(db=db)
        out: list[bytes] = []
        if cur.set_range(kind):
            for key in cur.iternext(values=False):
                key = bytes(key)
                if key[:1] != kind or U64.unpack_from(key, 1)[0] >= before or len(out) >= limit:
                    break
                out.append(key)
        return out

    def promote(self, limit: int) -> int:
        """List the waiting hosts whose time has come as ready."""
        due = self.until(self.hosts, b"W", self.now + 1, limit)
        for key in due:
            hid = key[9:17]
            h = self.load_host(hid)
            if h.slot != key:
                self.txn.delete(key, db=self.hosts)
            self.settle(hid, h)
        return len(due)

    def unlease(self, key: bytes, lease: Lease, back: bool) -> tuple[bytes, Host]:
        """Drop key's lease (and its deadline entry); back: queue it again. The host,
        with one request fewer in flight unless its download was over (not yet saved)."""
        self.txn.delete(b"L" + key, db=self.leases)
        self.txn.delete(b"D" + ms(lease.deadline_ms) + key, db=self.leases)
        hid = key_host(key)
        if back:
            self.txn.put(key, lease.payload, db=self.queue)
        h = self.load_host(hid)
        if not lease.downloaded:
            h.inflight = max(h.inflight - 1, 0)
            self.hold(hid, lease.owner, -1)
        if back:
            h.queued += 1
        return hid, h

    def owned(self, key: bytes, owner: bytes) -> Lease | None:
        raw = self.txn.get(b"L" + key, db=self.leases)
        if raw is None:
            return None
        lease = Lease.unpack(raw)
        return lease if lease.owner == owner else None

    def reclaim(self, limit: int) -> int:
        expired = self.until(self.leases, b"D", self.now, limit)
        for dkey in expired:
            key = dkey[9:]
            raw = self.txn.get(b"L" + key, db=self.leases)
            if raw is None:  # a deadline entry without its lease: drop it
                self.txn.delete(dkey, db=self.leases)
                continue
            self.settle(*self.unlease(key, Lease.unpack(raw), back=True))
        return len(expired)

    def ack(self, dones: list[Done], owner: bytes) -> int:
        n = 0
        for d in dones:
            lease = self.owned(d.key, owner)
            if lease is not None:
                hid, h = self.unlease(d.key, lease, back=False)
                payload = lease.payload
            elif self.txn.get(b"L" + d.key, db=self.leases) is None:
                value = self.txn.pop(d.key, db=self.queue)  # back in the queue meanwhile
                if value is None:
                    continue
                hid = key_host(d.key)
                h = self.load_host(hid)
                h.queued = max(h.queued - 1, 0)
                payload = bytes(value)
            else:  # another process took it again: its answer counts
                continue
            n += 1
            self.outcome(hid, h, d, payload)
            self.settle(hid, h)
        return n

    def outcome(self, hid: bytes, h: Host, d: Done, payload: bytes) -> None:
        """Count a request's answer on its host and schedule its revisit."""
        if d.status is None:
            return
        if d.status == NO_ANSWER:  # its failure was counted when it happened
            self.keep_due(d)
            return
        h.fetched += 1
        h.failures = 0
        h.flags &= ~DOWN
        self.pace(hid, h, d)
        revisit = self.f.revisit
        if revisit is None or d.fp is None or d.status in THROTTLE_STATUSES:
            return
        fp = check_fp(d.fp)
        raw = self.txn.get(b"U" + fp, db=self.urls)
        old = None if raw is None else Url.unpack(raw)
        if old is not None and old.due_ms:
            self.txn.delete(b"T" + ms(old.due_ms) + fp, db=self.urls)
        if d.status in GONE_STATUSES:
            gone = (old.gone if old else 0) + 1
            interval = old.interval_ms if old else revisit.next_interval(None, False)
            digest = old.digest if old else 0
            if gone >= revisit.gone_after:  # not revisited again; kept so it stays known
                self.txn.put(b"U" + fp, Url(0, interval, digest, gone, hid, b"").pack(),
                             db=self.urls)
                return
        else:
            same = d.status == NOT_MODIFIED  # a conditional GET's answer: as it was
            gone, digest = 0, old.digest if same and old else d.digest
            if old is None:
                interval = revisit.next_interval(None, False)
            else:
                changed = not same and (d.changed if d.changed is not None
                                        else old.digest != d.digest)
                interval = revisit.next_interval(old.interval_ms, changed)
        again = payload if d.again is None else d.again
        self.schedule(fp, Url(0, interval, digest, gone, hid, again))

    def pace(self, hid: bytes, h: Host, d: Done) -> None:
        """Host h's delay after an answer: what a 429/503 added wanes (a tenth per other
        answer); with AutoThrottle and a latency, the delay is learnt from it (on a host
        that answered 429/503, coming down no faster than the wane), and its next allowed
        time moves with it (its last start plus the new delay, as Scrapy's slot does)."""
        waned = h.delay_ms
        if d.status not in THROTTLE_STATUSES:
            h.throttles = 0
            if h.delay_ms > h.crawl_ms:
                waned = h.crawl_ms + int((h.delay_ms - h.crawl_ms) * THROTTLE_KEEP)
        p = self.rule(hid)
        if p.auto is None or d.latency is None:
            h.delay_ms = waned
            return
        before = self.delay_ms(hid, h)
        floor = max(int(p.delay * 1000), h.crawl_ms)
        learnt = p.auto.next_ms(self.base_ms(hid, h), d.latency, d.status == 200, floor)
        learnt = min(learnt, max(int(p.max_delay * 1000), floor))
        h.delay_ms = min(max(learnt, waned) if h.flags & THROTTLED else learnt, 2**32 - 1)
        h.flags |= AUTO
        if h.next_ms:  # its last start plus the delay now in force
            h.next_ms = max(h.next_ms + self.delay_ms(hid, h) - before, 0)

    def schedule(self, fp: bytes, rec: Url) -> None:
        """Store fp's revisit record, due one interval from now."""
        rec.due_ms = self.now + max(rec.interval_ms, 1)
        self.txn.put(b"U" + fp, rec.pack(), db=self.urls)
        self.txn.put(b"T" + ms(rec.due_ms) + fp, b"", db=self.urls)

    def keep_due(self, d: Done) -> None:
        """A revisit whose download got no answer: due again after the same interval
        (a URL fetched before and not yet scheduled again; a new URL stays unknown)."""
        if self.f.revisit is None or d.fp is None:
            return
        fp = check_fp(d.fp)
        raw = self.txn.get(b"U" + fp, db=self.urls)
        if raw is None:
            return
        rec = Url.unpack(raw)
        if not rec.due_ms and rec.payload:
            self.schedule(fp, rec)

    def queue_due(self, limit: int) -> int:
        due = self.until(self.urls, b"T", self.now + 1, limit)
        if not due:
            return 0
        seq = self.next_seq()
        for tkey in due:
            fp = tkey[9:]
            self.txn.delete(tkey, db=self.urls)
            raw = self.txn.get(b"U" + fp, db=self.urls)
            if raw is None:
                continue
            rec = Url.unpack(raw)
            rec.due_ms = 0  # queued now: due again once fetched
            if not rec.payload:
                self.txn.put(b"U" + fp, rec.pack(), db=self.urls)
            elif self.enqueue(rec.hid, "", 0, seq, rec.payload) == DROPPED:
                self.schedule(fp, rec)  # its host is given up: due again one interval on
            else:
                self.txn.put(b"U" + fp, rec.pack(), db=self.urls)
                self.txn.put(fp, ms(self.now), db=self.seen)
                seq += 1
        self.txn.put(self.f._seq_key, U64.pack(seq - 1), db=self.meta)
        return len(due)

    def downloaded(self, keys: list[bytes], owner: bytes) -> int:
        """Owner's leases of keys whose download is over: their hosts' slots are free."""
        n = 0
        for k in keys:
            lease = self.owned(k, owner)
            if lease is not None and not lease.downloaded:
                self.txn.put(b"L" + k, Lease(lease.deadline_ms, lease.taken_ms, owner,
                                             lease.payload, True).pack(), db=self.leases)
                hid = key_host(k)
                h = self.load_host(hid)
                h.inflight = max(h.inflight - 1, 0)
                self.settle(hid, h)
                self.hold(hid, owner, -1)
                n += 1
        return n

    def release(self, keys: list[bytes], owner: bytes) -> int:
        n = 0
        for k in keys:
            lease = self.owned(k, owner)
            if lease is not None:
                self.settle(*self.unlease(k, lease, back=True))
                n += 1
        return n

    def renew(self, keys: list[bytes], owner: bytes, lease_ms: int) -> int:
        n = 0
        deadline = self.now + lease_ms
        for k in keys:
            lease = self.owned(k, owner)
            if lease is not None:
                self.txn.delete(b"D" + ms(lease.deadline_ms) + k, db=self.leases)
                self.txn.put(b"L" + k, Lease(deadline, lease.taken_ms, owner,
                                             lease.payload, lease.downloaded).pack(),
                             db=self.leases)
                self.txn.put(b"D" + ms(deadline) + k, b"", db=self.leases)
                n += 1
        return n

    def set_delay(self, name: str, delay_ms: int) -> None:
        hid, h = self.named_host(name)
        h.crawl_ms = min(delay_ms, 2**32 - 1)
        # a delay learnt from latencies stays, above the new floor
        h.delay_ms = max(h.delay_ms, h.crawl_ms) if h.flags & AUTO else h.crawl_ms
        h.flags |= DELAY_KNOWN
        # robots.txt was a request to the host, and the request that made the crawler
        # fetch it follows one delay later: the next take waits for both
        h.next_ms = max(h.next_ms, self.now + 2 * self.delay_ms(hid, h))
        self.settle(hid, h)

    def save_robots(self, origin: str, status: int, body: bytes) -> None:
        self.txn.put(robots_key(origin), ROBOTS.pack(self.now, status) + body[:ROBOTS_MAX],
                     db=self.hosts)

    def robots(self, origin: str, max_age_ms: int) -> tuple[int, bytes] | None:
        raw = self.txn.get(robots_key(origin), db=self.hosts)
        if raw is None or len(raw) < ROBOTS.size:
            return None
        fetched, status = ROBOTS.unpack_from(raw)
        if fetched + max_age_ms < self.now:
            return None
        return status, bytes(raw[ROBOTS.size:])

    def throttle(self, name: str, wait: float | None, status: int) -> float:
        hid, h = self.named_host(name)
        h.throttles += 1
        if status == 503:
            h.n503 += 1
        else:
            h.n429 += 1
        if wait is None:
            wait = self.policy.backoff_for(h.throttles)
        if self.now >= h.blocked_ms:  # a new episode (not one more answer of a burst)
            cap = int(self.policy.max_delay * 1000)
            h.delay_ms = min(max(2 * h.delay_ms, int(THROTTLED_DELAY * 1000)), cap)
        h.flags |= THROTTLED
        h.blocked_ms = max(h.blocked_ms, self.now + int(wait * 1000))
        self.settle(hid, h)
        return wait

    def set_paused(self, name: str | None, paused: bool) -> None:
        if name is None:
            if paused:
                self.txn.put(self.f._paused_key, b"1", db=self.meta)
            else:
                self.txn.delete(self.f._paused_key, db=self.meta)
            return
        hid, h = self.named_host(name)
        h.flags = (h.flags | PAUSED) if paused else (h.flags & ~PAUSED)
        self.settle(hid, h)

    def failed(self, name: str) -> tuple[float, int | None]:
        """A download of host name got no answer. Unless the host is blocked already (the
        same episode: downloads in flight together fail together), block it for the
        backoff, doubled for each episode in a row, and ask it one request at a time
        until it answers; at ``max_failures`` episodes in a row give it up for
        ``max_delay`` (its queue dropped). (seconds blocked from now, requests dropped:
        None when it is not given up now)."""
        hid, h = self.named_host(name)
        if self.now < h.blocked_ms:
            return (h.blocked_ms - self.now) / 1000, None
        h.failures += 1
        limit, dropped = self.policy.max_failures, None
        if limit and h.failures >= limit:
            wait = self.policy.max_delay
            h.flags |= DOWN
            dropped = self.drop_queue(hid)
            h.queued = 0
        else:
            wait = self.policy.backoff_for(h.failures)
        h.blocked_ms = self.now + int(wait * 1000)
        self.settle(hid, h)
        return wait, dropped

    def drop_queue(self, hid: bytes) -> int:
        """Delete every queued request of host hid (its record is the caller's); how many."""
        cur = self.txn.cursor(db=self.queue)
        n = 0
        while cur.set_range(hid) and bytes(cur.key())[:8] == hid:
            cur.delete()
            n += 1
        return n

    def drop_host(self, name: str) -> int:
        hid = host_id(name)
        n = self.drop_queue(hid)
        raw = self.txn.get(b"H" + hid, db=self.hosts)
        if raw is not None:
            h = Host.unpack(raw)
            h.queued = 0
            self.settle(hid, h)
        return n

    def clear(self) -> None:
        """Drop requests, leases, the seen set and revisits; keep each host's politeness
        (its next allowed time, delay, block and flags: the host was asked all the same)
        with nothing queued or in flight."""
        hosts = list(self.iter_hosts())
        for db in (self.seen, self.queue, self.leases, self.hosts, self.urls):
            self.txn.drop(db, delete=False)
        for hid, h in hosts:
            h.queued = h.inflight = 0
            h.where, h.slot = NOWHERE, b""
            self.save_host(hid, h)
        self.txn.delete(self.f._paused_key, db=self.meta)

    # --- reads ----------------------------------------------------------------------------

    def iter_hosts(self) -> Iterable[tuple[bytes, Host]]:
        """(id, record) of every host, in id order; the owners' counts beside them skipped."""
        cur = self.txn.cursor(db=self.hosts)
        if not cur.set_range(b"H"):
            return
        for k, v in cur:
            if bytes(k[:1]) != b"H":
                break
            if len(k) == HOST_KEY:
                yield bytes(k[1:]), Host.unpack(v)

    def iter_leases(self) -> Iterable[tuple[bytes, Lease]]:
        cur = self.txn.cursor(db=self.leases)
        if not cur.set_range(b"L"):
            return
        for k, v in cur:
            k = bytes(k)
            if k[:1] != b"L":
                break
            yield k[1:], Lease.unpack(v)

    def counts(self) -> dict[str, int]:
        leased = self.entries(self.leases) // 2
        due = 0
        cur = self.txn.cursor(db=self.urls)
        if cur.set_range(b"T"):
            for k in cur.iternext(values=False):
                if bytes(k[:1]) != b"T":
                    break
                due += 1
        return {"queued": self.entries(self.queue), "leased": leased,
                "seen": self.entries(self.seen), "due": due}

    def pending(self, owner: bytes | None) -> int:
        n = self.entries(self.queue) + self.entries(self.leases) // 2
        if owner is not None:
            n -= sum(1 for _, le in self.iter_leases() if le.owner == owner)
        return n

    def host_rows(self, limit: int | None) -> list[dict[str, Any]]:
        rows = []
        for hid, h in self.iter_hosts():
            rows.append({
                "host": h.name, "queued": h.queued, "in_flight": h.inflight,
                "next_allowed": h.next_ms / 1000 if h.next_ms else None,
                "blocked_until": h.blocked_ms / 1000 if h.blocked_ms else None,
                "delay": self.base_ms(hid, h) / 1000,
                "crawl_delay": h.crawl_ms / 1000 if h.flags & DELAY_KNOWN else None,
                "delay_learnt": bool(h.flags & AUTO),
                "fetched": h.fetched, "answers_429": h.n429, "answers_503": h.n503,
                "failures": h.failures, "down": bool(h.flags & DOWN),
                "paused": bool(h.flags & PAUSED)})
        rows.sort(key=lambda r: (-r["queued"], -r["in_flight"], r["host"]))
        return rows if limit is None else rows[:limit]

    def owners(self) -> list[dict[str, Any]]:
        owners: dict[str, dict[str, Any]] = {}
        for _, le in self.iter_leases():
            who = le.owner.decode("utf-8", "replace")
            o = owners.setdefault(who, {"owner": who, "leases": 0, "oldest_age": 0.0,
                                        "expired": 0})
            o["leases"] += 1
            o["oldest_age"] = max(o["oldest_age"], (self.now - le.taken_ms) / 1000)
            o["expired"] += le.deadline_ms < self.now
        return sorted(owners.values(), key=lambda o: o["owner"])

    def status(self, hosts: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"frontier": self.f.name, "version": FRONTIER_VERSION,
                               "now": self.now / 1000}
        out.update(self.counts())
        out["paused"] = self.txn.get(self.f._paused_key, db=self.meta) is not None
        out["owners"] = self.owners()
        out["next_wake"] = self.first_wait()
        rows = self.host_rows(None)
        out["host_count"] = len(rows)
        out["hosts"] = rows if hosts is None else rows[:hosts]
        return out
