"""simstore's per-document cost by document length, for ``python -m tools.bench doclen``.

Standalone (numpy and simstore only), so ``doclen --base REV`` can copy it aside
and run it in a fresh process whose PYTHONPATH is another tree: ``import
simstore`` then gets that tree's package. It uses only ``fingerprints`` and
``signatures(texts, threads=1)``, which every compared revision has. As a
script it reads a JSON file of texts by length and prints one JSON object; with
--once it makes one call for ``doclen --instructions`` to count under callgrind.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import simstore

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "fingerprints": simstore.fingerprints,
    "signatures": simstore.signatures,
}
C_ENTRIES = {"fingerprints": "ss_fingerprint_*", "signatures": "ss_signature_*"}
"""The C entry points each function's work runs in: what callgrind counts (--toggle-collect)."""


def time_batch(fn: Callable[[], Any], reps: int) -> tuple[list[float], list[float]]:
    """One untimed call, then reps timed calls: wall seconds and CPU seconds of each."""
    fn()
    walls, cpus = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


def measure(texts_by_length: dict[str, list[str]], reps: int) -> list[dict[str, Any]]:
    """Per length and function: wall and CPU seconds of each timed one-thread batch call."""
    rows = []
    for length, texts in texts_by_length.items():
        for what, fn in FUNCTIONS.items():
            walls, cpus = time_batch(lambda fn=fn, texts=texts: fn(texts, threads=1), reps)
            rows.append({"what": what, "length": length, "docs": len(texts),
                         "wall_s": walls, "cpu_s": cpus})
    return rows


def main() -> None:
    """Read --texts (JSON: length -> texts), print the rows and simstore's file as JSON."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--texts", required=True, help="JSON file: {length: [text, ...]}")
    p.add_argument("--reps", type=int, default=5, help="timed calls per case")
    p.add_argument("--once", nargs=3, metavar=("FUNCTION", "LENGTH", "DOCS"),
                   help="instead: one call of FUNCTION on the first DOCS texts of LENGTH")
    args = p.parse_args()
    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    if args.once:
        what, length, docs = args.once
        FUNCTIONS[what](texts[length][: int(docs)], threads=1)
        print(json.dumps({"simstore_file": simstore.__file__}))
        return
    print(json.dumps({"simstore_file": simstore.__file__, "rows": measure(texts, args.reps)}))


if __name__ == "__main__":
    main()
