"""Table layouts for the persistent index: pure functions, no LMDB.

A fingerprint's 64 bits are split into B blocks. A table takes s of them as
its *header*: its keys are the fingerprints permuted so the header blocks come
first (then the other blocks, in order). If two fingerprints differ in at most
k bits, the s blocks where they differ least hold at most r of those bits,
where r is the sum of the s smallest parts of the most even split of k into
B parts (:func:`radius_bound`, at most ``floor(s*k/B)``), so with one table
per s-subset of blocks and probe radius r
every pair within k shares, on some table, header bits within r. A query
probes, on every table, each header value within r of its own and checks the
tail bits. r = 0 is Manku et al.'s scheme; r > 0 is multi-index hashing
(Norouzi et al., 2012).

The planner searches (B, s) for the cheapest layout under a small cost model.
Everything here works on ints and numpy arrays so it can run anywhere (Spark
tasks included).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import as_fingerprint_array, check_expected_size, check_int, check_k
from ..exceptions import InvalidConfigError
from ..native import core as _core
from ..native.core import MAX_K

LAYOUT_VERSION = 1
MAX_TABLES = 20
MAX_BLOCKS = 16
# The cost model of the run tables (simstore.store.runs.tables): probes and candidates are
# checked in one C call over sorted arrays in memory, so a probe (a directory
# lookup and a short search) and a candidate (a popcount) are cheap next to a
# table, which costs 12 bytes per fingerprint on disk and in memory and a share
# of every merge: the planner weighs a table like ~50 probes.
PROBE_US = 0.02
CANDIDATE_US = 0.002
TABLE_US = 1.0
QUERY_US = 5.0  # per query whatever the layout: transaction, state record, Python
TABLE_QUERY_US = 0.3  # the part of TABLE_US a query pays (a table's probe set-up)
LOWER_K_SLACK = 1.5  # a k' below the store's k may cost this much over a store planned for k'
TABLE_ENTRY_BYTES = 12
DOC_RECORD_BYTES = 70


@dataclass(frozen=True)
class Layout:
    """How fingerprints are permuted into tables.

    blocks: (start_bit, width) pairs, start_bit counted from the top bit (0),
    covering the 64 bits in order. tables: per table, the block indices that
    form its header (in header order). radius: header probe radius r.
    max_k: the largest Hamming distance the tables answer exactly.
    """

    blocks: tuple[tuple[int, int], ...]
    tables: tuple[tuple[int, ...], ...]
    radius: int
    max_k: int

    def __post_init__(self) -> None:
        pos = 0
        for start, width in self.blocks:
            if start != pos or width < 1:
                raise InvalidConfigError(
                    f"layout blocks must tile bits 0..63 in order (got {self.blocks})"
                )
            pos += width
        if pos != 64 or not 1 <= len(self.blocks) <= 64:
            raise InvalidConfigError(f"layout blocks must cover exactly 64 bits (got {pos})")
        if not self.tables:
            raise InvalidConfigError("a layout needs at least one table")
        for t in self.tables:
            if not t or len(set(t)) != len(t) or not all(0 <= b < len(self.blocks) for b in t):
                raise InvalidConfigError(
                    f"each table must name distinct block indices 0..{len(self.blocks) - 1}"
                    f" (got {t})"
                )
        check_k(self.radius, "radius")
        check_k(self.max_k, "max_k")

    def header_bits(self, table: int) -> int:
        """Number of header bits of one table."""
        return sum(self.blocks[b][1] for b in self.tables[table])

    def order(self, table: int) -> tuple[int, ...]:
        """Block indices in key order: the header blocks, then the rest ascending."""
        head = self.tables[table]
        return head + tuple(b for b in range(len(self.blocks)) if b not in head)

    def shifts(self, table: int) -> tuple[bytes, bytes, bytes]:
        """(src_shift, width, dst_shift) byte strings of a table's permutation."""
        src, width, dst = [], [], []
        pos = 0
        for b in self.order(table):
            start, w = self.blocks[b]
            src.append(64 - start - w)
            width.append(w)
            dst.append(64 - pos - w)
            pos += w
        return bytes(src), bytes(width), bytes(dst)

    def radius_for(self, k: int) -> int:
        """The header radius that answers distance k (<= max_k) exactly.

        A full Manku layout (every s-of-B block combination a table, as
        :func:`plan` makes) needs only radius_bound(B, s, k): a query below
        the store's k probes far fewer headers. Any other layout keeps its radius.
        """
        s = len(self.tables[0])
        nblocks = len(self.blocks)
        full = all(len(t) == s for t in self.tables) and sorted(self.tables) == list(
            itertools.combinations(range(nblocks), s)
        )
        if not full or k >= self.max_k:
            return self.radius
        return min(self.radius, radius_bound(nblocks, s, k))

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (for a store's metadata)."""
        return {
            "version": LAYOUT_VERSION,
            "blocks": [list(b) for b in self.blocks],
            "tables": [list(t) for t in self.tables],
            "radius": self.radius,
            "max_k": self.max_k,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        """Inverse of :meth:`to_dict`; refuses another layout version."""
        if data.get("version") != LAYOUT_VERSION:
            raise InvalidConfigError(
                f"layout version {data.get('version')!r} is not supported "
                f"(this simstore reads version {LAYOUT_VERSION})"
            )
        return cls(
            blocks=tuple((int(s), int(w)) for s, w in data["blocks"]),
            tables=tuple(tuple(int(b) for b in t) for t in data["tables"]),
            radius=int(data["radius"]),
            max_k=int(data["max_k"]),
        )


@dataclass(frozen=True)
class Plan:
    """A layout with the costs the planner expects for it at one store size."""

    layout: Layout
    k: int
    expected_size: int
    tables: int
    header_bits: tuple[int, ...]
    radius: int
    probes_per_query: int
    candidates_per_probe: float
    candidates_per_query: float
    bytes_per_fingerprint: int
    cost_us: float

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form (for reports and the CLI)."""
        return {
            "k": self.k,
            "expected_size": self.expected_size,
            "blocks": len(self.layout.blocks),
            "header_blocks": len(self.layout.tables[0]),
            "tables": self.tables,
            "header_bits": list(self.header_bits),
            "radius": self.radius,
            "probes_per_query": self.probes_per_query,
            "candidates_per_probe": self.candidates_per_probe,
            "candidates_per_query": self.candidates_per_query,
            "bytes_per_fingerprint": self.bytes_per_fingerprint,
            "cost_us": self.cost_us,
            "layout": self.layout.to_dict(),
        }


def even_blocks(nblocks: int) -> tuple[tuple[int, int], ...]:
    """nblocks contiguous blocks over 64 bits, the first 64 % nblocks one bit wider."""
    if not 1 <= nblocks <= 64:
        raise InvalidConfigError(f"'nblocks' must be an int in 1..64 (got {nblocks})")
    base, extra = divmod(64, nblocks)
    out, pos = [], 0
    for i in range(nblocks):
        w = base + (1 if i < extra else 0)
        out.append((pos, w))
        pos += w
    return tuple(out)


def manku_layout(nblocks: int, header_blocks: int, k: int) -> Layout:
    """All C(nblocks, header_blocks) tables with the radius that guarantees distance k."""
    if not 1 <= header_blocks <= nblocks:
        raise InvalidConfigError(
            f"'header_blocks' must be in 1..{nblocks} (got {header_blocks})"
        )
    k = check_k(k)
    tables = tuple(itertools.combinations(range(nblocks), header_blocks))
    return Layout(even_blocks(nblocks), tables, radius_bound(nblocks, header_blocks, k), k)


def radius_bound(nblocks: int, header_blocks: int, k: int) -> int:
    """The most differing bits the s least-differing of B blocks can hold at distance k.

    The worst case spreads k as evenly as possible: B - k % B blocks get
    k // B bits, the rest one more; the s smallest then hold
    s * (k // B) + max(0, s - (B - k % B)). This is floor(s*k/B) or less
    (k=3, B=5, s=2 gives 0, not 1).
    """
    q, rem = divmod(k, nblocks)
    return header_blocks * q + max(0, header_blocks - (nblocks - rem))


def probes(header_bits: int, radius: int) -> int:
    """Header values within Hamming radius r of one h-bit header."""
    return sum(math.comb(header_bits, i) for i in range(min(radius, header_bits) + 1))


def _cost(header_bits: tuple[int, ...], radius: int, n: int) -> tuple[int, float, float]:
    """(probes, candidates, cost in model µs) of one query at one radius."""
    nprobes = sum(probes(h, radius) for h in header_bits)
    cands = sum(probes(h, radius) * n / 2.0**h for h in header_bits)
    cost = nprobes * PROBE_US + cands * CANDIDATE_US + len(header_bits) * TABLE_US + QUERY_US
    return nprobes, cands, cost


def _latency(header_bits: tuple[int, ...], radius: int, n: int) -> float:
    """A query's model latency (µs): _cost without the tables' disk and merge share."""
    return _cost(header_bits, radius, n)[2] - len(header_bits) * (TABLE_US - TABLE_QUERY_US)


def _headers(nblocks: int, s: int) -> tuple[int, ...]:
    """Header bits of every table of the full Manku layout of s of nblocks even blocks."""
    widths = [w for _, w in even_blocks(nblocks)]
    return tuple(sum(widths[b] for b in t) for t in itertools.combinations(range(nblocks), s))


def evaluate(layout: Layout, k: int, expected_size: int) -> Plan:
    """The cost model of one layout: probes, candidates and disk per table."""
    n = max(int(expected_size), 1)
    hs = tuple(layout.header_bits(t) for t in range(len(layout.tables)))
    nprobes, cands, cost = _cost(hs, layout.radius, n)
    ntables = len(layout.tables)
    return Plan(
        layout=layout,
        k=k,
        expected_size=n,
        tables=ntables,
        header_bits=hs,
        radius=layout.radius,
        probes_per_query=nprobes,
        candidates_per_probe=cands / nprobes,
        candidates_per_query=cands,
        bytes_per_fingerprint=ntables * TABLE_ENTRY_BYTES + DOC_RECORD_BYTES,
        cost_us=cost,
    )


def plan(k: int, expected_size: int, max_tables: int = MAX_TABLES) -> Plan:
    """The cheapest layout answering every query up to distance k exactly.

    Searches B = 1..16 blocks and s = 1..B header blocks with at most
    max_tables tables; cost ≈ PROBE_US per probe + CANDIDATE_US per candidate
    + TABLE_US per table (a stand-in for disk, memory and merge cost) +
    QUERY_US. Among the layouts on which every k' < k answers within
    LOWER_K_SLACK times the latency of the layout planned for k', the
    cheapest for k (the cheapest overall when none is).
    """
    k = check_k(k, "k", MAX_K)
    n = max(int(check_expected_size(expected_size)), 1)
    max_tables = check_int(max_tables, "max_tables", 1)
    b, s = _plan_shape(k, n, max_tables)
    return evaluate(manku_layout(b, s, k), k, n)


@functools.lru_cache(maxsize=256)
def _plan_shape(k: int, n: int, max_tables: int) -> tuple[int, int]:
    """(blocks, header blocks) of plan(k, n, max_tables), planned for 0..k in turn."""
    shapes = [(b, s, _headers(b, s)) for b in range(1, MAX_BLOCKS + 1)
              for s in range(1, b + 1) if math.comb(b, s) <= max_tables]
    planned: list[float] = []  # latency of the layout planned for each k' < j
    pick = (1, 1)
    for j in range(k + 1):
        fair: list[tuple[float, int, int]] = []
        every: list[tuple[float, int, int]] = []
        for b, s, hs in shapes:
            own = (_cost(hs, radius_bound(b, s, j), n)[2], b, s)
            every.append(own)
            if all(_latency(hs, radius_bound(b, s, i), n) <= LOWER_K_SLACK * planned[i]
                   for i in range(j)):
                fair.append(own)
        _, b, s = min(fair or every)
        pick = (b, s)
        planned.append(_latency(_headers(b, s), radius_bound(b, s, j), n))
    return pick


def guarantees(layout: Layout, k: int) -> bool:
    """Whether every pair within distance k meets on some table within the radius.

    Exhaustive over every way to spread k differing bits over the blocks
    (respecting block widths); the planner's correctness oracle.
    """
    widths = [w for _, w in layout.blocks]
    heads = [list(t) for t in layout.tables]

    def spread(i: int, left: int, acc: list[int]) -> bool:
        if i == len(widths):
            return any(sum(acc[b] for b in h) <= layout.radius for h in heads)
        for d in range(min(left, widths[i]) + 1):
            acc.append(d)
            ok = spread(i + 1, left - d, acc)
            acc.pop()
            if not ok:
                return False
        return True

    return spread(0, k, [])


def permute(layout: Layout, table: int, fps: Any) -> np.ndarray:
    """Fingerprints (uint64) as they are keyed in one table."""
    arr = as_fingerprint_array(fps)
    src, width, dst = layout.shifts(_check_table(layout, table))
    return _core.permute_blocks(arr, src, width, dst)


def unpermute(layout: Layout, table: int, keys: Any) -> np.ndarray:
    """Inverse of :func:`permute`: table keys back to fingerprints."""
    arr = as_fingerprint_array(keys, "keys")
    src, width, dst = layout.shifts(_check_table(layout, table))
    return _core.permute_blocks(arr, dst, width, src)


def _check_table(layout: Layout, table: int) -> int:
    if isinstance(table, bool) or not isinstance(table, int) or not (
        0 <= table < len(layout.tables)
    ):
        raise InvalidConfigError(
            f"'table' must be an int in 0..{len(layout.tables) - 1} (got {table!r})"
        )
    return table
