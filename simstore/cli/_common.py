"""What every command shares: errors, output (stdout or -o FILE), argument types, opening."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from dataclasses import replace
from typing import IO, Any

from .._files import TempFile
from ..corpus.progress import Progress
from ..exceptions import SimstoreError
from ..native.core import MAX_K
from ..search.similar import check_threshold
from ..store import SimStore
from ..text.fingerprinting import SIGNATURE_CONFIG, FingerprintConfig
from ._tsv import format_id

PROG = "simstore-cli"


class CliError(Exception):
    """A failure to report as one line on stderr with exit code 1."""


class UsageError(Exception):
    """A usage error detected after parsing (exit code 2)."""


class Out:
    """Records to stdout or to -o FILE: human lines (TSV), or JSON lines with --json.

    A FILE is created under a temporary name when the command starts (:meth:`open`:
    a path that cannot be written is refused before any work) and renamed into
    place by close(True); a failed command leaves no file behind.
    """

    def __init__(self, as_json: bool, int_fps: bool = False, path: str | None = None) -> None:
        self.as_json, self.int_fps = as_json, int_fps
        self.path = None if path in (None, "-") else path
        self._output: TempFile | None = None
        self._stream: IO[str] | None = None

    def open(self) -> TempFile | None:
        """Create -o FILE's temporary now (None for stdout)."""
        if self.path is not None and self._output is None:
            self._output = TempFile(self.path, "-o")
        return self._output

    @property
    def stream(self) -> IO[str]:
        if self._stream is None:
            output = self.open()
            if output is None:
                self._stream = sys.stdout
            else:
                self._stream = io.TextIOWrapper(output.file, encoding="utf-8")
        return self._stream

    def fp(self, fp: int) -> Any:
        """A fingerprint for JSON: "0x%016x" by default, an int with --int-fps."""
        return fp if self.int_fps else f"0x{fp:016x}"

    def record(self, obj: dict[str, Any], human: str) -> None:
        self.stream.write((json.dumps(obj, ensure_ascii=False) if self.as_json else human) + "\n")

    def close(self, ok: bool) -> None:
        output, self._output = self._output, None
        if output is not None:
            if self._stream is not None:
                self._stream.flush()
                self._stream.detach()  # the TempFile closes its file
            if ok:
                output.commit()
            else:
                output.discard()
        self._stream = None


def fp_hex(fp: int) -> str:
    return f"0x{fp:016x}"


def tsv_id(doc_id: Any) -> str:
    return format_id(doc_id)


RELIABLE_THRESHOLD = 0.75  # below it the sketch's Jaccard estimate saturates (docs/quality.md)


def warn_low_threshold(args: argparse.Namespace) -> None:
    """A note on stderr (never in the --json records on stdout) for a --threshold below the
    range where the sketch's estimate is reliable."""
    t = getattr(args, "threshold", None)
    if t is None or t >= RELIABLE_THRESHOLD:
        return
    exact = ("; dedup-corpus --exact decides by the exact Jaccard of the texts instead"
             if args.command == "dedup-corpus" else "")
    say(args, f"warning: --threshold {t:g} is below {RELIABLE_THRESHOLD}, where the sketch's "
              "Jaccard estimate is unreliable (docs/python.md 'Choosing a threshold': use t >= 0.8)"
              + exact)


def progress_of(args: argparse.Namespace) -> Progress:
    return Progress(quiet=bool(getattr(args, "quiet", False)),
                    every=float(getattr(args, "progress_every", 30.0)), prefix=f"{PROG}: ")


def say(args: argparse.Namespace, text: str) -> None:
    """A note on stderr (not with --quiet)."""
    if not getattr(args, "quiet", False):
        print(f"{PROG}: {text}", file=sys.stderr)


def open_store(args: argparse.Namespace, readonly: bool = False, create: bool = False,
               config: FingerprintConfig | None = None, k: int | None = None) -> SimStore:
    """The store at args.path (created if `create`, with `config` and `k` when new)."""
    exists = os.path.exists(args.path)
    empty = os.path.isdir(args.path) and not os.path.exists(os.path.join(args.path, "data.mdb"))
    if not create and (not exists or empty):
        raise CliError(f"no store at {args.path!r}; create one with '{PROG} init {args.path}'")
    if exists:
        return SimStore(args.path, readonly=readonly)
    return SimStore(args.path, readonly=readonly, config=config, k=k)


# Arguments naming a store (every command's PATH, --store, compact's DEST) and their names.
STORE_ARGUMENTS = (("path", "store path"), ("store", "--store"), ("dest", "DEST"))


def unusable_store_path(args: argparse.Namespace) -> str | None:
    """Why a store argument cannot be used (a name that is not valid UTF-8: LMDB opens
    UTF-8 paths only), or None."""
    for attr, what in STORE_ARGUMENTS:
        path = getattr(args, attr, None)
        if not isinstance(path, str):
            continue
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return (f"{what} '{shown}' is not valid UTF-8, and a store's path must be: "
                    "rename it or give another path")
    return None


def need_similarity(store: SimStore) -> None:
    if not store.config.has_signature:
        raise CliError(
            f"{store.path!r} keeps fingerprints only; --threshold needs a similarity store "
            f"('{PROG} init PATH --similarity', then index the documents into it)"
        )


def signature_config(args: argparse.Namespace) -> FingerprintConfig:
    bits = getattr(args, "sketch_bits", None)
    return replace(SIGNATURE_CONFIG, sketch_bits=bits or SIGNATURE_CONFIG.sketch_bits)


# --------------------------------------------------------------------------- argument types


def k_arg(text: str, maximum: int = 64) -> int:
    """A Hamming radius, 0..maximum (a query's k: 0..64, scanned above the store's k)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"k must be an integer in 0..{maximum} (got {text!r})") from None
    if not 0 <= v <= maximum:
        raise argparse.ArgumentTypeError(f"k must be an integer in 0..{maximum} (got {v})")
    return v


def index_k_arg(text: str) -> int:
    """A k that only an index answers (the batch search): 0..MAX_K."""
    return k_arg(text, MAX_K)


def size_arg(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text!r})") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {v})")
    return v


_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def bytes_arg(text: str) -> int:
    """A positive number of bytes: 33554432, 32M, 32MiB, 512k (units of 1024)."""
    t = text.strip().lower().replace("_", "").removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _BYTE_UNITS else ""
    try:
        v = int(t[: len(t) - len(unit)]) * _BYTE_UNITS[unit]
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive number of bytes, e.g. 33554432, 32M or 512k (got {text!r})")
    return v


def seconds_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 (got {text!r})") \
            from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 (got {text!r})")
    return v


def threshold_arg(text: str) -> float:
    try:
        return check_threshold(float(text))
    except (ValueError, SimstoreError):
        raise argparse.ArgumentTypeError(
            f"the threshold must be a number in (0, 1] (got {text!r})"
        ) from None


def sketch_bits_arg(text: str) -> int:
    try:
        v = int(text)
        replace(SIGNATURE_CONFIG, sketch_bits=v)
    except (ValueError, SimstoreError):
        raise argparse.ArgumentTypeError(
            f"sketch bits must be a multiple of 64 in 64..4096 (got {text!r})"
        ) from None
    return v
