"""Whether LMDB should let the OS read ahead: not for a store larger than its memory.

A query reads a few scattered pages of each run it probes. With readahead the OS reads
128 KB around each page faulted in; on a store that fits the page cache that only warms
it sooner, but on one larger than the memory the process may use it evicts what later
queries need (a 100M store, 6.6 GiB, queried in a 2 GiB cgroup: cold p50 67 ms with
readahead, 12 ms without; docs/benchmarks.md). Without readahead a fetched run is also
placed from its leaf node rather than read whole (:mod:`simstore.store.runcache`); with
it, a run is read whole as py-lmdb returns it, which maps all its pages at once for the
probes that follow.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["memory_limit", "wants_readahead"]

_UNLIMITED = 1 << 62


def _cgroup_limit(proc: Path = Path("/proc/self/cgroup"),
                  fs: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The least memory limit of this process's cgroup and its parents (v2 ``memory.max``
    or v1 ``memory.limit_in_bytes``), or None when there is none or it cannot be read."""
    try:
        lines = proc.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # v2: the unified hierarchy
            root, name = fs, "memory.max"
        elif "memory" in controllers.split(","):
            root, name = fs / "memory", "memory.limit_in_bytes"
        else:
            continue
        d = root / rel.strip().lstrip("/")
        while True:
            try:
                raw = (d / name).read_text().strip()
            except (OSError, UnicodeDecodeError):
                raw = ""
            if raw.isdigit() and int(raw) < _UNLIMITED:
                found.append(int(raw))
            if d == root or root not in d.parents:
                break
            d = d.parent
    return min(found) if found else None


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def memory_limit() -> int | None:
    """Bytes of memory this process may use: its cgroup's limit or the machine's, the
    lesser; None when neither is known."""
    known = [x for x in (_cgroup_limit(), _total_memory()) if x]
    return min(known) if known else None


def wants_readahead(data_file: str) -> bool:
    """Readahead unless the data file is larger than half the memory the process may
    use (a missing file, or an unknown limit: readahead, LMDB's default)."""
    try:
        size = os.path.getsize(data_file)
    except OSError:
        return True
    limit = memory_limit()
    return limit is None or size <= limit // 2
