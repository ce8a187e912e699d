"""How big a run record is: its header, how fine its directory, how many keys fit a size.

Kept apart from :mod:`simstore.store.runs.format` (the records themselves) so the run sizes
that :mod:`simstore.store.runs.tables` derives from page counts read in one place.
"""

from __future__ import annotations

import struct

from ...native.probe import MAX_RUN_DIR_BITS

# entries, iid width (4 or 8), key width (0: 8-byte keys; 4: their low halves, the high
# half being the record key's), directory bits (0: none) and shift
RUN_HEAD = struct.Struct("<IBBBB")
DIR_MIN_ENTRIES = 256  # smaller runs go without a directory (a short search is as fast)
FINE_DIR_MIN = 4096  # runs this long (a bulk level's) get the finer directory


def dir_bits(n: int, values: int | None = None) -> int:
    """Directory bits for a run of n keys spanning ``values`` header values (None: as many
    as it may): 2 to 4 keys a bucket in a run of FINE_DIR_MIN keys or more (a bulk
    level's) whose buckets can then be single header values, else 4 to 8.

    A full bulk run (9,555 keys) of a table holding ~2 keys a header value or more (10M
    keys, 21-22-bit headers) spans fewer header values than its 4,096 buckets, so a probe
    starts at its bucket with no search. Where the header is sparse (100M, 32 bits) the
    finer directory would search as much and only cost pages, and the short runs of the
    small levels that churn are sparse there too (docs/bench/journal.md, "Finer
    directories where buckets can be header values").
    """
    fine = n.bit_length() - 2
    bits = fine if n >= FINE_DIR_MIN and (values is None or values <= 1 << fine) \
        else n.bit_length() - 3
    return max(1, min(MAX_RUN_DIR_BITS, bits))


def run_bytes(n: int, width: int = 4) -> int:
    """Bytes of a run record of n 8-byte keys with width-byte ids (and its directory)."""
    dlen = 4 * ((1 << dir_bits(n)) + 1) if n >= DIR_MIN_ENTRIES else 0
    return RUN_HEAD.size + n * (8 + width) + dlen


def run_capacity(nbytes: int) -> int:
    """The most keys a run record of at most nbytes holds with 4-byte ids."""
    n = nbytes // 12
    while n > 1 and run_bytes(n) > nbytes:
        n -= 1
    return n
