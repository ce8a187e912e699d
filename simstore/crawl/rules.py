"""The crawl's rules, free of storage: politeness per host and the revisit schedule.

:class:`Politeness` says how hard all processes together may ask one host; the
functions here read values hosts send (``Crawl-delay``, ``Retry-After``) and cap what a
hostile host could make of them. :class:`Revisit` is the adaptive schedule of a URL:
the first interval is the minimum, a page found unchanged doubles it (up to the
maximum), a changed one halves it (down to the minimum); one gone (404/410) that many
times in a row is not revisited again. :class:`AutoThrottle` learns a host's delay from
the latencies of its answers, as Scrapy's AutoThrottle does for one process.
"""

from __future__ import annotations

import dataclasses
import email.utils
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..exceptions import SimstoreTypeError, SimstoreValueError

DEFAULT_MAX_DELAY = 600.0  # seconds: the cap on a Crawl-delay, a Retry-After or a backoff
DEFAULT_BACKOFF = 2.0  # seconds of the first wait after a 429/503 without Retry-After
THROTTLED_DELAY = 0.25  # seconds: the least delay of a host that answered 429/503
# of what a 429/503 episode added to a host's delay, the part each other answer keeps:
# the delay comes back to the host's own (a tenth of the way per answer), as a
# congestion window grows back after a loss
THROTTLE_KEEP = 0.9
# episodes in a row of a host's downloads getting no answer (refused, timed out, no DNS)
# before it is given up: with the backoff doubling from 2 s, unreachable for a minute or more
DEFAULT_MAX_FAILURES = 6
DEFAULT_MARGIN = 0.02  # seconds added to a host's delay: a request leaves a few ms after its take
GONE_STATUSES = (404, 410)
NOT_MODIFIED = 304  # a conditional GET's answer: the page is as it was
THROTTLE_STATUSES = (429, 503)


def _seconds(value: object, name: str, *, zero: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (not zero and value == 0):
        raise SimstoreValueError(
            f"{name!r} must be a finite number of seconds {'>= 0' if zero else '> 0'} "
            f"(got {value!r})")
    return float(value)


@dataclass(frozen=True)
class AutoThrottle:
    """A host's delay learnt from how long it takes to answer, so that all processes
    together keep ``target`` requests in flight to it on average (Scrapy's
    AutoThrottle rule, held per host in the frontier instead of per download slot).

    A host starts at ``start`` seconds; each answer's latency L asks for L / target:
    the delay moves there at once when that is longer, else half way; an answer other
    than 200 never lowers it (error pages come back fast); it stays within the host's
    floor (``DOWNLOAD_DELAY``, its Crawl-delay) and ``max`` (the floor wins).
    """

    target: float = 1.0
    start: float = 5.0
    max: float = 60.0

    def __post_init__(self) -> None:
        _seconds(self.target, "target", zero=False)
        _seconds(self.start, "start")
        _seconds(self.max, "max", zero=False)

    def next_ms(self, delay_ms: int, latency: float, ok: bool, floor_ms: int) -> int:
        """The delay (ms) after an answer that took ``latency`` seconds, from ``delay_ms``;
        ``ok``: the answer was a 200."""
        want = min(latency / self.target, self.max) * 1000
        new = int(min(max(want, (delay_ms + want) / 2), self.max * 1000))
        new = max(new, floor_ms)
        return delay_ms if not ok and new < delay_ms else new


def taken_ahead(concurrency: int, total: int, ahead: bool = True) -> tuple[int, int]:
    """(``prefetch``, ``solo_prefetch``) of a host of ``concurrency`` for processes that
    hold ``total`` requests at most: half its concurrency more among several processes
    (none without ``ahead``), and one process alone as much as it holds (as plain
    Scrapy's slot would)."""
    prefetch = max(1, concurrency // 2) if ahead else 0
    return prefetch, min(max(prefetch, total - concurrency), 2**20)


@dataclass(frozen=True)
class HostRule:
    """One host's own politeness in place of the crawl's (Scrapy's ``DOWNLOAD_SLOTS``
    entry for it): its delay in seconds and its concurrency; None keeps the crawl's."""

    delay: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.delay is not None:
            _seconds(self.delay, "delay")
        c = self.concurrency
        if c is not None and (not isinstance(c, int) or isinstance(c, bool)
                              or not 1 <= c <= 2**31 - 1):
            raise SimstoreValueError(f"'concurrency' must be an int >= 1 or None (got {c!r})")


@dataclass(frozen=True)
class Politeness:
    """How hard all processes together ask one host.

    ``delay``: seconds between two requests to a host (the larger of this and its
    robots.txt Crawl-delay when ``robots``); ``concurrency``: requests in flight to
    a host at once; ``max_delay``: the cap on any wait a host asks for; ``backoff``:
    the first wait after a 429/503 without Retry-After (doubled each time in a row);
    ``robots``: a host is asked one request at a time until its robots.txt was read;
    ``margin``: seconds added to a delay > 0, since a request leaves its process a few
    milliseconds after the take that timed it (so the gaps a host sees stay >= its delay);
    ``prefetch``: requests a host may have taken beyond ``concurrency`` (they wait in a
    crawler's own download slot, so a finished download is followed at once);
    ``solo_prefetch``: the same while one process alone takes from the frontier (its own
    download slot holds the concurrency). With several processes taking, a host may have
    ``concurrency + prefetch`` in flight, each process its share of that (split evenly,
    rounded up), so none keeps a host the others wait for; each downloads its part of
    ``concurrency`` at once (:meth:`downloads`). ``max_failures``: episodes in a row of
    a host's downloads getting no answer (each blocks it for the backoff, doubled each
    time, and leaves it one request at a time; downloads that fail while it is blocked
    are the same episode) before it is given up for ``max_delay``: its queued requests
    dropped, and those queued for it meanwhile (0: never given up). ``auto``: each
    host's delay learnt from its answers' latencies (:class:`AutoThrottle`; None: off).
    ``hosts``: host name (any case) -> its own :class:`HostRule` (:meth:`for_host`).
    """

    delay: float = 0.0
    concurrency: int = 8
    max_delay: float = DEFAULT_MAX_DELAY
    backoff: float = DEFAULT_BACKOFF
    robots: bool = False
    margin: float = DEFAULT_MARGIN
    prefetch: int = 0
    solo_prefetch: int = 0
    max_failures: int = DEFAULT_MAX_FAILURES
    auto: AutoThrottle | None = None
    hosts: Mapping[str, HostRule] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.hosts, Mapping) or not all(
                isinstance(k, str) and isinstance(v, HostRule) for k, v in self.hosts.items()):
            raise SimstoreTypeError(
                f"'hosts' must map host names to simstore.crawl.HostRule (got {self.hosts!r})")
        if self.auto is not None and not isinstance(self.auto, AutoThrottle):
            raise SimstoreTypeError(
                f"'auto' must be a simstore.crawl.AutoThrottle or None (got {self.auto!r})")
        _seconds(self.delay, "delay")
        _seconds(self.margin, "margin")
        _seconds(self.max_delay, "max_delay", zero=False)
        _seconds(self.backoff, "backoff", zero=False)
        c = self.concurrency
        if not isinstance(c, int) or isinstance(c, bool) or not 1 <= c <= 2**31 - 1:
            raise SimstoreValueError(f"'concurrency' must be an int >= 1 (got {c!r})")
        for name in ("prefetch", "solo_prefetch", "max_failures"):
            f = getattr(self, name)
            if not isinstance(f, int) or isinstance(f, bool) or not 0 <= f <= 2**31 - 1:
                raise SimstoreValueError(f"{name!r} must be an int >= 0 (got {f!r})")
        # one rule a name whatever its case; a name given in lower case wins (it is the
        # one Scrapy's own slots match: host names reach them in lower case)
        rules = dict(sorted(self.hosts.items(), key=lambda kv: kv[0] == kv[0].lower()))
        rules = {k.lower(): r for k, r in rules.items()}
        object.__setattr__(self, "hosts", rules)
        object.__setattr__(self, "_own", {k: self._with(r) for k, r in rules.items()})

    def _with(self, rule: HostRule) -> Politeness:
        """These rules with a host's own delay and concurrency (its requests taken ahead
        scaled as the crawl's are: half its concurrency, and what a process alone may
        hold beyond it kept)."""
        conc = self.concurrency if rule.concurrency is None else rule.concurrency
        prefetch, solo = taken_ahead(conc, self.concurrency + self.solo_prefetch,
                                     ahead=bool(self.prefetch))
        return dataclasses.replace(
            self, delay=self.delay if rule.delay is None else rule.delay, concurrency=conc,
            prefetch=prefetch, solo_prefetch=solo if self.solo_prefetch else 0, hosts={})

    def for_host(self, name: str) -> Politeness:
        """The rules of host ``name``: these, or with its own :class:`HostRule`."""
        own: dict[str, Politeness] = self._own  # type: ignore[attr-defined]
        return own.get(name.lower(), self) if own else self

    @property
    def host_limit(self) -> int:
        """The requests a host may have taken (in flight) at most, all processes together."""
        return self.concurrency + max(self.prefetch, self.solo_prefetch)

    def downloads(self, takers: int) -> int:
        """How many requests of one host each of ``takers`` processes taking downloads at
        once: ``concurrency`` split evenly, rounded down (so together they never pass it,
        whichever processes come and go), at least 1."""
        return max(1, self.concurrency // max(takers, 1))

    @property
    def shared_limit(self) -> int:
        """The requests a host may have in flight while several processes take."""
        return self.concurrency + self.prefetch

    def share(self, takers: int) -> int:
        """What one of ``takers`` processes taking now may hold of one host."""
        if takers <= 1:
            return self.host_limit
        return -(-self.shared_limit // takers)

    def cap(self, seconds: float) -> tuple[float, bool]:
        """(seconds within 0 .. max_delay, whether it had to be changed)."""
        if not math.isfinite(seconds) or seconds < 0:
            return (self.max_delay if seconds == math.inf else 0.0), True
        if seconds > self.max_delay:
            return self.max_delay, True
        return seconds, False

    def backoff_for(self, throttles: int) -> float:
        """The wait after the ``throttles``-th 429/503 in a row without Retry-After."""
        return min(self.backoff * 2.0 ** min(max(throttles - 1, 0), 60), self.max_delay)


def parse_crawl_delay(raw: str | None) -> float | None:
    """A Crawl-delay value as seconds; None when absent; NaN when not a number."""
    if raw is None:
        return None
    try:
        return float(raw.strip())
    except ValueError:
        return math.nan


def parse_retry_after(raw: str | bytes | None, now: float) -> float | None:
    """Seconds a Retry-After header asks to wait (seconds, or an HTTP date), from now;
    None when absent or unreadable (then the backoff applies)."""
    if raw is None:
        return None
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.fromtimestamp(now, timezone.utc)).total_seconds())


@dataclass(frozen=True)
class Revisit:
    """The adaptive revisit schedule: ``min`` and ``max`` seconds between two fetches of a
    URL, ``gone_after`` answers 404/410 in a row before a URL is dropped."""

    min: float
    max: float
    gone_after: int = 3

    def __post_init__(self) -> None:
        _seconds(self.min, "min")
        _seconds(self.max, "max")
        if self.max < self.min:
            raise SimstoreValueError(f"revisit 'max' ({self.max}) is below 'min' ({self.min})")
        g = self.gone_after
        if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= 255:
            raise SimstoreValueError(f"'gone_after' must be an int in 1..255 (got {g!r})")

    def next_interval(self, interval_ms: int | None, changed: bool) -> int:
        """The next interval in ms: the minimum for a first fetch, else doubled when
        unchanged, halved when changed, within min .. max."""
        lo, hi = int(self.min * 1000), int(self.max * 1000)
        if interval_ms is None:
            return lo
        nxt = interval_ms // 2 if changed else max(interval_ms * 2, 1)
        return min(max(nxt, lo), hi)
