"""Progress of long runs on stderr: a tqdm bar on a terminal, a periodic line otherwise.

:class:`Progress` is what the corpus functions report to: ``bar(label, total)``
gives a bar counting input bytes (rate, ETA) with document counts beside it;
``step(label)`` marks a step that has no count (a search, a rebuild). On a
terminal the bar is tqdm's (when installed); in a pipe or a log a one-line
summary is printed every ``every`` seconds (0: never); ``quiet`` prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{v:,} {k}" for k, v in counts.items())


class Bar:
    """One counted phase: update(bytes, **counts) after each chunk."""

    def __init__(self, progress: Progress, label: str, total: int | None,
                 unit: str = "B") -> None:
        self.p, self.label, self.total, self.unit = progress, label, total, unit
        self.done = 0
        self.counts: dict[str, int] = {}
        self.start = self._last = time.monotonic()
        self._tqdm: Any = None
        if progress.tty and not progress.quiet:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is a dependency of the CLI extra
                tqdm = None
            if tqdm is not None:
                self._tqdm = tqdm(total=total or None, unit=unit, unit_scale=unit == "B",
                                  desc=label, file=progress.stream, leave=False,
                                  dynamic_ncols=True)

    def update(self, n: int, **counts: int) -> None:
        """n more units (bytes) done; counts: totals so far (docs=..., kept=...)."""
        nbytes = n
        self.done += nbytes
        self.counts.update(counts)
        if self.p.quiet:
            return
        now = time.monotonic()
        if self._tqdm is not None:
            if self.counts:
                docs = self.counts.get("docs", 0)
                rate = docs / max(now - self.start, 1e-9)
                self._tqdm.set_postfix_str(f"{counts_text(self.counts)}, {rate:,.0f} docs/s",
                                           refresh=False)
            self._tqdm.update(nbytes)
        elif self.p.every and now - self._last >= self.p.every:
            self._last = now
            self.p.line(self.line(now))

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        took = max(now - self.start, 1e-9)
        show = _size if self.unit == "B" else (lambda n: f"{n:,.0f} {self.unit}")
        of = ""
        if self.total:
            pct = 100 * self.done / self.total
            left = (self.total - self.done) / (self.done / took) if self.done else 0.0
            of = f" of {show(self.total)} ({pct:.0f}%, ETA {_clock(left)})"
        counts = f", {counts_text(self.counts)}" if self.counts else ""
        if self.unit == "B":
            docs = self.counts.get("docs", 0)
            rate = f"{docs / took:,.0f} docs/s, {self.done / took / 1e6:.1f} MB/s"
        else:
            rate = f"{self.done / took:,.0f} {self.unit}/s"
        return f"{self.label}: {show(self.done)}{of}{counts}; {rate}, {_clock(took)} elapsed"

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None


class Progress:
    """Where progress goes: a terminal (tqdm), a periodic line, or nowhere (quiet)."""

    def __init__(self, quiet: bool = False, every: float = 30.0, stream: TextIO | None = None,
                 prefix: str = "") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.quiet = quiet
        self.every = every
        self.prefix = prefix

    def line(self, text: str) -> None:
        if not self.quiet:
            self.stream.write(f"{self.prefix}{text}\n")
            self.stream.flush()

    @contextmanager
    def bar(self, label: str, total: int | None, unit: str = "B") -> Iterator[Bar]:
        b = Bar(self, label, total, unit)
        try:
            yield b
        finally:
            b.close()

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """A step without counts: 'label ...' then its time on a terminal; in a pipe a
        'still running' line every `every` seconds."""
        start = time.monotonic()
        stop = threading.Event()
        ticker = None
        if not self.quiet and self.tty:
            self.stream.write(f"{label} ...")
            self.stream.flush()
        elif not self.quiet and self.every:
            def tick() -> None:
                while not stop.wait(self.every):
                    self.line(f"{label}: still running, {_clock(time.monotonic() - start)} "
                              "elapsed")
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        try:
            yield
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            if not self.quiet and self.tty:
                self.stream.write(f"\r{label}: done in {time.monotonic() - start:.1f} s\n")
                self.stream.flush()


SILENT = Progress(quiet=True)
