"""A crawl frontier inside a store: a durable request queue, leases and a seen set, shared
by every process that opens the store.

The frontier lives in the store's own LMDB environment, in named databases whose
names start with ``crawl.`` (reserved for it; docs/crawl.md gives every byte):

- ``crawl.meta``: ``version`` -> JSON ``{"frontier": 1}``; ``seq.<name>`` -> the
  frontier's last sequence number (8 bytes big-endian).
- ``crawl.<name>.seen``: request fingerprint -> when it was (last) seen: ms since the
  epoch, 8 bytes big-endian. With ``expire``, one seen longer ago counts as unseen.
- ``crawl.<name>.queue``: :func:`queue_key` (priority, then sequence) -> payload.
- ``crawl.<name>.leases``: the same key -> deadline (ms since the epoch, 8 bytes
  big-endian), owner length (2 bytes), owner (UTF-8), payload.

Invariants a caller relies on: every call is one write transaction (one commit:
the store's ``durable`` decides the fsync), so a process killed at any moment
loses nothing it was told was done; a key is in the queue or in the leases, never
both; :meth:`Frontier.pop` hands each queued entry to one caller, and a lease not
acknowledged by its deadline goes back to the queue under its own key (so to its
old place), taken again by the next pop of any process. Payloads are opaque bytes.
Nothing accumulates in Python: memory is flat in the number of requests.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb

from ..exceptions import CorruptStoreError, FormatVersionError, SimstoreValueError, StoreError

FRONTIER_VERSION = 1
META_DB = b"crawl.meta"
VERSION_KEY = b"version"
PREFIX = "crawl."
DEFAULT_NAME = "default"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_PRIO_MAX = 2**63 - 1
_PRIO_MIN = -(2**63)
RECLAIM_SCAN = 256  # leases a pop looks at for expired ones, at most
RECLAIM_EVERY = 1.0  # seconds between two scans of the leases when the queue is not empty


def check_name(name: object) -> str:
    """A frontier name: 1-40 letters, digits, ``_`` or ``-``."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise SimstoreValueError(
            f"frontier name must be 1-40 letters, digits, '_' or '-' (got {name!r})")
    return name


def queue_key(priority: int, seq: int) -> bytes:
    """The queue key: 2**63 - 1 - priority (highest priority sorts first), then seq
    (first in, first out within a priority), both 8 bytes big-endian."""
    p = min(max(int(priority), _PRIO_MIN), _PRIO_MAX)
    return (_PRIO_MAX - p).to_bytes(8, "big") + seq.to_bytes(8, "big")


def key_priority(key: bytes) -> int:
    """The priority a queue key was made with (clamped to 64 bits)."""
    return _PRIO_MAX - int.from_bytes(key[:8], "big")


def lease_value(deadline_ms: int, owner: bytes, payload: bytes) -> bytes:
    """A lease record: deadline, owner length, owner, payload."""
    return deadline_ms.to_bytes(8, "big") + len(owner).to_bytes(2, "big") + owner + payload


def parse_lease(value: bytes) -> tuple[int, bytes, bytes]:
    """(deadline ms, owner, payload) of a lease record."""
    if len(value) < 10:
        raise CorruptStoreError(f"a frontier lease record of {len(value)} bytes (at least 10)")
    n = int.from_bytes(value[8:10], "big")
    return int.from_bytes(value[:8], "big"), bytes(value[10:10 + n]), bytes(value[10 + n:])


@dataclass(frozen=True)
class Popped:
    """A leased queue entry: its key (to ack) and payload."""

    key: bytes
    payload: bytes


class _Dbs:
    """The DBI handles of one frontier in one lmdb environment."""

    def __init__(self, env: Any, seq_key: bytes, meta: Any, seen: Any, queue: Any,
                 leases: Any) -> None:
        self.env = env
        self.seq_key = seq_key
        self.meta = meta
        self.seen = seen
        self.queue = queue
        self.leases = leases


class Frontier:
    """The shared crawl frontier ``name`` of an open :class:`~simstore.SimStore`.

    ``clock`` (seconds, default :func:`time.time`) decides lease deadlines and when a
    fingerprint was seen; every process sharing a frontier must agree on it (one
    machine's clock). ``expire`` (seconds): a fingerprint seen longer ago counts as
    unseen (a recrawl fetches its request again). The store
    handle stays the caller's: the frontier never opens or closes it.
    """

    def __init__(self, store: Any, name: str = DEFAULT_NAME,
                 clock: Callable[[], float] = time.time, expire: float | None = None) -> None:
        if expire is not None and not (isinstance(expire, (int, float)) and expire > 0):
            raise SimstoreValueError(f"'expire' must be seconds > 0 (got {expire!r})")
        self.expire = expire
        self.name = check_name(name)
        self._store = store
        self._clock = clock
        self._dbs: _Dbs | None = None
        self._seq_key = f"seq.{name}".encode()
        self._next_scan = 0.0
        self.reclaimed = 0  # expired leases this handle moved back to the queue
        self._names = [f"{PREFIX}{name}.{part}".encode() for part in ("seen", "queue", "leases")]
        with store._env.lock:
            self._handles()

    # --- handles --------------------------------------------------------------------

    def _handles(self) -> _Dbs:
        """The DBI handles, opened (and the databases created) after each (re)open of the
        environment: handles opened in a committed transaction last as long as it.
        The caller holds the environment's lock."""
        env = self._store._env
        live = env.live()
        if self._dbs is not None and self._dbs.env is live:
            return self._dbs
        self._dbs = env.write(self._create)
        return self._dbs

    def _create(self, txn: Any) -> _Dbs:
        env = self._store._env.env
        try:
            meta = env.open_db(META_DB, txn=txn, create=True)
            dbs = [env.open_db(n, txn=txn, create=True) for n in self._names]
        except lmdb.DbsFullError as exc:
            raise StoreError(
                f"store {self._store.path!r}: no room for frontier {self.name!r} (LMDB's "
                "limit of named databases); use fewer frontier names in this store") from exc
        raw = txn.get(VERSION_KEY, db=meta)
        if raw is None:
            txn.put(VERSION_KEY, json.dumps({"frontier": FRONTIER_VERSION}).encode(), db=meta)
        else:
            try:
                version = json.loads(bytes(raw)).get("frontier")
            except (ValueError, AttributeError):
                raise CorruptStoreError(
                    f"store {self._store.path!r}: the frontier's version record is not "
                    f"JSON ({bytes(raw)[:40]!r})") from None
            if version != FRONTIER_VERSION:
                raise FormatVersionError(
                    f"store {self._store.path!r}: its crawl frontier is version {version!r}; "
                    f"this simstore reads version {FRONTIER_VERSION} (use a matching simstore)")
        return _Dbs(env, self._seq_key, meta, *dbs)

    def _write(self, op: Callable[..., Any], *args: Any) -> Any:
        env = self._store._env
        with env.lock:  # the handles and the transaction of one environment
            return env.write(op, self._handles(), *args)

    def _read(self, op: Callable[..., Any], *args: Any) -> Any:
        env = self._store._env
        with env.lock:
            dbs = self._handles()
            with env.reading() as txn:
                return op(txn, dbs, *args)

    # --- the seen set -----------------------------------------------------------------

    def seen_add_many(self, fps: Sequence[bytes]) -> list[bool]:
        """For each fingerprint, whether it was seen before; all are seen after (one commit)."""
        fps = [bytes(f) for f in fps]
        if not fps:
            return []
        return self._write(_seen_add, fps, *self._times())

    def seen_contains(self, fp: bytes) -> bool:
        """Whether fp is in the seen set (and seen within ``expire``; no write)."""
        since = self._times()[1]
        return self._read(lambda txn, d: _is_seen(txn.get(bytes(fp), db=d.seen), since))

    def _times(self) -> tuple[int, int | None]:
        """(now, the oldest time a fingerprint seen still counts, or None), in ms."""
        now = self._clock()
        since = None if self.expire is None else int((now - self.expire) * 1000)
        return int(now * 1000), since

    def seen_count(self) -> int:
        """Fingerprints in the seen set."""
        return self._read(lambda txn, d: int(txn.stat(d.seen)["entries"]))

    # --- the queue ----------------------------------------------------------------------

    def push(self, priority: int, payload: bytes, fp: bytes | None = None, *,
             only_new: bool = True) -> bytes | None:
        """Queue payload (one commit) and add fp (if given) to the seen set in the same
        transaction; with ``only_new`` (default), not if fp was seen. The new key, or None
        when fp was seen and only_new."""
        return self.push_many([(priority, payload, fp, only_new)])[0]

    def push_many(self, items: Sequence[tuple[int, bytes, bytes | None, bool]]
                  ) -> list[bytes | None]:
        """:meth:`push` of each (priority, payload, fp or None, only_new), in one commit."""
        if not items:
            return []
        return self._write(_push, list(items), *self._times())

    def pop(self, lease_seconds: float, owner: str, acks: Iterable[bytes] = ()
            ) -> Popped | None:
        """Lease the first queued entry to owner for lease_seconds (one commit), or None
        when the queue is empty. Acknowledges ``acks`` and moves expired leases back to
        the queue in the same transaction (a bounded number per call)."""
        if not lease_seconds > 0:
            raise SimstoreValueError(f"lease_seconds must be > 0 (got {lease_seconds!r})")
        now = self._clock()
        scan = now >= self._next_scan
        popped, reclaimed = self._write(_pop, int(now * 1000), int(lease_seconds * 1000),
                                        owner.encode(), list(acks), scan)
        if scan or reclaimed:
            self._next_scan = now + RECLAIM_EVERY
        self.reclaimed += reclaimed
        return popped

    def ack(self, keys: Iterable[bytes], owner: str) -> int:
        """Drop the leases of keys that owner holds; a key whose lease expired and went
        back to the queue is dropped from the queue (its work is done). How many were."""
        keys = list(keys)
        if not keys:
            return 0
        return self._write(_ack, keys, owner.encode())

    def release(self, keys: Iterable[bytes], owner: str) -> int:
        """Give owner's leases of keys back to the queue now (work not done); how many."""
        keys = list(keys)
        if not keys:
            return 0
        return self._write(_release, keys, owner.encode())

    def renew(self, keys: Iterable[bytes], lease_seconds: float, owner: str) -> int:
        """Move the deadline of owner's leases of keys to now + lease_seconds; how many
        were still owner's."""
        keys = list(keys)
        if not keys:
            return 0
        deadline = int((self._clock() + lease_seconds) * 1000)
        return self._write(_renew, keys, owner.encode(), deadline)

    def reclaim(self) -> int:
        """Move every expired lease (a bounded number) back to the queue now; how many."""
        n = self._write(_reclaim, int(self._clock() * 1000))
        self.reclaimed += n
        return n

    def pending(self, owner: str | None = None) -> int:
        """Queued entries plus leases (expired ones too: they come back), leaving out those
        that owner holds."""
        return self._read(_pending, None if owner is None else owner.encode())

    def leases(self) -> list[tuple[bytes, int, str]]:
        """(key, deadline ms, owner) of every lease, in key order."""
        def op(txn: Any, d: _Dbs) -> list[tuple[bytes, int, str]]:
            out = []
            for k, v in txn.cursor(db=d.leases):
                deadline, who, _ = parse_lease(bytes(v))
                out.append((bytes(k), deadline, who.decode("utf-8", "replace")))
            return out
        return self._read(op)

    def __len__(self) -> int:
        """Queued entries (leases not counted)."""
        return self._read(lambda txn, d: int(txn.stat(d.queue)["entries"]))

    def clear(self) -> None:
        """Empty the queue, the leases and the seen set (a new crawl into the same store)."""
        def op(txn: Any, d: _Dbs) -> None:
            for db in (d.seen, d.queue, d.leases):
                txn.drop(db, delete=False)
            txn.delete(self._seq_key, db=d.meta)
        self._write(op)


# --- transactions (txn, dbs, ...) -------------------------------------------------------


def _is_seen(value: bytes | None, since: int | None) -> bool:
    """Whether a seen-set value counts as seen (seen at or after since, ms)."""
    if value is None:
        return False
    return since is None or int.from_bytes(value, "big") >= since


def _mark_seen(txn: Any, d: _Dbs, fp: bytes, now: int, since: int | None) -> bool:
    """Whether fp counted as seen; it is seen (now, unless it counted) after."""
    if _is_seen(txn.get(fp, db=d.seen), since):
        return True
    txn.put(fp, now.to_bytes(8, "big"), db=d.seen)
    return False


def _seen_add(txn: Any, d: _Dbs, fps: list[bytes], now: int, since: int | None
              ) -> list[bool]:
    return [_mark_seen(txn, d, fp, now, since) for fp in fps]


def _next_seq(txn: Any, d: _Dbs) -> int:
    raw = txn.get(d.seq_key, db=d.meta)
    return 1 if raw is None else int.from_bytes(raw, "big") + 1


def _push(txn: Any, d: _Dbs, items: list[tuple[int, bytes, bytes | None, bool]],
          now: int, since: int | None) -> list[bytes | None]:
    out: list[bytes | None] = []
    seq = None
    for priority, payload, fp, only_new in items:
        if fp is not None and _mark_seen(txn, d, bytes(fp), now, since) and only_new:
            out.append(None)
            continue
        seq = _next_seq(txn, d) if seq is None else seq + 1
        key = queue_key(priority, seq)
        txn.put(key, payload, db=d.queue)
        out.append(key)
    if seq is not None:
        txn.put(d.seq_key, seq.to_bytes(8, "big"), db=d.meta)
    return out


def _pop(txn: Any, d: _Dbs, now_ms: int, lease_ms: int, owner: bytes, acks: list[bytes],
         scan: bool) -> tuple[Popped | None, int]:
    _ack(txn, d, acks, owner)
    cur = txn.cursor(db=d.queue)
    found = cur.first()
    reclaimed = 0
    if scan or not found:
        reclaimed = _reclaim(txn, d, now_ms)
        if reclaimed:
            found = cur.first()
    if not found:
        return None, reclaimed
    key, payload = bytes(cur.key()), bytes(cur.value())
    cur.delete()
    txn.put(key, lease_value(now_ms + lease_ms, owner, payload), db=d.leases)
    return Popped(key, payload), reclaimed


def _reclaim(txn: Any, d: _Dbs, now_ms: int) -> int:
    """Move expired leases (of the first RECLAIM_SCAN) back to the queue."""
    expired = []
    for i, (k, v) in enumerate(txn.cursor(db=d.leases)):
        if i >= RECLAIM_SCAN:
            break
        deadline, _, payload = parse_lease(bytes(v))
        if deadline < now_ms:
            expired.append((bytes(k), payload))
    for k, payload in expired:
        txn.delete(k, db=d.leases)
        txn.put(k, payload, db=d.queue)
    return len(expired)


def _owned(txn: Any, d: _Dbs, key: bytes, owner: bytes) -> tuple[int, bytes] | None:
    """(deadline, payload) of key's lease if owner holds it."""
    v = txn.get(key, db=d.leases)
    if v is None:
        return None
    deadline, who, payload = parse_lease(bytes(v))
    return (deadline, payload) if who == owner else None


def _ack(txn: Any, d: _Dbs, keys: list[bytes], owner: bytes) -> int:
    n = 0
    for k in keys:
        if _owned(txn, d, k, owner) is not None:
            n += txn.delete(k, db=d.leases)
        else:
            n += txn.delete(k, db=d.queue)  # reclaimed meanwhile, not yet taken again
    return n


def _release(txn: Any, d: _Dbs, keys: list[bytes], owner: bytes) -> int:
    n = 0
    for k in keys:
        held = _owned(txn, d, k, owner)
        if held is not None:
            txn.delete(k, db=d.leases)
            txn.put(k, held[1], db=d.queue)
            n += 1
    return n


def _renew(txn: Any, d: _Dbs, keys: list[bytes], owner: bytes, deadline: int) -> int:
    n = 0
    for k in keys:
        held = _owned(txn, d, k, owner)
        if held is not None:
            txn.put(k, lease_value(deadline, owner, held[1]), db=d.leases)
            n += 1
    return n


def _pending(txn: Any, d: _Dbs, owner: bytes | None) -> int:
    n = int(txn.stat(d.queue)["entries"]) + int(txn.stat(d.leases)["entries"])
    if owner is not None:
        for _, v in txn.cursor(db=d.leases):
            if parse_lease(bytes(v))[1] == owner:
                n -= 1
    return n
