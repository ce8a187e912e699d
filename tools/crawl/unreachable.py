"""A host that gives no answer: how often a crawl knocks, and how long it takes to end.

One live host of :mod:`tools.crawl.web` (127.0.0.2, ``pages`` pages) and ``dead`` URLs on
127.0.0.3, all start URLs of one ``scrapy runspider`` process of :mod:`tools.crawl.spider`:
plain Scrapy, then the simstore Scheduler (a new store each run). The dead host either
refuses every connection (``refuse``: nothing listens at its port) or never answers
(``silent``: a socket listens and never accepts, so each request ends at Scrapy's
``DOWNLOAD_TIMEOUT``). Figures per run: connections to the dead host
(Scrapy's ``downloader/exception_count``), live pages fetched, seconds to the process's
exit, and the Scheduler's ``simstore/hosts/given_up``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .._util import checkout_env
from .spider import command
from .web import Web


def closed_port(address: str) -> int:
    """A port on address where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


MODES = ("refuse", "silent")


def crawl(work: Path, scheduler: str, pages: int = 20, dead: int = 40,
          settings: dict[str, Any] | None = None, timeout: float = 600.0,
          mode: str = "refuse") -> dict[str, Any]:
    """One run (scheduler "plain" or "simstore") in work: its figures, its log's path."""
    if mode not in MODES:
        raise ValueError(f"{mode!r} is not a valid mode, must be one of {MODES}")
    opts: dict[str, Any] = {"LOG_LEVEL": "INFO", **(settings or {})}
    if scheduler == "simstore":
        opts |= {"SCHEDULER": "simstore.scrapy.Scheduler", "SIMSTORE_PATH": work / "store"}
    with ExitStack() as stack:
        if mode == "refuse":
            port = closed_port("127.0.0.3")
        else:
            silent = stack.enter_context(socket.socket())
            silent.bind(("127.0.0.3", 0))
            silent.listen(1024)  # connections complete in the kernel, never accepted
            port = silent.getsockname()[1]
        starts = [f"http://127.0.0.3:{port}/p/{i}" for i in range(dead)]
        web = stack.enter_context(Web(hosts=1, pages=pages, delay=0, limited=0))
        log = work / "log"
        t0 = time.monotonic()
        with open(log, "wb") as out:
            rc = subprocess.run(command(web.start_urls() + starts, str(work / "rec"),
                                        str(work / "stats"), opts),
                                cwd=work, env=checkout_env(), stdout=out,
                                stderr=subprocess.STDOUT, timeout=timeout).returncode
        seconds = time.monotonic() - t0
        live = {h.path for h in web.hits() if h.path != "/robots.txt"}
    stats = json.loads((work / "stats").read_text()) if (work / "stats").exists() else {}
    return {"scheduler": scheduler, "mode": mode, "exit": rc, "seconds": round(seconds, 2),
            "live_pages": len(live), "of_live": pages, "dead_urls": dead,
            "dead_connections": stats.get("downloader/exception_count", 0),
            "retries_given_up": stats.get("retry/max_reached", 0),
            "given_up": stats.get("simstore/hosts/given_up", 0),
            "no_answer": stats.get("simstore/hosts/no_answer", 0), "log": str(log)}


def run(pages: int = 20, dead: int = 40, settings: dict[str, Any] | None = None,
        mode: str = "refuse") -> list[dict[str, Any]]:
    """Plain Scrapy, then the Scheduler, on the same kind of web."""
    out = []
    for scheduler in ("plain", "simstore"):
        with tempfile.TemporaryDirectory(prefix="unreachable-") as d:
            r = crawl(Path(d), scheduler, pages, dead, settings, mode=mode)
            r.pop("log")
            out.append(r)
    return out
