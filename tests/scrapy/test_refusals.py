"""Refused settings in real ``scrapy runspider`` processes: the crawl stops before any request
is taken, says why once, exits 1, and leaves a queued frontier as it found it (issue 55,
items 1, 6, 12 and 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

scrapy = pytest.importorskip("scrapy")

import simstore  # noqa: E402
from simstore.crawl import Frontier, Push  # noqa: E402
from simstore.crawl.payload import encode  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MW = '{"simstore.scrapy.NearDuplicateMiddleware": 575}'
PIPE = '{"simstore.scrapy.NearDuplicatePipeline": 300}'
SPIDER = '''
import json, scrapy
class S(scrapy.Spider):
    name = "s"
    start_urls = ["http://127.0.0.1:9/start"]
    def parse(self, response):
        yield {"url": response.url, "text": response.text}
    def closed(self, reason):
        st = dict(self.crawler.stats.get_stats())
        st["finish_reason"] = reason
        open(self.settings.get("STATS_OUT"), "w").write(json.dumps(st, default=str))
'''


def queued_store(path: Path) -> None:
    """A store whose frontier holds three requests (as the Scheduler writes them)."""
    with simstore.SimStore(path) as s:
        f = Frontier(s)
        f.push_many([Push(0, encode({"url": f"http://127.0.0.1:9/p{i}", "callback": "parse",
                                     "method": "GET", "headers": {}, "body": b"",
                                     "meta": {}, "priority": 0, "dont_filter": False}),
                          b"fp%d" % i, True, "127.0.0.1") for i in range(3)])


def frontier_state(path: Path) -> tuple[int, int, int]:
    with simstore.SimStore(path) as s:
        c = Frontier(s).counts()
        return c["queued"], c["leased"], c["seen"]


def run(tmp: Path, settings: dict[str, str]) -> tuple[int, str, dict]:
    spider = tmp / "spider.py"
    spider.write_text(SPIDER)
    stats = tmp / "stats.json"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(spider), "-s",
           "TELNETCONSOLE_ENABLED=False", "-s", f"STATS_OUT={stats}", "-s", "LOG_LEVEL=INFO"]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr, json.loads(stats.read_text())


CASES = [
    ({"SIMSTORE_MODE": "Log", "DOWNLOADER_MIDDLEWARES": MW}, "SIMSTORE_MODE"),
    ({"SIMSTORE_K": "-1", "DOWNLOADER_MIDDLEWARES": MW}, "k"),
    ({"SIMSTORE_THRESHOLD": "nan", "ITEM_PIPELINES": PIPE}, "SIMSTORE_THRESHOLD"),
    ({"SIMSTORE_DURABLE": "maybe"}, "SIMSTORE_DURABLE"),
    ({"SIMSTORE_LEASE": "1e300"}, "SIMSTORE_LEASE"),
    ({"SIMSTORE_LEASE": "1e-9"}, "SIMSTORE_LEASE"),
    ({"SIMSTORE_REVISIT": "sometimes"}, "SIMSTORE_REVISIT"),
    ({"AUTOTHROTTLE_ENABLED": "True", "AUTOTHROTTLE_TARGET_CONCURRENCY": "0"},
     "AUTOTHROTTLE_TARGET_CONCURRENCY"),
    ({"DOWNLOAD_SLOTS": '{"x": {"concurrency": 0}}'}, "DOWNLOAD_SLOTS"),
    ({"DOWNLOADER_MIDDLEWARES": MW, "ITEM_PIPELINES": PIPE}, "keep one of them"),
]


@pytest.mark.slow
@pytest.mark.parametrize("settings,named", CASES, ids=[c[1] + "-" + "-".join(c[0]) for c in CASES])
def test_a_refused_crawl_stops_before_any_take(tmp_path, settings, named):
    """Every refused setting, with the Scheduler on a queued frontier: one ERROR line naming
    it, finish reason simstore_refused, exit code 1, no request taken or fetched."""
    store = tmp_path / "store"
    queued_store(store)
    before = frontier_state(store)
    code, out, st = run(tmp_path, {"SIMSTORE_PATH": str(store),
                                   "SCHEDULER": "simstore.scrapy.Scheduler", **settings})
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert code == 1, out[-2000:]
    assert len(errors) == 1 and named in errors[0] and "simstore" in errors[0], errors
    assert "Traceback" not in out
    assert st["finish_reason"] == "simstore_refused"
    assert st.get("downloader/request_count", 0) == 0
    assert frontier_state(store) == before


@pytest.mark.slow
def test_a_refused_middleware_without_the_scheduler_fetches_nothing(tmp_path):
    """Scrapy's own scheduler with a refused middleware: closed at start, exit 1, no fetch,
    no store created."""
    code, out, st = run(tmp_path, {"SIMSTORE_PATH": str(tmp_path / "store"),
                                   "SIMSTORE_MODE": "DROP", "DOWNLOADER_MIDDLEWARES": MW})
    assert code == 1 and st["finish_reason"] == "simstore_refused"
    assert st.get("downloader/request_count", 0) == 0
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
def test_an_age_beyond_the_epoch_means_forever(tmp_path):
    """SIMSTORE_EXPIRE=3000w is longer than the time since 1970: nothing expires, and the
    crawl is not refused (the start URL fails to connect, then the crawl finishes)."""
    code, out, st = run(tmp_path, {"SIMSTORE_PATH": str(tmp_path / "store"),
                                   "SIMSTORE_EXPIRE": "3000w",
                                   "SCHEDULER": "simstore.scrapy.Scheduler",
                                   "DOWNLOADER_MIDDLEWARES": MW, "RETRY_ENABLED": "False"})
    assert code == 0 and st["finish_reason"] == "finished", out[-2000:]
    assert st.get("simstore/skipped/store_error", 0) == 0
