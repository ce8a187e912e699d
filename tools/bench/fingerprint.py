"""``fingerprint``: text -> fingerprint throughput (MB/s, one thread) against peers."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import simstore

from .. import _corpus
from ._cli import common, positive
from ._harness import MB, Report, Stats, per_call_ns, timed_reps
from ._peers import load_datasketch, load_simhash


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.fingerprints on 5 KB English docs, MB/s on one thread, vs peers."""
    rep = Report(
        "fingerprint",
        {k: getattr(args, k) for k in ("docs", "doc_bytes", "peer_docs", "reference_docs",
                                       "reps", "seed")},
    )
    docs = _corpus.english_documents(args.docs, args.doc_bytes, args.seed)
    sizes = [len(d.encode("utf-8")) for d in docs]
    nonascii = sum(not d.isascii() for d in docs)
    rep.note(
        f"{len(docs)} docs, {sum(sizes) / MB:.2f} MB, median {int(np.median(sizes))} bytes/doc, "
        f"{nonascii} with non-ASCII characters; MB = 10^6 bytes of UTF-8; one thread"
    )
    rep.header()

    def throughput(impl: str, subset: list[str], walls: list[float], cpus: list[float],
                   per_doc: np.ndarray | None = None, **extra: Any) -> tuple[float, float]:
        mbytes = sum(len(d.encode("utf-8")) for d in subset) / MB
        mb_s = mbytes / float(np.median(walls))
        cpu_mb_s = mbytes / float(np.median(cpus))
        stats = Stats.of(walls)
        rep.row(impl, f"{len(subset)} docs/rep", stats, "s/rep", mb_s=mb_s, mb_per_cpu_s=cpu_mb_s,
                reps=len(walls), **extra)
        if per_doc is not None:
            rep.row(impl, "per call", Stats.of(per_doc / 1e3), "us", calls=len(per_doc))
        return mb_s, cpu_mb_s

    walls, cpus, fps = timed_reps(
        lambda: simstore.fingerprints(docs), args.reps,
        warmup=lambda: simstore.fingerprints(docs[:100]),
    )
    batched, batched_cpu = throughput("simstore.fingerprints", docs, walls, cpus)
    rep.target("simstore.fingerprints per CPU-second", batched_cpu, 50, ">=", "MB/s")
    rep.target("simstore.fingerprints wall clock", batched, 50, ">=", "MB/s")
    for label, keep in (("ASCII docs", True), ("non-ASCII docs", False)):
        part = [d for d in docs if d.isascii() == keep]
        if part:
            walls, cpus, _ = timed_reps(partial(simstore.fingerprints, part), args.reps)
            throughput(f"simstore.fingerprints ({label})", part, walls, cpus)

    def single_calls(fn: Callable[[str], Any], subset: list[str]) -> tuple[list, list, np.ndarray]:
        fn(subset[0])
        samples, walls, cpus = [], [], []
        for _ in range(args.reps):
            c0 = time.process_time()
            ns = per_call_ns(fn, subset)
            cpus.append(time.process_time() - c0)
            walls.append(float(ns.sum()) / 1e9)
            samples.append(ns)
        return walls, cpus, np.concatenate(samples)

    w, c, ns = single_calls(simstore.fingerprint, docs)
    single, _ = throughput("simstore.fingerprint (1 text/call)", docs, w, c, ns)

    ratios: dict[str, float] = {}
    sh = load_simhash()
    if sh is None:
        rep.note("peer 'simhash' not importable: skipped")
    else:
        peer_docs, failed = [], 0
        for d in docs[: args.peer_docs]:
            try:
                sh.Simhash(d)
                peer_docs.append(d)
            except OverflowError:
                failed += 1
        if failed:
            rep.note(
                f"simhash.Simhash(text) raised OverflowError on {failed} of {args.peer_docs} docs "
                "(a 4-char feature counted > 255 times overflows its uint8 under numpy 2); "
                "both simhash rows time only the docs it accepts"
            )
        w, c, ns = single_calls(sh.Simhash, peer_docs)
        ratios["simhash.Simhash(text)"] = batched / throughput(
            "simhash.Simhash(text)", peer_docs, w, c, ns
        )[0]

        def shingled(text: str) -> Any:
            toks = re.findall(r"\w+", text.lower())
            return sh.Simhash([" ".join(toks[i : i + 3]) for i in range(len(toks) - 2)])

        w, c, ns = single_calls(shingled, peer_docs)
        ratios["simhash.Simhash(3-word shingles)"] = batched / throughput(
            "simhash.Simhash(3-word shingles)", peer_docs, w, c, ns
        )[0]

    ds = load_datasketch()
    if ds is None:
        rep.note("peer 'datasketch' not importable: skipped")
    else:
        # A different method (MinHash sketches for Jaccard, usually with LSH), but the
        # one users weigh against simhash: sketch the same 3-word shingles.
        def minhash(text: str) -> Any:
            toks = re.findall(r"\w+", text.lower())
            m = ds.MinHash(num_perm=128)
            m.update_batch([" ".join(toks[i : i + 3]).encode() for i in range(len(toks) - 2)])
            return m

        mh_docs = docs[: args.peer_docs]
        w, c, ns = single_calls(minhash, mh_docs)
        ratios["datasketch.MinHash(128 perms, 3-word shingles)"] = batched / throughput(
            "datasketch.MinHash(128 perms, 3-word shingles)", mh_docs, w, c, ns
        )[0]

    from simstore.text.reference import reference_fingerprint

    ref_docs = docs[: args.reference_docs]
    w, c, ns = single_calls(reference_fingerprint, ref_docs)
    agree = sum(reference_fingerprint(d) == int(fps[i]) for i, d in enumerate(ref_docs))
    ratios["simstore._reference (pure Python)"] = batched / throughput(
        "simstore._reference (pure Python)", ref_docs, w, c, ns,
        equal_to_simstore=f"{agree}/{len(ref_docs)}",
    )[0]
    for name, r in ratios.items():
        rep.note(f"simstore.fingerprints is {r:.1f}x {name} (MB/s, same run)")
    out = rep.to_dict()
    out["headline"] = {"simstore_mb_s": batched, "simstore_mb_per_cpu_s": batched_cpu,
                       "single_call_mb_s": single,
                       "speedup_vs": ratios}
    return out


def add_arguments(f: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench fingerprint``."""
    common(f)
    f.add_argument("--docs", type=positive, default=3000,
                   help="5 KB documents for simstore (default %(default)s)")
    f.add_argument("--doc-bytes", type=positive, default=5000,
                   help="document size cap in UTF-8 bytes (default %(default)s)")
    f.add_argument("--peer-docs", type=positive, default=200,
                   help="documents given to the PyPI simhash peer (default %(default)s)")
    f.add_argument("--reference-docs", type=positive, default=40,
                   help="documents given to the pure-Python reference (default %(default)s)")
