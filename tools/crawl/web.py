"""A local web of many hosts that asks to be crawled politely, for crawl-politeness measurements.

``hosts`` hosts, each its own :class:`~http.server.ThreadingHTTPServer` bound to a
loopback address of its own (127.0.0.2, 127.0.0.3, ...; one port for all when it is
free on each, else one each), every one with ``pages`` pages: ``/`` and ``/p/1`` ...
``/p/<pages-1>``. Page k links to pages 2k+1, 2k+2 and k+1 of its host (so a crawl
opens wide at once and reaches every page) and to two seeded pages of other hosts.
Text is real English (:func:`tools.crawl.site.paragraphs`), each page its own seeded
word order, carrying ``<meta name="page-id" content="h<i>-p<k>">``.

Politeness, as a strict server would ask it:

- every ``/robots.txt`` says ``User-agent: *`` and ``Crawl-delay: <delay>``, the value
  sent as given (a number, or a hostile ``banana``, ``1e9``, ``-1``);
- the first ``limited`` hosts answer ``limit_status`` (429, or 503) with
  ``Retry-After`` when a page is asked sooner than the crawl delay after the previous
  request to that host (less :data:`SLACK`; robots.txt never limited, never counted),
  by any client (``limit_gap``: a stricter gap than robots.txt asks, as real servers
  have, so that even a polite crawler meets a Retry-After); and
  every request inside the window so given is answered the same way. ``retry_as``:
  ``seconds`` or ``date`` (an HTTP date that far ahead).

Revisits: every page carries an ``ETag`` and a ``Last-Modified`` that move with its text,
and a conditional GET (``If-None-Match``, else ``If-Modified-Since``) of a page that has
not moved is answered 304 with no body (``validators=False``: none sent, never 304).
:meth:`Web.advance` starts a new generation in which a seeded fraction of
the pages has new text (the same pages for the same seed) and another answers 404 or
410 (alternately); what changed is
kept in ``changed`` and ``gone``. Every request is logged as a :class:`Hit` (host, path,
agent, status, ``time.monotonic()`` at arrival, the Retry-After window it was given),
so :mod:`tools.crawl.politeness` measures exactly what the hosts saw. Servers run in
daemon threads and stop with :meth:`Web.close` (or the ``with`` block).
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .site import paragraphs

HOLD_MAX = 60.0  # seconds a request may wait for Web.hold before it is answered anyway
# Seconds a gap may fall short of the crawl delay and still keep it: a client holding the
# delay by its own send times is seen by the hosts a few ms early or late (connection set-up,
# thread scheduling on a busy machine); the hosts limit and the figures count with it.
SLACK = 0.01
LAST_MODIFIED = 1_767_225_600  # 2026-01-01: a page's first Last-Modified (a day on per version)


@dataclass(frozen=True)
class Hit:
    """One request a host answered: arrival time is ``time.monotonic()`` in this process."""

    host: str
    path: str
    agent: str
    status: int
    at: float
    retry_after: float = 0.0  # the window a 429/503 answer gave, in seconds (0: none)
    generation: int = 0
    size: int = 0  # bytes of the answer's body


def host_address(i: int) -> str:
    """The loopback address of host i (127.0.0.2 for i = 0)."""
    if not 0 <= i < 250:
        raise ValueError(f"{i} is not a valid host number, must be between 0 and 249")
    return f"127.0.0.{i + 2}"


def page_path(k: int) -> str:
    """The path of page k of a host (``/`` for 0)."""
    return "/" if k == 0 else f"/p/{k}"


class Web:
    """The hosts, their pages and state, and the log of every request they answered."""

    def __init__(self, hosts: int = 8, pages: int = 150, delay: str | float = 0.2,
                 retry_after: float = 2.0, limited: int = 2, limit_status: int = 429,
                 retry_as: str = "seconds", seed: int = 7,
                 limit_gap: float | None = None, latency: float = 0.0,
                 validators: bool = True) -> None:
        if hosts < 1 or pages < 1:
            raise ValueError(f"hosts={hosts}, pages={pages}: both must be >= 1")
        if retry_as not in ("seconds", "date"):
            raise ValueError(f"{retry_as!r} is not a valid retry_as, must be seconds or date")
        if limit_status not in (429, 503):
            raise ValueError(f"{limit_status} is not a valid limit_status, must be 429 or 503")
        self.hosts = [host_address(i) for i in range(hosts)]
        self.pages = pages
        self.delay = str(delay)
        self.retry_after = float(retry_after)
        self.retry_as = retry_as
        self.limit_status = limit_status
        self.limited = set(self.hosts[:limited])
        self.limit_gap = limit_gap  # None: the crawl delay
        self.latency = latency  # seconds every answer takes (a server's own work)
        self.validators = validators  # pages carry an ETag and a Last-Modified
        self.seed = seed
        self.generation = 0
        self.changed: set[tuple[str, str]] = set()
        self.gone: dict[tuple[str, str], int] = {}
        self.log: list[Hit] = []
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.hold.set()
        self._version: dict[tuple[str, str], int] = {}
        self._last: dict[str, float] = {}  # host -> arrival of its last page request
        self._blocked: dict[str, float] = {}  # host -> end of the window it gave
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.ports: dict[str, int] = {}
        paragraphs()  # loaded now, not by the first request (it would skew that host's gaps)

    # --- the pages -----------------------------------------------------------------------

    def all_pages(self) -> set[tuple[str, str]]:
        """Every (host, path) of the web."""
        return {(h, page_path(k)) for h in self.hosts for k in range(self.pages)}

    def delay_seconds(self) -> float:
        """The crawl delay as a number of seconds (0 where robots.txt says no usable one)."""
        try:
            d = float(self.delay)
        except ValueError:
            return 0.0
        return d if 0 <= d < float("inf") else 0.0

    def _gap(self) -> float:
        return self.delay_seconds() if self.limit_gap is None else self.limit_gap

    def url(self, host: str, path: str = "/") -> str:
        """The URL of a page."""
        return f"http://{host}:{self.ports[host]}{path}"

    def start_urls(self) -> list[str]:
        """The home page of every host."""
        return [self.url(h) for h in self.hosts]

    def links(self, host: str, k: int) -> list[str]:
        """The URLs page k of host links to."""
        own = [j for j in (2 * k + 1, 2 * k + 2, k + 1) if j < self.pages]
        out = [self.url(host, page_path(j)) for j in own]
        others = [h for h in self.hosts if h != host]
        rng = random.Random(f"{self.seed}|{host}|{k}")
        for _ in range(2 if others else 0):
            out.append(self.url(rng.choice(others), page_path(rng.randrange(self.pages))))
        return out

    def render(self, host: str, path: str) -> tuple[int, bytes]:
        """(status, body) of a page in the current generation."""
        k = _page_number(path, self.pages)
        if k is None:
            return 404, b"<html><body><p>Not found</p></body></html>"
        with self.lock:
            gone = self.gone.get((host, path))
            version = self._version.get((host, path), 0)
        if gone:
            return gone, b"<html><body><p>Gone</p></body></html>"
        pool = paragraphs()
        rng = random.Random(f"{self.seed}|{host}|{k}|{version}")
        paras = []
        for p in rng.sample(pool, 3):
            words = p.split()
            paras.append("<p>" + " ".join(rng.sample(words, len(words))) + "</p>")
        links = "".join(f'<li><a href="{u}">page</a></li>' for u in self.links(host, k))
        doc = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><meta name="page-id" '
               f'content="h{self.hosts.index(host)}-p{k}"><title>{host} page {k}</title>'
               f"</head><body><main>{''.join(paras)}</main><ul>{links}</ul></body></html>")
        return 200, doc.encode()

    def validators_of(self, host: str, path: str) -> dict[str, str]:
        """The ETag and Last-Modified of a page in the current generation: both move with
        the page's text."""
        with self.lock:
            version = self._version.get((host, path), 0)
        tag = hashlib.blake2b(f"{self.seed}|{host}|{path}|{version}".encode(),
                              digest_size=8).hexdigest()
        return {"ETag": f'"{tag}"',
                "Last-Modified": formatdate(LAST_MODIFIED + version * 86400, usegmt=True)}

    def not_modified(self, validators: dict[str, str], if_none_match: str | None,
                     if_modified_since: str | None) -> bool:
        """Whether a conditional GET gets 304 (RFC 9110 13.2.2: If-None-Match, when sent,
        decides alone; a weak comparison; else If-Modified-Since against Last-Modified)."""
        if "ETag" not in validators:
            return False
        if if_none_match is not None:
            tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
            return "*" in tags or validators["ETag"] in tags
        if if_modified_since is None:
            return False
        try:
            since = parsedate_to_datetime(if_modified_since)
        except (TypeError, ValueError):
            return False
        if since.tzinfo is None:  # an HTTP date is GMT, whether it says so or not
            since = since.replace(tzinfo=timezone.utc)
        return parsedate_to_datetime(validators["Last-Modified"]) <= since

    def robots(self) -> bytes:
        """The robots.txt of every host."""
        return f"User-agent: *\nCrawl-delay: {self.delay}\n".encode()

    def advance(self, fraction: float = 0.2, seed: int = 1, gone: float = 0.05) -> None:
        """A new generation: ``fraction`` of the pages get new text and ``gone`` of the
        others answer 404 or 410 (home pages never go); ``changed`` and ``gone`` say which.

        One seed picks the same pages every time (pages that keep changing, as a news
        site's do): the same ones change again, and more go."""
        if not (0 <= fraction <= 1 and 0 <= gone <= 1 and fraction + gone <= 1):
            raise ValueError(f"fraction={fraction}, gone={gone}: each in [0, 1], sum <= 1")
        pages = sorted(self.all_pages())
        random.Random(f"advance|{self.seed}|{seed}").shuffle(pages)
        n_changed = round(fraction * len(pages))
        candidates = [p for p in pages[n_changed:] if p[1] != "/" and p not in self.gone]
        dead = candidates[:round(gone * len(pages))]
        with self.lock:
            self.generation += 1
            self.changed = set(pages[:n_changed]) - set(self.gone)
            for p in self.changed:
                self._version[p] = self._version.get(p, 0) + 1
            for i, p in enumerate(dead):
                self.gone[p] = 404 if i % 2 == 0 else 410

    # --- politeness ----------------------------------------------------------------------

    def answer(self, host: str, path: str, agent: str, if_none_match: str | None = None,
               if_modified_since: str | None = None) -> tuple[int, bytes, dict[str, str]]:
        """Log one request and decide its answer: (status, body, extra headers); a page
        that matches a conditional GET's validators is 304 with no body."""
        now = time.monotonic()
        window = 0.0
        if path != "/robots.txt":
            with self.lock:
                if host in self.limited:
                    if now < self._blocked.get(host, 0.0):
                        window = self._blocked[host] - now
                    elif now - self._last.get(host, -1e18) < self._gap() - SLACK:
                        window = self.retry_after
                        self._blocked[host] = now + window
                self._last[host] = now
        if path == "/robots.txt":
            status, body, headers = 200, self.robots(), {"Content-Type": "text/plain"}
        elif window:
            status, body = self.limit_status, b"<html><body><p>Slow down</p></body></html>"
            # whole seconds, rounded up: a client that waits what the header says is never
            # inside the window (an HTTP date has no fractions)
            when = (formatdate(math.ceil(time.time() + window), usegmt=True)
                    if self.retry_as == "date" else str(math.ceil(window)))
            headers = {"Content-Type": "text/html", "Retry-After": when}
        else:
            status, body = self.render(host, path)
            headers = {"Content-Type": "text/html; charset=utf-8"}
            if status == 200 and self.validators:
                headers.update(self.validators_of(host, path))
                if self.not_modified(headers, if_none_match, if_modified_since):
                    status, body = 304, b""
        with self.lock:
            self.log.append(Hit(host, path, agent, status, now, window, self.generation,
                                len(body)))
        return status, body, headers

    def hits(self) -> list[Hit]:
        """A copy of the log."""
        with self.lock:
            return list(self.log)

    # --- serving -------------------------------------------------------------------------

    def start(self, tries: int = 20) -> Web:
        """Serve every host (one port for all if it can be had in ``tries``); returns self."""
        for _ in range(tries):
            try:
                self._bind_all(same_port=True)
                break
            except OSError:
                self._close_servers()
        else:
            self._bind_all(same_port=False)
        for srv in self._servers:
            t = threading.Thread(target=srv.serve_forever, name="crawlweb", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _bind_all(self, same_port: bool) -> None:
        port = 0
        for host in self.hosts:
            srv = _Server((host, port), self)
            self._servers.append(srv)
            self.ports[host] = srv.server_address[1]
            if same_port:
                port = srv.server_address[1]

    def _close_servers(self) -> None:
        for srv in self._servers:
            srv.server_close()
        self._servers = []

    def close(self) -> None:
        """Stop every server and release the hold."""
        self.hold.set()
        for srv in self._servers:
            srv.shutdown()
        self._close_servers()
        for t in self._threads:
            t.join(5)
        self._threads = []

    def __enter__(self) -> Web:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _page_number(path: str, pages: int) -> int | None:
    if path == "/":
        return 0
    rest = path.removeprefix("/p/")
    if rest != path and rest.isdigit() and 0 < int(rest) < pages:
        return int(rest)
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        web = self.server.web
        web.hold.wait(HOLD_MAX)
        if web.latency:
            time.sleep(web.latency)
        host = self.server.server_address[0]
        path = self.path.split("?", 1)[0]
        status, body, headers = web.answer(host, path, self.headers.get("User-Agent", ""),
                                           self.headers.get("If-None-Match"),
                                           self.headers.get("If-Modified-Since"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if status != 304:  # a 304 has no body (RFC 9110 15.4.5)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: the web's log is ``Web.log``."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], web: Web) -> None:
        self.web = web
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about clients gone mid-request (a killed crawler); loud about the rest."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
