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
  host id -> empty (hosts with queued work that may be fetched from ms on); ``O`` ‖ host
  id ‖ owner -> u32 (the owner's requests of the host in flight: taken, download not
  over); ``A`` ‖ owner -> u64 ms (the owner's last take of work: the processes taking);
  ``B`` ‖ origin id -> u64 ms fetched ‖ u16 status ‖ body (an origin's robots.txt, read
  by every process; the origin id as a host id, of ``scheme://host[:port]``).
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


def host_of_url(url: object) -> str:
    """The host name of a URL (lower case; "" when it has none)."""
    if not isinstance(url, str):
        return ""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def held_key(hid: bytes, owner: bytes) -> bytes:
    """The key of owner's count of requests of host hid in flight: the host's record key
    and the owner (never empty), so the count sits on its host's page."""
    return b"H" + hid + owner


def taker_key(owner: bytes) -> bytes:
    """The key of owner's last take (ms)."""
    return b"A" + owner


ROBOTS = struct.Struct(">QH")  # a stored robots.txt's head: ms fetched, status
ROBOTS_MAX = 512 * 1024  # bytes of a robots.txt kept (crawlers read no further)


def robots_key(origin: str) -> bytes:
    """The key of origin's stored robots.txt."""
    return b"B" + host_id(origin)


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
DOWN = 8  # Host.flags: given up after downloads in a row got no answer: until blocked_ms
# ends, the requests queued for it are dropped
AUTO = 16  # Host.flags: delay_ms was learnt from its answers' latencies (AutoThrottle)

NOWHERE, READY, WAITING = 0, 1, 2

_HOST = struct.Struct(">QQQIIIIIIIIBBB")


@dataclass
class Host:
    """A host's shared state: politeness, counts, and where it sits in the take order.

    ``next_ms``: no request starts before (the last start plus the delay);
    ``blocked_ms``: none before either (a 429/503); ``delay_ms``: the delay in force:
    its robots.txt Crawl-delay (capped, ``crawl_ms``), raised by 429/503 answers and
    coming back down to it with each other answer; ``failures``: episodes in a row of
    its downloads getting no answer (refused, timed out, no DNS; the exponent of their
    backoff);
    ``slot``: the ``R`` or ``W`` key it is listed under, if any.
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
    crawl_ms: int = 0  # its robots.txt Crawl-delay (capped): what delay_ms comes back to
    failures: int = 0  # episodes in a row of downloads that got no answer
    flags: int = 0
    where: int = NOWHERE
    slot: bytes = b""

    def pack(self) -> bytes:
        """The record's bytes."""
        return _HOST.pack(self.next_ms, self.blocked_ms, self.fetched, self.delay_ms,
                          self.queued, self.inflight, self.n429, self.n503,
                          min(self.throttles, 2**32 - 1), self.crawl_ms,
                          min(self.failures, 2**32 - 1), self.flags,
                          self.where,
                          len(self.slot)) + self.slot + self.name.encode("utf-8",
                                                                         "surrogatepass")

    @classmethod
    def unpack(cls, raw: bytes) -> Host:
        """A record read back (CorruptStoreError if it is not one)."""
        raw = bytes(raw)
        if len(raw) < _HOST.size:
            raise CorruptStoreError(f"a frontier host record of {len(raw)} bytes")
        (next_ms, blocked_ms, fetched, delay_ms, queued, inflight, n429, n503, throttles,
         crawl_ms, failures, flags, where, n) = _HOST.unpack_from(raw)
        slot = raw[_HOST.size:_HOST.size + n]
        if len(slot) != n:
            raise CorruptStoreError("a frontier host record shorter than its slot")
        name = raw[_HOST.size + n:].decode("utf-8", "surrogatepass")
        return cls(name, next_ms, blocked_ms, fetched, delay_ms, queued, inflight, n429,
                   n503, throttles, crawl_ms, failures, flags, where, slot)


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
