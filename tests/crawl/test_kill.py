"""Processes sharing a frontier (take, push children, acknowledge, one commit each) with one
killed by SIGKILL at random moments: every request is taken and acknowledged, none lost,
a request taken twice only when a killed process held it, and the store verifies."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

import simstore
from simstore.crawl import Frontier

TOTAL = 1365  # a 4-ary tree of requests: 0's children are 1-4, i's are 4i+1 .. 4i+4
LEASE = 3.0  # seconds: the killed process's leases come back after it

_WORKER = r"""
import sys, time, simstore
from simstore.crawl import Frontier, Politeness, Push
TOTAL, LEASE = int(sys.argv[2]), float(sys.argv[3])
me = sys.argv[4]
with simstore.SimStore(sys.argv[1], durable=False) as s:
    f = Frontier(s, politeness=Politeness(delay=0.02, concurrency=2, margin=0.0))
    held = []
    while True:
        kids = [Push(0, b"%d" % c, b"%d" % c, True, "h%d.example" % (c % 5))
                for p in held for c in range(4 * int(p.payload) + 1, 4 * int(p.payload) + 5)
                if c < TOTAL]
        held = f.take(2, LEASE, me, push=kids, done=[p.key for p in held]).popped
        for p in held:
            print("T", p.payload.decode(), flush=True)
        if not held:
            if f.pending() == 0:
                break
            time.sleep(0.01)
"""


def _worker(path: str, name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER, path, str(TOTAL), str(LEASE), name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_and_doubles_only_its_own(tmp_path):
    """Three workers, one killed with SIGKILL three times at random moments while it works
    (and another started): each of the tree's requests is taken, the frontier ends empty,
    a request taken twice was held by a killed worker, and verify() is clean."""
    path = str(tmp_path / "store")
    with simstore.SimStore(path, durable=False) as s:
        Frontier(s).push(0, b"0", b"0", host="h0.example")
    rng = random.Random(20261129)
    procs = {f"w{i}": _worker(path, f"w{i}") for i in range(3)}
    killed: list[str] = []
    takes: dict[str, list[str]] = defaultdict(list)  # request -> the workers that took it
    for round_ in range(3):
        name = "w0" if round_ == 0 else f"k{round_ - 1}"
        victim = procs[name]
        for _ in range(rng.randint(4, 40)):  # a moment while it works
            line = victim.stdout.readline()
            if line:
                takes[line.split()[1]].append(name)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        # the rest of its lines, through the same buffered reader: communicate() would
        # read the pipe past what readline() has buffered, and lose that
        for line in victim.stdout.read().splitlines():
            takes[line.split()[1]].append(name)
        killed.append(name)
        procs[f"k{round_}"] = _worker(path, f"k{round_}")
    deadline = time.time() + 120
    for name, p in procs.items():
        if name in killed:
            continue
        out, err = p.communicate(timeout=max(1, deadline - time.time()))
        assert p.returncode == 0, err
        for line in out.splitlines():
            takes[line.split()[1]].append(name)
    assert set(takes) == {str(i) for i in range(TOTAL)}
    for req, who in takes.items():  # twice: every taker but one was killed
        assert sum(w not in killed for w in who) <= 1, f"request {req} taken by {who}"
    assert any(len(who) > 1 for who in takes.values()), "no kill caught a lease: no proof"
    with simstore.SimStore(path, durable=False) as s:
        f = Frontier(s)
        assert f.counts() == {"queued": 0, "leased": 0, "seen": TOTAL, "due": 0}
        assert s.verify() == []
