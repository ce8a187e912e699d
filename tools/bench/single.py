"""``single``: one document at a time, simstore's calls beside datasketch's and rensa's.

A crawler, a web service or a notebook calls simstore one document at a time. English
documents of at most --doc-bytes (tools/_corpus.english_documents) go through, each call
timed on its own (wall, perf_counter_ns):

- ``simstore.fingerprint(text)`` and ``simstore.signature(text)``, beside the batch calls
  ``fingerprints(texts)`` / ``signatures(texts)`` on one thread over the same documents:
  the ratio is the single calls' total over the batch's (``--reps`` passes each, medians);
- ``store.query(fp, k=3)`` on a fingerprint store of --n documents (k = 3), and
  ``store.similar(sig, 0.9)`` on a similarity store of the same documents, both
  asked about near copies of stored documents (their last 40 characters cut);
- ``store.add_if_new(id, sig, threshold=0.9)`` and ``store.add(id, sig)`` with
  ``durable=False``, of new documents (seeded random words of the corpus: no near copy
  stored), the signature made beforehand: the time beyond the signature;
- the peers, in RAM, 128 permutations: datasketch ``MinHash`` (update_batch of the
  document's 3-word shingles, digest) and ``MinHashLSH(threshold=0.9).query`` over the
  MinHashes of the --n documents; rensa ``RMinHash`` (update, digest) and
  ``RMinHashLSH(threshold=0.9, num_bands=16).query``. A peer that does not import is
  skipped with a note.

Targets (issue 49): signature() and fingerprint() <= 1.5x their batch cost per document;
query <= 10 us at k = 3; similar p50 <= datasketch MinHashLSH.query p50; add_if_new
(durable=False) <= 50 us beyond its signature.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import simstore

from .. import _corpus
from ._harness import DEFAULT_WORKDIR, Report, Stats, scratch_dir, timed_reps
from ._peers import load_datasketch, load_rensa
from .text import shingles

_US = 1e-3  # ns -> us
THRESHOLD = 0.9
K = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench single``."""
    p.add_argument(
        "--n",
        type=int,
        default=20_000,
        help="documents in the stores and the peers' LSH (default %(default)s)",
    )
    p.add_argument(
        "--calls", type=int, default=2000, help="timed calls of each kind (default %(default)s)"
    )
    p.add_argument(
        "--doc-bytes",
        type=int,
        default=3000,
        help="document size cap in UTF-8 bytes (default %(default)s)",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=3,
        help="passes of the single and batch text calls (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=20261128, help="corpus seed (default %(default)s)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help="where the scratch stores go (default %(default)s)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")


def _calls(
    rep: Report, impl: str, case: str, fn: Callable[[Any], Any], args: Sequence[Any]
) -> float:
    """Time fn(a) for each a (after one untimed call); one row, with the CPU p50 beside
    (the thread's CPU time of each call: what other work on the machine inflates least);
    the wall p50 in us."""
    fn(args[0])
    wall, cpu = np.empty(len(args)), np.empty(len(args))
    clock, thread = time.perf_counter_ns, time.thread_time_ns
    for i, a in enumerate(args):
        c0, t0 = thread(), clock()
        fn(a)
        wall[i], cpu[i] = clock() - t0, thread() - c0
    stats = Stats.of(wall).scaled(_US)
    rep.row(impl, case, stats, "us", cpu_p50_us=float(np.median(cpu)) * _US, calls=len(args))
    return stats.median


def _text_calls(rep: Report, docs: list[str], reps: int) -> dict[str, float]:
    """fingerprint()/signature() per call, and their total against the batch call's: the
    ratio of CPU medians (other work on a shared machine inflates wall times unevenly)."""
    ratios = {}
    pairs = (
        ("fingerprint", simstore.fingerprint, simstore.fingerprints),
        ("signature", simstore.signature, simstore.signatures),
    )
    for name, one, many in pairs:
        _calls(rep, f"simstore.{name}(text)", "per call", one, docs)
        singles = timed_reps(lambda one=one: [one(d) for d in docs], reps)
        batches = timed_reps(lambda many=many: many(docs, threads=1), reps)
        for impl, (walls, cpus, _) in (
            (f"simstore.{name}(text), total", singles),
            (f"simstore.{name}s(texts), 1 thread", batches),
        ):
            rep.row(
                impl,
                "per doc",
                Stats.of(walls).scaled(1e6 / len(docs)),
                "us",
                cpu_us=float(np.median(cpus)) * 1e6 / len(docs),
                docs=len(docs),
            )
        ratios[name] = float(np.median(singles[1]) / np.median(batches[1]))
        wall = float(np.median(singles[0]) / np.median(batches[0]))
        rep.note(
            f"{name}(): {len(docs)} single calls take {ratios[name]:.2f}x the CPU "
            f"({wall:.2f}x the wall) of one {name}s() call over them (medians of {reps})"
        )
    return ratios


def _new_texts(docs: list[str], n: int, seed: int) -> list[str]:
    """n documents of random words of the corpus: nothing near them is stored."""
    rng = random.Random(seed)
    vocab = sorted({w for d in docs[:2000] for w in d.split()})
    return [" ".join(rng.choice(vocab) for _ in range(400)) for _ in range(n)]


def _store_calls(
    rep: Report, args: argparse.Namespace, docs: list[str], near: list[str], new: list[str]
) -> dict[str, float]:
    """query, similar, add_if_new and add on stores of the documents (p50 in us)."""
    out = {}
    with scratch_dir(args.workdir, "single") as d:
        fp_store = simstore.SimStore(d / "fp", k=K, expected_size=args.n, durable=False)
        fp_store.add_many(range(len(docs)), simstore.fingerprints(docs))
        qs = [int(q) for q in simstore.fingerprints(near)]
        out["query"] = _calls(
            rep, f"store.query(fp, k={K})", f"{args.n} docs", lambda q: fp_store.query(q, K), qs
        )
        fp_store.close()
        store = simstore.SimStore(
            d / "sim", config=simstore.SIGNATURE_CONFIG, expected_size=args.n, durable=False
        )
        store.add_many(range(len(docs)), simstore.signatures(docs))
        sigs = list(simstore.signatures(near))
        hits = sum(len(store.similar(s, THRESHOLD)) for s in sigs)
        out["similar"] = _calls(
            rep,
            f"store.similar(sig, {THRESHOLD})",
            f"{args.n} docs",
            lambda s: store.similar(s, THRESHOLD),
            sigs,
        )
        rep.note(f"similar: {hits / len(sigs):.2f} hits per query (near copies of stored docs)")
        fresh = list(simstore.signatures(new))
        half = len(fresh) // 2
        ids = iter(range(10**9, 2 * 10**9))
        out["add_if_new"] = _calls(
            rep,
            f"store.add_if_new(id, sig, threshold={THRESHOLD})",
            "new doc, durable=False",
            lambda s: store.add_if_new(next(ids), s, threshold=THRESHOLD),
            fresh[:half],
        )
        _calls(
            rep,
            "store.add(id, sig)",
            "new doc, durable=False",
            lambda s: store.add(next(ids), s),
            fresh[half:],
        )
        store.close()
    return out


def _peer(
    rep: Report,
    name: str,
    sign: Callable[[str], Any],
    lsh: Any,
    docs: list[str],
    near: list[str],
) -> float:
    """A peer's one-document signing, then its LSH of docs asked about near (p50 in us)."""
    _calls(rep, f"{name} update+digest", "per call", sign, near)
    for i, text in enumerate(docs):
        lsh.insert(i, sign(text))
    queries = [sign(t) for t in near]
    label = f"{name} LSH(threshold={THRESHOLD}).query"
    return _calls(rep, label, f"{len(docs)} docs, in RAM", lsh.query, queries)


def _peer_calls(rep: Report, docs: list[str], near: list[str]) -> dict[str, float]:
    """datasketch's and rensa's one-document calls, 128 permutations (p50 in us)."""
    out = {}
    ds, rensa = load_datasketch(), load_rensa()

    def ds_sign(text: str) -> Any:
        m = ds.MinHash(num_perm=128)
        m.update_batch([s.encode("utf-8") for s in shingles(text)])
        m.digest()
        return m

    def rensa_sign(text: str) -> Any:
        m = rensa.RMinHash(num_perm=128, seed=0)
        m.update(shingles(text))
        m.digest()
        return m

    if ds is None:
        rep.note("peer 'datasketch' not importable: skipped")
    else:
        lsh = ds.MinHashLSH(threshold=THRESHOLD, num_perm=128)
        out["datasketch"] = _peer(rep, "datasketch MinHash(128)", ds_sign, lsh, docs, near)
    if rensa is None:
        rep.note("peer 'rensa' not importable: skipped")
    else:
        rlsh = rensa.RMinHashLSH(threshold=THRESHOLD, num_perm=128, num_bands=16)
        out["rensa"] = _peer(rep, "rensa RMinHash(128), 16 bands", rensa_sign, rlsh, docs, near)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The five single-document calls and the peers' in one run; the Report as JSON."""
    rep = Report(
        "single", {k: getattr(args, k) for k in ("n", "calls", "doc_bytes", "reps", "seed")}
    )
    rep.header()
    docs = _corpus.english_documents(args.n + args.calls, args.doc_bytes, args.seed)
    stored, extra = docs[: args.n], docs[args.n :]
    rng = random.Random(args.seed)
    near = [stored[rng.randrange(args.n)][:-40] for _ in range(args.calls)]
    ratios = _text_calls(rep, extra, args.reps)
    got = _store_calls(rep, args, stored, near, _new_texts(stored, 2 * args.calls, args.seed))
    peers = _peer_calls(rep, stored, near)
    for name in ("signature", "fingerprint"):
        rep.target(f"{name}() total / {name}s() one thread, CPU", ratios[name], 1.5, "<=", "x")
    rep.target(f"query p50 at k={K}", got["query"], 10, "<=", "us")
    if "datasketch" in peers:
        rep.target(
            "similar p50 / datasketch MinHashLSH.query p50",
            got["similar"] / peers["datasketch"],
            1.0,
            "<=",
            "x",
        )
    else:
        rep.target("similar p50 / datasketch MinHashLSH.query p50", None, 1.0, "<=", "x")
    rep.target(
        "add_if_new p50 (durable=False, beyond the signature)", got["add_if_new"], 50, "<=", "us"
    )
    return rep.to_dict()
