"""Every SIMSTORE_* setting read in one place, the one logger, and the one refusal.

A setting that is not what docs/crawl.md allows, or a store that cannot be opened, is
a *refusal*: :func:`refuse` logs one ERROR line naming the setting (once per crawl,
however many components refuse), no component touches the store from then on (the
Scheduler is built after the middlewares and pipelines and sees the refusal, so the
frontier is left as it was), the crawl closes at its start with the finish reason
``simstore_refused`` before any request is taken, and ``scrapy crawl`` exits 1.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from dataclasses import dataclass
from typing import Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, DropItem, IgnoreRequest, NotConfigured

from .._validate import parse_duration
from ..crawl import DEFAULT_NAME, AutoThrottle, HostRule, Politeness, Revisit, check_name
from ..crawl.rules import DEFAULT_MAX_DELAY, DEFAULT_MAX_FAILURES, taken_ahead
from ..exceptions import SimstoreError, SimstoreValueError

logger = logging.getLogger("simstore.scrapy")

REFUSED = "simstore_refused"  # the finish reason of a crawl whose settings were refused
MODES = ("drop", "log")
DEFAULT_LEASE = 60.0
MIN_LEASE, MAX_LEASE = 1.0, 86400.0
MIDDLEWARE = "simstore.scrapy.NearDuplicateMiddleware"
PIPELINE = "simstore.scrapy.NearDuplicatePipeline"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


# --- readers ------------------------------------------------------------------------------


def _raw(settings: Any, name: str) -> Any:
    raw = settings.get(name)
    return None if raw is None or raw == "" else raw


def number(settings: Any, name: str, kind: type) -> Any:
    """A setting converted to kind (int or float), or None when unset or empty."""
    raw = _raw(settings, name)
    if raw is None:
        return None
    try:
        value = kind(raw)
    except (TypeError, ValueError, OverflowError):
        value = None
    if value is None or (kind is float and not math.isfinite(value)) or isinstance(raw, bool):
        raise SimstoreValueError(
            f"setting {name} must be {'an int' if kind is int else 'a finite number'} "
            f"(got {raw!r})")
    return value


def flag(settings: Any, name: str, default: bool = False) -> bool:
    """A boolean setting: True/False, 1/0, yes/no, on/off (anything else is refused)."""
    raw = settings.get(name)
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SimstoreValueError(f"setting {name} must be True or False (got {raw!r})")


def age(settings: Any, name: str) -> float | None:
    """An age setting in seconds (``30d``, ``12h``, seconds); None when unset, and None
    ("forever") for an age longer than the time since 1970."""
    raw = _raw(settings, name)
    if raw is None:
        return None
    try:
        seconds = parse_duration(raw, name)
    except SimstoreError:
        raise SimstoreValueError(
            f"setting {name} must be an age: seconds, or a number with a unit s, m, h, d or "
            f"w such as '30d' (got {raw!r})") from None
    return None if seconds >= time.time() else seconds


def expire_setting(settings: Any) -> float | None:
    """SIMSTORE_EXPIRE in seconds, or None (unset, or longer than the time since 1970)."""
    return age(settings, "SIMSTORE_EXPIRE")


def mode_setting(settings: Any) -> str:
    """SIMSTORE_MODE: "drop" (default) or "log"."""
    raw = settings.get("SIMSTORE_MODE") or "drop"
    if raw not in MODES:
        raise SimstoreValueError(
            f"setting SIMSTORE_MODE must be one of {', '.join(map(repr, MODES))} (got {raw!r})")
    return str(raw)


def lease_setting(settings: Any) -> float:
    """SIMSTORE_LEASE in seconds (default 60): a number from 1 to 86400."""
    raw = _raw(settings, "SIMSTORE_LEASE")
    if raw is None:
        return DEFAULT_LEASE
    try:
        lease = float(raw)
    except (TypeError, ValueError, OverflowError):
        lease = math.nan
    if not MIN_LEASE <= lease <= MAX_LEASE:
        raise SimstoreValueError(
            f"setting SIMSTORE_LEASE must be seconds from {MIN_LEASE:g} to {MAX_LEASE:g} "
            f"(got {raw!r})")
    return lease


def path_setting(settings: Any, component: str) -> str:
    """SIMSTORE_PATH; refused when unset (the component needs the store)."""
    path = settings.get("SIMSTORE_PATH")
    if not path:
        raise SimstoreValueError(f"setting SIMSTORE_PATH is not set ({component} needs the store)")
    return str(path)


def frontier_name(settings: Any) -> str:
    """SIMSTORE_FRONTIER (default "default")."""
    raw = settings.get("SIMSTORE_FRONTIER") or DEFAULT_NAME
    try:
        return check_name(raw)
    except SimstoreValueError:
        raise SimstoreValueError(
            f"setting SIMSTORE_FRONTIER must be 1-40 letters, digits, '_' or '-' "
            f"(got {raw!r})") from None


def politeness_setting(settings: Any) -> Politeness:
    """Politeness across processes from Scrapy's own settings: DOWNLOAD_DELAY,
    CONCURRENT_REQUESTS_PER_DOMAIN (or _PER_IP when set), ROBOTSTXT_OBEY (robots.txt's
    Crawl-delay counts), CONCURRENT_REQUESTS (what a process crawling alone may hold of
    one host), SIMSTORE_MAX_HOST_DELAY (the cap on any wait a host asks) and
    SIMSTORE_HOST_MAX_FAILURES (downloads in a row without an answer before a host is
    given up; 0: never); with AUTOTHROTTLE_ENABLED each host's delay is learnt from the
    latencies all processes see (:func:`autothrottle_setting`); DOWNLOAD_SLOTS gives
    hosts their own delay and concurrency (:func:`slots_setting`)."""
    delay = number(settings, "DOWNLOAD_DELAY", float) or 0.0
    if delay < 0:
        raise SimstoreValueError(f"setting DOWNLOAD_DELAY must be >= 0 (got {delay!r})")
    conc = per_ip_setting(settings) or number(settings, "CONCURRENT_REQUESTS_PER_DOMAIN",
                                              int) or 8
    if conc < 1:
        raise SimstoreValueError(
            f"setting CONCURRENT_REQUESTS_PER_DOMAIN must be >= 1 (got {conc!r})")
    cap = number(settings, "SIMSTORE_MAX_HOST_DELAY", float)
    cap = DEFAULT_MAX_DELAY if cap is None else cap
    if cap <= 0:
        raise SimstoreValueError(f"setting SIMSTORE_MAX_HOST_DELAY must be > 0 (got {cap!r})")
    failures = number(settings, "SIMSTORE_HOST_MAX_FAILURES", int)
    failures = DEFAULT_MAX_FAILURES if failures is None else failures
    if not 0 <= failures <= 2**31 - 1:
        raise SimstoreValueError(
            f"setting SIMSTORE_HOST_MAX_FAILURES must be an int >= 0 (got {failures!r})")
    # one process alone may hold as much of a host as plain Scrapy keeps in its slot
    prefetch, solo = taken_ahead(conc, number(settings, "CONCURRENT_REQUESTS", int) or 16)
    return Politeness(delay=delay, concurrency=conc, max_delay=max(cap, delay),
                      robots=flag(settings, "ROBOTSTXT_OBEY"), prefetch=prefetch,
                      solo_prefetch=solo,
                      max_failures=failures, auto=autothrottle_setting(settings),
                      hosts=slots_setting(settings))


def per_ip_setting(settings: Any) -> int:
    """CONCURRENT_REQUESTS_PER_IP (0: unset): when set, a host's concurrency, and hosts
    grouped by address."""
    return number(settings, "CONCURRENT_REQUESTS_PER_IP", int) or 0


def slots_setting(settings: Any) -> dict[str, HostRule]:
    """Scrapy's DOWNLOAD_SLOTS (slot name -> {"delay": seconds, "concurrency": n, ...}) as
    each named host's own rule, held across processes; other keys of an entry (its
    jitter) stay Scrapy's, in each process's own download slot."""
    try:
        raw = settings.getdict("DOWNLOAD_SLOTS")
    except (ValueError, TypeError):
        raw = None
    if not isinstance(raw, dict):
        raise SimstoreValueError("setting DOWNLOAD_SLOTS must be a dict of slot name -> "
                                 f"dict (got {settings.get('DOWNLOAD_SLOTS')!r})")
    out = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not isinstance(entry, dict):
            raise SimstoreValueError(f"setting DOWNLOAD_SLOTS[{name!r}] must be a dict "
                                     f"under a str name (got {entry!r})")
        delay, conc = entry.get("delay"), entry.get("concurrency")
        try:
            out[name] = HostRule(None if delay is None else _plain(delay),
                                 None if conc is None else _plain(conc, int))
        except SimstoreValueError as exc:
            raise SimstoreValueError(f"setting DOWNLOAD_SLOTS[{name!r}]: {exc}") from None
    return out


def _plain(value: Any, kind: type = float) -> Any:
    """A number of a settings dict (a str from the command line too) as kind; the value
    itself when it is not one (HostRule then names it)."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def autothrottle_setting(settings: Any) -> AutoThrottle | None:
    """Scrapy's AUTOTHROTTLE_* settings as the frontier's rule: None unless
    AUTOTHROTTLE_ENABLED; AUTOTHROTTLE_TARGET_CONCURRENCY (> 0), AUTOTHROTTLE_START_DELAY
    (>= 0) and AUTOTHROTTLE_MAX_DELAY (> 0) seconds, Scrapy's defaults when unset."""
    if not flag(settings, "AUTOTHROTTLE_ENABLED"):
        return None
    values = {}
    for field_, name, default, least in (("target", "TARGET_CONCURRENCY", 1.0, "> 0"),
                                         ("start", "START_DELAY", 5.0, ">= 0"),
                                         ("max", "MAX_DELAY", 60.0, "> 0")):
        value = number(settings, "AUTOTHROTTLE_" + name, float)
        value = default if value is None else value
        if value < 0 or (least == "> 0" and value == 0):
            raise SimstoreValueError(
                f"setting AUTOTHROTTLE_{name} must be {least} (got {value!r})")
        values[field_] = value
    return AutoThrottle(**values)


def revisit_setting(settings: Any) -> Revisit | None:
    """SIMSTORE_REVISIT ("adaptive", or unset/"off") with SIMSTORE_REVISIT_MIN (default
    1d), SIMSTORE_REVISIT_MAX (default 30d) and SIMSTORE_REVISIT_GONE (default 3)."""
    raw = settings.get("SIMSTORE_REVISIT")
    if raw in (None, "", "off", False):
        return None
    if raw != "adaptive":
        raise SimstoreValueError(f"setting SIMSTORE_REVISIT must be 'adaptive' or 'off' "
                                 f"(got {raw!r})")
    lo = _interval(settings, "SIMSTORE_REVISIT_MIN", 86400.0)
    hi = _interval(settings, "SIMSTORE_REVISIT_MAX", 30 * 86400.0)
    gone = number(settings, "SIMSTORE_REVISIT_GONE", int)
    try:
        return Revisit(lo, hi, 3 if gone is None else gone)
    except SimstoreValueError as exc:
        raise SimstoreValueError(f"settings SIMSTORE_REVISIT_*: {exc}") from None


def _interval(settings: Any, name: str, default: float) -> float:
    raw = _raw(settings, name)
    if raw is None:
        return default
    if raw in (0, "0"):
        return 0.0
    seconds = age(settings, name)
    return 100 * 365 * 86400.0 if seconds is None else seconds


@dataclass(frozen=True)
class CrawlSettings:
    """What the Scheduler and the DupeFilter read, checked together at start."""

    path: str
    name: str
    lease: float
    expire: float | None
    durable: bool
    k: int | None
    politeness: Politeness
    revisit: Revisit | None
    allow_shared: bool
    robots_max_age: float = 86400.0
    per_ip: bool = False  # CONCURRENT_REQUESTS_PER_IP: hosts grouped by address
    conditional: bool = True  # revisits ask with the validators of the last answer


def crawl_settings(settings: Any, component: str) -> CrawlSettings:
    """Every setting of the frontier components, or a SimstoreValueError naming one."""
    return CrawlSettings(
        path=path_setting(settings, component), name=frontier_name(settings),
        lease=lease_setting(settings), expire=expire_setting(settings),
        durable=flag(settings, "SIMSTORE_DURABLE"), k=number(settings, "SIMSTORE_K", int),
        politeness=politeness_setting(settings), revisit=revisit_setting(settings),
        allow_shared=flag(settings, "SIMSTORE_ALLOW_SHARED_STORE"),
        robots_max_age=_interval(settings, "SIMSTORE_ROBOTS_MAX_AGE", 86400.0),
        per_ip=per_ip_setting(settings) > 0,
        conditional=flag(settings, "SIMSTORE_REVISIT_CONDITIONAL", True))


def both_checkers(settings: Any) -> bool:
    """Whether the middleware and the pipeline are both enabled."""
    mws = settings.getdict("DOWNLOADER_MIDDLEWARES")
    pipes = settings.getdict("ITEM_PIPELINES")
    return mws.get(MIDDLEWARE) is not None and pipes.get(PIPELINE) is not None


# --- the refusal ----------------------------------------------------------------------------

_REFUSALS: weakref.WeakKeyDictionary[Any, SimstoreError] = weakref.WeakKeyDictionary()


def refusal(crawler: Any) -> SimstoreError | None:
    """The refusal of this crawl, if a component refused already."""
    return _REFUSALS.get(crawler)


def refuse(crawler: Any, error: SimstoreError) -> None:
    """Refuse the crawl (see the module doc): the first refusal of a crawl logs and
    arranges the close; later ones are quiet."""
    if crawler in _REFUSALS:
        return
    _REFUSALS[crawler] = error
    logger.error("simstore: %s", error)
    closer = _Closer(crawler)
    crawler.signals.connect(closer.spider_opened, signal=signals.spider_opened, weak=False)
    crawler.signals.connect(closer.spider_closed, signal=signals.spider_closed, weak=False)


class Refused:
    """Any simstore component of a refused crawl (:func:`refuse`), the scheduler included:
    it touches no store, gives no request, and holds back whatever reaches it before the
    close. ``error``: why the crawl was refused (by this component or another)."""

    def __init__(self, error: SimstoreError | None) -> None:
        self.error = error

    def process_request(self, request: Any, spider: Any = None) -> None:
        raise IgnoreRequest("simstore refused the crawl's settings")

    def process_item(self, item: Any, spider: Any = None) -> Any:
        raise DropItem("simstore refused the crawl's settings")

    def open(self, spider: Any) -> None:
        """Nothing: the crawl closes at its start."""

    def close(self, reason: str) -> None:
        """Nothing to let go."""

    def has_pending_requests(self) -> bool:
        return False

    def enqueue_request(self, request: Any) -> bool:
        return False

    def next_request(self) -> None:
        return None

    def __len__(self) -> int:
        return 0


class _Closer:
    """Closes a refused crawl at its start and makes its command exit 1."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler

    def spider_opened(self, spider: Any = None) -> Any:
        engine = self.crawler.engine
        if _closes_at_open():  # Scrapy >= 2.18 closes before any start request is read
            raise CloseSpider(REFUSED)
        from scrapy.utils.defer import deferred_from_coro
        return deferred_from_coro(engine.close_spider_async(reason=REFUSED))

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        # Scrapy's crawl and runspider commands exit 1 when a crawler ends without a
        # spider (a crawl that failed to start): a refused crawl did not start either.
        self.crawler.spider = None


def _closes_at_open() -> bool:
    import scrapy

    try:
        major, minor = (int(x) for x in scrapy.__version__.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (2, 18)


def not_configured_without_path(settings: Any) -> None:
    """NotConfigured when SIMSTORE_PATH is unset (the middleware and pipeline are off)."""
    if not settings.get("SIMSTORE_PATH"):
        raise NotConfigured("SIMSTORE_PATH is not set")
