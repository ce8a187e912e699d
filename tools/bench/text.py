"""``text``: fingerprints and signatures of mixed-script real text, 1 and 2 threads, vs peers."""

from __future__ import annotations

import argparse
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

import simstore

from .. import _corpus
from ._cli import common, positive
from ._harness import MB, Report, Stats, timed_reps
from ._peers import load_datasketch, load_rensa

_WORDS = re.compile(r"\w+")


def _size(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / MB


def script_of(text: str) -> str:
    """The script of most of a text's non-ASCII letters (first word of their names), else ASCII."""
    names = Counter(
        unicodedata.name(ch, "?").split(" ")[0] for ch in text if not ch.isascii() and ch.isalpha()
    )
    if not names:
        return "ASCII"
    top = names.most_common(1)[0][0]
    return "CJK" if top in ("CJK", "HIRAGANA", "KATAKANA") else top


def shingles(text: str) -> list[str]:
    """The peers' one-line shingler: 3-word shingles of \\w+ runs of the lower-cased text."""
    toks = _WORDS.findall(text.lower())
    return [" ".join(toks[i : i + 3]) for i in range(max(1, len(toks) - 2))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.fingerprints / signatures on mixed-script real text (gettext catalogs + English)."""
    rep = Report("text", {k: getattr(args, k) for k in ("docs", "translated", "peer_docs",
                                                        "reps", "seed")})
    pairs = _corpus.mixed_documents(args.docs, args.seed, args.translated)
    docs = [t for _, t in pairs]
    nonascii = [t for t in docs if not t.isascii()]
    ascii_docs = [t for t in docs if t.isascii()]
    total = _size(docs)
    char_bytes = sum(len(t.encode("utf-8", "surrogatepass")) - sum(c.isascii() for c in t)
                     for t in nonascii) / MB
    locales = sorted({loc for loc, _ in pairs})
    rep.note(
        f"{len(docs)} docs, {total:.2f} MB: {len(nonascii)} docs with non-ASCII characters "
        f"({_size(nonascii) / total:.0%} of the bytes; non-ASCII characters themselves "
        f"{char_bytes / total:.0%}); {len(locales)} locales: translations (msgstr) of the gettext "
        "catalogs under /usr/share/locale/*/LC_MESSAGES/*.mo and English from "
        "/usr/share/common-licenses + /usr/share/doc/*/copyright, 2-20 KB each; "
        "MB = 10^6 bytes of UTF-8"
    )
    rep.note(f"simstore tokenizes in C: {simstore.text.fingerprinting.UNICODE_IN_C}")
    rep.header()
    rates: dict[str, float] = {}

    def measure(impl: str, case: str, fn: Callable[[], Any], texts: list[str]) -> float:
        walls, cpus, _ = timed_reps(fn, args.reps)
        mb = _size(texts)
        rate, cpu_rate = mb / float(np.median(walls)), mb / float(np.median(cpus))
        rep.row(impl, case, Stats.of(walls), "s/rep", mb_s=rate, mb_per_cpu_s=cpu_rate,
                docs=len(texts))
        rates[f"{impl} | {case}"] = rate
        return rate

    for case, texts in (("mixed", docs), ("non-ASCII docs", nonascii), ("ASCII docs", ascii_docs)):
        for what, fn in (("fingerprints", simstore.fingerprints),
                         ("signatures", simstore.signatures)):
            for threads in (1, 2) if case == "mixed" else (1,):
                measure(f"simstore.{what}(threads={threads})", case,
                        lambda fn=fn, texts=texts, threads=threads: fn(texts, threads=threads),
                        texts)
    one_sig = rates["simstore.signatures(threads=1) | mixed"]
    rep.target("signatures, mixed, one thread", one_sig, 60, ">=", "MB/s")
    rep.target("signatures, non-ASCII docs, one thread",
               rates["simstore.signatures(threads=1) | non-ASCII docs"], 50, ">=", "MB/s")
    rep.target("fingerprints, mixed, one thread",
               rates["simstore.fingerprints(threads=1) | mixed"], 80, ">=", "MB/s")
    for what in ("fingerprints", "signatures"):
        ratio = rates[f"simstore.{what}(threads=2) | mixed"] / rates[
            f"simstore.{what}(threads=1) | mixed"]
        rep.target(f"{what}: two threads / one thread", ratio, 1.7, ">=", "x")

    by_script: dict[str, list[str]] = defaultdict(list)
    for t in docs:
        by_script[script_of(t)].append(t)
    rensa, ds = load_rensa(), load_datasketch()
    if rensa is None:
        rep.note("peer 'rensa' not importable: skipped")
    if ds is None:
        rep.note("peer 'datasketch' not importable: skipped")
    behind = []
    for script, texts in sorted(by_script.items(), key=lambda kv: -len(kv[1])):
        texts = texts[: args.peer_docs]
        if len(texts) < 10:
            continue
        ours = measure("simstore.signatures(threads=1)", script,
                       lambda texts=texts: simstore.signatures(texts, threads=1), texts)
        if rensa is not None:
            def rensa_sign(texts: list[str] = texts) -> None:
                for t in texts:
                    m = rensa.RMinHash(num_perm=128, seed=0)
                    m.update(shingles(t))
                    m.digest()
            peer = measure("rensa.RMinHash(128) + Python shingles", script, rensa_sign, texts)
            if ours < peer:
                behind.append(script)
            ready = [shingles(t) for t in texts]

            def rensa_ready(ready: list[list[str]] = ready) -> None:
                for sh in ready:
                    m = rensa.RMinHash(num_perm=128, seed=0)
                    m.update(sh)
                    m.digest()
            measure("rensa.RMinHash(128), ready shingles", script, rensa_ready, texts)
        if ds is not None:
            few = texts[: max(10, args.peer_docs // 4)]  # datasketch is slow

            def ds_sign(few: list[str] = few) -> None:
                for t in few:
                    m = ds.MinHash(num_perm=128)
                    m.update_batch([s.encode("utf-8") for s in shingles(t)])
            measure("datasketch.MinHash(128) + Python shingles", script, ds_sign, few)
    if rensa is not None:
        rep.note("simstore.signatures ahead of rensa with Python shingles in every script"
                 if not behind else f"simstore.signatures behind rensa in: {', '.join(behind)}")
    out = rep.to_dict()
    out["headline"] = {k: round(v, 1) for k, v in rates.items()}
    return out


def add_arguments(tx: argparse.ArgumentParser) -> None:
    """The options of ``python -m tools.bench text``."""
    common(tx)
    tx.add_argument("--docs", type=positive, default=3000,
                    help="documents of 2-20 KB (default %(default)s)")
    tx.add_argument("--translated", type=float, default=0.67,
                    help="share of documents cut from gettext translations, the rest English "
                         "(default %(default)s)")
    tx.add_argument("--peer-docs", type=positive, default=300,
                    help="documents per script given to the peers (default %(default)s)")
