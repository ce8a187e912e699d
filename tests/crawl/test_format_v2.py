"""The frozen frontier format 2 (docs/crawl.md, "The frontier's databases, byte by byte").
tests/data/frontier-v2 holds a store written when it was frozen (tests/crawl/frontier_v2.py)
and every record of it: the store reads back as it was written and crawls on, the same
operations today write the same bytes, and the records decode as the docs say. A change
to the bytes that forgets a new frontier version and its upgrade fails here."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

import simstore
from simstore.crawl import Done, Frontier
from simstore.crawl.records import FRONTIER_VERSION

from . import frontier_v2
from .clock import Clock

DATA = Path(__file__).resolve().parents[1] / "data" / "frontier-v2"
INFO = json.loads((DATA / "frontier-v2.json").read_text())
END = INFO["clock"]

# The records as docs/crawl.md gives them, written here from the docs, not the code.
HOST = struct.Struct(">QQQIIIIIIIIBBB")  # next, blocked, fetched, delay, queued, in flight,
#                                          429s, 503s, in a row, crawl delay, failures,
#                                          flags, where, slot length
LEASE = struct.Struct(">QQBH")  # deadline, taken, flags, owner length
URL = struct.Struct(">QQQB8s")  # due, interval, digest, 404/410 in a row, host id
PAUSED, KNOWN, DOWN = 1, 2, 8


def _records(db: str) -> list[tuple[bytes, bytes]]:
    return [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in INFO["records"][db]]


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(DATA / "store", dst)
    return dst


def test_the_frontier_version_is_2():
    """Format 2 is frozen: a change to its bytes needs version 3 and an upgrade."""
    assert FRONTIER_VERSION == 2
    meta = dict(_records("crawl.meta"))
    assert json.loads(meta[b"version"]) == {"frontier": 2}


def test_todays_code_writes_the_frozen_bytes(tmp_path):
    """The fixture's operations, run today on the same clock, leave every record of every
    frontier database byte for byte as the frozen store holds them. A change of what the
    operations do that keeps the format fails here too: the frozen store must still read
    back and crawl on (the tests beside this one) before this test's expectation moves to
    records written anew, the frozen store itself kept as it is."""
    assert frontier_v2.write(tmp_path / "store") == END
    assert frontier_v2.dump(tmp_path / "store") == INFO["records"]


def test_the_frozen_store_reads_back(tmp_path):
    """Opened by today's code at the time it was written, the frozen store's frontiers say
    what they said then (counts, hosts, leases, owners), and opening writes nothing."""
    path = _copy(tmp_path)
    now = frontier_v2.views(path, END)
    assert _still_says(INFO["views"], now), now
    hosts = now["default"]["status"]["hosts"]
    assert hosts and not any(h["delay_learnt"] for h in hosts)  # a view added since
    assert frontier_v2.dump(path) == INFO["records"]


def _still_says(then: object, now: object) -> bool:
    """Whether a view today says all it said when frozen: the same values under the
    same keys (keys added to a view since may be there too)."""
    if isinstance(then, dict):
        return isinstance(now, dict) and all(k in now and _still_says(v, now[k])
                                             for k, v in then.items())
    if isinstance(then, list):
        return (isinstance(now, list) and len(then) == len(now)
                and all(_still_says(a, b) for a, b in zip(then, now, strict=True)))
    return then == now


def test_the_frozen_store_crawls_on(tmp_path):
    """Ten minutes later (every lease run out, the given-up host's block over), a crawl
    on the frozen store fetches each queued and each leased request of the hosts not
    paused once; resuming the paused host brings its requests; nothing is left."""
    queued = {json.loads(v[1:])["url"] for _, v in _records("crawl.default.queue")}
    leased = {json.loads(v[v.index(b"\x02{") + 1:])["url"]
              for k, v in _records("crawl.default.leases") if k[:1] == b"L"}
    clock = Clock(END + 700)
    fetched: list[str] = []
    with simstore.SimStore(_copy(tmp_path), durable=False) as s:
        f = Frontier(s, clock=clock, **frontier_v2.rules())

        def crawl() -> None:
            for _ in range(200):
                got = f.take(10, 60, "today")
                fetched.extend(json.loads(p.payload[1:])["url"] for p in got.popped)
                f.ack([Done(p.key, 200) for p in got.popped], "today")
                clock.t += 5
                if not f.pending():
                    break

        crawl()
        paused = {u for u in queued | leased if "//c.example/" in u}
        assert sorted(fetched) == sorted((queued | leased) - paused)
        f.resume("c.example")
        crawl()
        assert sorted(fetched) == sorted(queued | leased) and f.pending() == 0
        other = Frontier(s, "other", clock=clock, **frontier_v2.rules())
        assert other.status()["paused"] and other.pending() == 1


def test_the_records_are_what_the_docs_say():
    """Host records, owners' counts, the R/W index, leases, revisits and queue keys,
    decoded with the layouts written from docs/crawl.md, agree with the frontier's views."""
    rows = {r["host"]: r for r in INFO["views"]["default"]["status"]["hosts"]}
    hosts = _records("crawl.default.hosts")
    keys = {k for k, _ in hosts}
    ids = {}
    for key, value in hosts:
        if key[:1] != b"H" or len(key) != 9:
            continue
        (nxt, blocked, fetched, _delay, queued, inflight, n429, n503, _row, crawl_ms,
         failures, flags, where, n) = HOST.unpack_from(value)
        slot = value[HOST.size:HOST.size + n]
        name = value[HOST.size + n:].decode()
        assert key[1:] == hashlib.blake2b(name.encode(), digest_size=8).digest()
        ids[key[1:]] = name
        row = rows[name]
        assert (queued, inflight, fetched, n429, n503, failures) == (
            row["queued"], row["in_flight"], row["fetched"], row["answers_429"],
            row["answers_503"], row["failures"])
        assert nxt / 1000 == (row["next_allowed"] or 0)
        assert blocked / 1000 == (row["blocked_until"] or 0)
        assert bool(flags & PAUSED) == row["paused"] and bool(flags & DOWN) == row["down"]
        assert (crawl_ms / 1000 if flags & KNOWN else None) == row["crawl_delay"]
        assert where == {b"": 0, b"R": 1, b"W": 2}[slot[:1]] and (not slot or slot in keys)
    assert set(ids.values()) == set(rows)
    listed = {k[-8:]: k[:1] for k in keys if k[:1] in (b"R", b"W")}
    assert {ids[h]: kind for h, kind in listed.items()} == {
        "a.example": b"W", "b.example": b"W", "e.example": b"R"}  # c paused, d given up
    counts = {}
    for key, value in hosts:
        if key[:1] == b"H" and len(key) > 9:
            counts[(ids[key[1:9]], key[9:].decode())] = struct.unpack(">I", value)[0]
    leases = [(k, v) for k, v in _records("crawl.default.leases") if k[:1] == b"L"]
    dkeys = {k for k, _ in _records("crawl.default.leases") if k[:1] == b"D"}
    expect = {}
    for key, value in leases:
        deadline, taken, flags, n = LEASE.unpack_from(value)
        owner = value[LEASE.size:LEASE.size + n].decode()
        assert [key[1:].hex(), deadline, owner] in INFO["views"]["default"]["leases"]
        assert b"D" + deadline.to_bytes(8, "big") + key[1:] in dkeys and taken <= END * 1000
        if not flags & 1:  # its download not over: its owner holds a slot of the host
            who = (ids[key[1:9]], owner)
            expect[who] = expect.get(who, 0) + 1
    assert counts == expect and len(dkeys) == len(leases)
    urls = _records("crawl.default.urls")
    due = {k[9:] for k, _ in urls if k[:1] == b"T"}
    for key, value in (r for r in urls if r[0][:1] == b"U"):
        due_ms, interval, _digest, _gone, hid = URL.unpack_from(value)
        assert hid in ids and interval >= 3_600_000 and (key[1:] in due) == bool(due_ms)
    assert len(due) == INFO["views"]["default"]["status"]["due"]
    for key, _ in _records("crawl.default.queue"):
        assert len(key) == 24 and key[:8] in ids


@pytest.mark.parametrize("db", sorted(INFO["records"]))
def test_every_database_is_documented(db):
    """Each frontier database of the frozen store has its row in docs/crawl.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "crawl.md").read_text()
    name = db.replace(".default.", ".N.").replace(".other.", ".N.")
    assert f"`{name}`" in doc
