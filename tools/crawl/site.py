"""A local web site that repeats itself the way real sites do, for crawl tests and benchmarks.

Served by :mod:`http.server` on 127.0.0.1 only. Text is real English: paragraphs of
the Python standard library's docstrings (present wherever Python is), dealt out so
that no two articles share a paragraph. Every page carries ``<meta name="page-id">``;
copies of a page carry its id, so a crawl can be scored by content, not by URL.

Distinct pages: ``/`` (home), ``/section/<s>`` (links to its articles), ``/article/<n>``
(nav, ``<main>`` with the article and related links, footer), ``/misc`` and the
first calendar month. The ways the site repeats them:

- ``/article/<n>/print``: the print view, the article alone;
- ``?utm_source=…``: tracking parameters, the same page;
- ``?sid=…``: a session id. Every page links to itself with a new one, and a page
  with a session id gives every link a new one: endless URLs (the server notes each
  session id's depth, so a test sees how deep a crawl went);
- ``/archive/<n>``: a syndicated copy with an "updated" line and a new date;
- ``/calendar/<y>/<m>``: the calendar trap, a month linking to the months before and
  after it, for ever (``trap=False``: only the months of one year).

``variants=False`` gives a site of distinct pages only: home, sections, articles.
``page_kb`` adds an inline script of that many KB to every page (the weight of real
pages: their analytics and hydration data).

Odd responses, linked from ``/misc``: a Latin-1 page with no declared charset and a
page declaring UTF-8 in cp1252 bytes (pages with text: ``odd-…`` ids), and responses
with none to check (``SKIPPED``: a binary body sent as HTML, a 10 MB page, an empty
body and a PNG; only the 10 MB page has an id, ``bad-big``).

``python -m tools.crawl site`` serves it by hand.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import html
import importlib
import inspect
import random
import re
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# Standard-library modules whose docstrings give the text (missing ones are passed over).
_DOC_MODULES = (
    "argparse", "asyncio", "base64", "bisect", "calendar", "codecs", "collections",
    "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "doctest", "email", "enum", "fnmatch", "fractions",
    "ftplib", "functools", "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac",
    "http.client", "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "locale",
    "logging", "mailbox", "mimetypes", "multiprocessing", "numbers", "operator", "optparse",
    "os", "pathlib", "pdb", "pickle", "platform", "pprint", "pydoc", "queue", "random", "re",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib",
    "socket", "sqlite3", "ssl", "statistics", "string", "struct", "subprocess", "sysconfig",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace",
    "traceback", "typing", "unittest", "urllib.parse", "urllib.request", "uuid", "wave",
    "weakref", "xml.etree.ElementTree", "zipfile",
)
SECTIONS = ("world", "science", "culture", "sport", "business", "travel")
CALENDAR_START = (2026, 11)
BIG_BYTES = 10 * 2**20
# The responses under /misc/ a deduplicating crawl cannot check, and why (simstore.scrapy's
# skip reasons).
SKIPPED = {"binary": "binary", "big": "too_large", "empty": "empty", "image.png": "not_html"}
_PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")


def paragraphs() -> list[str]:
    """Distinct paragraphs (>= 25 words) of standard-library docstrings, in a fixed order."""
    return list(_paragraphs())


@functools.cache
def _paragraphs() -> tuple[str, ...]:
    seen: set[str] = set()
    out = []
    with warnings.catch_warnings():  # deprecated modules and names still have text
        warnings.simplefilter("ignore")
        for name in _DOC_MODULES:
            out += _module_paragraphs(name, seen)
    return tuple(out)


def _module_paragraphs(name: str, seen: set[str]) -> list[str]:
    """The paragraphs of one module's docstrings not in seen (added to it)."""
    try:
        mod = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a module this Python lacks gives no text
        return []
    out = []
    for n in sorted(vars(mod)):
        obj = getattr(mod, n) if not n.startswith("_") else None
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        for p in re.split(r"\n\s*\n", inspect.getdoc(obj) or ""):
            p = " ".join(p.split())
            if len(p.split()) >= 25 and ">>>" not in p and p not in seen:
                seen.add(p)
                out.append(p)
    return out


@dataclass
class Article:
    """One article: its number, section, title and paragraphs."""

    n: int
    section: str
    title: str
    paras: list[str]


@dataclass
class Site:
    """The pages of a site of ``articles`` articles (seeded), rendered on request."""

    articles: int = 36
    seed: int = 7
    trap: bool = True
    variants: bool = True
    page_kb: int = 0
    edition: int = 1  # > 1: every third article (0, 3, 6, ...) has new paragraphs
    items: list[Article] = field(init=False)
    _sids: dict[str, int] = field(init=False, default_factory=dict)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _cache: dict[str, tuple[int, str, bytes]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        pool = paragraphs()
        rng = random.Random(self.seed)
        rng.shuffle(pool)
        per = 5
        self.items = []
        for n in range(self.articles):
            if len(pool) >= per:
                paras = [pool.pop() for _ in range(per)]
            else:  # a large benchmark site: paragraphs come back in new combinations
                paras = rng.sample(paragraphs(), per)
            words = paras[0].split()
            title = " ".join(words[:6]).rstrip(".,;:").capitalize()
            self.items.append(Article(n, SECTIONS[n % len(SECTIONS)], title, paras))
        if self.edition > 1:  # a later edition: paragraphs no article of edition 1 had
            fresh = random.Random(self.seed + self.edition)
            for a in self.items[::3]:
                a.paras = [" ".join(fresh.sample(p.split(), len(p.split())))
                           for p in a.paras]

    # --- what a crawl should keep ----------------------------------------------------

    def distinct_ids(self) -> set[str]:
        """The page ids a deduplicating crawl keeps once each (bad pages not included)."""
        ids = {"home", "misc", "calendar", "odd-latin1", "odd-wrong-charset"}
        ids |= {f"section-{s}" for s in self.sections()}
        return ids | {f"article-{a.n}" for a in self.items}

    def sections(self) -> list[str]:
        """The sections that hold articles."""
        return [s for s in SECTIONS if any(a.section == s for a in self.items)]

    def sid_depth(self, sid: str) -> int:
        """How many session-id links lead from a page without one to this session id."""
        with self._lock:
            return self._sids.get(sid, 0)

    # --- rendering ---------------------------------------------------------------------

    def render(self, target: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a request target (path and query)."""
        parts = urlsplit(target)
        sid = parse_qs(parts.query).get("sid", [""])[0]
        if sid:
            return self._page(parts.path, sid)
        with self._lock:
            hit = self._cache.get(parts.path)
        if hit is None:
            hit = self._page(parts.path, "")
            with self._lock:
                self._cache[parts.path] = hit
        return hit

    def _new_sid(self, parent: str, link: str) -> str:
        sid = hashlib.blake2b(f"{parent}|{link}".encode(), digest_size=8).hexdigest()
        with self._lock:
            self._sids.setdefault(sid, self._sids.get(parent, 0) + 1)
        return sid

    def _page(self, path: str, sid: str) -> tuple[int, str, bytes]:
        bad = self._bad(path)
        if bad is not None:
            return bad
        built = self._build(path)
        if built is None:
            return 404, "text/html; charset=utf-8", b"<html><body><p>Not found</p></body></html>"
        page_id, title, body, links = built
        if self.variants and page_id != "calendar" and not path.endswith("/print"):
            links.append((f"{path}?sid=", "Remember my preferences"))
        hrefs = []
        for href, label in links:
            if href.endswith("?sid="):
                href += self._new_sid(sid or path, path)
            elif sid:
                sep = "&" if "?" in href else "?"
                href = f"{href}{sep}sid={self._new_sid(sid, href)}"
            hrefs.append(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>')
        doc = (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="page-id" content="{page_id}"><title>{html.escape(title)}</title>'
            f"</head><body>{body}<ul class=\"links\">{''.join(hrefs)}</ul>"
            f"{_script(self.page_kb)}</body></html>"
        )
        return 200, "text/html; charset=utf-8", doc.encode("utf-8")

    def _chrome(self, main: str) -> str:
        nav = "".join(f'<a href="/section/{s}">{s.title()}</a> ' for s in self.sections())
        return (
            f'<header><a href="/">The Example Gazette</a></header><nav>{nav}</nav>'
            f"<main>{main}</main><footer>The Example Gazette, 12 Harbour Street. Letters "
            "to the editor are welcome; we correct errors promptly.</footer>"
        )

    def _article_html(self, a: Article, dateline: str) -> str:
        body = "".join(f"<p>{html.escape(p)}</p>" for p in a.paras)
        return (
            f"<article><h1>{html.escape(a.title)}</h1><p class=\"byline\">By the "
            f"{a.section} desk, {dateline}</p>{body}</article>"
        )

    def _build(self, path: str) -> tuple[str, str, str, list[tuple[str, str]]] | None:
        """(page id, title, body html, links) of a page of the site, or None."""
        parts = [p for p in path.split("/") if p]
        if not parts:
            links = [(f"/section/{s}", s.title()) for s in self.sections()]
            if self.variants:
                links += [("/calendar/{}/{}".format(*CALENDAR_START), "Events"),
                          ("/misc", "Odd files")]
            intro = ("<h1>The Example Gazette</h1><p>News and essays from the harbour town, "
                     "collected by our reporters and readers since the spring.</p>")
            return "home", "The Example Gazette", self._chrome(intro), links
        if parts[0] == "section" and len(parts) == 2 and parts[1] in self.sections():
            arts = [a for a in self.items if a.section == parts[1]]
            lis = "".join(f"<li>{html.escape(a.title)}: {html.escape(a.paras[0][:160])}</li>"
                          for a in arts)
            main = f"<h1>{parts[1].title()}</h1><ul>{lis}</ul>"
            links = [(f"/article/{a.n}", a.title) for a in arts]
            return f"section-{parts[1]}", parts[1].title(), self._chrome(main), links
        if parts[0] == "article" and len(parts) in (2, 3) and parts[1].isdigit():
            n = int(parts[1])
            if n >= len(self.items) or (len(parts) == 3 and parts[2] != "print"):
                return None
            a = self.items[n]
            if len(parts) == 3:
                if not self.variants:
                    return None
                body = self._article_html(a, "3 March") + "<p>Printed from the Example Gazette.</p>"
                return f"article-{n}", a.title, body, [(f"/article/{n}", "Back to the article")]
            links = [(f"/article/{(n + d) % len(self.items)}", "Related") for d in (1, 7)]
            if self.variants:
                links += [(f"/article/{n}/print", "Print"),
                          (f"/article/{n}?utm_source=share&utm_medium=link", "Share"),
                          (f"/archive/{n}", "Also in the archive")]
            return f"article-{n}", a.title, self._chrome(self._article_html(a, "3 March")), links
        if parts[0] == "archive" and len(parts) == 2 and parts[1].isdigit() and self.variants:
            n = int(parts[1])
            if n >= len(self.items):
                return None
            a = self.items[n]
            main = ("<p>Updated: this article was corrected after publication.</p>"
                    + self._article_html(a, "5 March"))
            return f"article-{n}", a.title, self._chrome(main), [(f"/article/{n}", "Original")]
        if parts[0] == "calendar" and len(parts) == 3 and all(p.isdigit() for p in parts[1:]):
            return self._month(int(parts[1]), int(parts[2]))
        if parts == ["misc"]:
            links = [(f"/misc/{name}", name) for name in _BAD]
            main = ("<h1>Odd files</h1><p>Reports and scans that readers sent us, some of "
                    "them in old formats. Download them at your own risk.</p>")
            return "misc", "Odd files", self._chrome(main), links
        return None

    def _month(self, y: int, m: int) -> tuple[str, str, str, list[tuple[str, str]]] | None:
        if not 1 <= m <= 12:
            return None
        if not self.trap and y != CALENDAR_START[0]:
            return None
        name = f"{calendar.month_name[m]} {y}"
        days = "".join(f"<td>{d}</td>" for d in range(1, calendar.monthrange(y, m)[1] + 1))
        main = (
            f"<h1>Events in {name}</h1><table><tr>{days}</tr></table><p>No events are listed "
            "for this month yet. Community groups, schools, clubs and churches can send us "
            "their concerts, markets, meetings, talks and sports fixtures through the form "
            "on the contact page, at least two weeks before the date. We check every entry "
            "by telephone before we publish it, and we print a selection in the weekend "
            "edition. Entries are free of charge for events that are open to the public.</p>"
            "<h2>How to send an event</h2><p>Tell us the name of the event, the place with its "
            "full address, the day and the time it starts and ends, the price of a ticket if "
            "there is one, and a telephone number or an email address where readers can ask "
            "questions. Say whether the place can be reached by wheelchair and whether "
            "children are welcome. Photographs help: send them as attachments, not inside a "
            "document, and tell us who took them. Large events such as the harbour festival, "
            "the autumn fair and the winter market have their own pages, which we open a "
            "month before they begin.</p>"
        )
        prev = (y - 1, 12) if m == 1 else (y, m - 1)
        nxt = (y + 1, 1) if m == 12 else (y, m + 1)
        links = [(f"/calendar/{py}/{pm}", "Previous month") for py, pm in (prev,)]
        links += [(f"/calendar/{ny}/{nm}", "Next month") for ny, nm in (nxt,)]
        return "calendar", f"Events in {name}", self._chrome(main), links

    def _bad(self, path: str) -> tuple[int, str, bytes] | None:
        name = path.removeprefix("/misc/")
        if name == path or name not in _BAD:
            return None
        return _BAD[name]()


@functools.cache
def _script(kb: int) -> str:
    """An inline script of about kb KB (a page's analytics and hydration data), or ""."""
    if kb <= 0:
        return ""
    rng = random.Random(kb)
    rows = []
    while sum(map(len, rows)) < kb * 1000:
        key, val = rng.getrandbits(32), rng.getrandbits(48)
        rows.append(f'{{"k":"{key:08x}","v":{val},"t":"item-{val % 997}"}}')
    return "<script>window.__STATE__=[" + ",".join(rows) + "];</script>"


@functools.cache
def _big() -> tuple[int, str, bytes]:
    para = "<p>" + " ".join(paragraphs()[:40]) + "</p>"
    reps = BIG_BYTES // len(para.encode()) + 1
    body = ('<html><head><meta name="page-id" content="bad-big"></head><body>'
            + para * reps + "</body></html>")
    return 200, "text/html; charset=utf-8", body.encode()


_LATIN = ("Le café de la gare a fermé ses portes après trente années de service; les "
          "habitués regrettent déjà les crêpes, le thé à la menthe et les débats animés.")
_BAD = {
    "binary": lambda: (200, "text/html", b"\x00\x01\x02PK\x03\x04" + bytes(range(256)) * 64),
    "big": _big,
    "latin1": lambda: (200, "text/html", (
        '<html><head><meta name="page-id" content="odd-latin1"></head><body><p>'
        + _LATIN + "</p></body></html>").encode("latin-1")),
    "wrong-charset": lambda: (200, "text/html; charset=utf-8", (
        '<html><head><meta name="page-id" content="odd-wrong-charset"></head><body><p>'
        + _LATIN[::-1] + "</p></body></html>").encode("cp1252")),
    "empty": lambda: (200, "text/html; charset=utf-8", b""),
    "image.png": lambda: (200, "image/png", _PNG),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        srv = self.server
        srv.hold.wait(60)
        srv.meet(self.headers.get("User-Agent", ""))
        with srv.lock:
            srv.busy += 1
            srv.most_busy = max(srv.most_busy, srv.busy)
            srv.busy_log.append(srv.busy)
        try:
            if srv.delay:
                time.sleep(srv.delay)
            status, ctype, body = srv.site.render(self.path)
            with srv.lock:
                srv.log.append(Fetch(self.path, self.headers.get("User-Agent", ""),
                                     self.headers.get("Referer", ""), status))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with srv.lock:
                srv.busy -= 1

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: the server's log is ``Server.log``."""


@dataclass(frozen=True)
class Fetch:
    """One request the server answered."""

    target: str
    agent: str
    referer: str
    status: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site: Site, delay: float, together: int,
                 hold: threading.Event | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if hold is None:
            hold = threading.Event()
            hold.set()
        self.hold = hold
        self.site = site
        self.delay = delay
        self.lock = threading.Lock()
        self.log: list[Fetch] = []
        self.busy = 0  # requests being answered now
        self.most_busy = 0  # the most answered at once (after the hold)
        self.busy_log: list[int] = []  # requests being answered as each one starts
        self.together = together
        self._agents: set[str] = set()
        self._met = threading.Condition(self.lock)

    def meet(self, agent: str) -> None:
        """Hold requests until ``together`` user agents have asked (at most 60 s)."""
        with self._met:
            self._agents.add(agent)
            self._met.notify_all()
            self._met.wait_for(lambda: len(self._agents) >= self.together, timeout=60)


@contextmanager
def serve(site: Site, delay: float = 0.0, together: int = 1,
          hold: threading.Event | None = None) -> Iterator[tuple[str, _Server]]:
    """Serve site on 127.0.0.1 (a free port) in a thread: (base URL, server).

    delay: seconds added to every response; together: no response before that many
    user agents have asked (so concurrent crawlers really overlap); hold: no response
    before this event is set (at most 60 s), for crawlers that share one start URL.
    """
    srv = _Server(site, delay, together, hold)
    t = threading.Thread(target=srv.serve_forever, name="crawlsite", daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()
