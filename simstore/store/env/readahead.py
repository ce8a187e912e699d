"""How a store's pages come into memory (readahead for a store that fits, huge pages) and
leave a bulk writer's.

:func:`wants_readahead`: LMDB lets the OS read ahead only for a store of at most half the
memory the process may use (:func:`memory_limit`: its cgroup's limit or the machine's).
A query reads a few scattered pages of each run it probes; on a larger store, readahead
would evict what later queries need. Without readahead a fetched run is placed from its
leaf node rather than read whole (:mod:`simstore.store.runs.cache`).

With readahead the map is also advised into huge pages (:func:`advise_huge_pages`), so
pages read in from the file come in 2 MiB folios the kernel maps whole and a probe costs
no 4 KB page walk. Pages in the page cache keep the size they were written in, so a
writer, inside its transaction, first extends the file past the pages in use and reads
that part in through a mapping of its own advised the same way (:class:`HugeGrowth`):
LMDB's writes then land in 2 MiB folios that readers map whole. Measured:
docs/bench/journal.md, "Tables read in place" and "Huge pages".

Every page a process reads through the map counts in its RSS (RssFile) until it unmaps
it: a bulk load's merges read the whole store's runs, so its run tables let go of the
map after each merge commit (:func:`release_map`; docs/bench/bulk-memory-100m.json).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from ...native import lmdbmap as _lmdbmap

__all__ = ["HugeGrowth", "advise_huge_pages", "map_regions", "memory_limit",
           "release_map", "wants_readahead"]

_UNLIMITED = 1 << 62
HUGE_PAGE = 2 << 20
# below this many bytes (in use and to be written) a store's 4 KB page tables stay in the
# caches: no growth is prepared (and a small store's file keeps its size)
HUGE_GROWTH_FROM = 32 << 20
HUGE_ROOM_MAX = 64 << 20  # the most a writer prepares past the pages in use
_POPULATE_CHUNK = 8 << 20  # read in through a mapping of at most this many bytes at once
# (whose pages count in the process's resident set until it is closed)
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14


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


def map_regions(data_file: str, size: int | None, maps: Path = Path("/proc/self/maps")
                ) -> list[tuple[int, int]]:
    """(start, length) of this process's shared mappings of data_file from its start that
    are size bytes long (LMDB's map of it; None: of any length); none where /proc is not
    there to tell."""
    try:
        st = os.stat(data_file)
        lines = maps.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[1].endswith("s") or parts[2].strip("0") \
                or not parts[4].isdigit() or int(parts[4]) != st.st_ino:
            continue
        lo, _, hi = parts[0].partition("-")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        if (size is None or end - start == size) \
                and os.path.basename(parts[5]) == os.path.basename(data_file):
            out.append((start, end - start))
    return out


def advise_huge_pages(data_file: str, size: int) -> int:
    """Advise this process's map of data_file (size bytes) into huge pages; how many
    mappings took it (0 where the OS has no such advice or /proc cannot tell)."""
    return sum(_lmdbmap.advise_huge(start, n) for start, n in map_regions(data_file, size))


def release_map(data_file: str) -> int:
    """Drop this process's mapped pages of data_file (LMDB's map) from its resident set;
    how many mappings let them go. They stay in the page cache and come back, the same
    bytes, when next read (LMDB writes through write(2), never through its map): a
    writer that merged gigabytes of runs keeps in its RSS only what it reads after."""
    return sum(_lmdbmap.release(start, n) for start, n in map_regions(data_file, None))


def _up(n: int) -> int:
    return -(-n // HUGE_PAGE) * HUGE_PAGE


class HugeGrowth:
    """A writer's next pages, prepared in huge pages for its readers (see the module).

    :meth:`before_write` extends the data file past the pages in use (used bytes) to a 2
    MiB boundary by room for the next writes (need bytes, two huge pages at least, 64 MiB
    at most: a bulk write's own long writes come in large folios anyway) and reads the
    new part into the page cache through a mapping advised into huge pages, so that it
    is held in 2 MiB folios that LMDB's writes then fill. Only inside a write
    transaction: no other process writes the file then, so its size only grows here, and
    every byte past ``used`` is free (the new part is a hole; reading it in writes
    nothing). Nothing is done while half the room lies ready, for a small store, or once
    the OS has refused.
    """

    def __init__(self, data_file: str) -> None:
        self.data_file = data_file
        self.ready = 0  # the file is known to be at least this long (it never shrinks
        #                 under a writer; a copy put in its place only delays the next step)
        self.able = hasattr(mmap, "MADV_HUGEPAGE")

    def before_write(self, used: int, need: int, map_size: int) -> int:
        """Prepare room past used bytes for a write of about need bytes; how many bytes
        were read in (0: none were due, or the OS cannot)."""
        room = min(max(need, 2 * HUGE_PAGE), HUGE_ROOM_MAX)
        if not self.able or used + room < HUGE_GROWTH_FROM or self.ready >= used + room // 2:
            return 0
        try:
            self.ready = os.stat(self.data_file).st_size
        except OSError:
            return 0
        start = _up(max(self.ready, used))
        end = min(_up(used + room), map_size // HUGE_PAGE * HUGE_PAGE)
        if self.ready >= used + room // 2 or end <= start:
            return 0
        try:
            fd = os.open(self.data_file, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            try:
                if os.fstat(fd).st_size < end:
                    os.ftruncate(fd, end)  # never shorter: checked just above, under the lock
                self.ready = end
                for at in range(start, end, _POPULATE_CHUNK):
                    with mmap.mmap(fd, min(_POPULATE_CHUNK, end - at), mmap.MAP_SHARED,
                                   mmap.PROT_READ, offset=at) as view:
                        view.madvise(mmap.MADV_HUGEPAGE)
                        view.madvise(_MADV_POPULATE_READ)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            self.able = False  # only how pages are cached was at stake: LMDB goes on as before
            return 0
        return end - start
