"""``find-all``: all pairs within k, simstore against simhash-pybind and numpy."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .._util import popcount
from ._cli import common, positive, sized
from ._data import U64, clustered_fps, flip_bits, random_fps
from ._harness import Report, Stats, timed_reps
from ._peers import DEFAULT_PYBIND_DIR, load_simhash_pybind


def block_bounds(k: int) -> list[tuple[int, int]]:
    """(shift, width) of k+1 nearly equal blocks tiling 64 bits, top block first."""
    nb = k + 1
    widths = [64 // nb + (1 if i < 64 % nb else 0) for i in range(nb)]
    out, top = [], 64
    for w in widths:
        top -= w
        out.append((top, w))
    return out


def numpy_find_all(fps: np.ndarray, k: int, max_candidates: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, int]:
    """Pairs i < j within k by block permutation in numpy, or None if over max_candidates.

    Pigeonhole: split the bits into k+1 blocks; a pair within k agrees on one.
    Pass p sorts by block p and compares every pair inside each run of equal
    block values (one vectorized step per offset), keeping a pair only if p
    is the first block it agrees on. Returns (i, j, d) and the candidate count.
    """
    blocks = [(fps >> U64(sh)) & U64((1 << w) - 1) for sh, w in block_bounds(k)]
    candidates = 0
    for bv in blocks:
        counts = np.unique(bv, return_counts=True)[1].astype(np.int64)
        candidates += int((counts * (counts - 1) // 2).sum())
    if candidates > max_candidates:
        return None, candidates
    n = len(fps)
    pos = np.arange(n)
    parts_i, parts_j, parts_d = [], [], []
    for p, bv in enumerate(blocks):
        order = np.argsort(bv, kind="stable")
        sv = bv[order]
        starts = np.flatnonzero(np.concatenate([[True], sv[1:] != sv[:-1]]))
        lengths = np.diff(np.append(starts, n))
        run_end = np.repeat(starts + lengths, lengths)
        active = pos[run_end - pos > 1]
        step = 1
        while active.size:
            a, b = order[active], order[active + step]
            dist = popcount(fps[a] ^ fps[b])
            hit = dist <= k
            a, b, dist = a[hit], b[hit], dist[hit]
            first = np.ones(len(a), dtype=bool)
            for q in range(p):
                first &= blocks[q][a] != blocks[q][b]
            parts_i.append(np.minimum(a, b)[first])
            parts_j.append(np.maximum(a, b)[first])
            parts_d.append(dist[first])
            step += 1
            active = active[run_end[active] - active > step]
    if not parts_i:
        empty = np.empty(0, dtype=np.int64)
        return (empty, empty, np.empty(0, dtype=np.uint8)), candidates
    return (np.concatenate(parts_i), np.concatenate(parts_j), np.concatenate(parts_d)), candidates


def brute_find_all(fps: np.ndarray, k: int, chunk: int = 256) -> int:
    """Number of pairs i < j within k, by comparing every pair in numpy (row chunks)."""
    n, found = len(fps), 0
    cols = np.arange(n)
    for s in range(0, n, chunk):
        rows = fps[s : s + chunk]
        d = popcount(rows[:, None] ^ fps[None, :])
        upper = cols[None, :] > np.arange(s, s + len(rows))[:, None]
        found += int(np.count_nonzero((d <= k) & upper))
    return found


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.batch.find_all vs simhash-pybind, a numpy block-permutation and brute force."""
    from simstore.search.hamming import find_all

    sizes = args.sizes + ([10_000_000] if args.large else [])
    rep = Report("find-all", {"sizes": sizes, "k": args.k, "planted": args.planted,
                              "clustered": args.clustered,
                              "shared_bits": args.shared_bits,
                              "pybind_blocks": args.pybind_blocks,
                              "numpy_max_candidates": args.numpy_max_candidates,
                              "brute_max": args.brute_max, "reps": args.reps,
                              "seed": args.seed})
    rep.note("time per whole call; warm-up on the first tenth of the input; "
             "peers get their input pre-converted (untimed)")
    rep.header()
    pyb = load_simhash_pybind(args.pybind_dir)
    if pyb is None:
        rep.note("peer 'simhash-pybind' not importable: skipped")
    cases: list[tuple[str, np.ndarray]] = []
    for n in sizes:
        rng = np.random.default_rng([args.seed, n, 3])
        planted = min(args.planted, n // 2)
        fps = random_fps(rng, n - planted)
        near = flip_bits(rng, fps[:planted], 1, args.k)
        cases.append((f"random N={n:,}", rng.permutation(np.concatenate([fps, near]))))
    if args.planted:
        rep.note(f"each random case holds {args.planted:,} planted near copies (distance "
                 f"1..{args.k} from another fp), so the pair counts can be cross-checked")
    if args.clustered:
        rng = np.random.default_rng([args.seed, args.clustered, 4])
        cases.append((f"top {args.shared_bits} bits shared N={args.clustered:,}",
                      clustered_fps(rng, args.clustered, args.shared_bits)))
    k = args.k
    for case, fps in cases:
        rep.set_meta(n=len(fps), k=k, random=case.startswith("random"))
        warm = fps[: max(2, len(fps) // 10)]
        counts: dict[str, int] = {}
        for workers in (1, 2):
            walls, _, res = timed_reps(partial(find_all, fps, k, workers=workers), args.reps,
                                       warmup=partial(find_all, warm, k, workers=workers))
            name = f"simstore find_all ({workers} thread{'s' if workers > 1 else ''})"
            counts[name] = len(res.i)
            rep.row(name, case, Stats.of(walls), "s", pairs=len(res.i))
        if pyb is not None:
            hashes = {int(f) for f in fps}
            small = {int(f) for f in warm}
            walls, _, res = timed_reps(
                partial(pyb.find_all, hashes, args.pybind_blocks, k), args.reps,
                warmup=partial(pyb.find_all, small, args.pybind_blocks, k),
            )
            name = f"simhash-pybind find_all ({args.pybind_blocks} blocks)"
            counts[name] = len(res)
            rep.row(name, case, Stats.of(walls), "s", pairs=len(res))
        out, cand = numpy_find_all(fps, k, args.numpy_max_candidates)
        if out is None:
            rep.note(f"numpy block-permutation not run on {case}: {cand:,} candidate pairs "
                     f"> --numpy-max-candidates {args.numpy_max_candidates:,}")
        else:
            walls, _, (out, _) = timed_reps(
                partial(numpy_find_all, fps, k, args.numpy_max_candidates), args.reps,
                warmup=partial(numpy_find_all, warm, k, args.numpy_max_candidates),
            )
            assert out is not None
            counts["numpy block-permutation"] = len(out[0])
            rep.row("numpy block-permutation", case, Stats.of(walls), "s", pairs=len(out[0]),
                    candidates=cand)
        if len(fps) <= args.brute_max:
            walls, _, found = timed_reps(partial(brute_find_all, fps, k), args.reps,
                                         warmup=partial(brute_find_all, warm, k))
            counts["numpy brute force"] = found
            rep.row("numpy brute force", case, Stats.of(walls), "s", pairs=found)
        else:
            rep.note(f"numpy brute force not run on {case}: n > --brute-max {args.brute_max:,}")
        if len(set(counts.values())) > 1:
            rep.note(f"pair counts DISAGREE on {case}: {counts}")
    return rep.to_dict()


def add_arguments(fa: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench find-all``."""
    common(fa)
    sized(fa, [100_000, 1_000_000], "random-fp sizes N")
    fa.add_argument("--k", type=positive, default=3, help="distance (default %(default)s)")
    fa.add_argument("--planted", type=int, default=1000,
                    help="near copies planted in each random case (default %(default)s)")
    fa.add_argument("--clustered", type=int, default=40_000,
                    help="size of the clustered case, 0 = none (default %(default)s)")
    fa.add_argument("--shared-bits", type=positive, default=40,
                    help="top bits all clustered fps share (default %(default)s)")
    fa.add_argument("--pybind-dir", type=Path, default=DEFAULT_PYBIND_DIR,
                    help="where simhash-pybind is installed aside (default %(default)s)")
    fa.add_argument("--pybind-blocks", type=positive, default=6,
                    help="simhash-pybind number_of_blocks, > k (default %(default)s)")
    fa.add_argument("--numpy-max-candidates", type=positive, default=200_000_000,
                    help="skip the numpy block-permutation above this many candidate pairs "
                         "(default %(default)s)")
    fa.add_argument("--brute-max", type=positive, default=50_000,
                    help="largest n for numpy brute force (default %(default)s)")
