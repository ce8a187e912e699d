"""``kills``: a writer process SIGKILLed at a random instant, then its store checked.

The writer child (``python -m tools.stress worker``, not for direct use) does one kind of
operation in a loop and logs to an ack file: a line ``B <n> ...`` (flushed) before call n,
and ``A <n>`` (flushed and fsynced) after it returned. After the kill, :func:`check_store`
reopens the store: ``verify()`` passes, every acknowledged call is there, the call in flight
happened completely or not at all, and no reader slot of the dead process is left.
tests/store/test_crash.py runs short rounds through :func:`crash_round`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

import simstore
from simstore.store import SimStore
from simstore.store.check.lmdbfile import read_metas
from simstore.store.check.pages import FileCheck

from .._util import checkout_env
from .constants import CHURN_RUNS, EVERY_WORKER, set_constants

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


def run_worker(store: str, op: str, ack_path: str, seed: int) -> None:
    """Do `op` in a loop until killed, logging every call to ack_path."""
    rng = random.Random(seed)
    ack = _Ack(ack_path)
    # churn's small run-table constants: a merge worker's store has levels to merge
    set_constants({**EVERY_WORKER, **(CHURN_RUNS if op in (*CHURNS, "merge") else {})})
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


def reader_pids(store: SimStore) -> set[int]:
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
        if dead_pid in reader_pids(s):
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
    return [sys.executable, "-m", "tools.stress", "worker", store, op, ack, str(seed)]


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
        _worker_cmd(store, op, ack, seed), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=checkout_env(),
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
