"""Queue payloads as data that cannot run code: tagged JSON, and the old pickles read safely.

A store is shared by processes and users and copied around, so nothing read from it may
run code. A payload is one kind byte, then its data:

- ``02`` ‖ UTF-8 JSON of a value made of None, bools, ints, finite floats, str, lists and
  dicts with str keys; ``bytes`` are written ``{"$b": base64}``, a dict with a key that is
  not a str (or is ``"$b"``/``"$d"``) ``{"$d": [[key, value], ...]}``. Tuples come back
  as lists. Anything else is refused (:class:`PayloadError`): the caller keeps such a
  request to itself.
- ``01`` ‖ pickle: written by frontier version 1. Read only by :func:`read_legacy`,
  whose unpickler resolves no global at all, so a crafted pickle fails instead of
  running code; the upgrade rewrites those payloads as ``02``.
"""

from __future__ import annotations

import base64
import io
import json
import math
import pickle
from typing import Any

from ..exceptions import SimstoreValueError

KIND_PICKLE = b"\x01"
KIND_JSON = b"\x02"


class PayloadError(SimstoreValueError):
    """A value cannot be written as a payload, or bytes are not a payload this reads."""


def _tag(value: Any, depth: int = 0) -> Any:
    if depth > 64:
        raise PayloadError("a payload nests deeper than 64 levels")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"a payload holds a float that JSON cannot write ({value!r})")
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_tag(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in ("$b", "$d") for k in value):
            return {k: _tag(v, depth + 1) for k, v in value.items()}
        return {"$d": [[_tag(k, depth + 1), _tag(v, depth + 1)] for k, v in value.items()]}
    raise PayloadError(f"a payload holds a {type(value).__name__}, which is not data "
                       "JSON can carry (None, bool, int, float, str, bytes, list, dict)")


def _untag(value: Any) -> Any:
    if isinstance(value, list):
        return [_untag(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and "$b" in value:
            return base64.b64decode(value["$b"], validate=True)
        if len(value) == 1 and "$d" in value:
            return {_hashable(_untag(k)): _untag(v) for k, v in value["$d"]}
        return {k: _untag(v) for k, v in value.items()}
    return value


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def encode(value: Any) -> bytes:
    """The ``02`` payload of value (PayloadError if it holds anything but plain data)."""
    return KIND_JSON + json.dumps(_tag(value), separators=(",", ":"), ensure_ascii=False,
                                  allow_nan=False).encode("utf-8")


def decode(payload: bytes) -> Any:
    """The value of a ``02`` payload (PayloadError for any other bytes)."""
    if payload[:1] != KIND_JSON:
        raise PayloadError(f"not a JSON payload (kind byte {bytes(payload[:1])!r})")
    try:
        return _untag(json.loads(bytes(payload[1:]).decode("utf-8")))
    except (ValueError, TypeError, KeyError) as exc:
        raise PayloadError(f"a JSON payload that does not read back ({exc})") from None


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds plain data only: any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise PayloadError(f"a pickled payload names {module}.{name}: refused (a store's "
                           "payloads are data; no code is loaded from it)")


def read_legacy(payload: bytes) -> Any:
    """The value of a version-1 ``01`` pickle payload, read without resolving any global
    (so without running code); PayloadError if it needs one or is not a pickle."""
    if payload[:1] != KIND_PICKLE:
        raise PayloadError(f"not a version-1 payload (kind byte {bytes(payload[:1])!r})")
    try:
        return _NoGlobals(io.BytesIO(bytes(payload[1:]))).load()
    except PayloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a crafted pickle: refused
        raise PayloadError(f"a version-1 payload that does not read back ({exc!r})") from None
