"""simstore stress runs: kill -9 crash rounds and multi-process random operations.

Run ``python tools/stress.py --help``; every sub-command has its own ``--help``.
Everything is seeded: the same ``--seed`` replays the same operations (the
kill instants depend on the machine's speed, not only on the seed).

* ``kills``: start a writer process doing one kind of operation (single adds,
  ``add_many``, removes, ``rebuild``, ``compact``, or ``churn``: add_many and
  remove_many in turn with the run tables' constants shrunk, so that kills land
  inside new levels and merges spread over writes; ``sigchurn``: the same on a
  similarity store, whose band levels merge and fold too) in a loop, SIGKILL it at a random
  instant, reopen the store and check that ``verify()`` passes, every call
  acknowledged before the kill is there, the call in flight happened
  completely or not at all, and no reader slot of the dead process is left.
* ``ops``: several processes run seeded random operations (add, add_many,
  remove, remove_many, add_if_new, query, batch) on one store, each on its own
  id namespace plus a shared one; afterwards each namespace must equal the
  process's own model and ``verify()`` must pass, with warnings as errors.
* ``damage``: a seeded fuzzer of damaged files: copies of a sound Hamming
  store and a sound similarity store get random pages, partial pages, single
  bytes, meta pages overwritten or the file truncated; a fresh process per
  case opens the copy, runs ``verify()``, then queries. The figure: no case
  where open() or verify() killed the process, hung or let a non-simstore
  exception out (queries crashing on damage are counted apart). See
  ``tools/_damage.py`` and docs/errors.md.
* ``corpus-kills``: ``dedup-corpus --store`` (keep first, longest) and ``index
  --threshold`` killed with SIGKILL at random instants, run again until one run
  finishes: its kept output must equal an uninterrupted run's, line for line
  (the store's ids for ``index``). See ``tools/_corpus_kills.py``.

The suite (tests/store/test_crash.py) runs a short, bounded version of ``kills``
through :func:`crash_round`; ``--kills 1000`` is the long run.

The writer child (``worker``, not for direct use) logs to an ack file: a line
``B <n> ...`` (flushed) before call n, and ``A <n>`` (flushed and fsynced)
after it returned.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

import simstore
from simstore.store import SimStore
from simstore.store.check.lmdbfile import read_metas
from simstore.store.check.pages import FileCheck

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _corpus_kills  # noqa: E402  (sibling helpers, found through the path set above)
import _damage  # noqa: E402

OPS = ("add", "add_many", "remove", "rebuild", "compact", "churn", "sigchurn", "merge",
       "expire")
ADDS = ("add", "add_many", "merge")  # ops whose calls add docs (checked by _check_adds)
MERGE_ADD_MAX = 600  # new docs per add_many of a merge worker, between its merge_levels
CHURNS = ("churn", "sigchurn")
PRELOAD = 3000
# expire: call n (even) adds a batch stored at EXPIRE_T0 + n, call n (odd) expires what was
# stored before EXPIRE_T0 + n - EXPIRE_LAG, in commits of a random size (the preload is
# stored now: never expired)
EXPIRE_T0, EXPIRE_LAG = 1_000_000_000, 9
REBUILD_KS = (2, 3, 4)
# The churn worker's run-table constants (simstore.store.runs.tables and .merges): a new level
# every few calls, merges spread over several writes, levels of many runs (longer ones in
# a level of 1,024 docs or more), and every add_many's merging paid partly in commits of
# their own (MERGE_COMMIT_MAX: a kill lands between them too).
CHURN_RUNS = {"runs.tables": {"RECENT_MAX": 64, "RUN_ENTRIES": 128, "BULK_DOCS": 1024,
                              "BULK_RUN_ENTRIES": 512},
              "runs.merges": {"MERGE_STEP": 128, "MERGE_PER_DOC": 2, "MERGE_COMMIT_MAX": 256}}
# Every worker (and ops process) prepares its next pages in huge pages however small its
# store (the file extended and read in inside each write transaction: a kill lands there
# too, and other processes' transactions run beside it).
EVERY_WORKER = {"env.readahead": {"HUGE_GROWTH_FROM": 0}}
CHURN_ADD_MAX = 300  # new docs per add_many call
CHURN_REMOVE_MAX = 200  # acknowledged docs per remove_many call


# --------------------------------------------------------------------------- data


def batch_fps(seed: int, n: int, size: int) -> np.ndarray:
    """The fingerprints of call n of a seeded worker (the checker derives them again)."""
    rng = np.random.default_rng([seed, n + 1])
    return rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True)


def batch_sigs(seed: int, n: int, size: int) -> simstore.Signatures:
    """The signatures of call n of a seeded sigchurn worker: batch_fps's fingerprints,
    random sketches and band keys (no two docs share a band key: each doc's similar()
    is itself alone)."""
    cfg = simstore.SIGNATURE_CONFIG
    # a generator per array: a doc's signature is the same whatever the call's size
    return simstore.Signatures(cfg, batch_fps(seed, n, size), *(
        np.random.default_rng([seed, n + 1, j]).integers(0, 2**64 - 1, shape, dtype=np.uint64,
                                                         endpoint=True)
        for j, shape in enumerate(((size, cfg.sketch_bits // 64), (size, cfg.bands)))))


def batch_ids(n: int, size: int) -> list[str]:
    return [f"b{n}.{i}" for i in range(size)]


def preload(path: str, seed: int, sig: bool = False) -> None:
    """The store a remove/rebuild/compact/churn worker starts from: PRELOAD int ids (a
    similarity store of batch_sigs for sigchurn)."""
    cfg = simstore.SIGNATURE_CONFIG if sig else None
    with SimStore(path, k=3, config=cfg, expected_size=10_000) as s:
        s.add_many(range(PRELOAD), (batch_sigs if sig else batch_fps)(seed, -1, PRELOAD))


# --------------------------------------------------------------------------- worker


class _Ack:
    """The worker's log: intent lines flushed, acknowledgements fsynced."""

    def __init__(self, path: str) -> None:
        self.fh = open(path, "a", encoding="ascii")  # noqa: SIM115 - lives until killed

    def intent(self, n: int, text: str = "") -> None:
        self.fh.write(f"B {n} {text}\n")
        self.fh.flush()

    def done(self, n: int) -> None:
        self.fh.write(f"A {n}\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())


def _set_constants(table: dict[str, dict[str, int]]) -> None:
    """Set constants of simstore.store's modules in this (worker) process."""
    for module, values in table.items():
        for name, value in values.items():
            setattr(importlib.import_module(f"simstore.store.{module}"), name, value)


def run_worker(store: str, op: str, ack_path: str, seed: int) -> None:
    """Do `op` in a loop until killed, logging every call to ack_path."""
    rng = random.Random(seed)
    ack = _Ack(ack_path)
    # churn's small run-table constants: a merge worker's store has levels to merge
    _set_constants({**EVERY_WORKER, **(CHURN_RUNS if op in (*CHURNS, "merge") else {})})
    s = SimStore(store)
    print("ready", flush=True)
    order = list(range(PRELOAD))
    rng.shuffle(order)
    added: list[str] = []  # churn: acknowledged ids not yet removed
    for n in range(10**9):
        if op in CHURNS:
            _churn_call(s, ack, rng, n, seed, added, op == "sigchurn")
            continue
        if op == "expire":
            _expire_call(s, ack, rng, n, seed)
            continue
        if op == "add":
            fp = int(batch_fps(seed, n, 1)[0])
            ack.intent(n, "1")
            s.add(f"b{n}.0", fp)
        elif op == "add_many":
            size = rng.randint(1, 3000)
            ack.intent(n, str(size))
            s.add_many(batch_ids(n, size), batch_fps(seed, n, size))
        elif op == "merge":  # adds, then every level merged (a kill lands in either)
            size = rng.randint(1, MERGE_ADD_MAX)
            ack.intent(n, str(size))
            s.add_many(batch_ids(n, size), batch_fps(seed, n, size))
            ack.done(n)
            s.merge_levels()
            continue
        elif op == "remove":
            size = rng.randint(1, 40)
            ids, order = order[:size], order[size:]
            if not ids:
                time.sleep(1)
                continue
            ack.intent(n, ",".join(map(str, ids)))
            if len(ids) == 1:
                s.remove(ids[0])
            else:
                s.remove_many(ids)
        elif op == "rebuild":
            k = REBUILD_KS[n % len(REBUILD_KS)]
            ack.intent(n, str(k))
            s.rebuild(k=k)
        elif op == "compact":
            dest = f"{store}.copy{n}"
            ack.intent(n, dest)
            s.compact(dest)
        else:
            raise SystemExit(f"unknown op {op!r}")
        ack.done(n)


def _expire_call(s: SimStore, ack: _Ack, rng: random.Random, n: int, seed: int) -> None:
    """Expire call n: add_many stored at EXPIRE_T0 + n (even n), expire (odd n)."""
    if n % 2 == 0:
        size = rng.randint(1, 400)
        ack.intent(n, f"add {size}")
        s.add_many(batch_ids(n, size), batch_fps(seed, n, size), at=EXPIRE_T0 + n)
    else:
        ack.intent(n, "expire")
        s.expire(before=EXPIRE_T0 + n - EXPIRE_LAG, batch=rng.randint(1, 300))
    ack.done(n)


def _check_expire(s: SimStore, intents: dict[int, str], done: set[int], seed: int
                  ) -> list[str]:
    """Each add call's docs: gone if an acknowledged expire's cutoff passed their time,
    all or none if the call was in flight, any of them if only an expire in flight may
    have reached them; else all present."""
    problems = []
    cutoffs = {n: EXPIRE_T0 + n - EXPIRE_LAG for n, t in intents.items() if t == "expire"}
    done_cut = max((c for n, c in cutoffs.items() if n in done), default=0)
    any_cut = max(cutoffs.values(), default=0)
    expected = 0
    for n, text in intents.items():
        if text == "expire":
            continue
        size = int(text.split()[1])
        fps = batch_fps(seed, n, size).tolist()
        got = [s.get(i) for i in batch_ids(n, size)]
        present = sum(g is not None for g in got)
        at = EXPIRE_T0 + n
        if any(g is not None and g != f for g, f in zip(got, fps, strict=True)):
            problems.append(f"add {n}: wrong fingerprints stored")
        if at < done_cut and present:
            problems.append(f"add {n}: {present} docs outlived an acknowledged expire")
        elif at >= any_cut and n in done and present != size:
            problems.append(f"acknowledged add {n}: {size - present} of {size} docs lost")
        elif at >= any_cut and n not in done and present not in (0, size):
            problems.append(f"add {n} in flight: {present} of {size} docs stored (torn)")
        expected += present
    if len(s) != expected + PRELOAD:
        problems.append(f"store holds {len(s)} docs, the calls account for "
                        f"{expected + PRELOAD}")
    return problems


def _churn_call(s: SimStore, ack: _Ack, rng: random.Random, n: int, seed: int,
                added: list[str], sig: bool) -> None:
    """Churn call n: add_many of new ids (even n), remove_many of acknowledged ones (odd n)."""
    if n % 2 == 0 or not added:
        size = rng.randint(1, CHURN_ADD_MAX)
        ack.intent(n, f"add {size}")
        s.add_many(batch_ids(n, size), (batch_sigs if sig else batch_fps)(seed, n, size))
        ack.done(n)
        added += batch_ids(n, size)
        return
    rng.shuffle(added)
    cut = len(added) - rng.randint(1, min(CHURN_REMOVE_MAX, len(added)))
    ids = added[cut:]
    del added[cut:]
    ack.intent(n, "rm " + ",".join(ids))
    s.remove_many(ids)
    ack.done(n)


# --------------------------------------------------------------------------- checking


def read_ack(path: str) -> tuple[dict[int, str], set[int]]:
    """(intent text per call, acknowledged calls); a torn last line is ignored."""
    intents: dict[int, str] = {}
    done: set[int] = set()
    with open(path, encoding="ascii") as fh:
        lines = fh.read().split("\n")
    for line in lines[:-1]:  # the part after the last newline may be torn
        kind, n, *rest = line.split(" ", 2)
        if kind == "B":
            intents[int(n)] = rest[0] if rest else ""
        else:
            done.add(int(n))
    return intents, done


def _reader_pids(store: SimStore) -> set[int]:
    """Pids holding reader slots, from LMDB's reader table."""
    pids = set()
    for line in store._env.readers().splitlines()[1:]:
        parts = line.split()
        if parts and parts[0].isdigit():
            pids.add(int(parts[0]))
    return pids


def check_store(path: str, op: str, ack_path: str, seed: int, dead_pid: int) -> list[str]:
    """Everything that is wrong with a store after its writer was killed."""
    problems: list[str] = []
    intents, done = read_ack(ack_path)
    pending = sorted(set(intents) - done)
    if len(pending) > 1:
        problems.append(f"more than one call in flight: {pending}")
    with SimStore(path) as s:
        problems += [f"verify: {p}" for p in s.verify()]
        if dead_pid in _reader_pids(s):
            problems.append(f"reader slot of killed pid {dead_pid} still held")
        if op in ADDS:
            problems += _check_adds(s, intents, done, seed)
        elif op == "remove":
            problems += _check_removes(s, intents, done, seed)
        elif op == "rebuild":
            problems += _check_rebuilds(s, intents, done, seed)
        elif op == "compact":
            problems += _check_compacts(s, intents, done, path)
        elif op in CHURNS:
            problems += _check_churn(s, intents, done, seed, op == "sigchurn")
        elif op == "expire":
            problems += _check_expire(s, intents, done, seed)
    return problems


def _check_adds(s: SimStore, intents: dict[int, str], done: set[int], seed: int) -> list[str]:
    problems = []
    expected = 0
    for n, text in intents.items():
        size = int(text)
        fps = batch_fps(seed, n, size).tolist()
        got = [s.get(i) for i in batch_ids(n, size)]
        present = sum(g is not None for g in got)
        if n in done and got != fps:
            problems.append(f"acknowledged call {n}: {size - present} of {size} docs lost")
        elif n not in done and present not in (0, size):
            problems.append(f"call {n} in flight: {present} of {size} docs stored (torn)")
        elif present and got != fps:
            problems.append(f"call {n}: wrong fingerprints stored")
        expected += present
    if len(s) != expected:
        problems.append(f"store holds {len(s)} docs, the calls account for {expected}")
    return problems


def _check_removes(s: SimStore, intents: dict[int, str], done: set[int], seed: int) -> list[str]:
    problems = []
    fps = batch_fps(seed, -1, PRELOAD).tolist()
    gone: set[int] = set()
    for n, text in intents.items():
        ids = [int(x) for x in text.split(",")]
        absent = [i for i in ids if i not in s]
        if n in done and len(absent) != len(ids):
            problems.append(f"acknowledged remove {n}: {len(ids) - len(absent)} ids still stored")
        elif n not in done and len(absent) not in (0, len(ids)):
            problems.append(f"remove {n} in flight: {len(absent)} of {len(ids)} gone (torn)")
        gone.update(absent)
    for i in range(PRELOAD):
        if i not in gone and s.get(i) != fps[i]:
            problems.append(f"id {i} was never removed but is missing or changed")
            break
    return problems


def _check_churn(s: SimStore, intents: dict[int, str], done: set[int], seed: int,
                 sig: bool) -> list[str]:
    """Acknowledged adds there (unless removed since), removals gone, the call in flight
    whole or absent, the preloaded docs untouched; queries find exactly the docs near them
    (and in a similarity store, similar() finds each sampled doc alone, a removed one
    nowhere)."""
    problems = []
    removed: list[tuple[int, int]] = []  # (call, index in it) of docs removed
    want = dict(zip(range(PRELOAD), batch_fps(seed, -1, PRELOAD).tolist(), strict=True))
    for n in sorted(intents):
        kind, _, arg = intents[n].partition(" ")
        if kind == "add":
            ids, fps = batch_ids(n, int(arg)), batch_fps(seed, n, int(arg)).tolist()
            got = [s.get(i) for i in ids]
            present = sum(g is not None for g in got)
            if n not in done and present not in (0, len(ids)):
                problems.append(f"add_many {n} in flight: {present} of {len(ids)} docs (torn)")
            if n in done or present:
                want.update(zip(ids, fps, strict=True))
        else:
            ids = arg.split(",")
            gone = sum(i not in s for i in ids)
            if n in done and gone != len(ids):
                problems.append(f"acknowledged remove_many {n}: {len(ids) - gone} ids still stored")
            elif n not in done and gone not in (0, len(ids)):
                problems.append(f"remove_many {n} in flight: {gone} of {len(ids)} gone (torn)")
            if n in done or gone:
                for i in ids:
                    want.pop(i, None)
                    removed.append(_call_of(i))
    stored = dict(s.items())
    if stored != want:
        lost = sum(i not in stored for i in want)
        extra = sum(i not in want for i in stored)
        wrong = sum(stored[i] != f for i, f in want.items() if i in stored)
        problems.append(f"store and acknowledged calls disagree: {lost} docs missing, "
                        f"{extra} unexpected, {wrong} with another fingerprint")
    sample = random.Random(seed).sample(sorted(stored, key=str), min(30, len(stored)))
    for i in sample:
        fp = stored[i]
        near = {d for d, f in stored.items() if (f ^ fp).bit_count() <= s.k}
        got = {m.doc_id for m in s.query(fp)}
        if got != near:
            problems.append(f"query({fp:#x}): {len(got)} docs found, {len(near)} within k={s.k}")
            break
    if sig:
        problems += _check_similar(s, stored, removed, seed)
    return problems


def _call_of(doc_id: str | int) -> tuple[int, int]:
    """(call, index in it) of a churn doc id: 'b<n>.<i>', or a preloaded int (call -1)."""
    if isinstance(doc_id, int):
        return -1, doc_id
    n, i = doc_id[1:].split(".")
    return int(n), int(i)


def _check_similar(s: SimStore, stored: dict, removed: list[tuple[int, int]],
                   seed: int) -> list[str]:
    """similar(its signature) of sampled stored docs is the doc alone, of removed ones empty."""
    rng = random.Random(seed)
    docs = [(d, True) for d in rng.sample(sorted(stored, key=str), min(30, len(stored)))]
    docs += [(d, False) for d in rng.sample(removed, min(30, len(removed)))]
    for d, kept in docs:
        n, i = _call_of(d) if kept else d
        sig = batch_sigs(seed, n, i + 1)[i]
        got = [m.doc_id for m in s.similar(sig, 0.9)]
        if got != ([d] if kept else []):
            return [f"similar() of {'stored' if kept else 'removed'} doc {d}: {got[:3]}"]
    return []


def _check_rebuilds(s: SimStore, intents: dict[int, str], done: set[int], seed: int) -> list[str]:
    problems = []
    if done:
        allowed = {int(intents[max(done)])} | {int(intents[n]) for n in intents if n not in done}
    else:
        allowed = {3} | {int(t) for t in intents.values()}
    if s.k not in allowed:
        problems.append(f"store has k={s.k}; expected one of {sorted(allowed)}")
    ids, fps = s.snapshot()
    if ids != list(range(PRELOAD)) or fps.tolist() != batch_fps(seed, -1, PRELOAD).tolist():
        problems.append("rebuild changed the stored docs")
    return problems


def _check_compacts(s: SimStore, intents: dict[int, str], done: set[int], path: str) -> list[str]:
    problems = []
    want = s.snapshot()
    # verify() (a checking process each) on the last two copies; the structural
    # check of the file (in this process, no LMDB walk) and the contents on all.
    last = sorted(intents)[-2:]
    for n, dest in intents.items():
        if not os.path.exists(dest):
            if n in done:
                problems.append(f"acknowledged compact {n}: {dest} missing")
            continue
        try:
            with SimStore(dest, readonly=True) as c:
                bad = c.verify() if n in last else _structure(dest)
                got = c.snapshot()
        except Exception as exc:  # noqa: BLE001 - reported as a problem
            problems.append(f"compact {n}: {dest} does not open: {exc!r}")
            continue
        if bad or got[0] != want[0] or got[1].tolist() != want[1].tolist():
            problems.append(f"compact {n}: {dest} is not a complete copy ({bad[:2]})")
    return problems


def _structure(path: str) -> list[str]:
    """The structural check of a store's newest snapshot (simstore.store.check.pages)."""
    data = os.path.join(path, "data.mdb")
    txnid = max(m.txnid for m in read_metas(data, 4096) if m is not None)
    return FileCheck(data, 4096).run(txnid) or []


# --------------------------------------------------------------------------- crash rounds


def _worker_cmd(store: str, op: str, ack: str, seed: int) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "worker", store, op, ack, str(seed)]


def crash_round(root: str, op: str, seed: int, max_delay: float = 0.5) -> list[str]:
    """One kill -9 round in a fresh directory under root; returns the problems found."""
    rng = random.Random(seed)
    base = os.path.join(root, f"r{seed}-{op}")
    os.makedirs(base)
    store = os.path.join(base, "s")
    ack = os.path.join(base, "ack")
    if op not in ADDS:
        preload(store, seed, op == "sigchurn")
    proc = subprocess.Popen(
        _worker_cmd(store, op, ack, seed), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != b"ready":
            proc.kill()
            return [f"worker did not start: {proc.communicate()[1].decode()[-500:]}"]
        time.sleep(rng.uniform(0.0, max_delay))
        early = proc.poll()
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if early is not None:
        return [f"worker exited by itself ({early}): {err.decode()[-500:]}"]
    return check_store(store, op, ack, seed, proc.pid)


# --------------------------------------------------------------------------- random ops


@dataclass
class _Model:
    """A process's own view of its namespace: id -> fp."""

    docs: dict[str, int] = field(default_factory=dict)


def _near(rng: random.Random, fp: int, d: int) -> int:
    for b in rng.sample(range(64), d):
        fp ^= 1 << b
    return fp


def random_ops(path: str, proc_no: int, n_ops: int, seed: int) -> dict[str, int]:
    """Seeded random operations on ids 'p<proc_no>.*' (plus shared add_if_new ids).

    Returns this process's model of its own namespace; raises AssertionError on
    a wrong answer about it (only this process writes there).
    """
    rng = random.Random(seed * 1000 + proc_no)
    model = _Model()
    _set_constants(EVERY_WORKER)
    with SimStore(path) as s:
        for _ in range(n_ops):
            r = rng.random()
            ns = f"p{proc_no}."
            if r < 0.3:
                i, fp = f"{ns}{rng.randrange(200)}", rng.getrandbits(64)
                s.add(i, fp)
                model.docs[i] = fp
            elif r < 0.4:
                ids = [f"{ns}{rng.randrange(200)}" for _ in range(rng.randint(1, 50))]
                fps = [rng.getrandbits(64) for _ in ids]
                s.add_many(ids, fps)
                model.docs.update(zip(ids, fps, strict=False))
            elif r < 0.55:
                i = f"{ns}{rng.randrange(200)}"
                assert s.remove(i) == (i in model.docs), f"remove({i!r}) disagrees"
                model.docs.pop(i, None)
            elif r < 0.6:
                ids = [f"{ns}{rng.randrange(200)}" for _ in range(rng.randint(1, 20))]
                s.remove_many(ids)
                for i in ids:
                    model.docs.pop(i, None)
            elif r < 0.7:
                # shared: several processes race to store near-duplicates of one base
                base = random.Random(rng.randrange(20)).getrandbits(64)
                s.add_if_new(f"shared.{proc_no}.{rng.randrange(10**6)}", _near(rng, base, 1))
            elif r < 0.9 and model.docs:
                i = rng.choice(sorted(model.docs))
                got = {m.doc_id for m in s.query(model.docs[i], 0)}
                assert i in got, f"query misses {i!r}"
                assert s.get(i) == model.docs[i], f"get({i!r}) disagrees"
            else:
                with s.batch():
                    for _ in range(rng.randint(1, 10)):
                        i, fp = f"{ns}{rng.randrange(200)}", rng.getrandbits(64)
                        s.add(i, fp)
                        model.docs[i] = fp
    return model.docs


def _ops_child(args: tuple[str, int, int, int]) -> dict[str, int]:
    return random_ops(*args)


def run_ops(path: str, procs: int, n_ops: int, seed: int, method: str = "spawn") -> list[str]:
    """`procs` processes of random_ops on one store; then every namespace and verify()."""
    SimStore(path, k=3, expected_size=10_000).close()
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(procs) as pool:
        models = pool.map(_ops_child, [(path, p, n_ops, seed) for p in range(procs)])
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with SimStore(path) as s:
            problems += s.verify()
            for p, model in enumerate(models):
                stored = {d: fp for d, fp in s.items() if str(d).startswith(f"p{p}.")}
                if stored != model:
                    problems.append(f"process {p}: store and model disagree on its ids")
            shared = [fp for d, fp in s.items() if str(d).startswith("shared.")]
            for i, a in enumerate(shared):
                if any((a ^ b).bit_count() <= s.k for b in shared[:i]):
                    problems.append(f"add_if_new stored two near-duplicates (fp {a:#x})")
    return problems


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stress.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("kills", help="SIGKILL writers at random instants; check every reopen")
    p.add_argument("--kills", type=int, default=100, help="number of kill rounds (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {OPS}")
    p.add_argument("--max-delay", type=float, default=0.8,
                   help="kill within this many seconds of the worker starting (default 0.8)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the stores of failed rounds")
    p = sub.add_parser("ops", help="random operations in several processes, then verify()")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--ops-per-proc", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-method", choices=("spawn", "fork", "forkserver"), default="spawn")
    p.add_argument("--dir", default=None)
    p = sub.add_parser("damage", help="damage copies of sound stores; open, verify, query each")
    p.add_argument("--cases", type=int, default=500, help="number of damage cases (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--docs", type=int, default=3000,
                   help="docs of the Hamming store (the similarity store gets half)")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    p.add_argument("--json", default=None, help="write the figures and every case here")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true",
                   help="keep the damaged copies of failed and silently changed cases")
    p = sub.add_parser("corpus-kills",
                       help="kill dedup-corpus --store / index runs; the rerun must finish")
    p.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    p.add_argument("--kinds", default=",".join(_corpus_kills.KINDS),
                   help=f"comma-separated subset of {_corpus_kills.KINDS}")
    p.add_argument("--docs", type=int, default=6000, help="documents per corpus (default 6000)")
    p.add_argument("--max-kills", type=int, default=3, help="kills per round, 1 to this")
    p.add_argument("--max-delay", type=float, default=1.5,
                   help="kill within this many seconds of a run starting (default 1.5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p = sub.add_parser("worker", help="internal: the writer child that kills starts")
    p.add_argument("store")
    p.add_argument("op", choices=OPS)
    p.add_argument("ack")
    p.add_argument("seed", type=int)
    return parser


def _cmd_kills(args: argparse.Namespace) -> int:
    ops = args.ops.split(",")
    bad_ops = set(ops) - set(OPS)
    if bad_ops:
        print(f"stress.py kills: unknown op(s) {sorted(bad_ops)}; choose from {OPS}",
              file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="simstore-kills-")
    failures = 0
    t0 = time.monotonic()
    for i in range(args.kills):
        op = ops[i % len(ops)]
        seed = args.seed * 1_000_003 + i
        problems = crash_round(root, op, seed, args.max_delay)
        base = os.path.join(root, f"r{seed}-{op}")
        if problems:
            failures += 1
            print(f"round {i} ({op}, seed {seed}): FAILED", *problems, sep="\n  ", flush=True)
        if not problems or not args.keep:
            shutil.rmtree(base, ignore_errors=True)
            for name in os.listdir(root):
                if name.startswith(f"r{seed}-"):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        if (i + 1) % 50 == 0:
            print(f"{i + 1} kills, {failures} failed, {time.monotonic() - t0:.0f} s", flush=True)
    print(f"{args.kills} kills, {failures} failed rounds")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


def _cmd_ops(args: argparse.Namespace) -> int:
    root = args.dir or tempfile.mkdtemp(prefix="simstore-ops-")
    failures = 0
    for r in range(args.rounds):
        path = os.path.join(root, f"ops{r}")
        problems = run_ops(path, args.procs, args.ops_per_proc, args.seed + r, args.start_method)
        print(f"round {r}: {'ok' if not problems else 'FAILED'}", *problems[:20], sep="\n  ")
        failures += bool(problems)
        shutil.rmtree(path, ignore_errors=True)
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


def _cmd_damage(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    root = args.dir or tempfile.mkdtemp(prefix="simstore-damage-")
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    cases = _damage.run(args.cases, args.seed, root, docs=args.docs, jobs=args.jobs,
                        keep=args.keep, progress=True)
    words = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python tools/stress.py", *words])
    figures = _damage.report(cases, args.json, command)
    print(f"{len(cases)} cases in {time.monotonic() - t0:.0f} s, "
          f"{figures['failures']} failures (open or verify died, hung or raised a "
          f"non-simstore error); queries: {figures['queries']}")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if figures["failures"] else 0


def _cmd_corpus_kills(args: argparse.Namespace) -> int:
    kinds = tuple(args.kinds.split(","))
    if set(kinds) - set(_corpus_kills.KINDS):
        print(f"stress.py corpus-kills: choose kinds from {_corpus_kills.KINDS}",
              file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="simstore-corpus-kills-")
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    failed, kills = _corpus_kills.run(args.rounds, args.seed, root, args.docs, args.max_kills,
                                      args.max_delay, kinds)
    print(f"{args.rounds} rounds, {kills} kills mid-run, {failed} failed rounds, "
          f"{time.monotonic() - t0:.0f} s")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stress tool; returns the exit code (0: every check passed)."""
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        run_worker(args.store, args.op, args.ack, args.seed)
        return 0
    if args.command == "kills":
        return _cmd_kills(args)
    if args.command == "damage":
        return _cmd_damage(args, argv)
    if args.command == "corpus-kills":
        return _cmd_corpus_kills(args)
    return _cmd_ops(args)


if __name__ == "__main__":
    sys.exit(main())
