"""Thin binding of the probe engine (``csrc/probe.c``): queries over sorted runs in place.

A :class:`Prober` holds a layout's probe plans and the run sets it points at
(:mod:`simstore.native.runsets`, re-exported here), and answers a query (every
probe of every table and level) or exact key lookups in one C call each. A
run's arrays may lie in memory the caller does not own (a store's runs are read
where LMDB maps them): the caller keeps that memory valid while it calls the
prober. Callers validate the layout; the run sets check the arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..exceptions import InvalidConfigError
from .core import ffi, lib, raise_for
from .runsets import (  # the run sets a prober reads; re-exported as this binding's face
    MAX_RUN_DIR_BITS,
    Placed,
    Run,
    RunSet,
    is_int,
    run_dir,
    u64_array,
)

__all__ = ["MAX_RUN_DIR_BITS", "Placed", "Prober", "Run", "RunSet", "probe_masks", "run_dir"]

MAX_PROBES = 1 << 22  # probes a query may plan (a larger radius is a layout mistake)
SPAN_KEYS = 16  # keys a probe spanning several header values may expect (two lines)
NEED_CAP = 1024  # runs not loaded a call reports at most (the rest on the next call)
_uncleared = ffi.new_allocator(should_clear_after_alloc=False)  # (what C writes, read back)


_NEED, _ROOM, _MAP = lib.SS_ENEED, lib.SS_EROOM, lib.SS_EMAP  # (read once per call)


def _ball(bits: int, radius: int) -> int:
    """Values within Hamming distance radius of one bits-bit value."""
    return sum(math.comb(bits, r) for r in range(min(radius, bits) + 1))


def probe_masks(header_bits: int, radius: int, tail: int) -> list[int]:
    """The XOR masks of weight <= radius over header_bits bits, shifted left by tail, ascending."""
    out = []
    for r in range(min(radius, header_bits) + 1):
        for bits in itertools.combinations(range(header_bits), r):
            out.append(sum(1 << (b + tail) for b in bits))
    return sorted(out)


def span_bits(header_bits: int, keys: int) -> int:
    """How many low header bits a probe may span in a table of about keys keys: the most
    whose 2**bits header values hold SPAN_KEYS keys or fewer (0 when one value holds more)."""
    per_value = max(keys, 1) / 2.0**header_bits
    bits = int(math.floor(math.log2(SPAN_KEYS / per_value))) if per_value < SPAN_KEYS else 0
    return max(0, min(bits, header_bits - 1))


def span_masks(masks: Sequence[int], tail: int, span: int) -> tuple[list[int], list[int]]:
    """masks (ascending) with each group that agrees above the low span header bits taken
    as one probe of that span (its mask's span bits cleared), a lone mask as itself: the
    masks and their spans, ascending. One range then replaces probes that would each
    read a directory line for a few keys or none."""
    if span <= 0:
        return list(masks), [0] * len(masks)
    out: list[int] = []
    spans: list[int] = []
    shift = tail + span
    for _, grp in itertools.groupby(masks, key=lambda m: m >> shift):
        group = list(grp)
        if len(group) > 1:
            out.append(group[0] >> shift << shift)
            spans.append(span)
        else:
            out.append(group[0])
            spans.append(0)
    return out, spans


class Prober:
    """A query's probes over sorted runs, all in one C call (ss_probe).

    Built once per layout from each table's permutation spec (as
    Layout.shifts) and header bits. ``set_sets`` points it at the current
    run sets, keeping a reference to each; :meth:`hits` answers a query.
    Probe plans are built per radius and span bits (:meth:`set_size`) on first
    use. The output buffers are kept and grown between calls, so calls must not
    overlap (one prober per thread); set_sets may run while a call is under way
    (the call finishes on the runs it started with).
    """

    def __init__(
        self, specs: Sequence[tuple[bytes, bytes, bytes]], header_bits: Sequence[int]
    ) -> None:
        self._ntables, self._nblocks = _check_specs(specs, header_bits)
        self._header_bits = tuple(header_bits)
        self._tails = [64 - h for h in header_bits]
        # the plans' byte arrays: ffi-owned, since struct fields keep nothing alive
        self._spec_arrays = [
            ffi.new("uint8_t[]", b"".join(s[i] for s in specs)) for i in range(3)
        ] + [ffi.new("uint8_t[]", bytes(self._tails))]
        # the C plans by span bits (per table), then radius; _now: those at the current spans
        self._plans: dict[tuple[int, ...], dict[int, Any]] = {}
        self._span = (0,) * self._ntables  # per table: low header bits a probe may span
        self._now = self._plans.setdefault(self._span, {})
        self._plan_refs: list[Any] = []
        # (C set array, count, the RunSets it points into): swapped whole, so a
        # call holds the runs it started with even if set_sets runs meanwhile
        self._sets: tuple[Any, int, list[RunSet]] = (ffi.new("ss_runset[]", 0), 0, [])
        self._grow(64)
        # the runs a call found not loaded (ss_need), loaded before it is made again
        self._need = np.empty(NEED_CAP, dtype=np.uint64)
        self._scratch: Any = None
        self._one = ffi.new("uint64_t[1]")  # lookup_one's key
        self._scratch_n = 0
        self._c_need = ffi.new("ss_need *", {"a": ffi.from_buffer("uint64_t[]", self._need),
                                            "cap": NEED_CAP, "n": 0})

    def masks(self, radius: int) -> list[list[int]]:
        """Each table's probe masks at one radius (ascending, shifted into the header)."""
        return [probe_masks(h, radius, 64 - h) for h in self._header_bits]

    def plan(self, radius: int, spans: bool = True) -> Any:
        """The C plan (ss_probe_plan *) of one radius at the current spans (or none)."""
        span = self._span if spans else (0,) * self._ntables
        plan = self._plans.setdefault(span, {}).get(radius)
        if plan is None:
            plan = self._plan(radius, span)
        return plan

    def set_size(self, keys: int) -> None:
        """Plan for tables of about keys keys each from now on: where a header value holds
        few, a probe spans the near values its neighbours would probe (:func:`span_bits`).
        Answers never depend on it, only how many probes find them."""
        span = tuple(span_bits(h, keys) for h in self._header_bits)
        if span != self._span:
            self._span = span
            self._now = self._plans.setdefault(span, {})

    def _plan(self, radius: int, span: tuple[int, ...]) -> Any:
        """The C plan (ss_probe_plan *) of one radius and each table's span bits."""
        if not is_int(radius) or not 0 <= radius <= 64:
            raise InvalidConfigError(f"simstore: radius must be an int in 0..64 (got {radius!r})")
        count = sum(_ball(h, radius) for h in self._header_bits)
        if count > MAX_PROBES:
            raise InvalidConfigError(
                f"simstore: radius {radius} needs {count} probes a query (at most {MAX_PROBES})"
            )
        masks, spans = [], []
        for ms, tail, bits in zip(self.masks(radius), self._tails, span, strict=True):
            m, sp = span_masks(ms, tail, bits)
            masks.append(m)
            spans += sp
        c_masks = ffi.new("uint64_t[]", [m for ms in masks for m in ms])
        c_nmasks = ffi.new("int32_t[]", [len(ms) for ms in masks])
        c_spans = ffi.new("uint8_t[]", spans) if any(spans) else ffi.NULL
        src, width, dst, tails = self._spec_arrays
        plan = ffi.new(
            "ss_probe_plan *",
            {"ntables": self._ntables, "nblocks": self._nblocks, "src_shift": src,
             "width": width, "dst_shift": dst, "tails": tails, "masks": c_masks,
             "nmasks": c_nmasks, "spans": c_spans},
        )
        self._plan_refs += [c_masks, c_nmasks, c_spans]
        self._plans.setdefault(span, {})[radius] = plan
        return plan

    def set_sets(self, sets: Sequence[RunSet], keys: Sequence[int | None] | None = None
                 ) -> None:
        """Probe these run sets from now on (their tables within this prober's); keys:
        about how many keys each sorted set holds (None: unknown), from which its probes
        span as :meth:`set_size`'s do for a whole table, so a small level costs fewer."""
        for rs in sets:
            if rs.table >= self._ntables:
                raise InvalidConfigError(
                    f"simstore: a run set's table must be -1..{self._ntables - 1} "
                    f"(got {rs.table})")
        for rs, n in zip(sets, keys if keys is not None else [None] * len(sets), strict=True):
            if rs.table >= 0:
                rs.span = 0 if n is None else span_bits(self._header_bits[rs.table], n)
        arr = ffi.new("ss_runset[]", len(sets))
        for i, rs in enumerate(sets):
            rs.fill(arr[i])
        self._sets = (arr, len(sets), list(sets))

    def _grow(self, cap: int) -> None:
        """Output buffers with room for cap hits."""
        self._cap = cap
        self._vals = np.empty(cap, dtype=np.uint64)
        self._dist = np.empty(cap, dtype=np.uint8)
        self._c_vals = ffi.from_buffer("uint64_t[]", self._vals)
        self._c_dist = ffi.from_buffer("uint8_t[]", self._dist)

    def _load_needed(self, keep: list[RunSet]) -> None:
        """Load the runs the last call found not loaded (ss_need), set by set."""
        n = min(int(self._c_need.n), NEED_CAP)
        by_set: dict[int, list[int]] = {}
        for x in set(self._need[:n].tolist()):
            by_set.setdefault(x >> 32, []).append(x & 0xFFFFFFFF)
        if not sum(keep[si].load(sorted(idxs)) for si, idxs in by_set.items()):
            raise InvalidConfigError("simstore: the C core needs runs no set can load")

    def _run(self, q: int, k: int, plan: Any) -> int:
        """ss_probe into the output buffers until it has its runs and room: the hit count."""
        sets, nsets, _ = self._sets
        try:
            m: int = lib.ss_probe(q, k, plan, sets, nsets, self._c_vals, self._c_dist,
                                  self._cap, self._c_need)
        except (OverflowError, TypeError) as exc:
            raise InvalidConfigError(
                f"simstore: a probe needs q in 0..2**64-1 and k in 0..64 (got {q!r}, {k!r})"
            ) from exc
        if 0 <= m <= self._cap:  # (most queries: answered by the first call)
            return m

        def call(sets: Any, nsets: int, need: Any, vals: Any, cap: int) -> tuple[int, int]:
            n = int(lib.ss_probe(q, k, plan, sets, nsets, vals, self._c_dist, cap, need))
            return n, n

        return self.until_answered(call, (m, m))

    def scratch(self, n: int) -> Any:
        """An int64 cffi array of at least n entries for a caller's C call, reused (its
        contents are whatever the last call left; calls are serialized as this prober's
        are)."""
        if self._scratch_n < n:
            self._scratch_n = max(n, 2 * self._scratch_n)
            self._scratch = _uncleared("int64_t[]", self._scratch_n)
        return self._scratch

    def until_answered(self, fn: Callable[[Any, int, Any, Any, int], tuple[int, int]],
                       answer: tuple[int, int] | None = None) -> int:
        """Run fn(sets, nsets, need, vals, cap), a C call over these run sets with its
        values in vals (cap entries), until it has the runs it needs and room; fn answers
        (rc, entries wanted), answer: its answer to a first call the caller made over the
        current sets. SS_ENEED: the runs it lists are loaded here; SS_EROOM or a count
        past cap: the buffers grow here (the output of an earlier call made from them is
        gone then). Its last rc, SS_EMAP included; any other error is raised."""
        sets, nsets, keep = self._sets  # keep: alive until the call returns
        while True:
            rc, wanted = answer or fn(sets, nsets, self._c_need, self._c_vals, self._cap)
            answer = None
            if rc == _NEED:
                self._load_needed(keep)
            elif rc == _ROOM or rc > self._cap:
                self._grow(max(wanted, 2 * self._cap))
            elif rc < 0 and rc != _MAP:
                raise_for(rc, f"looking up keys in {nsets} run sets")
            else:
                return rc

    def lookup(self, qs: np.ndarray) -> list[int]:
        """Values of every key of the sorted runs equal to one of qs (uint64), duplicates kept."""
        qs = u64_array(qs, "lookup keys")
        return self._lookup(ffi.from_buffer("uint64_t[]", qs), len(qs))

    def lookup_one(self, q: int) -> list[int]:
        """:meth:`lookup` of the one key q (a single write's id: no array made)."""
        try:
            self._one[0] = q
        except (OverflowError, TypeError) as exc:
            raise InvalidConfigError(f"simstore: a lookup key must be in 0..2**64-1 (got {q!r})"
                                     ) from exc
        return self._lookup(self._one, 1)

    def _lookup(self, cq: Any, n: int) -> list[int]:
        sets, nsets, _ = self._sets
        m = int(lib.ss_lookup(sets, nsets, cq, n, self._c_vals, self._cap, self._c_need))
        if not 0 <= m <= self._cap:

            def call(sets: Any, nsets: int, need: Any, vals: Any, cap: int) -> tuple[int, int]:
                got = int(lib.ss_lookup(sets, nsets, cq, n, vals, cap, need))
                return got, got

            m = self.until_answered(call, (m, m))
        return ffi.unpack(self._c_vals, m) if m else []

    def hits(self, q: int, k: int, radius: int) -> list[tuple[int, int]]:
        """(value, distance) of every value within k of q, distinct, by distance then value.

        radius is the header radius that answers k on this layout
        (Layout.radius_for(k)).
        """
        plan = self._now.get(radius)  # (inline: once per query)
        if plan is None:
            plan = self._plan(radius, self._span)
        m = self._run(q, k, plan)
        if not m:
            return []
        return list(zip(ffi.unpack(self._c_vals, m), ffi.unpack(self._c_dist, m), strict=True))


def _check_specs(
    specs: Sequence[tuple[bytes, bytes, bytes]], header_bits: Sequence[int]
) -> tuple[int, int]:
    """(ntables, nblocks) of per-table permutation specs, checked for ss_probe."""
    ntables = len(specs)
    if not 1 <= ntables <= 64 or len(header_bits) != ntables:
        raise InvalidConfigError(
            f"simstore: a prober needs 1..64 tables and one header size each"
            f" (got {ntables} specs, {len(header_bits)} header sizes)"
        )
    nblocks = len(specs[0][1])
    for spec in specs:
        if not _spec_ok(spec, nblocks):
            raise InvalidConfigError(
                f"simstore: each table spec must be 3 byte strings of {nblocks} bytes"
                f" whose blocks fit in 64 bits (got {spec!r})"
            )
    if not 1 <= nblocks <= 64 or not all(is_int(h) and 1 <= h <= 64 for h in header_bits):
        raise InvalidConfigError(
            f"simstore: a prober needs 1..64 blocks and header sizes in 1..64"
            f" (got {nblocks} blocks, headers {list(header_bits)})"
        )
    return ntables, nblocks


def _spec_ok(spec: Any, nblocks: int) -> bool:
    """Whether spec is (src_shift, width, dst_shift) of nblocks blocks inside 64 bits."""
    if len(spec) != 3 or not all(isinstance(b, bytes) and len(b) == nblocks for b in spec):
        return False
    src, width, dst = spec
    blocks = zip(src, width, dst, strict=True)
    return all(1 <= w <= 64 and s + w <= 64 and d + w <= 64 for s, w, d in blocks)
