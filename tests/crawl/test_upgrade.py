"""A store whose frontiers the last format-1 code wrote (queued and leased pickled requests
on several hosts, a crafted pickle, two frontier names) opens under simstore.crawl as
format 2: every plain request queued under its host, the crafted one dropped and counted,
no code run, the seen sets intact."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import simstore
from simstore.crawl import Frontier
from simstore.crawl.payload import decode

from ..testlib import lmdb_env

REPO = Path(__file__).resolve().parents[2]
V1_COMMIT = "d0a61eb"  # the last commit with simstore/store/frontier.py (format 1)

_WRITE_V1 = r"""
import importlib.util, json, os, pickle, sys
import simstore
spec = importlib.util.spec_from_file_location("simstore.store._frontier_v1", sys.argv[1])
v1 = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = v1
spec.loader.exec_module(v1)

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[3],))

out = {}
with simstore.SimStore(sys.argv[2], durable=False) as s:
    for name, n in (("default", 12), ("other", 4)):
        f = v1.Frontier(s, name)
        urls = [f"http://{'abc'[i % 3]}.example/{name}/{i}" for i in range(n)]
        for i, url in enumerate(urls):
            req = {"url": url, "headers": {b"Accept": [b"*/*"]}, "priority": i % 2}
            f.push(i % 2, b"\x01" + pickle.dumps(req, protocol=5), f"{name}-{i}".encode())
        if name == "default":
            f.push(5, b"\x01" + pickle.dumps({"url": "http://evil.example/", "x": Evil()}),
                   b"evil")
        leased = [f.pop(3600, "old-process").key.hex() for _ in range(3)]
        out[name] = {"urls": urls, "leased": leased, "seen": f.seen_count(), "len": len(f)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def v1_source(tmp_path_factory) -> Path:
    try:
        src = subprocess.run(["git", "show", f"{V1_COMMIT}:simstore/store/frontier.py"],
                             cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"the format-1 frontier ({V1_COMMIT}) is not in this checkout's history")
    path = tmp_path_factory.mktemp("v1") / "frontier_v1.py"
    path.write_bytes(src)
    return path


def _meta(store, key: bytes) -> bytes | None:
    env = lmdb_env(store)
    with env.begin() as txn:
        meta = env.open_db(b"crawl.meta", txn=txn, create=False)
        raw = txn.get(key, db=meta)
    return None if raw is None else bytes(raw)


def test_a_format_1_store_is_upgraded_in_place(tmp_path, v1_source):
    """Format-1 frontiers 'default' and 'other' come back as version 2: each plain request
    (the leased ones too) queued once under its URL's host, the crafted pickle dropped and
    counted in upgrade.dropped.default without running, the seen sets as they were."""
    path, marker = tmp_path / "store", tmp_path / "ran"
    done = subprocess.run([sys.executable, "-c", _WRITE_V1, str(v1_source), str(path),
                           str(marker)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    old = json.loads(done.stdout)
    assert old["default"]["len"] == 13 - 3 and not marker.exists()
    with simstore.SimStore(path, durable=False) as s:
        assert json.loads(_meta(s, b"version")) == {"frontier": 1}
        f = Frontier(s)
        assert json.loads(_meta(s, b"version")) == {"frontier": 2}
        assert struct.unpack(">Q", _meta(s, b"upgrade.dropped.default")) == (1,)
        assert _meta(s, b"upgrade.dropped.other") is None
        for name, frontier in (("default", f), ("other", Frontier(s, "other"))):
            want = old[name]["urls"]
            assert frontier.counts() == {"queued": len(want), "leased": 0,
                                         "seen": old[name]["seen"], "due": 0}
            assert all(frontier.seen_contains(f"{name}-{i}".encode()) for i in range(len(want)))
            per_host = {r["host"]: r["queued"] for r in frontier.hosts()}
            assert per_host == {h: sum(f"//{h}/" in u for u in want)
                                for h in ("a.example", "b.example", "c.example")}
            got = []
            while popped := frontier.take(100, 60, "new").popped:
                got += [(p.host, decode(p.payload)) for p in popped]
            assert sorted(u["url"] for _, u in got) == sorted(want)
            assert all(u["url"].split("/")[2] == h for h, u in got)
            assert all(u["headers"] == {b"Accept": [b"*/*"]} for _, u in got)
    assert not marker.exists()
