"""The crawl tests' one helper: a ``scrapy runspider`` process of tools/crawl/spider.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import scrapy
from scrapy.utils.test import get_crawler

from tools.crawl import spider

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120


class Crawler:
    """One ``scrapy runspider`` process of tools/crawl/spider.py, known to the site by its agent."""

    def __init__(self, tmp: Path, agent: str, starts: list[str], store: Path | None,
                 **settings: object) -> None:
        self.agent = agent
        self.record = tmp / f"{agent}.jsonl"
        self.stats_file = tmp / f"{agent}.stats.json"
        opts: dict[str, object] = {"USER_AGENT": agent, **settings}
        if store is not None:
            opts |= {"SIMSTORE_PATH": store, "DOWNLOADER_MIDDLEWARES": spider.MIDDLEWARE}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        cmd = spider.command(starts, str(self.record), str(self.stats_file), opts)
        self.log = open(tmp / f"{agent}.log", "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def wait(self) -> int:
        try:
            return self.proc.wait(TIMEOUT)
        finally:
            self.log.close()

    def pages(self) -> list[dict]:
        """What reached the spider: {url, page} per response."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def stats(self) -> dict:
        return json.loads(self.stats_file.read_text())

    def fetches(self, srv) -> list:
        with srv.lock:
            return [f for f in srv.log if f.agent == self.agent]

    def ready(self) -> bool:
        """Whether the spider was built (it creates its record file then)."""
        return self.record.exists()

    def output(self) -> str:
        return (self.stats_file.parent / f"{self.agent}.log").read_text(errors="replace")




class Spider(scrapy.Spider):
    """A spider for components built without a crawl."""

    name = "t"

    def parse(self, response):
        pass


def crawler_of(path: Path, **settings: object):
    """A crawler (no crawl) whose SIMSTORE_PATH is path."""
    return get_crawler(Spider, settings_dict={"SIMSTORE_PATH": str(path), **settings})
