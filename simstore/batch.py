"""Batch search over fingerprint arrays, at the path the README names.

The code is in :mod:`simstore.search.hamming`; this face keeps ``simstore.batch`` working.
"""

from __future__ import annotations

from .search.hamming import Pairs, clusters, duplicate_groups, find_all

__all__ = ["Pairs", "clusters", "duplicate_groups", "find_all"]
