"""``similarity``: Jaccard signatures, a similarity store and find_similar, against datasketch.

Four measurements in one run (MB = 10**6 bytes of UTF-8; everything on one thread):

1. ``simstore.signatures`` of ~5 KB English documents (MB/s) beside
   ``simstore.fingerprints`` and datasketch ``MinHash(num_perm=128)`` over the same
   distinct word 3-shingles (only the MinHash build is timed, not the shingling);
2. a ``SimStore(config=SIGNATURE_CONFIG, durable=False)`` of N synthetic documents:
   one ``add_many`` call, disk bytes per document, ``similar(sig, 0.9)`` and
   ``add_if_new(threshold=0.9)`` latency;
3. datasketch ``MinHashLSH(threshold=0.9, num_perm=128)`` (in memory, approximate)
   over up to --lsh-max of those documents: insert rate and query latency;
4. ``simstore.find_similar`` over all N signatures.

A synthetic document is a set of 300..1000 random 64-bit feature hashes (what a
text's distinct shingles hash to), signed by ``simstore.native.core.signature_hashes``;
its fingerprint is the unweighted simhash of the set. A near copy replaces r of
its base's m hashes, so the true Jaccard of the pair is exactly (m - r) / (m + r).
datasketch gets the MinHash values its default "affine32" scheme computes for the
same sets (hash = the low 32 bits of each feature hash), computed in bulk here.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import simstore
from simstore.native import core as _core

from .. import _corpus
from ._cli import common, pair, positive
from ._harness import (
    DEFAULT_WORKDIR,
    MB,
    Report,
    Stats,
    current_rss,
    du_bytes,
    load_average,
    per_call_ns,
    scratch_dir,
    timed_reps,
)
from ._peers import load_datasketch
from .query import latency_row

CFG = simstore.SIGNATURE_CONFIG
THRESHOLD = 0.9
NUM_PERM = 128
PAIR_JACCARD = (0.80, 0.98)  # true Jaccard of the near copies planted among the N docs
JACCARD_EDGES = (0.80, 0.85, 0.90, 0.93, 0.96, 0.99)  # buckets of the recall breakdowns
CHUNK = 20_000  # synthetic docs generated and signed at a time (even: pairs stay together)
MINHASH_BLOCK = 200  # docs per bulk datasketch MinHash computation


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Signatures MB/s, a similarity store of N docs and find_similar, vs datasketch."""
    keys = ("docs", "doc_bytes", "peer_docs", "n", "queries", "adds", "planted", "features",
            "query_jaccard", "lsh_max", "reps", "seed")
    rep = Report("similarity", {**{k: getattr(args, k) for k in keys}, "scheme": CFG.scheme})
    load_note(rep, "start")
    head: dict[str, Any] = {}
    signature_throughput(rep, args, head)
    syn = synthetic(args, load_datasketch())
    rep.note(
        f"{args.n:,} synthetic docs of {args.features[0]}..{args.features[1]} feature hashes "
        f"generated and signed in {syn.seconds:.1f} s (not part of any timing); "
        f"{len(syn.pair_base):,} planted near-copy pairs, true Jaccard "
        f"{PAIR_JACCARD[0]}..{PAIR_JACCARD[1]}; {len(syn.query_base):,} queries, each a "
        f"near copy (not stored) of one stored doc, true Jaccard "
        f"{args.query_jaccard[0]}..{args.query_jaccard[1]}"
    )
    rep.header()
    store_section(rep, args, syn, head)
    lsh_section(rep, args, syn, head)
    find_similar_section(rep, args, syn, head)
    load_note(rep, "end")
    out = rep.to_dict()
    out["headline"] = head
    return out


def load_note(rep: Report, when: str) -> None:
    """A note of the machine's load averages (another CPU job skews wall-clock numbers)."""
    shown = " ".join(f"{v:.2f}" for v in load_average())
    rep.note(f"load average (1, 5, 15 min) at {when}: {shown} on {os.cpu_count()} logical CPUs")


# --------------------------------------------------------------------------- 1. signatures


def signature_throughput(rep: Report, args: argparse.Namespace, head: dict[str, Any]) -> None:
    """simstore.signatures vs fingerprints vs datasketch MinHash on English documents."""
    docs = _corpus.english_documents(args.docs, args.doc_bytes, args.seed)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    rep.note(f"{len(docs)} English docs, {nbytes / MB:.2f} MB, "
             f"median {int(np.median([len(d.encode()) for d in docs]))} bytes/doc")
    rep.header()

    def row(impl: str, subset: list[str], walls: list[float], cpus: list[float],
            **extra: Any) -> tuple[float, float]:
        mbytes = sum(len(d.encode("utf-8")) for d in subset) / MB
        mb_s, mb_cpu = mbytes / float(np.median(walls)), mbytes / float(np.median(cpus))
        rep.row(impl, f"{len(subset)} docs/rep", Stats.of(walls), "s/rep", mb_s=mb_s,
                mb_per_cpu_s=mb_cpu, reps=len(walls), **extra)
        return mb_s, mb_cpu

    warm = docs[:100]
    w, c, _ = timed_reps(lambda: simstore.signatures(docs), args.reps,
                         warmup=lambda: simstore.signatures(warm))
    sig_mb_s, sig_cpu = row("simstore.signatures", docs, w, c)
    w, c, _ = timed_reps(lambda: simstore.fingerprints(docs, CFG), args.reps,
                         warmup=lambda: simstore.fingerprints(warm, CFG))
    fp_mb_s, fp_cpu = row("simstore.fingerprints", docs, w, c)
    head.update(signatures_mb_s=sig_mb_s, signatures_mb_per_cpu_s=sig_cpu,
                fingerprints_mb_s=fp_mb_s, fingerprints_mb_per_cpu_s=fp_cpu)
    rep.target("simstore.signatures wall clock", sig_mb_s, 50, ">=", "MB/s")
    rep.target("simstore.signatures per CPU-second", sig_cpu, 50, ">=", "MB/s")

    ds = load_datasketch()
    if ds is None:
        rep.note("peer 'datasketch' not importable: MinHash skipped")
        rep.target("simstore.signatures vs datasketch MinHash", None, 20, ">=", "x")
        return
    peer = docs[: args.peer_docs]
    shingles = [sorted({s.encode() for s in simstore.features(d, CFG)}) for d in peer]
    perms = ds.MinHash(num_perm=NUM_PERM).permutations

    def per_doc() -> None:
        for sh in shingles:
            ds.MinHash(num_perm=NUM_PERM).update_batch(sh)

    def shared_perms() -> None:
        for sh in shingles:
            ds.MinHash(num_perm=NUM_PERM, permutations=perms, scheme="affine32").update_batch(sh)

    rep.note(f"datasketch MinHash: {len(peer)} docs, their distinct 3-word shingles "
             "(simstore.features, UTF-8 bytes) made beforehand; timed: MinHash(num_perm=128) "
             "+ update_batch per doc (default sha1_hash32, affine32 scheme)")
    ratios, cpu_ratios = {}, {}
    for impl, fn in (("datasketch MinHash(128) per doc", per_doc),
                     ("datasketch MinHash(128), shared permutations", shared_perms)):
        w, c, _ = timed_reps(fn, args.reps)
        peer_mb_s, peer_cpu = row(impl, peer, w, c)
        ratios[impl], cpu_ratios[impl] = sig_mb_s / peer_mb_s, sig_cpu / peer_cpu
    for impl, r in ratios.items():
        rep.note(f"simstore.signatures is {r:.1f}x {impl} in MB/s, {cpu_ratios[impl]:.1f}x in "
                 "MB per CPU-second (same run)")
    head["signatures_speedup_vs"] = ratios
    head["signatures_cpu_speedup_vs"] = cpu_ratios
    rep.target("simstore.signatures vs the faster datasketch MinHash (wall)",
               min(ratios.values()), 20, ">=", "x")
    rep.target("simstore.signatures vs the faster datasketch MinHash (CPU)",
               min(cpu_ratios.values()), 20, ">=", "x")


# --------------------------------------------------------------------------- synthetic data


@dataclass
class Synthetic:
    """N signed synthetic docs, their planted pairs, the queries and the LSH peer's inputs."""

    sigs: simstore.Signatures
    pair_base: np.ndarray  # planted pairs: doc pair_copy[t] is a near copy of pair_base[t]
    pair_copy: np.ndarray
    pair_jaccard: np.ndarray  # exact Jaccard of each planted pair
    query_sigs: simstore.Signatures  # one near copy (not stored) of each query base
    query_base: np.ndarray
    query_jaccard: np.ndarray
    lsh_ids: np.ndarray  # docs given to MinHashLSH, and their datasketch MinHash values
    lsh_values: np.ndarray
    query_values: np.ndarray
    seconds: float


def near_copy(rng: np.random.Generator, h: np.ndarray, jaccard: float) -> tuple[np.ndarray, float]:
    """h with r hashes replaced by new random ones, r set by jaccard; and the exact Jaccard."""
    m = len(h)
    r = int(round(m * (1 - jaccard) / (1 + jaccard)))
    out = h.copy()
    out[rng.choice(m, r, replace=False)] = rng.integers(0, 2**64 - 1, r, dtype=np.uint64,
                                                         endpoint=True)
    return out, (m - r) / (m + r)


def sign(h: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fingerprints, sketches and band keys of the hash sets h[off[d]:off[d + 1]]."""
    sk, bk = _core.signature_hashes(h, off, CFG.seed, CFG.sketch_bits, CFG.bands, CFG.rows)
    return _core.simhash_batch(h, None, off), sk, bk


def minhash_values(perms: np.ndarray, h: np.ndarray, off: np.ndarray) -> np.ndarray:
    """datasketch's affine32 MinHash values (n, 128) uint32 of the sets h[off[d]:off[d + 1]].

    What MinHash(hashfunc=lambda x: x & 0xFFFFFFFF).update_batch computes, in bulk.
    """
    from datasketch.minhash import _fmix

    a, b = perms
    hv = _fmix((h & np.uint64(0xFFFFFFFF)).astype(np.uint32), 32)
    phv = a[:, None] * hv[None, :]
    phv += b[:, None]
    return np.minimum.reduceat(phv, off[:-1], axis=1).T.copy()


def gather(h: np.ndarray, off: np.ndarray, docs: Any) -> tuple[np.ndarray, np.ndarray]:
    """The hash sets of some docs, concatenated, with their offsets."""
    parts = [h[off[i] : off[i + 1]] for i in docs]
    sub = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=sub[1:])
    return (np.concatenate(parts) if parts else np.empty(0, np.uint64)), sub


def bulk_minhash(perms: np.ndarray | None, h: np.ndarray, off: np.ndarray) -> np.ndarray:
    """minhash_values in blocks of MINHASH_BLOCK docs ((0, 128) without a datasketch)."""
    n = len(off) - 1
    if perms is None or n == 0:
        return np.empty((0, NUM_PERM), dtype=np.uint32)
    blocks = []
    for s in range(0, n, MINHASH_BLOCK):
        e = min(n, s + MINHASH_BLOCK)
        blocks.append(minhash_values(perms, h[off[s] : off[e]], off[s : e + 1] - off[s]))
    return np.concatenate(blocks)


def random_sets(rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Random hash sets of the given sizes, concatenated, with their offsets."""
    off = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    return rng.integers(0, 2**64 - 1, int(off[-1]), dtype=np.uint64, endpoint=True), off


def synthetic(args: argparse.Namespace, ds: Any) -> Synthetic:
    """N docs generated and signed CHUNK at a time, with planted pairs and queries."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([args.seed, args.n])
    n, lo, hi = args.n, *args.features
    sizes = rng.integers(lo, hi + 1, n)
    # at most half the docs in planted pairs: the others are the queries' bases
    slots = np.sort(rng.choice(n // 2, min(args.planted, n // 4), replace=False))
    pair_base, pair_copy = 2 * slots, 2 * slots + 1
    pair_want = rng.uniform(*PAIR_JACCARD, len(slots))
    sizes[pair_copy] = sizes[pair_base]
    free = np.ones(n, dtype=bool)
    free[pair_base] = free[pair_copy] = False
    query_base = np.sort(rng.choice(np.flatnonzero(free), min(args.queries, int(free.sum())),
                                    replace=False))
    query_want = rng.uniform(*args.query_jaccard, len(query_base))
    in_lsh = np.zeros(n, dtype=bool)
    if ds is not None and args.lsh_max > 0:
        in_lsh[query_base[: args.lsh_max]] = True
        rest = np.flatnonzero(~in_lsh)[: max(0, min(args.lsh_max, n) - int(in_lsh.sum()))]
        in_lsh[rest] = True
    perms = None if ds is None else ds.MinHash(num_perm=NUM_PERM).permutations

    fps = np.empty(n, dtype=np.uint64)
    sketches = np.empty((n, CFG.sketch_bits // 64), dtype=np.uint64)
    bands = np.empty((n, CFG.bands), dtype=np.uint64)
    pair_jaccard = np.empty(len(slots))
    query_sets: list[np.ndarray] = []
    query_jaccard = np.empty(len(query_base))
    lsh_values = []
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        h, off = random_sets(rng, sizes[start:stop])
        t_lo, t_hi = np.searchsorted(pair_copy, [start, stop])
        for t in range(t_lo, t_hi):
            b, c = pair_base[t] - start, pair_copy[t] - start
            h[off[c] : off[c + 1]], pair_jaccard[t] = near_copy(
                rng, h[off[b] : off[b + 1]], pair_want[t])
        q_lo, q_hi = np.searchsorted(query_base, [start, stop])
        for q in range(q_lo, q_hi):
            b = query_base[q] - start
            qh, query_jaccard[q] = near_copy(rng, h[off[b] : off[b + 1]], query_want[q])
            query_sets.append(qh)
        fps[start:stop], sketches[start:stop], bands[start:stop] = sign(h, off)
        if in_lsh[start:stop].any():
            lsh_values.append(bulk_minhash(perms, *gather(h, off, np.flatnonzero(
                in_lsh[start:stop]))))
    qh = np.concatenate(query_sets)
    qoff = np.zeros(len(query_sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in query_sets], out=qoff[1:])
    return Synthetic(
        sigs=simstore.Signatures(CFG, fps, sketches, bands),
        pair_base=pair_base, pair_copy=pair_copy, pair_jaccard=pair_jaccard,
        query_sigs=simstore.Signatures(CFG, *sign(qh, qoff)),
        query_base=query_base, query_jaccard=query_jaccard,
        lsh_ids=np.flatnonzero(in_lsh),
        lsh_values=(np.concatenate(lsh_values) if lsh_values
                    else np.empty((0, NUM_PERM), np.uint32)),
        query_values=bulk_minhash(perms, qh, qoff),
        seconds=time.perf_counter() - t0,
    )


def by_jaccard(true_j: np.ndarray, hit: np.ndarray) -> dict[str, str]:
    """found/total per true-Jaccard bucket."""
    out = {}
    for lo, hi in zip(JACCARD_EDGES[:-1], JACCARD_EDGES[1:], strict=True):
        sel = (true_j >= lo) & (true_j < hi)
        if sel.any():
            out[f"{lo:.2f}-{hi:.2f}"] = f"{int(hit[sel].sum())}/{int(sel.sum())}"
    return out


# --------------------------------------------------------------------------- 2. the store


def store_section(rep: Report, args: argparse.Namespace, syn: Synthetic,
                  head: dict[str, Any]) -> None:
    """add_many, bytes per doc, similar() and add_if_new latency of one similarity store."""
    n = len(syn.sigs)
    full = n == 1_000_000
    case = f"N={n:,}"
    rep.set_meta(n=n)
    with scratch_dir(args.workdir, "similarity") as d:
        path = d / "store"
        store = simstore.SimStore(path, config=CFG, durable=False, expected_size=n)
        c0, t0 = time.process_time(), time.perf_counter()
        store.add_many(range(n), syn.sigs)
        add_s, add_cpu = time.perf_counter() - t0, time.process_time() - c0
        rep.row("simstore SimStore.add_many (1 call)", case, None, "s", seconds=add_s,
                cpu_seconds=add_cpu, docs_per_s=n / add_s)
        rep.target("add_many of 1M signatures (one call)", add_s if full else None, 30, "<=", "s")
        store.sync()
        alloc, apparent = du_bytes(path)
        st = store.stats()
        rep.row("simstore similarity store size", case, None, "B/doc",
                du_bytes_per_doc=round(alloc / n, 1), apparent_bytes_per_doc=round(apparent / n, 1),
                stats_used_bytes_per_doc=round(st["used_bytes"] / n, 1),
                stats_bytes_per_doc=st["bytes_per_doc"], k=st["k"], tables=st["tables"],
                bands=CFG.bands, sketch_bytes=st["sketch_bytes"])
        rep.target("disk bytes per doc at 1M (du)", alloc / n if full else None, 400, "<=", "B")
        store.close()  # a read-only look at the databases, then reopened
        rep.row("simstore store bytes by database", case, None, "B/doc",
                **{k: round(v / n, 1) for k, v in db_bytes(path).items()})
        store = simstore.SimStore(path, durable=False)
        head.update(add_many_s=add_s, du_bytes_per_doc=alloc / n,
                    stats_bytes_per_doc=st["bytes_per_doc"])

        queries = list(syn.query_sigs)
        hits, extra = np.zeros(len(queries), dtype=bool), 0
        for i, q in enumerate(queries):
            got = {m.doc_id for m in store.similar(q, THRESHOLD)}
            hits[i] = int(syn.query_base[i]) in got
            extra += len(got - {int(syn.query_base[i])})
        stats = latency_row(
            rep, "simstore SimStore.similar(sig, 0.9)", case,
            lambda q: store.similar(q, THRESHOLD), queries, args.reps,
            recall=f"{int(hits.sum())}/{len(hits)}", other_matches=extra,
            recall_by_true_jaccard=by_jaccard(syn.query_jaccard, hits))
        rep.target("similar() p50 at 1M", stats.median if full else None, 50, "<=", "us")
        head.update(similar_us=stats.median, similar_recall=float(hits.mean()))
        add_if_new_rows(rep, store, syn, args, case)
        store.close()


def db_bytes(path: Path) -> dict[str, int]:
    """Bytes of pages each kind of LMDB database of a closed store uses (read-only look)."""
    import lmdb

    kinds = {"b": "band_tables", "t": "hamming_tables", "d": "docs", "i": "ids"}
    out: dict[str, int] = {}
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=256)
    try:
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
            for name in names:
                st = txn.stat(env.open_db(name, txn=txn, create=False))
                pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                kind = kinds.get(chr(name[0]), "other")
                out[kind] = out.get(kind, 0) + pages * st["psize"]
    finally:
        env.close()
    return out


def add_if_new_rows(rep: Report, store: simstore.SimStore, syn: Synthetic,
                    args: argparse.Namespace, case: str) -> None:
    """add_if_new(threshold=0.9) latency: new random docs (stored), near copies (refused)."""
    rng = np.random.default_rng([args.seed, 7])
    warm = 20
    h, off = random_sets(rng, rng.integers(*args.features, args.adds + warm))
    fresh = list(simstore.Signatures(CFG, *sign(h, off)))
    n = len(syn.sigs)
    ids = iter(range(n + len(syn.query_base), n + len(syn.query_base) + len(fresh)))
    per_call_ns(lambda s: store.add_if_new(next(ids), s, threshold=THRESHOLD), fresh[-warm:])
    stored = []

    def new(s: simstore.Signature) -> None:
        stored.append(not store.add_if_new(next(ids), s, threshold=THRESHOLD))

    ns = per_call_ns(new, fresh[:-warm])
    rep.row("simstore SimStore.add_if_new(0.9)", case + " new doc", Stats.of(ns / 1e3), "us",
            calls=len(ns), stored=f"{sum(stored)}/{len(stored)}", durable=False)
    qids = iter(range(n, n + len(syn.query_base)))
    refused = []

    def dup(s: simstore.Signature) -> None:
        refused.append(bool(store.add_if_new(next(qids), s, threshold=THRESHOLD)))

    ns = per_call_ns(dup, list(syn.query_sigs))
    rep.row("simstore SimStore.add_if_new(0.9)", case + " near copy", Stats.of(ns / 1e3), "us",
            calls=len(ns), refused=f"{sum(refused)}/{len(refused)}", durable=False)


# --------------------------------------------------------------------------- 3. MinHashLSH


def lsh_section(rep: Report, args: argparse.Namespace, syn: Synthetic,
                head: dict[str, Any]) -> None:
    """datasketch MinHashLSH (in memory, approximate): insert rate, query latency."""
    ds = load_datasketch()
    if ds is None or not len(syn.lsh_ids):
        rep.note("datasketch MinHashLSH skipped" + (" (--lsh-max 0)" if ds else
                                                   " (datasketch not importable)"))
        return
    k = len(syn.lsh_ids)
    case = f"N={k:,}"
    rep.set_meta(n=k)
    rep.note(f"datasketch MinHashLSH(threshold=0.9, num_perm=128) holds {k:,} of the "
             f"{len(syn.sigs):,} docs (every query's base and the first others; --lsh-max): "
             "it is in memory, approximate (banded LSH, no check of the estimate), slow to fill "
             "and memory hungry; timed: insertion_session inserts of prebuilt LeanMinHash "
             "objects")

    def lean(v: np.ndarray) -> Any:
        return ds.LeanMinHash(seed=1, hashvalues=v, scheme="affine32")

    objs = [lean(v) for v in syn.lsh_values]
    rss0 = current_rss()
    lsh = ds.MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    t0 = time.perf_counter()
    with lsh.insertion_session() as session:
        for i, o in zip(syn.lsh_ids.tolist(), objs, strict=True):
            session.insert(i, o)
    ins_s = time.perf_counter() - t0
    rss = current_rss() - rss0
    rep.row("datasketch MinHashLSH insert (in memory)", case, None, "docs/s",
            docs_per_s=k / ins_s, seconds=ins_s, rss_growth_mib=round(rss / 2**20),
            bands_rows=f"{lsh.b}x{lsh.r}")
    sel = np.flatnonzero(np.isin(syn.query_base, syn.lsh_ids))
    qobjs = [lean(syn.query_values[i]) for i in sel]
    hits = np.array([int(syn.query_base[i]) in lsh.query(o) for i, o in zip(sel, qobjs,
                                                                            strict=True)])
    stats = latency_row(rep, "datasketch MinHashLSH.query (in memory)", case, lsh.query, qobjs,
                        args.reps, recall=f"{int(hits.sum())}/{len(hits)}",
                        recall_by_true_jaccard=by_jaccard(syn.query_jaccard[sel], hits))
    head.update(lsh_query_us=stats.median, lsh_docs=k, lsh_insert_docs_per_s=k / ins_s)


# --------------------------------------------------------------------------- 4. find_similar


def find_similar_section(rep: Report, args: argparse.Namespace, syn: Synthetic,
                         head: dict[str, Any]) -> None:
    """find_similar over all N signatures: wall time, pairs, planted pairs found."""
    n = len(syn.sigs)
    rep.set_meta(n=n)
    warm = syn.sigs[: min(n, 50_000)]
    walls, cpus, found = timed_reps(lambda: simstore.find_similar(syn.sigs, THRESHOLD),
                                    args.reps,
                                    warmup=lambda: simstore.find_similar(warm, THRESHOLD))
    codes = found.i.astype(np.uint64) * np.uint64(n) + found.j.astype(np.uint64)
    planted = syn.pair_base.astype(np.uint64) * np.uint64(n) + syn.pair_copy.astype(np.uint64)
    hit = np.isin(planted, codes)
    stats = Stats.of(walls)
    rep.row("simstore.find_similar(sigs, 0.9)", f"N={n:,}", stats, "s",
            cpu_s=float(np.median(cpus)), pairs=len(found.i),
            planted_found=f"{int(hit.sum())}/{len(hit)}",
            other_pairs=len(found.i) - int(hit.sum()),
            planted_found_by_true_jaccard=by_jaccard(syn.pair_jaccard, hit))
    rep.target("find_similar at 1M", stats.median if n == 1_000_000 else None, 10, "<=", "s")
    head.update(find_similar_s=stats.median, find_similar_pairs=len(found.i))


def add_arguments(si: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench similarity``."""
    common(si)
    si.add_argument("--docs", type=positive, default=3000,
                    help="~5 KB English documents for the signature MB/s (default %(default)s)")
    si.add_argument("--doc-bytes", type=positive, default=5000,
                    help="document size cap in UTF-8 bytes (default %(default)s)")
    si.add_argument("--peer-docs", type=positive, default=500,
                    help="documents given to datasketch MinHash (default %(default)s)")
    si.add_argument("--n", type=positive, default=1_000_000,
                    help="synthetic documents in the store and find_similar (default %(default)s)")
    si.add_argument("--features", type=pair(int), default=(300, 1000),
                    help="LO,HI distinct feature hashes per synthetic document "
                         "(default 300,1000)")
    si.add_argument("--planted", type=int, default=10_000,
                    help="near-copy pairs among the N docs, true Jaccard 0.80..0.98, at most "
                         "N/4 (default %(default)s)")
    si.add_argument("--queries", type=positive, default=2000,
                    help="similar() queries, each a near copy of a stored doc "
                         "(default %(default)s)")
    si.add_argument("--query-jaccard", type=pair(float), default=(0.93, 0.98),
                    help="LO,HI true Jaccard of a query and its stored doc (default 0.93,0.98)")
    si.add_argument("--adds", type=positive, default=2000,
                    help="timed add_if_new calls of new documents (default %(default)s)")
    si.add_argument("--lsh-max", type=int, default=100_000,
                    help="documents given to datasketch MinHashLSH, 0 = skip it; slow and "
                         "memory hungry (default %(default)s)")
    si.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where the scratch store goes (default %(default)s)")
