"""The bytes of the frontier's records (frontier format 2; docs/crawl.md gives every byte).

Integers are unsigned big-endian. A host is known by its id, the first 8 bytes of
BLAKE2b of its lower-case name. Several kinds of record share one LMDB database, told
apart by a first byte, so a frontier takes 6 named databases:

- ``crawl.N.queue``: host id ‖ 2^63-1-priority ‖ seq (the *queue key*, 24 bytes) -> payload.
- ``crawl.N.leases``: ``L`` ‖ queue key -> deadline ms ‖ taken ms ‖ u8 flags ‖ u16 owner
  length ‖ owner ‖ payload;
  ``D`` ‖ deadline ms ‖ queue key -> empty (the leases by deadline).
- ``crawl.N.hosts``: ``H`` ‖ host id -> :class:`Host`; ``R`` ‖ 2^63-1-priority ‖ seq ‖
  host id -> empty (hosts that may be fetched now, by their first request); ``W`` ‖ ms ‖
  host id -> empty (hosts with queued work that may be fetched from ms on).
- ``crawl.N.urls``: ``U`` ‖ fingerprint -> :class:`Url`; ``T`` ‖ due ms ‖ fingerprint ->
  empty (revisits by due time).
- ``crawl.N.seen``: fingerprint -> ms seen (as in format 1).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..exceptions import CorruptStoreError

PREFIX = "crawl."  # the names of the frontier's databases
FRONTIER_VERSION = 2  # the version of these records (crawl.meta's "version")

PRIO_MAX = 2**63 - 1
PRIO_MIN = -(2**63)
U64 = struct.Struct(">Q")
NEVER = 2**64 - 1  # a time that never comes


def host_id(host: str) -> bytes:
    """The 8-byte id of a host name (case-insensitive)."""
    return hashlib.blake2b(host.lower().encode("utf-8", "surrogatepass"),
                           digest_size=8).digest()


TAG_SIZE = 8


def owner_tag(owner: bytes) -> bytes:
    """The 8-byte tag of a lease owner (BLAKE2b of its name) a host record keeps."""
    return hashlib.blake2b(owner, digest_size=TAG_SIZE).digest()


def host_of_url(url: object) -> str:
    """The host name of a URL (lower case; "" when it has none)."""
    if not isinstance(url, str):
        return ""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def prio_bytes(priority: int) -> bytes:
    """2^63-1-priority, clamped to int64: the highest priority sorts first."""
    p = min(max(int(priority), PRIO_MIN), PRIO_MAX)
    return U64.pack(PRIO_MAX - p)


def queue_key(hid: bytes, priority: int, seq: int) -> bytes:
    """The queue key: host id, priority (highest first), seq (first in, first out)."""
    return hid + prio_bytes(priority) + U64.pack(seq)


def key_host(key: bytes) -> bytes:
    """The host id of a queue key."""
    return bytes(key[:8])


def ms(value: int) -> bytes:
    """A time in ms as 8 bytes (clamped to 0 .. NEVER)."""
    return U64.pack(min(max(int(value), 0), NEVER))


@dataclass(frozen=True)
class Lease:
    """A lease: until when, since when, held by whom, on what payload, and whether its
    download is over (its host's slot given back before its acknowledgement)."""

    deadline_ms: int
    taken_ms: int
    owner: bytes
    payload: bytes
    downloaded: bool = False

    def pack(self) -> bytes:
        """The record's bytes: deadline, taken, flags (u8: 1 downloaded), owner length
        (u16), owner, payload."""
        return (ms(self.deadline_ms) + ms(self.taken_ms) + bytes([int(self.downloaded)])
                + len(self.owner).to_bytes(2, "big") + self.owner + self.payload)

    @classmethod
    def unpack(cls, raw: bytes) -> Lease:
        """A record read back (CorruptStoreError if it is not one)."""
        raw = bytes(raw)
        n = int.from_bytes(raw[17:19], "big")
        if len(raw) < 19 + n:
            raise CorruptStoreError(f"a frontier lease record of {len(raw)} bytes")
        return cls(U64.unpack_from(raw)[0], U64.unpack_from(raw, 8)[0], raw[19:19 + n],
                   raw[19 + n:], bool(raw[16] & 1))


PAUSED = 1  # Host.flags: no request of the host is taken
DELAY_KNOWN = 2  # Host.flags: its robots.txt was read (its Crawl-delay, or none, known)
THROTTLED = 4  # Host.flags: it answered 429/503: one request at a time, its delay learnt
HOLDER = 8  # in a host record: 8 bytes after the slot name the one process holding it

NOWHERE, READY, WAITING = 0, 1, 2

_HOST = struct.Struct(">QQQIIIIIIBBB")


@dataclass
class Host:
    """A host's shared state: politeness, counts, and where it sits in the take order.

    ``next_ms``: no request starts before (the last start plus the delay);
    ``blocked_ms``: none before either (a 429/503); ``delay_ms``: its robots.txt
    Crawl-delay (capped); ``slot``: the ``R`` or ``W`` key it is listed under, if any;
    ``holder``: while requests are in flight, the tag (:func:`owner_tag`) of the one
    process that took them all, from the take that found none in flight until none is
    again; empty when none is in flight or more than one process took them (a record
    without one, as format 2 first wrote it, reads as more than one).
    """

    name: str
    next_ms: int = 0
    blocked_ms: int = 0
    fetched: int = 0
    delay_ms: int = 0
    queued: int = 0
    inflight: int = 0
    n429: int = 0
    n503: int = 0
    throttles: int = 0  # 429/503 answers in a row (the exponent of the backoff)
    flags: int = 0
    where: int = NOWHERE
    slot: bytes = b""
    holder: bytes = b""

    def enter(self, tag: bytes) -> None:
        """One more request in flight, taken by the process of tag."""
        self.holder = tag if self.inflight == 0 or self.holder == tag else b""
        self.inflight += 1

    def leave(self) -> None:
        """One request fewer in flight."""
        self.inflight = max(self.inflight - 1, 0)
        if not self.inflight:
            self.holder = b""

    def pack(self) -> bytes:
        """The record's bytes."""
        held = len(self.holder) == TAG_SIZE and self.inflight > 0
        flags = (self.flags & ~HOLDER) | (HOLDER if held else 0)
        return (_HOST.pack(self.next_ms, self.blocked_ms, self.fetched, self.delay_ms,
                           self.queued, self.inflight, self.n429, self.n503,
                           min(self.throttles, 2**32 - 1), flags, self.where,
                           len(self.slot)) + self.slot + (self.holder if held else b"")
                + self.name.encode("utf-8", "surrogatepass"))

    @classmethod
    def unpack(cls, raw: bytes) -> Host:
        """A record read back (CorruptStoreError if it is not one)."""
        raw = bytes(raw)
        if len(raw) < _HOST.size:
            raise CorruptStoreError(f"a frontier host record of {len(raw)} bytes")
        (next_ms, blocked_ms, fetched, delay_ms, queued, inflight, n429, n503, throttles,
         flags, where, n) = _HOST.unpack_from(raw)
        at = _HOST.size + n
        slot = raw[_HOST.size:at]
        holder = raw[at:at + TAG_SIZE] if flags & HOLDER else b""
        if len(slot) != n or len(holder) != (TAG_SIZE if flags & HOLDER else 0):
            raise CorruptStoreError("a frontier host record shorter than its slot")
        name = raw[at + len(holder):].decode("utf-8", "surrogatepass")
        return cls(name, next_ms, blocked_ms, fetched, delay_ms, queued, inflight, n429,
                   n503, throttles, flags & ~HOLDER, where, slot, holder)


_URL = struct.Struct(">QQQB8s")


@dataclass
class Url:
    """A fetched URL's revisit state: when it is due (0: not scheduled), its interval, a
    digest of what it answered last, how many times in a row it was gone (404/410), its
    host's id and the payload that fetches it again."""

    due_ms: int
    interval_ms: int
    digest: int
    gone: int
    hid: bytes
    payload: bytes

    def pack(self) -> bytes:
        """The record's bytes."""
        return _URL.pack(self.due_ms, self.interval_ms, self.digest, min(self.gone, 255),
                         self.hid) + self.payload

    @classmethod
    def unpack(cls, raw: bytes) -> Url:
        """A record read back (CorruptStoreError if it is not one)."""
        raw = bytes(raw)
        if len(raw) < _URL.size:
            raise CorruptStoreError(f"a frontier URL record of {len(raw)} bytes")
        return cls(*_URL.unpack_from(raw), raw[_URL.size:])
