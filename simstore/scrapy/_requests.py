"""A Scrapy request as a queue payload and back, and the host a request is polite to.

A payload is Scrapy's ``Request.to_dict()`` as data (:mod:`simstore.crawl.payload`). For
a plain ``Request`` the values it has by default are left out (``request_from_dict``
gives them back): most links carry a URL, a callback name, a Referer and a depth, and
each request of a crawl is written and read once. Reading refuses a ``_class`` that
names anything but an already imported ``Request`` subclass: Scrapy's own reader would
import whatever module a store names, and importing runs code.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from scrapy import Request
from scrapy.utils.request import request_from_dict

from ..crawl import PayloadError, host_of_url
from ..crawl.payload import decode, encode

# What a plain Request holds when its constructor is given nothing (left out of payloads)
_DEFAULTS: dict[str, Any] = {
    "method": "GET", "headers": {}, "body": b"", "cookies": {}, "meta": {},
    "encoding": "utf-8", "priority": 0, "dont_filter": False, "flags": [],
    "cb_kwargs": {}, "callback": None, "errback": None,
}
_SLOW = object()  # a callback the quick lookup cannot name: Scrapy's to_dict decides
# an answer's validators -> the headers that send them back (RFC 9110 13.1.2, 13.1.3)
VALIDATORS = ((b"ETag", b"If-None-Match"), (b"Last-Modified", b"If-Modified-Since"))
_ASKING = {ask.lower() for _, ask in VALIDATORS}
MAX_VALIDATOR = 256  # bytes: a longer validator is not sent back
# what a validator may be to be sent back: visible ASCII and spaces (no control byte: a
# header value taken from a server is never written into a request as it came)
_VALIDATOR = re.compile(rb"[\x20-\x7e]{1,%d}" % MAX_VALIDATOR)


def _method_name(spider: Any, func: Any) -> Any:
    """The name of the spider method func (None for None), or _SLOW."""
    if func is None:
        return None
    name = getattr(func, "__name__", None)
    own = getattr(func, "__func__", None)
    if (spider is not None and own is not None and isinstance(name, str)
            and getattr(getattr(spider, name, None), "__func__", None) is own):
        return name
    return _SLOW


def to_payload(request: Any, spider: Any) -> bytes:
    """request as a payload; PayloadError, ValueError, TypeError or AttributeError when it
    cannot be stored as data (a callback that is not a spider method, objects in meta)."""
    if type(request) is Request:  # noqa: E721 - a subclass may have other defaults
        names = {"callback": _method_name(spider, request.callback),
                 "errback": _method_name(spider, request.errback)}
        if _SLOW not in names.values():
            out: dict[str, Any] = {"url": request.url}
            for attr in Request.attributes:
                if attr == "url":
                    continue
                value = names[attr] if attr in names else getattr(request, attr)
                if attr == "headers":
                    value = dict(value)
                default = _DEFAULTS.get(attr, _SLOW)
                if not (type(value) is type(default) and value == default):
                    out[attr] = value
            return encode(out)
    return encode(request.to_dict(spider=spider))


def from_payload(payload: bytes, spider: Any) -> Any:
    """The request of a payload (PayloadError, ValueError or TypeError when it does not
    read back as one); a ``_class`` must name a Request subclass already imported."""
    d = decode(payload)
    if not isinstance(d, dict) or not isinstance(d.get("url"), str):
        raise PayloadError("a queued payload is not a request's dict")
    if "_class" in d:
        _request_class(d["_class"])
    return request_from_dict(d, spider=spider)


def conditional(payload: bytes, answer: Mapping[bytes, Any]) -> bytes | None:
    """The payload of a GET asked again as a conditional GET: with the validators of its
    answer's headers (``ETag``, ``Last-Modified``; Scrapy ``Headers``) as
    ``If-None-Match`` / ``If-Modified-Since``, in place of those it carried (a validator
    longer than MAX_VALIDATOR or with a control byte is left out). None when that changes
    nothing, or the payload is not a GET's (or not one this reads)."""
    try:
        d = decode(payload)
    except PayloadError:
        return None
    headers = d.get("headers", {}) if isinstance(d, dict) else None
    if not isinstance(headers, dict) or d.get("method", "GET") != "GET":
        return None
    kept = {k: v for k, v in headers.items()
            if not (isinstance(k, bytes) and k.lower() in _ASKING)}
    for got, ask in VALIDATORS:
        value = answer.get(got)
        if isinstance(value, bytes) and _VALIDATOR.fullmatch(value):
            kept[ask] = [value]
    if kept == headers:
        return None
    d["headers"] = kept
    return encode(d)


def _request_class(path: Any) -> type:
    """The Request subclass at ``module.Name`` if that module is imported, else PayloadError
    (nothing is imported on a store's word)."""
    module, _, name = path.rpartition(".") if isinstance(path, str) else ("", "", "")
    cls = getattr(sys.modules.get(module), name, None) if module and name else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise PayloadError(f"a queued request names class {path!r}, which is not a Request "
                           "class this process has imported: not loaded")
    return cls


_host_of_url = lru_cache(maxsize=16384)(host_of_url)


def host_of(request: Any) -> str:
    """The host a request is polite to: its URL's host name, as Scrapy's download slots
    (asked many times per request: cached by URL)."""
    return _host_of_url(request.url)
