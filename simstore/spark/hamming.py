"""All pairs within Hamming distance k on Spark: the pigeonhole passes as one shuffle.

Exactness (the same rule as ``csrc/batch.c``'s ``ss_batch_pass``): split the 64 bits
into B contiguous blocks (``block_masks``); a pair within k agrees on at least B - k of
them, and its *canonical pass* is the set of its lowest B - k agreeing blocks. Each
distinct fingerprint is sent once per pass, keyed by (pass, header = its bits in the
pass's blocks). A pair's two rows share the key of its canonical pass, so they meet in
one partition; ``batch_pass`` over that pass's rows of the partition emits a pair only
if that pass is its canonical one (and rows of other headers never agree on the
header, so they never pair). Hence every pair once, with no global distinct.

Crowded keys (more than ``max_group`` distinct rows sharing one (pass, header), found
from a sample) are salted: each row gets a bucket s = hash(fp) mod S and is sent to the
S tasks (min(s, t), max(s, t)), t = 0..S-1. Task (s, s) keeps pairs inside bucket s,
task (s, t) with s < t only pairs across s and t: a pair with buckets {a, b} comes out
of task (min, max) only. Exactness holds whichever keys are salted; the sample only
decides where the work goes.

Identical fingerprints share every key (and, salted, their bucket: it hashes the
fingerprint), so each task holds all copies of its values: it groups them, searches the
distinct values (as ``batch_pass`` requires) and expands the copies itself. Pairs among
copies come from pass 0 only. One shuffle in all, no joins.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import Any

import numpy as np
import pyarrow.compute as pc

from ..native import core as _core
from .common import RA, RB, REP, DataFrame, F, T, pa, session_of, table_of, u64

MAX_PASSES = 256
MAX_SALT = 64
_CHUNK = 1 << 20
# the task column: pass << 19 | slot << 6 | bucket (slot 0: unsalted; else 1 + s1*64 + s2)
_SLOT_SHIFT, _PASS_SHIFT = 6, 19


def block_masks(nblocks: int) -> list[int]:
    """The bit masks of the nblocks contiguous blocks, lowest bits first (as batch.c)."""
    masks = [0] * nblocks
    for t in range(64):
        masks[t * nblocks // 64] |= 1 << t
    return masks


def plan(rows: int, k: int, group_rows: int) -> tuple[int, list[int]]:
    """Blocks B and the passes' header block sets (bit masks over blocks), for k >= 1.

    The fewest passes (each one shuffles every distinct row once) whose headers are wide
    enough that an average header group holds at most group_rows rows.
    """
    choice = k + 1
    for b in range(k + 1, min(64, k + 8) + 1):
        h = b - k
        if math.comb(b, h) > MAX_PASSES:
            break
        choice = b
        if rows <= group_rows * 2 ** (h * (64 // b)):
            break
    return choice, [
        sum(1 << x for x in c) for c in itertools.combinations(range(choice), choice - k)
    ]


def header_masks(nblocks: int, combos: list[int]) -> list[int]:
    """For each pass, the fingerprint bits of its header blocks, as a signed 64-bit int."""
    blocks = block_masks(nblocks)
    out = []
    for c in combos:
        m = 0
        for b in range(nblocks):
            if c >> b & 1:
                m |= blocks[b]
        out.append(m - (1 << 64) if m >= 1 << 63 else m)
    return out


def _exploded(src: DataFrame, fp_col: str, masks: list[int]) -> DataFrame:
    """src with one row per pass: _pass and _head (the fingerprint's header bits)."""
    marr = F.array(*[F.lit(m).cast("long") for m in masks])
    x = src.withColumn("_pass", F.explode(F.sequence(F.lit(0), F.lit(len(masks) - 1))))
    return x.withColumn("_head", F.col(fp_col).bitwiseAND(F.element_at(marr, F.col("_pass") + 1)))


def crowded(
    df: DataFrame, fp_col: str, masks: list[int], rows: int, max_group: int,
    sample_rows: int, seed: int,
) -> list[tuple[int, int, int]]:
    """(pass, header, salt buckets S) of the keys a sample says hold > max_group rows.

    Counts rows, not distinct values (copies can only over-salt, which costs a little
    replication and never a wrong answer).
    """
    frac = min(1.0, sample_rows / max(rows, 1))
    src = df.select(fp_col)
    if frac < 1.0:
        src = src.sample(fraction=frac, seed=seed)
    counts = _exploded(src, fp_col, masks).groupBy("_pass", "_head").count()
    found = counts.where(F.col("count") > max_group * frac).collect()
    out = []
    for p, head, c in found:
        est = c / frac
        out.append((int(p), int(head), int(min(MAX_SALT, max(2, math.ceil(2 * est / max_group))))))
    return out


def search(
    df: DataFrame, id_col: str, fp_col: str, id_type: T.DataType, k: int, nblocks: int,
    combos: list[int], heavy: list[tuple[int, int, int]], partitions: int, groups: bool,
) -> DataFrame:
    """(RA, RB, distance) of the rows of df, by one shuffle of (pass, salt slot, header).

    groups=False: every pair of rows (copies expanded in the task). groups=True: pairs
    of representatives (distance >= 1), and for each copy its representative (RA = the
    copy, RB = the smallest id holding its fingerprint, distance 0).
    """
    masks = header_masks(nblocks, combos)
    x = _exploded(df.select(F.col(id_col).alias(REP), fp_col), fp_col, masks)
    if heavy:
        spark = session_of(df)
        salt = spark.createDataFrame(heavy, "_pass int, _head long, _s int")
        x = x.join(F.broadcast(salt), ["_pass", "_head"], "left")
        s = F.col("_s")
        bucket = F.when(s.isNull(), F.lit(0)).otherwise(F.pmod(F.xxhash64(fp_col), s)).cast("int")
        x = x.withColumn("_bk", bucket)
        slots = F.when(s.isNull(), F.array(F.lit(0))).otherwise(
            F.transform(
                F.sequence(F.lit(0), s - 1),
                lambda t: F.least(F.col("_bk"), t) * MAX_SALT + F.greatest(F.col("_bk"), t) + 1,
            )
        )
        x = x.withColumn("_slot", F.explode(slots))
        task = (
            F.shiftleft(F.col("_pass"), _PASS_SHIFT)
            + F.shiftleft(F.col("_slot"), _SLOT_SHIFT)
            + F.col("_bk")
        )
    else:
        task = F.shiftleft(F.col("_pass"), _PASS_SHIFT)
    x = x.select(task.cast("int").alias("_t"), fp_col, REP)
    marr = F.array(*[F.lit(m).cast("long") for m in masks])
    head = F.col(fp_col).bitwiseAND(F.element_at(marr, F.shiftright(F.col("_t"), _PASS_SHIFT) + 1))
    x = x.repartition(partitions, F.shiftright(F.col("_t"), _SLOT_SHIFT), head)
    schema = T.StructType([
        T.StructField(RA, id_type, False),
        T.StructField(RB, id_type, False),
        T.StructField("distance", T.ByteType(), False),
    ])
    return x.mapInArrow(partial(search_partition, k, nblocks, combos, fp_col, groups), schema)


def _run_pairs(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (x < y) of positions inside each run [start, start + count)."""
    pos = np.repeat(starts, counts) + _ranks(counts)
    later = np.repeat(starts + counts, counts) - pos - 1
    first = np.repeat(pos, later)
    return first, first + 1 + _ranks(later)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each count c, concatenated."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _heads_first(pos: np.ndarray, starts: np.ndarray, counts: np.ndarray, ids: Any) -> None:
    """Within each run of copies (pos[start:start+count]), move the row of the smallest
    id to the front (in place): it is the run's representative."""
    many = np.flatnonzero(counts > 1)
    at = np.repeat(starts[many], counts[many]) + _ranks(counts[many])
    run = np.repeat(np.arange(len(many)), counts[many])
    key = ids.take(pa.array(pos[at]))
    if pa.types.is_integer(key.type):
        o = np.lexsort((key.to_numpy(), run))
    else:
        o = pc.sort_indices(pa.table({"r": run, "i": key}),
                            sort_keys=[("r", "ascending"), ("i", "ascending")]).to_numpy()
    pos[at] = pos[at[o]]


def search_partition(
    k: int, nblocks: int, combos: list[int], fp_col: str, groups: bool, batches: Any
) -> Any:
    """The Python worker's side. In each task (one pass, one salt slot) of the partition
    the copies are grouped (``_core.dedupe``), the distinct fingerprints go through
    ``_core.batch_pass`` for that one pass (headers never mix: see the module doc) and
    the copies are expanded. Pairs among copies (and copy -> representative links) come
    only from pass 0's task that holds them (salted: the task (s, s) of their bucket s),
    so once."""
    t = table_of(batches)
    if t is None:
        return
    task = t.column("_t").to_numpy()
    fps = u64(t.column(fp_col))
    ids = t.column(REP).combine_chunks()
    g = task >> _SLOT_SHIFT
    by_task = np.argsort(g, kind="stable")
    gs = g[by_task]
    bounds = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1], True])
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        key = int(gs[s])
        p, slot = key >> (_PASS_SHIFT - _SLOT_SHIFT), key & ((1 << 13) - 1)
        same_bucket = not slot or (slot - 1) // MAX_SALT == (slot - 1) % MAX_SALT
        rows = by_task[s:e]
        uniq, order, bounds_u = _core.dedupe(np.ascontiguousarray(fps[rows]))
        pos = rows[order.astype(np.int64)]  # rows by fingerprint; a run per distinct value
        starts = bounds_u[:-1].astype(np.int64)
        counts = np.diff(bounds_u).astype(np.int64)
        copies = len(uniq) < len(pos)
        if copies and groups:
            _heads_first(pos, starts, counts, ids)
        found = _core.batch_pass(uniq, k, nblocks, [combos[p]])
        if found is None:
            raise AssertionError("batch_pass met identical fingerprints after grouping")
        ui, uj, d = found
        if not same_bucket:
            bk = task[pos[starts]] & (MAX_SALT - 1)
            cross = bk[ui] != bk[uj]
            ui, uj, d = ui[cross], uj[cross], d[cross]
        copies = copies and p == 0 and same_bucket
        if groups:
            out.append((pos[starts[ui]], pos[starts[uj]], d))
            if copies:
                many = counts > 1
                at = np.repeat(starts[many], counts[many]) + _ranks(counts[many])
                head = np.repeat(starts[many], counts[many])
                member = at != head
                out.append((pos[at[member]], pos[head[member]],
                            np.zeros(int(member.sum()), np.uint8)))
            continue
        cu, cv = counts[ui], counts[uj]
        tot = cu * cv
        which = np.repeat(np.arange(len(ui)), tot)
        off = _ranks(tot)
        out.append((pos[starts[ui][which] + off // cv[which]],
                    pos[starts[uj][which] + off % cv[which]], d[which]))
        if copies:
            many = counts > 1
            a, b = _run_pairs(starts[many], counts[many])
            out.append((pos[a], pos[b], np.zeros(len(a), np.uint8)))
    if not out:
        return
    a = np.concatenate([o[0] for o in out])
    b = np.concatenate([o[1] for o in out])
    d = np.concatenate([o[2] for o in out]).astype(np.int8)
    for c in range(0, len(a), _CHUNK):
        yield pa.RecordBatch.from_arrays(
            [
                ids.take(pa.array(a[c : c + _CHUNK])),
                ids.take(pa.array(b[c : c + _CHUNK])),
                pa.array(d[c : c + _CHUNK]),
            ],
            names=[RA, RB, "distance"],
        )
