"""Kill rounds over the corpus workflow: ``dedup-corpus --store`` and ``index`` reruns.

A round writes a seeded JSON lines corpus (near copies and repeated ids among
its documents), runs the command once uninterrupted into a fresh store (the
reference), then runs the same command again and again into a second store,
killing it with SIGKILL at a random instant each time (1 to ``max_kills``
times), and finally lets it finish. Then:

- ``dedup-corpus`` (keep first or longest): the finished run's ``-o`` equals the
  reference's kept output, line for line (every kept document once, in input
  order); its removed report counts every other line; the store holds exactly
  the kept ids; no temporary file is left beside the outputs.
- ``index --threshold``: the store holds exactly the reference store's ids.
- ``verify()`` passes on the store.

Run by ``python -m tools.stress corpus-kills``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from simstore.store import SimStore

from .._util import checkout_env

KINDS = ("first", "longest", "index")


def write_corpus(path: str, docs: int, seed: int) -> None:
    """JSON lines: 20% near copies of a recent document, 1% ids repeated."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30_000)]
    recent: list[list[str]] = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(docs):
            if recent and rng.random() < 0.2:
                text = list(rng.choice(recent))
                text[rng.randrange(len(text))] = rng.choice(words)
            else:
                text = rng.sample(words, rng.randrange(40, 90))
            recent = (recent + [text])[-300:]
            doc_id = f"d{rng.randrange(i)}" if i and rng.random() < 0.01 else f"d{i}"
            f.write(json.dumps({"id": doc_id, "text": " ".join(text)}) + "\n")


def _command(kind: str, src: str, store: str, out: str, rm: str) -> list[str]:
    cli = [sys.executable, "-m", "simstore", "-q", "--progress-every", "0"]
    if kind == "index":
        return [*cli, "index", store, src, "--threshold", "0.9", "--chunk", "200"]
    return [*cli, "dedup-corpus", src, "-o", out, "--removed", rm, "--store", store,
            "--keep", kind, "--chunk", "200"]


def _run(cmd: list[str], kill_after: float | None) -> int | None:
    """Run cmd; SIGKILL it after kill_after seconds (None: let it finish); its exit code,
    or None when it was killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=checkout_env())
    try:
        proc.wait(timeout=kill_after if kill_after is not None else 600)
        return proc.returncode
    except subprocess.TimeoutExpired:
        if kill_after is None:
            raise
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ids(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["id"] for line in f]


def _leftovers(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if ".simstore-tmp-" in n)


def corpus_round(root: str, kind: str, seed: int, docs: int, max_kills: int,
                 max_delay: float) -> tuple[list[str], int]:
    """One round in a fresh directory under root: (problems, kills landed mid-run)."""
    rng = random.Random(seed)
    base = os.path.join(root, f"c{seed}-{kind}")
    os.makedirs(base)
    src = os.path.join(base, "in.jsonl")
    write_corpus(src, docs, seed)
    p = {name: os.path.join(base, name)
         for name in ("ref", "ref.jsonl", "ref-rm.jsonl", "s", "kept.jsonl", "rm.jsonl")}
    code = _run(_command(kind, src, p["ref"], p["ref.jsonl"], p["ref-rm.jsonl"]), None)
    if code != 0:
        return [f"the uninterrupted run failed ({code})"], 0
    cmd = _command(kind, src, p["s"], p["kept.jsonl"], p["rm.jsonl"])
    kills = 0
    for _ in range(rng.randint(1, max_kills)):
        if _run(cmd, rng.uniform(0.05, max_delay)) is None:
            kills += 1
    code = _run(cmd, None)
    if code != 0:
        return [f"the final run failed ({code})"], kills
    return _check(kind, p, base, docs), kills


def _check(kind: str, p: dict[str, str], base: str, docs: int) -> list[str]:
    problems = []
    with SimStore(p["s"], readonly=True) as s:
        got = set(s.doc_ids())
        problems += [f"verify: {x}" for x in s.verify()]
    if kind == "index":
        with SimStore(p["ref"], readonly=True) as ref:
            want = set(ref.doc_ids())
        if got != want:
            problems.append(f"store: {len(got - want)} ids too many, {len(want - got)} missing")
        return problems
    want_kept, kept = _ids(p["ref.jsonl"]), _ids(p["kept.jsonl"])
    if kept != want_kept:
        missing = len(set(want_kept) - set(kept))
        extra = len(kept) - len(set(kept))
        problems.append(f"kept: {len(kept)} lines, the uninterrupted run {len(want_kept)} "
                        f"({missing} missing, {extra} written twice)")
    if len(kept) + len(_ids(p["rm.jsonl"])) != docs:
        problems.append("kept + removed lines do not count the input")
    if got != set(want_kept):
        problems.append("the store's ids are not the kept ids")
    if _leftovers(base):
        problems.append(f"temporaries left: {_leftovers(base)}")
    return problems


def run(rounds: int, seed: int, root: str, docs: int, max_kills: int, max_delay: float,
        kinds: tuple[str, ...] = KINDS) -> tuple[int, int]:
    """Run the rounds (kinds in turn); print each failure; (failed rounds, kills landed)."""
    failed = kills = 0
    t0 = time.monotonic()
    for i in range(rounds):
        kind = kinds[i % len(kinds)]
        problems, k = corpus_round(root, kind, seed * 1_000_003 + i, docs, max_kills,
                                   max_delay)
        kills += k
        if problems:
            failed += 1
            print(f"round {i} ({kind}): FAILED", *problems, sep="\n  ", flush=True)
        if (i + 1) % 10 == 0:
            print(f"{i + 1} rounds, {kills} kills, {failed} failed, "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    return failed, kills
