"""``powerloss``: OS crashes and power cuts replayed from a recorded trace of a store's writes.

For each durability mode, a child process runs a seeded workload on one store through the
public API (adds, ``add_if_new``, ``add_many``, removes, batches, ``merge_levels``,
``expire``, four threads adding at once, the crawl frontier's push, pop with acks, take
with children and acks, ack and release (not on an unsafe store: the frontier refuses
one), and ``dedup-corpus --store`` in a process of its own) with ``writes_shim.c``
preloaded: every write, flush and size change below the store's directory is logged,
and the child logs a marker before each call and after it returns (the call
acknowledged), with the state the store then holds (its documents and its frontier).

Crash states (:mod:`.crash_states`): at a random point of the trace, the data file as the
last flush left it plus some of the later writes (none; in order up to a point; a random
subset, whole; a random subset of their 512-byte sectors: torn pages). Each is written to
a directory, opened with simstore, checked by verify's whole check and read; it must be
the state after some call: at least the last call acknowledged before the last flush
(``durable=False``) or before the crash (``durable=True``), and no call not yet begun.
A state inside a call of several commits (``expire``, ``dedup-corpus``, four threads
adding at once: group commits) counts when its documents lie between the states before
and after it. Anything else is corrupt (verify's
problems, an open refused, the checker killed, or a state no order of commits makes) or
a lost acknowledged commit. ``--control`` runs ``durable='unsafe'`` too, which must show
at least one: a tool that cannot fail proves nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from simstore.crawl import Frontier, Push
from simstore.exceptions import SimstoreError
from simstore.store import SimStore
from simstore.store.verify import check_here

from .._util import checkout_env
from . import crash_states as cs
from .constants import CHURN_RUNS, set_constants
from .corpus_kills import write_corpus

MODES = {"full": True, "normal": False, "unsafe": "unsafe"}
MULTI = ("expire", "dedup-corpus", "threads")  # calls of several commits
CORPUS_DOCS = 300
STATE_TIMEOUT = 60.0  # seconds a checker may spend on one state


# --------------------------------------------------------------------------- the workload


def digest(store: SimStore, frontier: Frontier | None) -> dict[str, Any]:
    """What a state holds, read through the public API: its documents and its frontier."""
    items = sorted([repr(k), int(v)] for k, v in store.items())
    front = [0, [], 0] if frontier is None else [
        frontier.pending(), sorted([k.hex(), d, o] for k, d, o in frontier.leases()),
        frontier.seen_count()]
    h = hashlib.sha1(json.dumps([items, front]).encode()).hexdigest()
    return {"digest": h, "items": items, "front": front}


FRONTIER = ["push"] + ["push_many"] * 2 + ["pop"] * 3 + ["take"] * 2 + ["ack", "release"]


def _plan(rng: random.Random, ops: int, mode: str) -> list[str]:
    """The calls, in order; dedup-corpus once, halfway. No frontier calls on an unsafe
    store: the frontier refuses one."""
    kinds = ["add"] * 4 + ["add_if_new"] * 3 + ["add_many"] * 2 + ["remove"] * 2 + [
        "remove_many", "batch", "merge_levels", "expire", "threads"]
    if mode != "unsafe":
        kinds += FRONTIER
    plan = [rng.choice(kinds) for _ in range(ops)]
    plan[ops // 2] = "dedup-corpus"
    return plan


class _Workload:
    """The child's calls on one store, each between its markers."""

    def __init__(self, store: str, io: str, log: str, mode: str, seed: int) -> None:
        self.path, self.io, self.log = store, io, log
        self.rng = random.Random(seed)
        self.store = SimStore(store, durable=MODES[mode])
        self.frontier: Frontier | None = None
        self.held: list[bytes] = []  # keys this worker leased and has not acked
        self.now = time.time()

    def call(self, kind: str) -> None:
        """One call of the kind (a few calls in a batch for 'batch')."""
        rng, s = self.rng, self.store
        old = self.now - 10**6 if rng.random() < 0.3 else None
        if kind == "add":
            s.add(rng.randrange(400), rng.getrandbits(64), at=old)
        elif kind == "add_if_new":
            s.add_if_new(f"n{rng.randrange(10**9)}", rng.getrandbits(64))
        elif kind in ("add_many", "batch"):
            ids = [rng.randrange(400) for _ in range(rng.randint(5, 80))]
            fps = [rng.getrandbits(64) for _ in ids]
            if kind == "add_many":
                s.add_many(ids, fps, at=old)
            else:
                with s.batch():
                    for i, fp in zip(ids[:10], fps, strict=False):
                        s.add(i, fp)
        elif kind == "remove":
            s.remove(rng.randrange(400))
        elif kind == "remove_many":
            s.remove_many([rng.randrange(400) for _ in range(rng.randint(5, 40))])
        elif kind == "merge_levels":
            s.merge_levels()
        elif kind == "expire":
            s.expire(before=self.now - 10**5)
        elif kind == "dedup-corpus":
            self._dedup()
        elif kind == "threads":  # group commits: four threads adding at once
            docs = [[(f"t{rng.randrange(10**9)}", rng.getrandbits(64)) for _ in range(8)]
                    for _ in range(4)]
            workers = [threading.Thread(target=lambda b=b: [s.add(i, fp) for i, fp in b])
                       for b in docs]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
        else:
            self._frontier(kind)

    def _frontier(self, kind: str) -> None:
        rng, fr = self.rng, self.frontier
        assert fr is not None
        if kind == "push":
            fr.push(rng.randrange(3), rng.randbytes(rng.randrange(10, 300)), rng.randbytes(8))
        elif kind == "push_many":
            fr.push_many([(rng.randrange(3), rng.randbytes(40), rng.randbytes(8), True)
                          for _ in range(rng.randint(2, 20))])
        elif kind == "pop":
            acks = self.held[:1] if rng.random() < 0.5 else []
            got = fr.pop(rng.choice((0.001, 600.0)), "w", acks=acks)
            self.held = [k for k in self.held if k not in acks]
            if got is not None:
                self.held.append(got.key)
        elif kind == "take":  # leases, children and acks in one commit
            done, self.held = self.held[:3], self.held[3:]
            children = [Push(rng.randrange(3), rng.randbytes(60), rng.randbytes(8))
                        for _ in range(rng.randint(0, 5))]
            taken = fr.take(rng.randint(1, 4), 600.0, "w", push=children, done=done)
            self.held += [p.key for p in taken.popped]
        elif self.held:
            keys, self.held = self.held[:2], self.held[2:]
            (fr.ack if kind == "ack" else fr.release)(keys, "w")

    def _dedup(self) -> None:
        """dedup-corpus --store in a process of its own (its own environment, durable)."""
        src = os.path.join(self.io, "corpus.jsonl")
        cmd = [sys.executable, "-m", "simstore", "-q", "--progress-every", "0", "dedup-corpus",
               src, "-o", os.path.join(self.io, "kept.jsonl"), "--store", self.path,
               "--k", "3", "--chunk", "40"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=checkout_env())

    def run(self, plan: list[str], states: str) -> None:
        """Every call of the plan between its markers; each acknowledged state to states."""
        with open(states, "w", encoding="utf-8") as out:
            def acked(j: int, kind: str) -> None:
                cs.mark(self.log, f"A {j}")
                out.write(json.dumps({"op": j, "kind": kind,
                                      **digest(self.store, self.frontier)}) + "\n")
            acked(0, "start")
            cs.mark(self.log, "B 1")
            if self.store.durability != "unsafe":
                self.frontier = Frontier(self.store)
            acked(1, "frontier")
            for j, kind in enumerate(plan, start=2):
                cs.mark(self.log, f"B {j}")
                self.call(kind)
                acked(j, kind)
        self.store.close()


def worker(store: str, io: str, log: str, mode: str, seed: int, ops: int) -> None:
    """The traced child: the workload of the seed on the store (internal sub-command)."""
    set_constants(CHURN_RUNS)  # levels and merges within a few calls of a small store
    w = _Workload(store, io, log, mode, seed)
    w.run(_plan(random.Random(seed), ops, mode), os.path.join(io, "states.jsonl"))


# --------------------------------------------------------------------------- the checker


def checker() -> None:
    """Check the states named on stdin, one JSON line each on stdout (internal)."""
    for line in sys.stdin:
        path = line.strip()
        try:
            problems = check_here(path).problems
        except SimstoreError as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            out: dict[str, Any] = {"corrupt": problems[:3]}
        else:
            try:
                with SimStore(path, durable=False) as s:  # a frontier refuses "unsafe"
                    out = digest(s, Frontier(s))
            except SimstoreError as exc:
                out = {"corrupt": [f"{type(exc).__name__}: {exc}"]}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


class _Checker:
    """A checker process, started again when a state kills it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def check(self, path: str) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tools.stress", "powerloss-check"], text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=checkout_env())
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        line = _read_line(self.proc, STATE_TIMEOUT)
        if line is None:
            self.close()
            return {"corrupt": ["the checking process died or hung on this state"]}
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.communicate()
            self.proc = None


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """One line of proc's output; None when it ends or stays silent for timeout s."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return None
    line = proc.stdout.readline()
    return line or None


# --------------------------------------------------------------------------- the run


@dataclass
class Tally:
    """What the states of one mode showed."""

    mode: str
    states: int = 0
    corrupt: int = 0
    lost: int = 0
    writes: int = 0
    flushes: int = 0
    calls: int = 0
    by_strategy: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _judge(got: dict[str, Any], recs: list[dict[str, Any]], need: int, begun: int) -> str | None:
    """None when got is a state the calls can leave, else why not ('lost ...' or other)."""
    if "corrupt" in got:
        return "corrupt: " + "; ".join(got["corrupt"])[:400]
    for j in range(need, begun + 1):
        if recs[j]["digest"] == got["digest"]:
            return None
    for k in range(max(need, 1), begun + 1):
        if recs[k]["kind"] in MULTI and got["front"] == recs[k]["front"]:
            before = {tuple(x) for x in recs[k - 1]["items"]}
            after = {tuple(x) for x in recs[k]["items"]}
            if before & after <= {tuple(x) for x in got["items"]} <= before | after:
                return None
    older = [j for j in range(need) if recs[j]["digest"] == got["digest"]]
    if older:
        return f"lost acknowledged calls: the state after call {older[-1]}, needed {need}+"
    return f"corrupt: a state no order of the calls {need}..{begun} leaves"


def run_mode(mode: str, states: int, seed: int, ops: int, root: str, shim: str,
             keep: str | None) -> Tally:
    """Trace the workload under one mode, then check ``states`` crash states of it."""
    tally = Tally(mode)
    store, io = os.path.join(root, mode, "store"), os.path.join(root, mode, "io")
    os.makedirs(io)
    with SimStore(store, k=3, expected_size=5000) as s:  # the image the trace starts from
        s.add_many(range(1000, 1100), [random.Random(seed + i).getrandbits(64)
                                       for i in range(100)])
    data = os.path.join(store, "data.mdb")
    with open(data, "rb") as f:
        base = f.read()
    write_corpus(os.path.join(io, "corpus.jsonl"), CORPUS_DOCS, seed)
    log = os.path.join(io, "trace.log")
    env = {**checkout_env(), "LD_PRELOAD": shim, "SIMSTORE_POWERLOSS_DIR": store + os.sep,
           "SIMSTORE_POWERLOSS_LOG": log}
    subprocess.run([sys.executable, "-m", "tools.stress", "powerloss-worker", store, io, log,
                    mode, str(seed), str(ops)], check=True, env=env)
    events = cs.read(log)
    with open(os.path.join(io, "states.jsonl"), encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    tally.calls = len(recs) - 1
    tally.writes = sum(e.kind == cs.WRITE and e.path == data for e in events)
    tally.flushes = sum(e.kind == cs.SYNC and e.path == data for e in events)
    if not tally.writes:
        raise SystemExit("powerloss: the recorder saw no write to the store (LD_PRELOAD "
                         "ignored?); nothing can be checked")
    marks = [(i, e.data.decode().split()) for i, e in enumerate(events) if e.kind == cs.MARK]
    rng = random.Random(seed)
    replay = cs.Replayer(events, data, base)
    checker = _Checker()
    try:
        for n, crash in enumerate(sorted(rng.randrange(1, len(events) + 1)
                                         for _ in range(states))):
            strategy = rng.choice(cs.STRATEGIES)
            image = replay.image_at(crash, rng, strategy)
            flush = crash if mode == "full" else cs.last_flush(events, data, crash)
            need = max([int(m[1]) for i, m in marks if i < flush and m[0] == "A"], default=0)
            begun = max([int(m[1]) for i, m in marks if i < crash and m[0] == "B"], default=0)
            state = os.path.join(root, mode, f"state{n}")
            os.makedirs(state)
            with open(os.path.join(state, "data.mdb"), "wb") as f:
                f.write(image)
            why = _judge(checker.check(state), recs, need, begun)
            tally.states += 1
            tally.by_strategy[strategy] = tally.by_strategy.get(strategy, 0) + 1
            if why is not None:
                tally.lost += why.startswith("lost")
                tally.corrupt += not why.startswith("lost")
                tally.failures.append(f"state {n} (event {crash}/{len(events)}, {strategy}): "
                                      f"{why}")
                if keep:
                    dest = os.path.join(keep, f"{mode}-state{n}")
                    shutil.copytree(state, dest)
                    with open(os.path.join(dest, "why.txt"), "w", encoding="utf-8") as f:
                        f.write(tally.failures[-1] + "\n")
            shutil.rmtree(state)
    finally:
        checker.close()
    return tally


def run(modes: list[str], states: int, seed: int, ops: int, keep: str | None,
        control: bool) -> int:
    """Every mode (and the unsafe control); prints the tallies; the exit status."""
    root = cs.workdir()
    status = 0
    try:
        shim = cs.build_shim(root)
        if keep:
            os.makedirs(keep, exist_ok=True)
        for mode in [*modes, *(["unsafe"] if control and "unsafe" not in modes else [])]:
            t0 = time.monotonic()
            t = run_mode(mode, states, seed, ops, root, shim, keep)
            strategies = ", ".join(f"{k} {v}" for k, v in sorted(t.by_strategy.items()))
            print(f"durable={MODES[mode]!r} ({mode}): {t.states} states ({strategies}) of "
                  f"{t.calls} calls, {t.writes} writes, {t.flushes} flushes: {t.corrupt} "
                  f"corrupt, {t.lost} lost acknowledged commits "
                  f"[{time.monotonic() - t0:.0f} s]", flush=True)
            for line in t.failures[:10]:
                print("  " + line)
            is_control = mode == "unsafe" and control
            if is_control and not (t.corrupt or t.lost):
                print("  CONTROL FAILED: no corrupt or lost state in the unsafe mode; the "
                      "check proves nothing at this --states / --seed")
                status = 1
            elif not is_control and (t.corrupt or t.lost):
                status = 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return status
