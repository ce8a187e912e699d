"""Who may open a crawl store, and what reading one can do: stores created private, stores of
other users or writable by others refused unless allowed, and a planted payload that would
run code read as nothing but a dropped request (issue 55, items 2 and 9)."""

from __future__ import annotations

import os
import pickle
import stat
import sys

import pytest

scrapy = pytest.importorskip("scrapy")

import simstore  # noqa: E402
from simstore.crawl import Frontier, Push  # noqa: E402
from simstore.scrapy import NearDuplicateMiddleware, Scheduler  # noqa: E402
from simstore.scrapy._settings import refusal  # noqa: E402
from simstore.scrapy._stores import acquire, release  # noqa: E402
from tests.scrapy.crawlers import Spider, crawler_of  # noqa: E402


def modes(path):
    return stat.S_IMODE(os.stat(path).st_mode), {
        e.name: stat.S_IMODE(e.stat().st_mode) for e in os.scandir(path) if e.is_file()}


def test_a_store_the_scheduler_creates_is_private(tmp_path):
    """With umask 022 the new store's folder is 0700 and its files 0600 (requests hold
    cookies and headers); a stricter umask stays stricter."""
    old = os.umask(0o022)
    try:
        sched = Scheduler.from_crawler(crawler_of(tmp_path / "a"))
        sched.close("finished")
        folder, files = modes(tmp_path / "a")
        assert folder == 0o700 and files and set(files.values()) == {0o600}
        os.umask(0o077)
        mw = NearDuplicateMiddleware.from_crawler(crawler_of(tmp_path / "b"))
        mw.spider_closed()
        folder, files = modes(tmp_path / "b")
        assert folder == 0o700 and set(files.values()) == {0o600}
    finally:
        os.umask(old)


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "another user"])
def test_a_store_others_may_write_is_refused_unless_allowed(tmp_path, how):
    """A store writable by group or others, or owned by another user, refuses the crawl with
    the setting that allows it named; SIMSTORE_ALLOW_SHARED_STORE opens it."""
    path = tmp_path / "store"
    simstore.SimStore(path).close()
    if how == "another user":
        if os.geteuid() != 0:
            pytest.skip("chown needs root")
        os.chown(path, 65534, 65534)
    else:
        os.chmod(path, 0o775 if how == "group-writable" else 0o757)
    crawler = crawler_of(path)
    Scheduler.from_crawler(crawler)
    assert "SIMSTORE_ALLOW_SHARED_STORE" in str(refusal(crawler))
    with pytest.raises(simstore.StoreError, match="SIMSTORE_ALLOW_SHARED_STORE"):
        acquire(path, allow_shared=False)
    sched = Scheduler.from_crawler(crawler_of(path, SIMSTORE_ALLOW_SHARED_STORE=True))
    assert isinstance(sched, Scheduler)
    sched.close("finished")


def test_a_planted_pickle_runs_no_code(tmp_path, monkeypatch):
    """A request planted in the queue as a pickle whose loading would run code, or as JSON
    naming a request class in a module not imported (Scrapy's reader would import it), is
    dropped as undecodable; the code never runs, the crawl goes on with the next request."""
    marker = tmp_path / "pwned"
    (tmp_path / "planted_requests.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "store"
    with simstore.SimStore(path) as s:
        f = Frontier(s)
        f.push_many([Push(5, b"\x01" + pickle.dumps(Evil()), b"evil", True, "x"),
                     Push(4, b'\x02{"url":"http://x/c","_class":"planted_requests.R"}',
                          b"class", True, "x"),
                     Push(0, b"\x02" + b'{"url":"http://x/ok","callback":"parse"}', b"ok",
                          True, "x")])
    crawler = crawler_of(path)
    sched = Scheduler.from_crawler(crawler)
    sched.open(Spider.from_crawler(crawler))
    request = sched.next_request()
    assert request is not None and request.url == "http://x/ok"
    assert not marker.exists() and "planted_requests" not in sys.modules
    assert crawler.stats.get_value("simstore/frontier/undecodable") == 2
    sched.close("shutdown")


def test_acquire_shares_one_handle_and_the_last_release_closes(tmp_path):
    """Two acquires of one path in a process share a handle; it closes with the last release."""
    a = acquire(tmp_path / "s")
    b = acquire(tmp_path / "s")
    assert a is b
    release(a)
    assert not b.closed
    release(b)
    assert b.closed


def test_the_frontier_is_refused_on_a_store_that_an_os_crash_may_corrupt(tmp_path):
    """durable='unsafe' (LMDB's NOSYNC) may corrupt the store in an OS crash: a frontier
    refuses it, while durable=False (data flushed at commit) is accepted."""
    with simstore.SimStore(tmp_path / "u", durable="unsafe") as s:
        with pytest.raises(simstore.StoreError, match="unsafe"):
            Frontier(s)
    with simstore.SimStore(tmp_path / "n", durable=False) as s:
        assert len(Frontier(s)) == 0
