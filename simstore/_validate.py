"""Argument checks shared by every public entry point.

Each check either returns the value in canonical form or raises a simstore
exception whose message names the argument and says what is allowed.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from .exceptions import (
    InvalidConfigError,
    InvalidDistanceError,
    InvalidFingerprintError,
    SimstoreTypeError,
    SimstoreValueError,
)

MAX_FP = (1 << 64) - 1


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_path(value: Any, name: str) -> str:
    """A file-system path as str: a str, bytes (decoded as the OS does) or os.PathLike,
    without NUL (no system call takes one)."""
    try:
        path = os.fsdecode(value)
    except TypeError:
        raise SimstoreTypeError(
            f"{name!r} must be a str, bytes or os.PathLike (got {_type_name(value)})"
        ) from None
    if "\0" in path:
        raise SimstoreValueError(
            f"{name!r} must be a path without NUL characters (got {path!r:.80})"
        )
    return path


def as_float(value: Any) -> float:
    """float(value), NaN for a number too large for a float (the range checks refuse it)."""
    try:
        return float(value)
    except OverflowError:
        return float("nan")


def check_threshold(threshold: Any, name: str = "threshold") -> float:
    """A Jaccard threshold: a real number in (0, 1]."""
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, numbers.Real):
        raise SimstoreTypeError(
            f"{name!r} must be a number in (0, 1] (got {_type_name(threshold)})"
        )
    t = as_float(threshold)
    if not 0.0 < t <= 1.0:
        shown = t if t == t else f"{threshold!r:.40}"  # a NaN from an overflow: the value
        raise InvalidConfigError(f"{name!r} must be in (0, 1] (got {shown})")
    return t


def check_seconds(value: Any, name: str) -> float:
    """A time limit: a finite number of seconds > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise SimstoreTypeError(
            f"{name!r} must be a number of seconds > 0 (got {_type_name(value)})"
        )
    secs = as_float(value)
    if not (np.isfinite(secs) and secs > 0):
        raise InvalidConfigError(
            f"{name!r} must be a finite number of seconds > 0 (got {value!r:.40})"
        )
    return secs


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: Any, name: str) -> float:
    """Seconds of a duration: a number of seconds, or a str such as "90s", "45m", "12h",
    "30d", "2w" (a bare number in a str is seconds). Must be > 0."""
    if isinstance(value, str):
        text = value.strip().lower()
        unit = _UNITS.get(text[-1:], None)
        number = text[:-1] if unit is not None else text
        try:
            secs = float(number) * (unit or 1)
        except ValueError:
            secs = float("nan")
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        secs = as_float(value)
    else:
        raise SimstoreTypeError(
            f"{name!r} must be a duration: seconds, or a str such as '30d' "
            f"(got {_type_name(value)})")
    if not np.isfinite(secs) or secs <= 0:
        raise InvalidConfigError(
            f"{name!r} must be a duration > 0: seconds, or a number with a unit s, m, h, d "
            f"or w such as '30d' (got {value!r:.40})")
    return secs


def check_fingerprint(value: Any, name: str = "fp") -> int:
    """An integer in 0 .. 2**64-1 (Python or numpy int; bool is refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        hint = "; for a text, give its fingerprint: store.fingerprint(text)" \
            if isinstance(value, str) else ""
        raise InvalidFingerprintError(
            f"{name!r} must be an int in 0..2**64-1 (got {_type_name(value)}: {value!r:.60})"
            + hint
        )
    v = int(value)
    if v < 0 or v > MAX_FP:
        raise InvalidFingerprintError(f"{name!r} must be an int in 0..2**64-1 (got {v})")
    return v


def as_fingerprint_array(values: Any, name: str = "fps") -> np.ndarray:
    """A contiguous 1-D uint64 array from an array or an iterable of fingerprints.

    Signed integer arrays are accepted when no value is negative; float, bool,
    object and string arrays are refused, never silently converted.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise InvalidFingerprintError(
                f"{name!r} must be a 1-D array of uint64 (got shape {values.shape})"
            )
        kind = values.dtype.kind
        if kind == "u":
            return np.ascontiguousarray(values, dtype=np.uint64)
        if kind == "i":
            if values.size and int(values.min()) < 0:
                raise InvalidFingerprintError(
                    f"{name!r} holds negative values; fingerprints are 0..2**64-1"
                )
            return np.ascontiguousarray(values.astype(np.uint64))
        if kind == "O":
            return _from_iterable(values.tolist(), name)
        raise InvalidFingerprintError(
            f"{name!r} must be an array of unsigned 64-bit integers (got dtype {values.dtype})"
        )
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Iterable):
        raise InvalidFingerprintError(
            f"{name!r} must be a uint64 array or an iterable of ints (got {_type_name(values)})"
        )
    return _from_iterable(values, name)


def _from_iterable(values: Iterable[Any], name: str) -> np.ndarray:
    items = list(values)
    out = np.empty(len(items), dtype=np.uint64)
    for i, v in enumerate(items):
        out[i] = check_fingerprint(v, f"{name}[{i}]")
    return out


def check_k(k: Any, name: str = "k", maximum: int = 64) -> int:
    """A Hamming radius: an int in 0 .. maximum."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise InvalidDistanceError(f"{name!r} must be an int in 0..{maximum} (got {_type_name(k)})")
    v = int(k)
    if v < 0 or v > maximum:
        raise InvalidDistanceError(f"{name!r} must be an int in 0..{maximum} (got {v})")
    return v


def _bound(n: int) -> str:
    """A limit as a reader takes it in: 2**48 rather than 281474976710656."""
    return f"2**{n.bit_length() - 1}" if n >= 1 << 20 and n & (n - 1) == 0 else str(n)


def check_int(value: Any, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """An int (Python or numpy; bool refused) in minimum .. maximum: THE integer check."""
    allowed = f"an int >= {minimum}" if maximum is None else \
        f"an int in {minimum}..{_bound(maximum)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise SimstoreTypeError(f"{name!r} must be {allowed} (got {_type_name(value)})")
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        raise InvalidConfigError(f"{name!r} must be {allowed} (got {v!r:.40})")
    return v


MAX_EXPECTED_SIZE = 1 << 62


def check_expected_size(value: Any) -> int:
    """The number of documents a layout is planned for: THE rule (an int in 0..2**62)."""
    return check_int(value, "expected_size", 0, MAX_EXPECTED_SIZE)


def check_str(value: Any, name: str) -> str:
    """A str, or SimstoreTypeError naming the argument."""
    if not isinstance(value, str):
        raise SimstoreTypeError(f"{name!r} must be a str (got {_type_name(value)})")
    return value


# ``durable=`` values and the durability each names (simstore/store/env/durability.py)
DURABILITY = {True: "full", False: "normal", "full": "full", "normal": "normal",
              "unsafe": "unsafe"}


def check_durable(value: Any) -> str:
    """A durability: True ("full"), False ("normal") or "unsafe" (the names are taken too);
    the name of the mode."""
    if isinstance(value, (bool, np.bool_, str)) and value in DURABILITY:
        return DURABILITY[value if isinstance(value, str) else bool(value)]
    if isinstance(value, str):
        raise InvalidConfigError(
            f"'durable' must be True, False or 'unsafe' (got {value!r:.40}); 'unsafe' skips "
            "every flush and may corrupt the store in an OS crash")
    raise SimstoreTypeError(f"'durable' must be a bool or 'unsafe' (got {_type_name(value)})")
