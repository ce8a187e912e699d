"""The shared crawl frontier: queue, leases, seen set, hosts and revisits in one store.

Every call is one write transaction of the store (or a read), so a process killed at
any moment leaves a consistent frontier and loses nothing it was told was done; the
clock is read inside the transaction, after the write lock is held, so a lease is
never born expired however long the lock took. Invariants in every snapshot:

1. A queue key is in the queue or in the leases, never both, and never reused: the
   sequence only grows (``clear`` keeps it).
2. A host with queued requests is listed once: under ``R`` (may be fetched now, ordered
   by its first request: priority, then first in first out) or ``W`` (from a time on),
   or nowhere while it has its concurrency in flight or is paused; every change that
   could let it go lists it again.
3. A take starts no request to a host before its next allowed time (the last start
   plus its delay) nor inside a Retry-After, across all processes.
4. Every lease is listed under its deadline; a take moves the expired ones back
   first (a bounded number per call, oldest first), whatever the number of leases.

Memory is flat in the number of requests and hosts: takes and reclaims walk indexes
from their start.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import (
    CorruptStoreError,
    FormatVersionError,
    SimstoreTypeError,
    SimstoreValueError,
    StoreError,
)
from .records import (
    DELAY_KNOWN,
    NOWHERE,
    PAUSED,
    PREFIX,
    READY,
    THROTTLED,
    U64,
    WAITING,
    Host,
    Lease,
    Url,
    host_id,
    key_host,
    ms,
    queue_key,
)
from .rules import GONE_STATUSES, THROTTLE_STATUSES, THROTTLED_DELAY, Politeness, Revisit
from .upgrade import upgrade_v1

FRONTIER_VERSION = 2
META_DB = b"crawl.meta"
VERSION_KEY = b"version"
DEFAULT_NAME = "default"
PARTS = ("seen", "queue", "leases", "hosts", "urls")
RECLAIM_MAX = 256  # expired leases a transaction moves back, at most (oldest first)
PROMOTE_MAX = 1024  # waiting hosts a transaction lists as ready, at most
DUE_BATCH = 1000  # due URLs queued per transaction
MAX_LEASE = 30 * 86400.0  # seconds
MAX_FP = 255  # bytes of a fingerprint
MAX_OWNER = 1024  # bytes of an owner
_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")


def check_name(name: object) -> str:
    """A frontier name: 1-40 letters, digits, ``_`` or ``-``."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise SimstoreValueError(
            f"frontier name must be 1-40 letters, digits, '_' or '-' (got {name!r})")
    return name


@dataclass(frozen=True)
class Popped:
    """A leased request: its key (to acknowledge), payload and host."""

    key: bytes
    payload: bytes
    host: str = ""


@dataclass(frozen=True)
class Push:
    """A request to queue: unless ``only_new`` and its fingerprint was seen."""

    priority: int
    payload: bytes
    fp: bytes | None = None
    only_new: bool = True
    host: str = ""


@dataclass(frozen=True)
class Done:
    """A leased request the caller is done with, and what came of it: the HTTP status
    (None: no answer), and for revisits its fingerprint and whether it changed (None:
    judge by ``digest``, a 64-bit digest of what it answered)."""

    key: bytes
    status: int | None = None
    fp: bytes | None = None
    changed: bool | None = None
    digest: int = 0


@dataclass(frozen=True)
class Taken:
    """What a take gave: the requests leased, the keys the pushes got (None: seen), when
    the next waiting host may go (seconds since the epoch, None: none waits) and how many
    expired leases it moved back."""

    popped: list[Popped]
    pushed: list[bytes | None]
    wake: float | None
    reclaimed: int


def _check_seconds(value: object, name: str, hi: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (0 < value <= hi):  # type: ignore[operator]
        raise SimstoreValueError(f"{name!r} must be seconds in (0, {hi:g}] (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def _check_owner(owner: object) -> bytes:
    if not isinstance(owner, str) or not owner:
        raise SimstoreTypeError(f"'owner' must be a non-empty str (got {owner!r})")
    try:
        raw = owner.encode("utf-8")
    except UnicodeEncodeError:
        raise SimstoreValueError(f"'owner' must be encodable as UTF-8 (got {owner!r})") from None
    if len(raw) > MAX_OWNER:
        raise SimstoreValueError(f"'owner' must be at most {MAX_OWNER} bytes (got {len(raw)})")
    return raw


def _check_fp(fp: object) -> bytes:
    if not isinstance(fp, (bytes, bytearray, memoryview)):
        raise SimstoreTypeError(f"'fp' must be bytes (got {type(fp).__name__})")
    raw = bytes(fp)
    if not 1 <= len(raw) <= MAX_FP:
        raise SimstoreValueError(f"'fp' must be 1-{MAX_FP} bytes (got {len(raw)})")
    return raw


def _check_push(p: Push) -> Push:
    prio = p.priority
    if isinstance(prio, float) and prio.is_integer():
        prio = int(prio)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise SimstoreValueError(f"'priority' must be an int (got {p.priority!r})")
    if not isinstance(p.payload, (bytes, bytearray, memoryview)):
        raise SimstoreTypeError(f"'payload' must be bytes (got {type(p.payload).__name__})")
    if not isinstance(p.host, str):
        raise SimstoreTypeError(f"'host' must be a str (got {type(p.host).__name__})")
    fp = None if p.fp is None else _check_fp(p.fp)
    return Push(prio, bytes(p.payload), fp, bool(p.only_new), p.host)


def _check_keys(keys: Iterable[Any]) -> list[bytes]:
    out = []
    for k in keys:
        if not isinstance(k, (bytes, bytearray, memoryview)):
            raise SimstoreTypeError(f"a frontier key must be bytes (got {type(k).__name__})")
        out.append(bytes(k))
    return out


def _check_done(d: Any) -> Done:
    if not isinstance(d, Done):
        return Done(_check_keys([d])[0])
    _check_keys([d.key])
    if d.status is not None and (not isinstance(d.status, int) or isinstance(d.status, bool)):
        raise SimstoreTypeError(f"'status' must be an int or None (got {d.status!r})")
    if d.fp is not None:
        _check_fp(d.fp)
    dg = d.digest
    if not isinstance(dg, int) or isinstance(dg, bool) or not 0 <= dg < 2**64:
        raise SimstoreValueError(f"'digest' must be an int in [0, 2**64) (got {dg!r})")
    return d


def _check_host(host: object, none: bool = False) -> None:
    if not isinstance(host, str) and not (none and host is None):
        raise SimstoreTypeError(f"'host' must be a str (got {type(host).__name__})")


class Frontier:
    """The shared crawl frontier ``name`` of an open :class:`~simstore.SimStore`.

    ``clock`` (seconds, default :func:`time.time`) must be one machine's clock for every
    process sharing the frontier: leases and politeness are wall-clock times.
    ``expire``: a fingerprint seen longer ago counts as unseen (``math.inf``: never).
    ``politeness`` and ``revisit`` are this handle's rules (:mod:`simstore.crawl.rules`).
    The store handle stays the caller's: the frontier never opens or closes it.
    """

    def __init__(self, store: Any, name: str = DEFAULT_NAME, *,
                 clock: Callable[[], float] = time.time, expire: float | None = None,
                 politeness: Politeness | None = None, revisit: Revisit | None = None
                 ) -> None:
        if expire is not None:
            ok = isinstance(expire, (int, float)) and not isinstance(expire, bool)
            if not ok or not expire > 0:
                raise SimstoreValueError(f"'expire' must be seconds > 0 (got {expire!r})")
            if expire == math.inf:
                expire = None
        if politeness is not None and not isinstance(politeness, Politeness):
            raise SimstoreTypeError("'politeness' must be a simstore.crawl.Politeness")
        if revisit is not None and not isinstance(revisit, Revisit):
            raise SimstoreTypeError("'revisit' must be a simstore.crawl.Revisit")
        if getattr(store, "durability", None) == "unsafe":
            raise StoreError(
                f"store {store.path!r} is open with durable='unsafe', which an OS crash may "
                "corrupt: a crawl frontier is refused on it (open it with durable=False)")
        self.name = check_name(name)
        self.expire = expire
        self.politeness = politeness or Politeness()
        self.revisit = revisit
        self._clock = clock
        self._store = store
        self._seq_key = f"seq.{name}".encode()
        self._paused_key = f"paused.{name}".encode()
        self.reclaimed = 0  # expired leases this handle moved back to the queue
        names = [META_DB] + [f"{PREFIX}{name}.{part}".encode() for part in PARTS]
        self._dbs = store.databases(names, f"crawl frontier {name!r}", self._setup)

    # --- opening ---------------------------------------------------------------------

    def _setup(self, txn: Any, handles: list[Any], open_db: Callable[[bytes], Any]) -> None:
        """Write the version of a new frontier, upgrade a format-1 one in place, refuse
        any other."""
        meta = handles[0]
        raw = txn.get(VERSION_KEY, db=meta)
        version = FRONTIER_VERSION
        if raw is not None:
            try:
                version = json.loads(bytes(raw)).get("frontier")
            except (ValueError, AttributeError):
                raise CorruptStoreError(
                    f"store {self._dbs_path()!r}: the frontier's version record is not "
                    f"JSON ({bytes(raw)[:40]!r})") from None
        if version == 1:
            upgrade_v1(txn, meta, open_db)
        elif version != FRONTIER_VERSION:
            raise FormatVersionError(
                f"store {self._dbs_path()!r}: its crawl frontier is version {version!r}; "
                f"this simstore reads versions 1 and {FRONTIER_VERSION}")
        if raw is None or version == 1:
            txn.put(VERSION_KEY, json.dumps({"frontier": FRONTIER_VERSION}).encode(), db=meta)

    def _dbs_path(self) -> str:
        return str(self._store.path)

    def _now(self) -> int:
        now = self._clock()
        if not isinstance(now, (int, float)) or not math.isfinite(now) or now < 0:
            raise SimstoreValueError(f"the frontier's clock returned {now!r}, not a time")
        return int(now * 1000)

    def _write(self, op: Callable[..., Any], *args: Any) -> Any:
        return self._dbs.write(lambda txn, h: op(_Txn(self, txn, h), *args))

    def _read(self, op: Callable[..., Any], *args: Any) -> Any:
        return self._dbs.read(lambda txn, h: op(_Txn(self, txn, h), *args))

    # --- the seen set ----------------------------------------------------------------

    def seen_add_many(self, fps: Sequence[bytes]) -> list[bool]:
        """For each fingerprint, whether it was seen before; all are seen after (one commit)."""
        fps = [_check_fp(f) for f in fps]
        if not fps:
            return []
        return self._write(lambda t: [t.mark_seen(fp) for fp in fps])

    def seen_contains(self, fp: bytes) -> bool:
        """Whether fp is in the seen set (and seen within ``expire``; no write)."""
        fp = _check_fp(fp)
        return self._read(lambda t: t.is_seen(t.txn.get(fp, db=t.seen)))

    def seen_many(self, fps: Sequence[bytes]) -> list[bool]:
        """For each fingerprint, whether it is in the seen set (one read, no write)."""
        fps = [_check_fp(f) for f in fps]
        return self._read(lambda t: [t.is_seen(t.txn.get(fp, db=t.seen)) for fp in fps])

    def seen_count(self) -> int:
        """Fingerprints in the seen set."""
        return self._read(lambda t: t.entries(t.seen))

    # --- the queue ---------------------------------------------------------------------

    def push(self, priority: int, payload: bytes, fp: bytes | None = None, *,
             only_new: bool = True, host: str = "") -> bytes | None:
        """Queue payload for host (one commit), adding fp (if given) to the seen set in the
        same transaction; with ``only_new`` not if fp was seen. The key, or None."""
        return self.push_many([Push(priority, payload, fp, only_new, host)])[0]

    def push_many(self, items: Sequence[Push | tuple[Any, ...]]) -> list[bytes | None]:
        """:meth:`push` of each item (a :class:`Push` or its fields), in one commit."""
        pushes = [_check_push(p if isinstance(p, Push) else Push(*p)) for p in items]
        if not pushes:
            return []
        return self._write(lambda t: t.push(pushes))

    def take(self, n: int, lease_seconds: float, owner: str, *,
             push: Sequence[Push] = (), done: Iterable[Done | bytes] = (),
             downloaded: Iterable[bytes] = ()) -> Taken:
        """Lease up to n requests to owner for lease_seconds (one commit): in the same
        transaction queue ``push``, acknowledge ``done``, note the leases whose download
        is over (``downloaded``: their hosts' slots free, the leases kept until their
        acknowledgement), move expired leases back and list the hosts whose wait is over.
        Host-fair and polite: a request is taken only from a host that may be asked now,
        first the host whose first request comes first."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise SimstoreValueError(f"'n' must be an int >= 0 (got {n!r})")
        lease = _check_seconds(lease_seconds, "lease_seconds", MAX_LEASE)
        who = _check_owner(owner)
        pushes = [_check_push(p) for p in push]
        dones = [_check_done(d) for d in done]
        left = _check_keys(downloaded)
        taken: Taken = self._write(
            lambda t: t.take(n, int(lease * 1000), who, pushes, dones, left))
        self.reclaimed += taken.reclaimed
        return taken

    def pop(self, lease_seconds: float, owner: str, acks: Iterable[bytes] = ()
            ) -> Popped | None:
        """Lease the next request (see :meth:`take`) or None; acknowledges ``acks``."""
        popped = self.take(1, lease_seconds, owner, done=acks).popped
        return popped[0] if popped else None

    def ack(self, done: Iterable[Done | bytes], owner: str) -> int:
        """Drop owner's leases of these keys (recording what came of each); a key whose
        lease expired and went back to the queue is dropped from the queue (its work is
        done). How many were."""
        dones = [_check_done(d) for d in done]
        who = _check_owner(owner)
        if not dones:
            return 0
        return self._write(lambda t: t.ack(dones, who))

    def release(self, keys: Iterable[bytes], owner: str) -> int:
        """Give owner's leases of keys back to the queue now (work not done); how many."""
        keys, who = _check_keys(keys), _check_owner(owner)
        if not keys:
            return 0
        return self._write(lambda t: t.release(keys, who))

    def renew(self, keys: Iterable[bytes], lease_seconds: float, owner: str) -> int:
        """Move the deadline of owner's leases of keys to now + lease_seconds (the clock read
        inside the transaction); how many were still owner's."""
        keys, who = _check_keys(keys), _check_owner(owner)
        lease = _check_seconds(lease_seconds, "lease_seconds", MAX_LEASE)
        if not keys:
            return 0
        return self._write(lambda t: t.renew(keys, who, int(lease * 1000)))

    def reclaim(self) -> int:
        """Move expired leases back to the queue now (oldest first, a bounded number)."""
        n = self._write(lambda t: t.reclaim(RECLAIM_MAX))
        self.reclaimed += n
        return n

    def queue_due(self, limit: int | None = None) -> int:
        """Queue the URLs whose revisit is due now (commits of DUE_BATCH); how many."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                                  or limit < 0):
            raise SimstoreValueError(f"'limit' must be an int >= 0 or None (got {limit!r})")
        total = 0
        while limit is None or total < limit:
            batch = DUE_BATCH if limit is None else min(DUE_BATCH, limit - total)
            n = self._write(lambda t, b=batch: t.queue_due(b))
            total += n
            if n == 0:
                break
        return total

    # --- hosts ---------------------------------------------------------------------------

    def robots_read(self, host: str, crawl_delay: float | None) -> tuple[float, bool]:
        """Note that host's robots.txt was just fetched and says ``crawl_delay`` seconds
        (None: none): its delay from now on, capped (``max_delay``; NaN or negative: 0).
        (the delay applied, whether the value had to be changed)."""
        _check_host(host)
        changed = False
        seconds = 0.0
        if crawl_delay is not None:
            if not isinstance(crawl_delay, (int, float)) or math.isnan(crawl_delay):
                changed = True
            else:
                seconds, changed = self.politeness.cap(float(crawl_delay))
        self._write(lambda t: t.set_delay(host, int(seconds * 1000)))
        return seconds, changed

    def throttle(self, host: str, retry_after: float | None, status: int = 429
                 ) -> tuple[float, bool]:
        """Block host for every process: for ``retry_after`` seconds (capped), or without
        one for the backoff, doubled for each 429/503 in a row. (seconds blocked, whether
        retry_after had to be capped)."""
        _check_host(host)
        capped = False
        wait = None
        if retry_after is not None:
            ok = isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool)
            if not ok:
                raise SimstoreTypeError(
                    f"'retry_after' must be seconds or None (got {retry_after!r})")
            wait, capped = self.politeness.cap(float(retry_after))
        return self._write(lambda t: t.throttle(host, wait, status)), capped

    def pause(self, host: str | None = None) -> None:
        """Take nothing more (from host, or from the whole frontier) until :meth:`resume`."""
        _check_host(host, none=True)
        self._write(lambda t: t.set_paused(host, True))

    def resume(self, host: str | None = None) -> None:
        """Undo :meth:`pause` (of host, or of the whole frontier)."""
        _check_host(host, none=True)
        self._write(lambda t: t.set_paused(host, False))

    def drop_host(self, host: str) -> int:
        """Drop every queued request of host (its leases run on); how many."""
        _check_host(host)
        return self._write(lambda t: t.drop_host(host))

    # --- views -----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """queued, leased, seen and due (revisits scheduled) entries."""
        return self._read(lambda t: t.counts())

    def pending(self, owner: str | None = None) -> int:
        """Queued requests plus leases (expired ones too: they come back), leaving out
        those that owner holds."""
        who = None if owner is None else _check_owner(owner)
        return self._read(lambda t: t.pending(who))

    def leases(self) -> list[tuple[bytes, int, str]]:
        """(key, deadline ms, owner) of every lease, in key order."""
        return [(k, le.deadline_ms, le.owner.decode("utf-8", "replace"))
                for k, le in self._read(lambda t: list(t.iter_leases()))]

    def hosts(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every host's state (name, queued, in flight, next allowed and blocked-until in
        seconds since the epoch, delay, fetched, 429s, 503s, paused), most queued first."""
        return self._read(lambda t: t.host_rows(limit))

    def status(self, hosts: int | None = 50) -> dict[str, Any]:
        """The frontier at a glance: counts, leases by owner, paused, the first hosts."""
        return self._read(lambda t: t.status(hosts))

    def owners(self) -> list[dict[str, Any]]:
        """Who holds leases: per owner, how many, the oldest one's age in seconds and how
        many ran out."""
        return self._read(lambda t: t.owners())

    def next_wake(self) -> float | None:
        """When the first waiting host may go (seconds since the epoch), or None."""
        return self._read(lambda t: t.first_wait())

    def __len__(self) -> int:
        """Queued requests (leases not counted)."""
        return self._read(lambda t: t.entries(t.queue))

    def clear(self) -> None:
        """Empty the queue, leases, seen set and revisits (a new crawl into the same
        store); hosts keep their politeness, and the sequence goes on, so no key is ever
        reused."""
        self._write(lambda t: t.clear())


class _Txn:
    """One transaction on a frontier's databases: the operations of :class:`Frontier`."""

    def __init__(self, f: Frontier, txn: Any, handles: list[Any]) -> None:
        self.f = f
        self.txn = txn
        self.meta, self.seen, self.queue, self.leases, self.hosts, self.urls = handles
        self.now = f._now()  # read with the write lock held: no lease is born expired
        self.policy = f.politeness
        expire = f.expire
        self.since = None if expire is None else self.now - int(expire * 1000)

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

    def save_host(self, hid: bytes, h: Host) -> None:
        self.txn.put(b"H" + hid, h.pack(), db=self.hosts)

    def head(self, hid: bytes) -> bytes | None:
        """The first queue key of host hid (highest priority, then oldest)."""
        cur = self.txn.cursor(db=self.queue)
        if not cur.set_range(hid):
            return None
        key = bytes(cur.key())
        return key if key[:8] == hid and len(key) == 24 else None

    def delay_ms(self, h: Host) -> int:
        """The spacing of host h's requests: its delay, plus the margin when it has one."""
        d = max(int(self.policy.delay * 1000), h.delay_ms)
        return d + int(self.policy.margin * 1000) if d else 0

    def place(self, hid: bytes, h: Host) -> None:
        """List host h where it belongs now (invariant 2); the caller saves it."""
        if h.where != NOWHERE:
            self.txn.delete(h.slot, db=self.hosts)
            h.where, h.slot = NOWHERE, b""
        if h.queued <= 0 or h.flags & PAUSED:
            return
        conc = self.policy.concurrency + self.policy.prefetch
        if (self.policy.robots and not h.flags & DELAY_KNOWN) or h.flags & THROTTLED:
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
        key = queue_key(hid, priority, seq)
        self.txn.put(key, payload, db=self.queue)
        self.requeued(hid, key, name)
        return key

    def requeued(self, hid: bytes, key: bytes, name: str | None = None) -> None:
        """Count a request (re)entering host hid's queue under key; list the host anew
        when it was nowhere or the request comes before its listed first one."""
        h = self.load_host(hid, name)
        h.queued += 1
        if h.where == NOWHERE or (h.where == READY and key[8:24] < h.slot[1:17]):
            self.place(hid, h)
        self.save_host(hid, h)

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
        paused = n and self.txn.get(self.f._paused_key, db=self.meta) is not None
        cur = self.txn.cursor(db=self.hosts)
        while len(popped) < n and not paused:
            if not cur.set_range(b"R"):
                break
            rkey = bytes(cur.key())
            if rkey[:1] != b"R":
                break
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
            payload = bytes(self.txn.pop(key, db=self.queue))
            deadline = self.now + lease_ms
            self.txn.put(b"L" + key, Lease(deadline, self.now, owner, payload).pack(),
                         db=self.leases)
            self.txn.put(b"D" + ms(deadline) + key, b"", db=self.leases)
            h.queued = max(h.queued - 1, 0)
            h.inflight += 1
            h.next_ms = self.now + self.delay_ms(h)
            self.settle(hid, h)
            popped.append(Popped(key, payload, h.name))
        wake = self.first_wait() if len(popped) < n else None
        return Taken(popped, pushed, wake, reclaimed)

    def first_wait(self) -> float | None:
        cur = self.txn.cursor(db=self.hosts)
        if cur.set_range(b"W"):
            key = bytes(cur.key())
            if key[:1] == b"W":
                return U64.unpack_from(key, 1)[0] / 1000
        return None

    def promote(self, limit: int) -> int:
        """List the waiting hosts whose time has come as ready."""
        cur = self.txn.cursor(db=self.hosts)
        due = []
        if cur.set_range(b"W"):
            for key in cur.iternext(values=False):
                key = bytes(key)
                if key[:1] != b"W" or U64.unpack_from(key, 1)[0] > self.now or len(due) >= limit:
                    break
                due.append(key)
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
        cur = self.txn.cursor(db=self.leases)
        expired = []
        if cur.set_range(b"D"):
            for dkey in cur.iternext(values=False):
                dkey = bytes(dkey)
                if dkey[:1] != b"D" or U64.unpack_from(dkey, 1)[0] >= self.now:
                    break
                if len(expired) >= limit:
                    break
                expired.append(dkey)
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
        h.fetched += 1
        if d.status not in THROTTLE_STATUSES:
            h.throttles = 0
        revisit = self.f.revisit
        if revisit is None or d.fp is None or d.status in THROTTLE_STATUSES:
            return
        fp = _check_fp(d.fp)
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
            gone, digest = 0, d.digest
            if old is None:
                interval = revisit.next_interval(None, False)
            else:
                changed = d.changed if d.changed is not None else old.digest != d.digest
                interval = revisit.next_interval(old.interval_ms, changed)
        due = self.now + max(interval, 1)
        self.txn.put(b"U" + fp, Url(due, interval, digest, gone, hid, payload).pack(),
                     db=self.urls)
        self.txn.put(b"T" + ms(due) + fp, b"", db=self.urls)

    def queue_due(self, limit: int) -> int:
        cur = self.txn.cursor(db=self.urls)
        due = []
        if cur.set_range(b"T"):
            for tkey in cur.iternext(values=False):
                tkey = bytes(tkey)
                if tkey[:1] != b"T" or U64.unpack_from(tkey, 1)[0] > self.now:
                    break
                if len(due) >= limit:
                    break
                due.append(tkey)
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
            self.txn.put(b"U" + fp, rec.pack(), db=self.urls)
            if rec.payload:
                self.txn.put(fp, ms(self.now), db=self.seen)
                self.enqueue(rec.hid, "", 0, seq, rec.payload)
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
        hid = host_id(name)
        h = self.load_host(hid, name)
        h.name = h.name or name
        h.delay_ms = min(delay_ms, 2**32 - 1)
        h.flags |= DELAY_KNOWN
        # robots.txt was a request to the host, and the request that made the crawler
        # fetch it follows one delay later: the next take waits for both
        h.next_ms = max(h.next_ms, self.now + 2 * self.delay_ms(h))
        self.settle(hid, h)

    def throttle(self, name: str, wait: float | None, status: int) -> float:
        hid = host_id(name)
        h = self.load_host(hid, name)
        h.name = h.name or name
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
        hid = host_id(name)
        h = self.load_host(hid, name)
        h.name = h.name or name
        h.flags = (h.flags | PAUSED) if paused else (h.flags & ~PAUSED)
        self.settle(hid, h)

    def drop_host(self, name: str) -> int:
        hid = host_id(name)
        cur = self.txn.cursor(db=self.queue)
        n = 0
        while cur.set_range(hid) and bytes(cur.key())[:8] == hid:
            cur.delete()
            n += 1
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
        hosts = []
        cur = self.txn.cursor(db=self.hosts)
        if cur.set_range(b"H"):
            for k, v in cur:
                if bytes(k[:1]) != b"H":
                    break
                hosts.append((bytes(k), Host.unpack(v)))
        for db in (self.seen, self.queue, self.leases, self.hosts, self.urls):
            self.txn.drop(db, delete=False)
        for k, h in hosts:
            h.queued = h.inflight = 0
            h.where, h.slot = NOWHERE, b""
            self.txn.put(k, h.pack(), db=self.hosts)
        self.txn.delete(self.f._paused_key, db=self.meta)

    # --- reads ----------------------------------------------------------------------------

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
        cur = self.txn.cursor(db=self.hosts)
        if cur.set_range(b"H"):
            for k, v in cur:
                if bytes(k[:1]) != b"H":
                    break
                h = Host.unpack(v)
                rows.append({
                    "host": h.name, "queued": h.queued, "in_flight": h.inflight,
                    "next_allowed": h.next_ms / 1000 if h.next_ms else None,
                    "blocked_until": h.blocked_ms / 1000 if h.blocked_ms else None,
                    "delay": max(self.policy.delay, h.delay_ms / 1000),
                    "crawl_delay": h.delay_ms / 1000 if h.flags & DELAY_KNOWN else None,
                    "fetched": h.fetched, "answers_429": h.n429, "answers_503": h.n503,
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

