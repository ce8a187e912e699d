"""The crawl tests' one settable clock: a frontier reads it as it reads time.time."""

from __future__ import annotations


class Clock:
    """A settable clock (seconds); ``ms`` as the frontier reads it."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    @property
    def ms(self) -> int:
        return int(self.t * 1000)
