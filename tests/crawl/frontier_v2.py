"""The frozen frontier format 2's fixture: a small store written by a fixed sequence of
frontier operations on a fixed clock, so that every record kind of docs/crawl.md is in it
(queued, leased and downloaded requests; hosts ready, waiting, paused, throttled, given
up, with a robots.txt delay and one kept; revisits; a paused second frontier).

``python -m tests.crawl.frontier_v2 DIR`` wrote tests/data/frontier-v2 when the format was
frozen; tests/crawl/test_format_v2.py reads that store with today's code and holds what
today's code writes to the same bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lmdb

import simstore
from simstore.crawl import NO_ANSWER, Done, Frontier, Politeness, Popped, Push, Revisit
from simstore.crawl.payload import encode

from .clock import Clock

T0 = 1_800_000_000.0  # the fixed clock's start (seconds)
OWNER = "crawler-1/4242/f00d"
OTHER = "crawler-2/4243/beef"
ROBOTS = b"User-agent: *\nCrawl-delay: 2\n"


def rules() -> dict[str, Any]:
    """The frontiers' rules, the same for writing and reading."""
    return {"politeness": Politeness(delay=1.0, concurrency=2, max_failures=2),
            "revisit": Revisit(min=3600, max=86400, gone_after=2)}


def _push(host: str, n: int, priority: int = 0) -> Push:
    url = f"http://{host}/page/{n}"
    return Push(priority, encode({"url": url, "method": "GET", "meta": {"n": n}}),
                f"{host}/{n}".encode(), True, host)


def _fp(p: Popped) -> bytes:
    """The fingerprint _push gave the request p."""
    return f"{p.host}/{json.loads(p.payload[1:])['meta']['n']}".encode()


def write(path: Path) -> float:
    """Write the fixture store at path; the clock's time at the end (seconds)."""
    clock = Clock(T0)
    with simstore.SimStore(path, durable=False) as s:
        f = Frontier(s, clock=clock, **rules())
        f.push_many([_push(h, i, i % 2) for h in ("a.example", "b.example", "c.example",
                                                  "d.example") for i in range(4)])
        first = f.take(4, 600, OWNER).popped  # one of each host: a, b, c, d
        f.robots_read("a.example", 2.0, origin="http://a.example", status=200, body=ROBOTS)
        clock.t += 0.5
        f.take(0, 600, OWNER, downloaded=[first[2].key])  # c's download over, leased still
        f.ack([Done(p.key, 200, _fp(p), None, 7) for p in first[:2]], OWNER)  # revisits
        clock.t += 1.5
        second = f.take(2, 600, OTHER).popped
        f.ack([Done(second[0].key, 404, _fp(second[0]))], OTHER)  # gone once
        f.throttle("b.example", 30.0, 429)
        f.failed("d.example")
        clock.t += 3
        f.failed("d.example")  # the second episode: given up, its queue dropped
        f.pause("c.example")
        f.seen_add_many([b"kept/in/memory"])
        f.ack([Done(first[3].key, NO_ANSWER, _fp(first[3]))], OWNER)
        clock.t += 1
        f.push_many([_push("e.example", i) for i in range(2)])  # listed ready
        f.take(1, 600, OWNER)  # a's first: a waits on its delay again
        other = Frontier(s, "other", clock=clock, **rules())
        other.push_many([_push("e.example", 0)])
        other.pause()
    return clock.t


def dump(path: Path) -> dict[str, list[list[str]]]:
    """Every record of the store's ``crawl.`` databases, read with LMDB alone: database
    name -> [key hex, value hex] in key order."""
    env = lmdb.open(str(path), max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor() if bytes(k).startswith(b"crawl.")]
        out = {}
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin(db=db) as txn:
                out[name.decode()] = [[bytes(k).hex(), bytes(v).hex()] for k, v in txn.cursor()]
        return out
    finally:
        env.close()


def views(path: Path, now: float) -> dict[str, Any]:
    """What the store's frontiers say at ``now``, as JSON would carry it."""
    with simstore.SimStore(path, durable=False) as s:
        out = {}
        for name in ("default", "other"):
            f = Frontier(s, name, clock=Clock(now), **rules())
            out[name] = {"status": f.status(hosts=None), "counts": f.counts(),
                         "leases": [[k.hex(), d, o] for k, d, o in f.leases()]}
    return json.loads(json.dumps(out))


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    end = write(out / "store")
    info = {"clock": end, "records": dump(out / "store"), "views": views(out / "store", end)}
    (out / "frontier-v2.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
