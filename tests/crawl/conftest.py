"""The crawl tests' store: one per test, ``durable=False`` as a crawl opens it."""

from __future__ import annotations

import pytest

import simstore


@pytest.fixture
def store(tmp_path):
    s = simstore.SimStore(tmp_path / "store", durable=False)
    yield s
    s.close()
