"""What callers hand the frontier and what it hands back, and the checks every argument
passes before a transaction starts (so a wrong value is refused by name, nothing written)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..exceptions import SimstoreTypeError, SimstoreValueError

MAX_LEASE = 30 * 86400.0  # seconds
MAX_FP = 255  # bytes of a fingerprint
MAX_OWNER = 1024  # bytes of an owner
NO_ANSWER = 0  # Done.status of a download that got no answer (refused, timed out, no DNS)
DROPPED = b""  # a push's key while its host is given up: the request was dropped, not queued


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
    (None: nothing to count, as a request a middleware dropped; ``NO_ANSWER``: its
    download got no answer, so a revisit keeps its interval), and for revisits its
    fingerprint and whether it changed (None: judge by ``digest``, a 64-bit digest of
    what it answered); ``latency``: seconds its host took to answer (None: not
    measured), what :class:`~simstore.crawl.rules.AutoThrottle` learns from; ``again``:
    the payload that fetches the URL at its revisit (None: the one it was taken with),
    e.g. the request carrying the answer's validators for a conditional GET. A 304 (Not
    Modified) answer counts as unchanged."""

    key: bytes
    status: int | None = None
    fp: bytes | None = None
    changed: bool | None = None
    digest: int = 0
    latency: float | None = None
    again: bytes | None = None


@dataclass(frozen=True)
class Taken:
    """What a take gave: the requests leased, the keys the pushes got (None: seen;
    ``DROPPED``: its host given up), when the next waiting host may go (seconds since
    the epoch, None: none waits), how many expired leases it moved back, whether a host
    may still be asked now (False: a take before a slot is freed, a request queued or
    the wake finds nothing), and how many processes take now (each holds its share of a
    host; this one among them)."""

    popped: list[Popped]
    pushed: list[bytes | None]
    wake: float | None
    reclaimed: int
    more: bool = True
    takers: int = 1


def check_seconds(value: object, name: str, hi: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (0 < value <= hi):  # type: ignore[operator]
        raise SimstoreValueError(f"{name!r} must be seconds in (0, {hi:g}] (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def check_owner(owner: object) -> bytes:
    if not isinstance(owner, str) or not owner:
        raise SimstoreTypeError(f"'owner' must be a non-empty str (got {owner!r})")
    try:
        raw = owner.encode("utf-8")
    except UnicodeEncodeError:
        raise SimstoreValueError(f"'owner' must be encodable as UTF-8 (got {owner!r})") from None
    if len(raw) > MAX_OWNER:
        raise SimstoreValueError(f"'owner' must be at most {MAX_OWNER} bytes (got {len(raw)})")
    return raw


def check_fp(fp: object) -> bytes:
    if not isinstance(fp, (bytes, bytearray, memoryview)):
        raise SimstoreTypeError(f"'fp' must be bytes (got {type(fp).__name__})")
    raw = bytes(fp)
    if not 1 <= len(raw) <= MAX_FP:
        raise SimstoreValueError(f"'fp' must be 1-{MAX_FP} bytes (got {len(raw)})")
    return raw


def check_push(p: Push) -> Push:
    prio = p.priority
    if isinstance(prio, float) and prio.is_integer():
        prio = int(prio)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise SimstoreValueError(f"'priority' must be an int (got {p.priority!r})")
    if not isinstance(p.payload, (bytes, bytearray, memoryview)):
        raise SimstoreTypeError(f"'payload' must be bytes (got {type(p.payload).__name__})")
    if not isinstance(p.host, str):
        raise SimstoreTypeError(f"'host' must be a str (got {type(p.host).__name__})")
    fp = None if p.fp is None else check_fp(p.fp)
    return Push(prio, bytes(p.payload), fp, bool(p.only_new), p.host)


def check_keys(keys: Iterable[Any]) -> list[bytes]:
    out = []
    for k in keys:
        if not isinstance(k, (bytes, bytearray, memoryview)):
            raise SimstoreTypeError(f"a frontier key must be bytes (got {type(k).__name__})")
        out.append(bytes(k))
    return out


def check_done(d: Any) -> Done:
    if not isinstance(d, Done):
        return Done(check_keys([d])[0])
    check_keys([d.key])
    if d.status is not None and (not isinstance(d.status, int) or isinstance(d.status, bool)):
        raise SimstoreTypeError(f"'status' must be an int or None (got {d.status!r})")
    if d.fp is not None:
        check_fp(d.fp)
    dg = d.digest
    if not isinstance(dg, int) or isinstance(dg, bool) or not 0 <= dg < 2**64:
        raise SimstoreValueError(f"'digest' must be an int in [0, 2**64) (got {dg!r})")
    lat = d.latency
    if lat is not None and (not isinstance(lat, (int, float)) or isinstance(lat, bool)
                            or not 0 <= lat < math.inf):
        raise SimstoreValueError(f"'latency' must be seconds >= 0 or None (got {lat!r})")
    if d.again is not None and not isinstance(d.again, bytes):
        raise SimstoreTypeError(f"'again' must be bytes or None (got {type(d.again).__name__})")
    return d


def check_origin(origin: object, status: object = 200, body: object = b"") -> None:
    """A robots.txt's origin (a str), its status (an HTTP status) and body (bytes)."""
    if not isinstance(origin, str):
        raise SimstoreTypeError(f"'origin' must be a str (got {type(origin).__name__})")
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 999:
        raise SimstoreValueError(f"'status' must be an HTTP status, an int 0-999 (got {status!r})")
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise SimstoreTypeError(f"'body' must be bytes (got {type(body).__name__})")


def check_host(host: object, none: bool = False) -> None:
    if not isinstance(host, str) and not (none and host is None):
        raise SimstoreTypeError(f"'host' must be a str (got {type(host).__name__})")
