"""``simstore-cli crawl``: the frontier's view and its steering, read back through the
frontier itself."""

from __future__ import annotations

import json

import pytest

import simstore
from simstore.cli import main
from simstore.crawl import Frontier, Push


def _store(tmp_path):
    path = str(tmp_path / "store")
    with simstore.SimStore(path) as s:
        f = Frontier(s)
        f.push_many([Push(0, b"\x02{}", b"f%d" % i, True, f"h{i % 2}") for i in range(5)])
        f.take(1, 60, "proc/1")
    return path


def test_crawl_json_counts_queued_leased_and_hosts(tmp_path, capsys):
    """--json gives the counts, the lease owner and each host's queue, as the frontier has them."""
    path = _store(tmp_path)
    assert main(["--json", "crawl", path]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["queued"], st["leased"], st["seen"]) == (4, 1, 5)
    assert [o["owner"] for o in st["owners"]] == ["proc/1"]
    assert sorted((h["host"], h["queued"], h["in_flight"]) for h in st["hosts"]) == [
        ("h0", 2, 1), ("h1", 2, 0)]


def test_crawl_pause_resume_and_drop_host_steer_every_take(tmp_path, capsys):
    """A paused frontier hands nothing out; a paused host is skipped; a dropped host's queue
    is gone; resume lets takes go on."""
    path = _store(tmp_path)
    assert main(["crawl", path, "--pause"]) == 0
    assert "PAUSED" in capsys.readouterr().out
    with simstore.SimStore(path) as s:
        assert Frontier(s).take(5, 60, "p").popped == []
    assert main(["crawl", path, "--resume", "--pause", "h1", "--drop-host", "h0"]) == 0
    out = capsys.readouterr().out
    assert "dropped 2 queued" in out and "h1 (paused)" in out
    with simstore.SimStore(path) as s:
        f = Frontier(s)
        assert f.take(5, 60, "p").popped == []  # h0 dropped, h1 paused
        f.resume("h1")
        assert {p.host for p in f.take(5, 60, "p").popped} == {"h1"}


def test_crawl_on_a_missing_store_is_one_line(tmp_path, capsys):
    """No store at the path: exit 1 with one line, and none is created."""
    assert main(["crawl", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no store" in err[0]
    assert not (tmp_path / "nothing").exists()


def test_crawl_refuses_bad_arguments_by_their_flag(tmp_path, capsys):
    """--hosts 0 or x is a usage error naming --hosts (exit 2); a frontier name LMDB cannot
    hold is one line naming it (exit 1); the store's frontier is left as it was."""
    path = _store(tmp_path)
    for bad in ("0", "x"):
        with pytest.raises(SystemExit) as err:
            main(["crawl", path, "--hosts", bad])
        assert err.value.code == 2
        assert "argument --hosts" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(["crawl", path, "--frontier", "no spaces!"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "frontier name" in lines[0]
    with simstore.SimStore(path) as s:
        assert Frontier(s).counts()["queued"] == 4


def test_crawl_marks_a_delay_autothrottle_learnt(tmp_path, capsys):
    """A host whose delay AutoThrottle learnt shows it, learnt; the others do not."""
    from simstore.crawl import AutoThrottle, Done, Politeness

    path = _store(tmp_path)
    with simstore.SimStore(path) as s:
        f = Frontier(s, politeness=Politeness(auto=AutoThrottle(start=0.0)))
        got = f.take(1, 60, "proc/1").popped
        f.ack([Done(got[0].key, 200, latency=0.25)], "proc/1")
        learnt = got[0].host
    assert main(["crawl", path]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  h")}
    assert "0.25s (learnt)" in rows[learnt]
    assert "(learnt)" not in rows[{"h0": "h1", "h1": "h0"}[learnt]]
