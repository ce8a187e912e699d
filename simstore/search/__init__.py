"""Search over arrays in memory: the table layout and the all-pairs searches.

Pure functions of numpy arrays (fingerprints, signatures); nothing here opens a store,
so the store, the corpus workflow and Spark tasks all run the same code. ``layout`` plans
Manku's block-permuted tables, ``hamming`` finds every pair within k bits (``find_all``,
``clusters``), ``similar`` every pair at estimated Jaccard >= t (``exact``: at exact
Jaccard >= t, given the texts; ``bandpairs``: the band-key candidates both use),
``greedy`` clusters that do not chain.
"""

from __future__ import annotations

from .hamming import Pairs, clusters, duplicate_groups, find_all
from .layout import Layout, Plan, plan
from .similar import SimilarPairs, find_similar, similar_clusters

__all__ = [
    "Layout",
    "Pairs",
    "Plan",
    "SimilarPairs",
    "clusters",
    "duplicate_groups",
    "find_all",
    "find_similar",
    "plan",
    "similar_clusters",
]
