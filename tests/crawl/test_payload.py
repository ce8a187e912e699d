"""simstore.crawl.payload: plain data round trips as tagged JSON, anything else is refused,
and version-1 pickles are read without running code."""

from __future__ import annotations

import math
import os
import pickle

import pytest
from hypothesis import given

from simstore.crawl.payload import PayloadError, decode, encode, read_legacy

from ..strategies import payload_values


def _as_read(value):
    """What a value reads back as: tuples are lists, except as dict keys."""
    if isinstance(value, (list, tuple)):
        return [_as_read(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_read(v) for k, v in value.items()}
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


@given(payload_values())
def test_plain_data_round_trips(value):
    """Every value made of plain data (bytes, dicts with bytes or tuple keys, nested lists)
    reads back equal, tuples as lists."""
    raw = encode(value)
    assert raw[:1] == b"\x02"
    assert decode(raw) == _as_read(value)


def test_a_scrapy_request_dict_round_trips():
    """A Request.to_dict-shaped value (bytes header names, lists of bytes values, meta with
    str keys named like the tags) reads back equal."""
    value = {"url": "http://a.example/p?q=1", "method": "GET",
             "headers": {b"Accept": [b"text/html"], b"Cookie": [b"a=b"]},
             "body": b"\x00\xff", "cookies": {"s": "1"}, "meta": {"$b": 1, "depth": 2},
             "priority": -3, "flags": [], "cb_kwargs": {}, "callback": "parse",
             "errback": None, "dont_filter": False}
    assert decode(encode(value)) == value


def test_a_nested_tuple_key_round_trips():
    """A dict key that is a tuple holding a tuple reads back as the same key (whatever
    encode writes, decode reads)."""
    value = {((1, 2), b"x"): "v"}
    assert decode(encode(value)) == value


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value", [object(), {1: {2: math.nan}}, [math.inf], {"s": {1, 2}},
                                   _deep(70)])
def test_objects_and_nan_are_refused(value):
    """Objects, sets, NaN, inf and nesting deeper than 64 are a PayloadError (a ValueError)."""
    with pytest.raises(PayloadError):
        encode(value)
    assert issubclass(PayloadError, ValueError)


@pytest.mark.parametrize("raw", [b"", b"\x01\x80\x05", b"\x02{", b"\x02\xff", b"\x03{}",
                                 b'\x02{"$b":"!!"}'])
def test_bytes_that_are_no_json_payload_are_refused(raw):
    """Empty, pickled, truncated, non-UTF-8, unknown-kind and bad-base64 bytes are a
    PayloadError from decode."""
    with pytest.raises(PayloadError):
        decode(raw)


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, protocol):
    """read_legacy of a crafted pickle calling os.system raises PayloadError and the file
    that call would create does not exist."""
    marker = tmp_path / "ran"
    raw = b"\x01" + pickle.dumps({"url": "http://a.example/", "x": _Evil(str(marker))},
                                 protocol=protocol)
    with pytest.raises(PayloadError, match="system|refused"):
        read_legacy(raw)
    assert not marker.exists()


def test_a_version_1_pickle_of_a_plain_dict_reads_back():
    """A format-1 payload (b'\\x01' + pickle protocol 5 of Request.to_dict's plain dict)
    reads back equal."""
    value = {"url": "http://a.example/", "headers": {b"A": [b"b"]}, "meta": {"depth": 1},
             "priority": 0, "body": b"", "flags": ["x"], "cb_kwargs": {}}
    assert read_legacy(b"\x01" + pickle.dumps(value, protocol=5)) == value


def test_read_legacy_refuses_what_is_not_a_version_1_payload():
    """A JSON payload or a truncated pickle is a PayloadError from read_legacy."""
    for raw in (encode({"url": "x"}), b"\x01" + pickle.dumps({"a": 1})[:-3], b""):
        with pytest.raises(PayloadError):
            read_legacy(raw)
