"""simstore inside datatrove pipelines: near-duplicate steps for FineWeb-style jobs.

Needs the ``datatrove`` extra (``pip install 'simstore[datatrove]'``); ``import
simstore`` never imports datatrove. Two ways, by how many machines run the job:

- one machine: :class:`NearDedupFilter`, one step after the reader; every task
  (process) shares one persistent store, so a document is kept once across them, and
  the next dump run through the same store is deduplicated against this one;
- many machines: :class:`NearDedupSignature`, :class:`NearDedupBuckets`,
  :class:`NearDedupCluster` and :class:`NearDedupClusterFilter`, four stages laid out
  as datatrove's own ``MinhashDedup*`` (files per rank and band), for its Local,
  Slurm and Ray executors.

See docs/datatrove.md.
"""

from __future__ import annotations

from ._deps import MissingDependencyError
from ._filter import NearDedupFilter
from ._stages import (
    NearDedupBuckets,
    NearDedupCluster,
    NearDedupClusterFilter,
    NearDedupSignature,
)

__all__ = [
    "MissingDependencyError",
    "NearDedupBuckets",
    "NearDedupCluster",
    "NearDedupClusterFilter",
    "NearDedupFilter",
    "NearDedupSignature",
]
