"""The option parsers and option groups the benchmark commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._harness import DEFAULT_WORKDIR


def positive(text: str) -> int:
    """A count > 0 (``1_000_000`` allowed)."""
    v = int(text.replace("_", ""))
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a valid count, must be > 0")
    return v


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a valid number of seconds, must be "
                                         ">= 0 and finite")
    return v


def reps(text: str) -> int:
    """A repetition count >= 3 (Median / P90 / P99 need a few)."""
    v = int(text)
    if v < 3:
        raise argparse.ArgumentTypeError(f"{text} is not a valid repetition count, must be >= 3")
    return v


def pair(kind: type, zero: bool = False) -> Callable[[str], tuple[Any, Any]]:
    """A parser of "LO,HI" (0 < LO <= HI; with zero, 0 <= LO) into a tuple of two kind."""
    def parse(text: str) -> tuple[Any, Any]:
        try:
            lo, hi = (kind(v.replace("_", "")) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a valid LO,HI pair") from None
        if not (0 <= lo if zero else 0 < lo) or lo > hi:
            raise argparse.ArgumentTypeError(
                f"{text} is not a valid range, must be {'0 <=' if zero else '0 <'} LO <= HI")
        return lo, hi
    return parse


def sizes(text: str) -> list[int]:
    """Comma-separated counts > 0."""
    return [positive(s) for s in text.split(",") if s]


def sized(sp: argparse.ArgumentParser, default: list[int], what: str) -> None:
    """The --sizes / --large / --workdir options shared by the size-driven commands."""
    shown = ",".join(str(v) for v in default)
    sp.add_argument("--sizes", type=sizes, default=default,
                    help=f"{what}, comma-separated (default {shown})")
    sp.add_argument("--large", action="store_true", help="also N = 10,000,000")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where scratch stores go (default %(default)s)")


def common(sp: argparse.ArgumentParser) -> None:
    """The --seed / --reps / --out options of every benchmark."""
    sp.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
    sp.add_argument("--reps", type=reps, default=3,
                    help="timed repetitions after one warm-up, >= 3 (default %(default)s)")
    sp.add_argument("--out", type=Path, default=None, help="write the JSON result here")
