"""Crash states of a file from a recorded trace of its writes and flushes (ALICE-style).

:func:`build_shim` compiles ``writes_shim.c`` (an ``LD_PRELOAD`` library recording
every write, flush and size change a process makes below a directory); :func:`read`
parses its log into :class:`Event` s, in the order the calls returned. A crash at event
``p`` leaves on disk, for each 512-byte sector of the file:

- what the last write *before the last flush* of the file (fsync/fdatasync, or a write
  through an ``O_DSYNC`` descriptor, which is on disk when it returns) put there: that is
  sure to be there;
- or any later write to it before ``p`` (the OS writes back dirty pages in any order,
  and a page only in part: a torn page).

:func:`crash_image` draws one such file image: the pending writes dropped, kept in
order up to a point, kept whole in a random subset and order, or kept sector by sector.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import tempfile
from dataclasses import dataclass

SECTOR = 512
WRITE, SYNC, OPEN, TRUNC, MARK, MSYNC = 1, 2, 4, 5, 6, 7
DSYNC = 1  # flag of a WRITE made through an O_DSYNC descriptor
HEAD = struct.Struct("<IIIIQQ")  # kind, pid, file, flags, offset, length
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "writes_shim.c")
STRATEGIES = ("flushed", "in order", "whole writes", "sectors")


@dataclass(frozen=True)
class Event:
    """One record: a write (its bytes), a flush, a size change, or a marker's text."""

    kind: int
    path: str
    offset: int = 0
    data: bytes = b""
    dsync: bool = False


def build_shim(into: str) -> str:
    """Compile the recorder with cc into the directory ``into``; the library's path."""
    out = os.path.join(into, "writes_shim.so")
    cmd = ["cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", out, SHIM, "-ldl", "-lpthread"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit("powerloss needs a C compiler ('cc') to build its write recorder"
                         ) from None
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"cannot build the write recorder: {exc.stderr.strip()[:500]}"
                         ) from None
    return out


def mark(log: str, text: str) -> None:
    """Append a marker to the trace (after everything this process wrote before it)."""
    body = text.encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, HEAD.pack(MARK, os.getpid(), 0, 0, 0, len(body)) + body)
    finally:
        os.close(fd)


def read(log: str) -> list[Event]:
    """The log's events in order (a file is named by its path, whatever the process)."""
    with open(log, "rb") as f:
        raw = f.read()
    names: dict[tuple[int, int], str] = {}
    events: list[Event] = []
    at = 0
    while at < len(raw):
        kind, pid, file, flags, offset, length = HEAD.unpack_from(raw, at)
        body = raw[at + HEAD.size: at + HEAD.size + length]
        at += HEAD.size + length
        if kind == OPEN:
            names[(pid, file)] = body.decode()
        elif kind == MARK:
            events.append(Event(MARK, "", data=body))
        elif kind == MSYNC:
            raise ValueError("the trace holds an msync: writes through a map are not recorded")
        else:
            events.append(Event(kind, names[(pid, file)], offset, body, bool(flags & DSYNC)))
    return events


def last_flush(events: list[Event], path: str, end: int) -> int:
    """The index of the last flush of path before event ``end`` (-1: none)."""
    for i in range(end - 1, -1, -1):
        if events[i].kind == SYNC and events[i].path == path:
            return i
    return -1


class Replayer:
    """Crash images of one file, for crash points taken in increasing order.

    Keeps the image every write before the current flush made, so each state costs the
    writes after its last flush only.
    """

    def __init__(self, events: list[Event], path: str, base: bytes) -> None:
        self.events = events
        self.path = path
        self.image = bytearray(base)
        self.done = 0  # events[:done] are in self.image

    def _apply(self, image: bytearray, e: Event, sectors: set[int] | None = None) -> None:
        """Put e (its sectors in ``sectors`` only, if given) into image."""
        if e.kind == TRUNC:
            if e.offset > len(image):
                image.extend(bytes(e.offset - len(image)))
            return
        end = e.offset + len(e.data)
        if sectors is None:
            if end > len(image):
                image.extend(bytes(end - len(image)))
            image[e.offset:end] = e.data
            return
        for s in sorted(sectors):
            lo, hi = max(s * SECTOR, e.offset), min((s + 1) * SECTOR, end)
            if hi > len(image):
                image.extend(bytes(hi - len(image)))
            image[lo:hi] = e.data[lo - e.offset: hi - e.offset]

    def _ours(self, e: Event) -> bool:
        return e.kind in (WRITE, TRUNC) and e.path == self.path

    def image_at(self, crash: int, rng: random.Random, strategy: str) -> bytes:
        """A file image after a crash just before events[crash] (crash points must not
        go down between calls)."""
        flush = last_flush(self.events, self.path, crash)
        for e in self.events[self.done:flush + 1]:
            if self._ours(e):
                self._apply(self.image, e)
        self.done = max(self.done, flush + 1)
        pending = [e for e in self.events[self.done:crash] if self._ours(e)]
        image = bytearray(self.image)
        # a write through an O_DSYNC descriptor is on disk when it returns
        sure = [i for i, e in enumerate(pending) if e.dsync]
        keep = self._choose(pending, rng, strategy)
        # in trace order: a sector holds the newest of its versions that reached the disk
        for i in sorted(set(keep) | set(sure)):
            self._apply(image, pending[i], None if i in sure else keep[i])
        return bytes(image)

    def _choose(self, pending: list[Event], rng: random.Random,
                strategy: str) -> dict[int, set[int] | None]:
        """Which pending writes (index -> its sectors kept, None: all) reach the disk."""
        if strategy == "flushed" or not pending:
            return {}
        if strategy == "in order":
            cut = rng.randrange(len(pending) + 1)
            keep: dict[int, set[int] | None] = {i: None for i in range(cut)}
            if cut < len(pending) and pending[cut].kind == WRITE:
                keep[cut] = set(rng.sample(_sectors(pending[cut]),
                                           rng.randrange(len(_sectors(pending[cut])) + 1)))
            return keep
        q = rng.random()
        if strategy == "whole writes":
            return {i: None for i in range(len(pending)) if rng.random() < q}
        out: dict[int, set[int] | None] = {}
        for i, e in enumerate(pending):
            if e.kind == TRUNC:
                if rng.random() < q:
                    out[i] = None
                continue
            kept = {s for s in _sectors(e) if rng.random() < q}
            if kept:
                out[i] = kept
        return out


def _sectors(e: Event) -> list[int]:
    """The sectors a write touches."""
    if not e.data:
        return []
    return list(range(e.offset // SECTOR, (e.offset + len(e.data) - 1) // SECTOR + 1))


def workdir() -> str:
    """A scratch directory, in memory where the machine offers it (the trace is the same
    on any file system; /dev/shm only saves the child's flushes)."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="simstore-powerloss-", dir=base)
