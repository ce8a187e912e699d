"""Frontier format 1 -> 2, in place, in the transaction that first opens a frontier.

Format 1 (simstore 1.0) kept, per frontier ``N`` named in ``crawl.meta`` by its
``seq.N`` record: ``crawl.N.queue`` keyed by priority ‖ seq (16 bytes) with pickled
payloads, ``crawl.N.leases`` under the same keys, and ``crawl.N.seen``. Format 2 keys
the queue by host first and keeps payloads as JSON (:mod:`simstore.crawl.payload`).
Each queued or leased request is moved to its format-2 key under its URL's host, its
payload read without running code and written as JSON; the leases of format-1
processes go back to the queue (stop every crawler before upgrading simstore). A
payload that needs code to be read back is dropped and counted in
``crawl.meta``'s ``upgrade.dropped.N``. The seen set is kept as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .payload import PayloadError, encode, read_legacy
from .records import PREFIX, PRIO_MAX, READY, U64, Host, host_id, host_of_url, queue_key

_LEGACY_KEY = 16


def _convert(payload: bytes) -> tuple[bytes, str] | None:
    """(format-2 payload, host) of a format-1 payload, or None when it cannot be read
    without running code."""
    try:
        value = read_legacy(payload)
        return encode(value), host_of_url(value.get("url") if isinstance(value, dict) else None)
    except PayloadError:
        return None


def upgrade_v1(txn: Any, meta: Any, open_db: Callable[[bytes], Any]) -> None:
    """Rewrite every format-1 frontier of the store (named by ``seq.N`` in meta)."""
    names = []
    cur = txn.cursor(db=meta)
    if cur.set_range(b"seq."):
        for k in cur.iternext(values=False):
            k = bytes(k)
            if not k.startswith(b"seq."):
                break
            names.append(k[4:].decode("ascii", "replace"))
    for name in names:
        _upgrade_one(txn, meta, open_db, name)


def _upgrade_one(txn: Any, meta: Any, open_db: Callable[[bytes], Any], name: str) -> None:
    db = {part: open_db(f"{PREFIX}{name}.{part}".encode())
          for part in ("queue", "leases", "hosts")}
    entries: list[tuple[bytes, bytes]] = []
    for part in ("queue", "leases"):
        cur = txn.cursor(db=db[part])
        for k, v in cur:
            k = bytes(k)
            if len(k) != _LEGACY_KEY:
                continue
            v = bytes(v)
            if part == "leases":  # deadline(8) owner-length(2) owner payload
                n = int.from_bytes(v[8:10], "big")
                v = v[10 + n:]
            entries.append((k, v))
        for k, _ in entries:
            txn.delete(k, db=db[part])
    dropped = 0
    hosts: dict[bytes, Host] = {}
    for k, v in entries:
        converted = _convert(v)
        if converted is None:
            dropped += 1
            continue
        payload, host = converted
        hid = host_id(host)
        prio = PRIO_MAX - U64.unpack_from(k)[0]
        seq = U64.unpack_from(k, 8)[0]
        txn.put(queue_key(hid, prio, seq), payload, db=db["queue"])
        h = hosts.setdefault(hid, Host(host))
        h.queued += 1
    for hid, h in hosts.items():  # listed as ready: the first take lists each properly
        cur = txn.cursor(db=db["queue"])
        cur.set_range(hid)
        head = bytes(cur.key())
        h.where, h.slot = READY, b"R" + head[8:24] + hid
        txn.put(h.slot, b"", db=db["hosts"])
        txn.put(b"H" + hid, h.pack(), db=db["hosts"])
    if dropped:
        txn.put(f"upgrade.dropped.{name}".encode(), U64.pack(dropped), db=meta)
