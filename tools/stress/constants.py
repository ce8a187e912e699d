"""The simstore constants a stress process shrinks, and how it sets them.

A stress worker sets these in its own process only, so that small stores reach the states a
large one reaches: new levels and spread merges within a few calls, huge-page growth from the
first write. ``tests/store/test_merge_levels.py`` reads :data:`CHURN_RUNS` too.
"""

from __future__ import annotations

import importlib

CHURN_RUNS = {"runs.tables": {"RECENT_MAX": 64, "RUN_ENTRIES": 128, "BULK_DOCS": 1024,
                              "BULK_RUN_ENTRIES": 512},
              "runs.merges": {"MERGE_STEP": 128, "MERGE_PER_DOC": 2, "MERGE_COMMIT_MAX": 256}}
# Every worker (and ops process) prepares its next pages in huge pages however small its
# store (the file extended and read in inside each write transaction: a kill lands there
# too, and other processes' transactions run beside it).
EVERY_WORKER = {"env.readahead": {"HUGE_GROWTH_FROM": 0}}


def set_constants(table: dict[str, dict[str, int]]) -> None:
    """Set constants of simstore.store's modules in this (worker) process."""
    for module, values in table.items():
        for name, value in values.items():
            setattr(importlib.import_module(f"simstore.store.{module}"), name, value)
