"""simstore.scrapy._requests: a request's payload reads back as Scrapy's own to_dict round
trip does (the oracle), leaves a plain Request's defaults out, imports nothing a store
names, and the host of a request is Scrapy's download slot's."""

from __future__ import annotations

import functools
import sys

import pytest
from hypothesis import given, settings, strategies as st

scrapy = pytest.importorskip("scrapy")

from scrapy.http import FormRequest, Headers, Request  # noqa: E402
from scrapy.utils.httpobj import urlparse_cached  # noqa: E402
from scrapy.utils.request import request_from_dict  # noqa: E402

from simstore.crawl import PayloadError  # noqa: E402
from simstore.crawl.payload import decode, encode  # noqa: E402
from simstore.scrapy._requests import (  # noqa: E402
    conditional,
    from_payload,
    host_of,
    to_payload,
)

from ..strategies import request_kwargs  # noqa: E402


def _renamed(func):
    def wrapper(self, *args, **kwargs):  # no functools.wraps: its __name__ is not the method's
        return func(self, *args, **kwargs)
    return wrapper


class Spider(scrapy.Spider):
    name = "t"

    def parse(self, response):
        pass

    def parse_item(self, response):
        pass

    def on_error(self, failure):
        pass

    @_renamed
    def parse_wrapped(self, response):
        pass


SPIDER = Spider()


def _request(kwargs: dict, cls: type = Request):
    kwargs = dict(kwargs)
    for name in ("callback", "errback"):
        if kwargs.get(name) is not None:
            kwargs[name] = getattr(SPIDER, kwargs[name])
    return cls(**kwargs)


def _scrapys_round_trip(request):
    """What Scrapy's own to_dict and request_from_dict give back (through the payload)."""
    return request_from_dict(decode(encode(request.to_dict(spider=SPIDER))), spider=SPIDER)


@settings(max_examples=300)
@given(request_kwargs())
def test_a_request_reads_back_as_scrapys_own_round_trip(kwargs):
    """Oracle: from_payload(to_payload(r)) has every attribute Scrapy's own round trip has,
    for plain Requests (defaults left out) and a subclass (written whole); so do a payload
    of the whole to_dict (as versions before read it back) and Scrapy's reader of ours
    (as they read what this one writes)."""
    for cls in (Request, FormRequest):
        request = _request(kwargs, cls)
        theirs = _scrapys_round_trip(request).to_dict(spider=SPIDER)
        for back in (from_payload(to_payload(request, SPIDER), SPIDER),
                     from_payload(encode(request.to_dict(spider=SPIDER)), SPIDER),
                     request_from_dict(decode(to_payload(request, SPIDER)), spider=SPIDER)):
            assert type(back) is cls
            assert back.to_dict(spider=SPIDER) == theirs


_ASK = (b"If-None-Match", b"If-Modified-Since")


def _validator_ok(value: bytes) -> bool:
    return 1 <= len(value) <= 256 and all(0x20 <= b <= 0x7E for b in value)


@settings(max_examples=300)
@given(request_kwargs(), st.dictionaries(
    st.sampled_from(["ETag", "Last-Modified", "etag", "Content-Type"]),
    st.binary(max_size=300) | st.sampled_from([b'"v1"', b'W/"v2"', b"a\r\nX-Evil: 1"]),
    max_size=3))
def test_a_conditional_revisit_carries_only_clean_validators(kwargs, answer):
    """Oracle for conditional(payload, answer headers) over arbitrary requests and hostile
    header values: never an exception; None for a request that is not a GET or that
    nothing changes; else the same request (its other attributes as they were) whose
    If-None-Match / If-Modified-Since are exactly the answer's ETag / Last-Modified that
    are 1-256 visible ASCII bytes (a value with a control byte, such as CR LF, is never
    sent back), none of the old ones kept."""
    request = _request(kwargs)
    payload = to_payload(request, SPIDER)
    headers = Headers(answer)
    got = conditional(payload, headers)
    sent = {ask: headers.get(got_) for got_, ask in ((b"ETag", _ASK[0]),
                                                    (b"Last-Modified", _ASK[1]))}
    sent = {k: v for k, v in sent.items() if v is not None and _validator_ok(v)}
    had = {k: request.headers.get(k) for k in _ASK if k in request.headers}
    if request.method != "GET":
        assert got is None
        return
    if got is None:
        assert had == sent
        return
    back = from_payload(got, SPIDER)
    assert {k: back.headers.get(k) for k in _ASK if k in back.headers} == sent
    mine = back.to_dict(spider=SPIDER)
    theirs = request.to_dict(spider=SPIDER)
    for d in (mine, theirs):
        d["headers"] = {k: v for k, v in d["headers"].items() if k not in _ASK}
    assert mine == theirs


def test_a_plain_requests_defaults_are_left_out():
    """Known answer: a link with a callback, a Referer and a depth is written as those."""
    request = Request("http://a.example/p", callback=SPIDER.parse,
                      headers={"Referer": "http://a.example/"}, meta={"depth": 2})
    assert decode(to_payload(request, SPIDER)) == {
        "url": "http://a.example/p", "callback": "parse",
        "headers": {b"Referer": [b"http://a.example/"]}, "meta": {"depth": 2}}
    assert to_payload(Request("http://a.example/"), SPIDER) == b'\x02{"url":"http://a.example/"}'
    # a value equal to its default but of another type is kept (False is not 0)
    assert decode(to_payload(Request("http://a.example/", priority=False), SPIDER)) == {
        "url": "http://a.example/", "priority": False}


def test_a_method_whose_name_differs_is_found_as_scrapy_finds_it():
    """A decorated callback whose __name__ is not its attribute name: the quick lookup
    cannot name it, Scrapy's to_dict does; a callback not of the spider is refused."""
    request = Request("http://a.example/", callback=SPIDER.parse_wrapped)
    assert decode(to_payload(request, SPIDER))["callback"] == "parse_wrapped"
    assert from_payload(to_payload(request, SPIDER), SPIDER).callback == SPIDER.parse_wrapped
    with pytest.raises(ValueError):
        to_payload(Request("http://a.example/", callback=lambda r: None), SPIDER)
    other = Request("http://a.example/", callback=Spider().parse)  # named as Scrapy names it
    assert decode(to_payload(other, SPIDER))["callback"] == other.to_dict(spider=SPIDER)["callback"]


def test_a_class_named_by_a_store_is_never_imported(tmp_path, monkeypatch):
    """A payload naming a module not imported is refused and the module never runs; one
    naming an imported callable that is no Request class is refused too."""
    marker = tmp_path / "ran"
    (tmp_path / "simstore_planted_mod.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Request:\n    attributes = ('url',)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = b'\x02{"url":"http://a.example/","_class":"simstore_planted_mod.Request"}'
    with pytest.raises(PayloadError, match="not loaded"):
        from_payload(planted, SPIDER)
    assert not marker.exists() and "simstore_planted_mod" not in sys.modules
    for path in ("os.system", "builtins.dict", "nodots", 7, "os."):
        raw = encode({"url": "http://a.example/", "_class": path})
        with pytest.raises(PayloadError):
            from_payload(raw, SPIDER)
    for raw in (encode([1]), encode({"url": 5}), encode({"callback": "parse"})):
        with pytest.raises(PayloadError):
            from_payload(raw, SPIDER)


@pytest.mark.parametrize("url", [
    "http://A.Example:81/x", "https://user:pw@b.example/p?q", "http://[::1]:8080/",
    "http://127.0.0.3/", "http://xn--bcher-kva.example/", "file:///etc/passwd"])
def test_host_of_is_scrapys_slot_host(url):
    """The host a request is polite to is the host name Scrapy's download slot uses, lower case."""
    request = Request(url)
    assert host_of(request) == (urlparse_cached(request).hostname or "").lower()
    assert host_of(request) == host_of(Request(url))  # cached by URL: the same answer


def test_host_cache_is_bounded():
    from simstore.scrapy import _requests

    assert isinstance(_requests._host_of_url, functools._lru_cache_wrapper)
    assert _requests._host_of_url.cache_info().maxsize is not None
