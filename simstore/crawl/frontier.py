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
   plus its delay) nor while it is blocked (a Retry-After, a backoff), across all
   processes.
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
from typing import Any

from ..exceptions import (
    CorruptStoreError,
    FormatVersionError,
    SimstoreTypeError,
    SimstoreValueError,
    StoreError,
)
from .calls import (
    MAX_LEASE,
    Done,
    Popped,
    Push,
    Taken,
    check_done,
    check_fp,
    check_host,
    check_keys,
    check_origin,
    check_owner,
    check_push,
    check_seconds,
)
from .records import FRONTIER_VERSION, PREFIX, host_id
from .rules import Politeness, Revisit
from .transaction import RECLAIM_MAX, Txn
from .upgrade import upgrade_v1

META_DB = b"crawl.meta"
VERSION_KEY = b"version"
DEFAULT_NAME = "default"
PARTS = ("seen", "queue", "leases", "hosts", "urls")
DUE_BATCH = 1000  # due URLs queued per transaction
_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")

__all__ = ["DEFAULT_NAME", "Done", "Frontier", "Popped", "Push", "Taken", "check_name"]


def check_name(name: object) -> str:
    """A frontier name: 1-40 letters, digits, ``_`` or ``-``."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise SimstoreValueError(
            f"frontier name must be 1-40 letters, digits, '_' or '-' (got {name!r})")
    return name


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
        self._rules = {host_id(n): self.politeness.for_host(n) for n in self.politeness.hosts}
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
        return self._dbs.write(lambda txn, h: op(Txn(self, txn, h), *args))

    def _read(self, op: Callable[..., Any], *args: Any) -> Any:
        return self._dbs.read(lambda txn, h: op(Txn(self, txn, h), *args))

    # --- the seen set ----------------------------------------------------------------

    def seen_add_many(self, fps: Sequence[bytes]) -> list[bool]:
        """For each fingerprint, whether it was seen before; all are seen after (one commit)."""
        fps = [check_fp(f) for f in fps]
        if not fps:
            return []
        return self._write(lambda t: [t.mark_seen(fp) for fp in fps])

    def seen_contains(self, fp: bytes) -> bool:
        """Whether fp is in the seen set (and seen within ``expire``; no write)."""
        fp = check_fp(fp)
        return self._read(lambda t: t.is_seen(t.txn.get(fp, db=t.seen)))

    def seen_many(self, fps: Sequence[bytes]) -> list[bool]:
        """For each fingerprint, whether it is in the seen set (one read, no write)."""
        fps = [check_fp(f) for f in fps]
        return self._read(lambda t: [t.is_seen(t.txn.get(fp, db=t.seen)) for fp in fps])

    def seen_count(self) -> int:
        """Fingerprints in the seen set."""
        return self._read(lambda t: t.entries(t.seen))

    # --- the queue ---------------------------------------------------------------------

    def push(self, priority: int, payload: bytes, fp: bytes | None = None, *,
             only_new: bool = True, host: str = "") -> bytes | None:
        """Queue payload for host (one commit), adding fp (if given) to the seen set in the
        same transaction; with ``only_new`` not if fp was seen. The key; None when fp was
        seen; ``DROPPED`` (``b""``) while host is given up (the request is not queued)."""
        return self.push_many([Push(priority, payload, fp, only_new, host)])[0]

    def push_many(self, items: Sequence[Push | tuple[Any, ...]]) -> list[bytes | None]:
        """:meth:`push` of each item (a :class:`Push` or its fields), in one commit."""
        pushes = [check_push(p if isinstance(p, Push) else Push(*p)) for p in items]
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
        lease = check_seconds(lease_seconds, "lease_seconds", MAX_LEASE)
        who = check_owner(owner)
        pushes = [check_push(p) for p in push]
        dones = [check_done(d) for d in done]
        left = check_keys(downloaded)
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
        dones = [check_done(d) for d in done]
        who = check_owner(owner)
        if not dones:
            return 0
        return self._write(lambda t: t.ack(dones, who))

    def release(self, keys: Iterable[bytes], owner: str) -> int:
        """Give owner's leases of keys back to the queue now (work not done); how many."""
        keys, who = check_keys(keys), check_owner(owner)
        if not keys:
            return 0
        return self._write(lambda t: t.release(keys, who))

    def renew(self, keys: Iterable[bytes], lease_seconds: float, owner: str) -> int:
        """Move the deadline of owner's leases of keys to now + lease_seconds (the clock read
        inside the transaction); how many were still owner's."""
        keys, who = check_keys(keys), check_owner(owner)
        lease = check_seconds(lease_seconds, "lease_seconds", MAX_LEASE)
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

    def robots_read(self, host: str, crawl_delay: float | None, *,
                    origin: str | None = None, status: int = 200, body: bytes = b""
                    ) -> tuple[float, bool]:
        """Note that host's robots.txt was just fetched and says ``crawl_delay`` seconds
        (None: none): its delay from now on, capped (``max_delay``; NaN or negative: 0).
        With ``origin`` (``scheme://host[:port]``), the answer (``status``, ``body``: its
        first ROBOTS_MAX bytes) is kept for every process (:meth:`robots_txt`), in the same
        commit. (the delay applied, whether the value had to be changed)."""
        check_host(host)
        if origin is not None:
            check_origin(origin, status, body)
        changed = False
        seconds = 0.0
        if crawl_delay is not None:
            if not isinstance(crawl_delay, (int, float)) or math.isnan(crawl_delay):
                changed = True
            else:
                seconds, changed = self.politeness.cap(float(crawl_delay))
        def write(t: Txn) -> None:
            t.set_delay(host, int(seconds * 1000))
            if origin is not None:
                t.save_robots(origin, status, bytes(body))

        self._write(write)
        return seconds, changed

    def robots_txt(self, origin: str, max_age: float) -> tuple[int, bytes] | None:
        """The robots.txt of origin (``scheme://host[:port]``) a process of the crawl
        fetched at most ``max_age`` seconds ago: (status, body), or None."""
        check_origin(origin)
        age = check_seconds(max_age, "max_age", MAX_LEASE)
        return self._read(lambda t: t.robots(origin, int(age * 1000)))

    def throttle(self, host: str, retry_after: float | None, status: int = 429
                 ) -> tuple[float, bool]:
        """Block host for every process: for ``retry_after`` seconds (capped), or without
        one for the backoff, doubled for each 429/503 in a row. (seconds blocked, whether
        retry_after had to be capped)."""
        check_host(host)
        capped = False
        wait = None
        if retry_after is not None:
            ok = isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool)
            if not ok:
                raise SimstoreTypeError(
                    f"'retry_after' must be seconds or None (got {retry_after!r})")
            wait, capped = self.politeness.cap(float(retry_after))
        return self._write(lambda t: t.throttle(host, wait, status)), capped

    def failed(self, host: str) -> tuple[float, int | None]:
        """A download of host got no answer (refused, timed out, no DNS). Unless the host
        is blocked already (downloads in flight together fail together: one episode),
        block it for every process for the backoff, doubled for each episode in a row,
        one request at a time until it answers; at ``max_failures`` episodes in a row
        give it up for ``max_delay``: its queued requests dropped, and those queued for it
        meanwhile. (seconds it is blocked from now, requests dropped: None when it is not
        given up now)."""
        check_host(host)
        return self._write(lambda t: t.failed(host))

    def pause(self, host: str | None = None) -> None:
        """Take nothing more (from host, or from the whole frontier) until :meth:`resume`."""
        check_host(host, none=True)
        self._write(lambda t: t.set_paused(host, True))

    def resume(self, host: str | None = None) -> None:
        """Undo :meth:`pause` (of host, or of the whole frontier)."""
        check_host(host, none=True)
        self._write(lambda t: t.set_paused(host, False))

    def drop_host(self, host: str) -> int:
        """Drop every queued request of host (its leases run on); how many."""
        check_host(host)
        return self._write(lambda t: t.drop_host(host))

    # --- views -----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """queued, leased, seen and due (revisits scheduled) entries."""
        return self._read(lambda t: t.counts())

    def pending(self, owner: str | None = None) -> int:
        """Queued requests plus leases (expired ones too: they come back), leaving out
        those that owner holds."""
        who = None if owner is None else check_owner(owner)
        return self._read(lambda t: t.pending(who))

    def leases(self) -> list[tuple[bytes, int, str]]:
        """(key, deadline ms, owner) of every lease, in key order."""
        return [(k, le.deadline_ms, le.owner.decode("utf-8", "replace"))
                for k, le in self._read(lambda t: list(t.iter_leases()))]

    def hosts(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every host's state (name, queued, in flight, next allowed and blocked-until in
        seconds since the epoch, delay and whether AutoThrottle learnt it, fetched, 429s,
        503s, paused), most queued first."""
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
