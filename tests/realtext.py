"""Real text of this Debian machine for the integration tests, with planted near copies.

Documents are the licence texts of ``/usr/share/common-licenses`` and the package
``copyright`` files of ``/usr/share/doc`` (full of near-identical GPL/BSD/MIT texts under
different headers), in sorted path order; after each fifth one comes a copy of a recent
document with a few words changed (Jaccard mostly 0.8-0.98), so every run has real and
planted near-duplicates. Seeded: the same list every time on one machine.
"""

from __future__ import annotations

import glob
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest


def _paths() -> list[str]:
    found = sorted(glob.glob("/usr/share/common-licenses/*"))
    found += sorted(glob.glob("/usr/share/doc/*/copyright"))
    seen, out = set(), []
    for p in found:
        real = os.path.realpath(p)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(real)
    return out


def _perturb(rng: random.Random, text: str) -> str:
    words = text.split(" ")
    for _ in range(max(1, len(words) // rng.randint(40, 200))):
        words[rng.randrange(len(words))] = rng.choice(["alpha", "beta", "gamma", "delta"])
    return " ".join(words)


def documents(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """n documents {id, text, score}: real files and planted near copies (see the module
    docstring); pytest skips the test when the machine has too few files."""
    paths = _paths()
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for p in paths:
        if len(docs) >= n:
            break
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read(20_000)
        if len(text.split()) < 20:
            continue
        docs.append({"id": f"doc-{len(docs):05d}", "text": text, "score": rng.random()})
        if len(docs) % 5 == 0 and len(docs) < n:
            src = docs[rng.randrange(max(0, len(docs) - 20), len(docs))]
            docs.append(
                {
                    "id": f"doc-{len(docs):05d}",
                    "text": _perturb(rng, src["text"]),
                    "score": rng.random(),
                }
            )
    if len(docs) < n // 2:
        pytest.skip(f"this machine has too little real text ({len(docs)} documents)")
    return docs


def write_jsonl(path: Path, docs: list[dict[str, Any]]) -> Path:
    """The documents as JSON lines at path."""
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
