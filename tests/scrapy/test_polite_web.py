"""The many-host web of tools.crawl.web, asked by urllib on loopback: robots.txt, 429s, revisions."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime

import pytest

from tools.crawl.web import Web, page_path


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one GET, errors included."""
    req = urllib.request.Request(url, headers={"User-Agent": "t"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_every_page_reachable_from_the_home_pages() -> None:
    """Following links from every host's home page reaches every page of the web, nothing else."""
    web = Web(hosts=3, pages=40)
    web.ports = dict.fromkeys(web.hosts, 1)
    seen, todo = set(), [(h, "/") for h in web.hosts]
    while todo:
        host, path = todo.pop()
        if (host, path) in seen:
            continue
        seen.add((host, path))
        k = 0 if path == "/" else int(path.rsplit("/", 1)[1])
        for url in web.links(host, k):
            h, p = url.removeprefix("http://").split(":", 1)
            todo.append((h, p[p.index("/"):]))
    assert seen == web.all_pages()


@pytest.mark.parametrize("delay", ["0.2", "banana", "1e9", "-1"])
def test_robots_txt_sends_the_delay_as_given(delay: str) -> None:
    """robots.txt says User-agent: * and Crawl-delay as given, hostile values too."""
    with Web(hosts=2, pages=3, delay=delay) as web:
        status, _, body = get(web.url(web.hosts[1], "/robots.txt"))
        assert status == 200 and body.decode() == f"User-agent: *\nCrawl-delay: {delay}\n"
        assert web.hits()[0].path == "/robots.txt"


def test_limited_host_answers_429_with_retry_after() -> None:
    """Asked too fast, a limited host answers 429 and again inside its window; others answer 200."""
    with Web(hosts=2, pages=5, delay=0.5, retry_after=3, limited=1) as web:
        limited, free = web.hosts
        assert [get(web.url(limited, p))[0] for p in ("/robots.txt", "/", "/p/1")] == [200, 200, 429]
        status, headers, _ = get(web.url(limited, "/p/2"))
        assert status == 429 and int(headers["Retry-After"]) == 3  # 3 less a little, rounded up
        assert [get(web.url(free, p))[0] for p in ("/", "/p/1")] == [200, 200]
        hits = web.hits()
        assert [h.status for h in hits if h.host == limited] == [200, 200, 429, 429]
        assert hits[2].retry_after == 3.0 and 0 < hits[3].retry_after < 3.0
        assert hits[1].agent == "t" and hits[1].at <= hits[2].at <= time.monotonic()


def test_limit_gap_stricter_than_robots_txt() -> None:
    """A host may limit harder than its Crawl-delay: a client keeping the delay still gets 429."""
    with Web(hosts=1, pages=3, delay=0.05, limit_gap=1.0) as web:
        url = web.url(web.hosts[0], "/")
        first = get(url)[0]
        time.sleep(0.1)
        assert (first, get(url)[0]) == (200, 429)


def test_retry_after_as_http_date_and_503() -> None:
    """Retry-After can be an HTTP date that far ahead, and the answer 503."""
    with Web(hosts=1, pages=3, delay=1, retry_after=60, limit_status=503, retry_as="date") as web:
        get(web.url(web.hosts[0], "/"))
        status, headers, _ = get(web.url(web.hosts[0], "/p/1"))
        assert status == 503
        ahead = parsedate_to_datetime(headers["Retry-After"]).timestamp() - time.time()
        assert 59 < ahead <= 61  # never before the end of the window


def test_advance_changes_some_pages_and_removes_others() -> None:
    """After advance, the changed pages render new text, others the same; gone ones 404 or 410."""
    web = Web(hosts=2, pages=50)
    web.ports = dict.fromkeys(web.hosts, 1)
    before = {p: web.render(*p) for p in web.all_pages()}
    web.advance(0.2, seed=3, gone=0.1)
    assert len(web.changed) == 20 and len(web.gone) == 10
    assert not web.changed & set(web.gone) and all(path != "/" for _, path in web.gone)
    assert sorted(set(web.gone.values())) == [404, 410]
    for p, (status, body) in before.items():
        now = web.render(*p)
        if p in web.gone:
            assert now[0] == web.gone[p]
        elif p in web.changed:
            assert now[0] == 200 and now[1] != body
        else:
            assert now == (status, body)
    assert web.render(web.hosts[0], page_path(50))[0] == 404


def test_advance_with_one_seed_changes_the_same_pages() -> None:
    """One seed picks the same pages again (pages that keep changing), with new text each time."""
    web = Web(hosts=2, pages=50)
    web.ports = dict.fromkeys(web.hosts, 1)
    web.advance(0.2, seed=3, gone=0.1)
    changed, gone = set(web.changed), dict(web.gone)
    page = next(iter(changed))
    text = web.render(*page)
    web.advance(0.2, seed=3, gone=0.0)
    assert (web.changed, web.gone, web.generation) == (changed, gone, 2)
    assert web.render(*page) != text
    web.advance(0.2, seed=4, gone=0.0)
    assert web.changed != changed


@pytest.mark.parametrize("field,value", [("latency", -1.0), ("latency", float("inf")),
                                         ("gap", -0.1), ("gap", float("nan"))])
def test_polite_refuses_an_odd_latency_or_gap_by_name(tmp_path, field, value):
    """A negative or non-finite --latency / --gap ends the tool with one line naming the
    flag, before any web or crawl starts."""
    from tools.crawl import polite

    with pytest.raises(SystemExit, match=f"--{field}"):
        polite.run(polite.Options(**{field: value}), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_conditional_gets_are_answered_304_until_the_page_moves() -> None:
    """Pages carry an ETag and a Last-Modified; a GET with If-None-Match (weak, listed or
    ``*``) that matches, or else with If-Modified-Since not before Last-Modified, is 304
    with no body; once the page changed, both validators move and it is 200 again.
    With validators=False none are sent and nothing is 304."""
    with Web(hosts=1, pages=3, delay="0", limited=0) as web:
        url = web.url(web.hosts[0], "/p/1")
        status, headers, body = get(url)
        etag, modified = headers["ETag"], headers["Last-Modified"]
        assert status == 200 and body and etag.startswith('"')

        def ask(**h: str) -> int:
            req = urllib.request.Request(url, headers={"User-Agent": "t", **h})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                assert e.read() == b""  # a 304 has no body
                return e.code

        later = "Tue, 01 Jan 2030 00:00:00 GMT"
        earlier = "Thu, 01 Jan 2015 00:00:00 GMT"
        assert ask(**{"If-None-Match": etag}) == 304
        assert ask(**{"If-None-Match": f'"x", W/{etag}'}) == 304
        assert ask(**{"If-None-Match": "*"}) == 304
        assert ask(**{"If-None-Match": '"x"', "If-Modified-Since": later}) == 200  # INM decides
        assert ask(**{"If-Modified-Since": modified}) == 304
        assert ask(**{"If-Modified-Since": earlier}) == 200
        assert ask(**{"If-Modified-Since": "banana"}) == 200
        assert ask(**{"If-Modified-Since": later.removesuffix(" GMT")}) == 304  # no zone: GMT
        web.advance(1.0, seed=1, gone=0.0)
        assert ask(**{"If-None-Match": etag}) == 200
        assert ask(**{"If-Modified-Since": modified}) == 200
        _, moved, _ = get(url)
        assert moved["ETag"] != etag
        assert parsedate_to_datetime(moved["Last-Modified"]) > parsedate_to_datetime(modified)
        assert [h.status for h in web.hits()].count(304) == 5
    with Web(hosts=1, pages=3, delay="0", limited=0, validators=False) as web:
        url = web.url(web.hosts[0], "/p/1")
        status, headers, _ = get(url)
        assert status == 200 and "ETag" not in headers
        req = urllib.request.Request(url, headers={"User-Agent": "t", "If-None-Match": "*"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
