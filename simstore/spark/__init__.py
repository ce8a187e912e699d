"""The searches of simstore over Spark DataFrames (optional ``spark`` extra).

``api`` is the face's source; ``columns`` (fingerprints and signatures as columns),
``hamming`` and ``similar`` (the distributed searches), ``graph`` (connected components),
``store`` (import and export of a store) and ``common`` (sessions, checks) do the work.
"""

from __future__ import annotations

from .api import (
    Dedup,
    clusters,
    dedup,
    duplicate_groups,
    export_store,
    find_all,
    find_similar,
    fp_from_hex,
    fp_from_unsigned,
    fp_to_hex,
    fp_to_unsigned,
    from_long,
    import_store,
    local_session,
    to_long,
    with_fingerprints,
    with_signatures,
)

__all__ = [
    "Dedup",
    "clusters",
    "dedup",
    "duplicate_groups",
    "export_store",
    "find_all",
    "find_similar",
    "fp_from_hex",
    "fp_from_unsigned",
    "fp_to_hex",
    "fp_to_unsigned",
    "from_long",
    "import_store",
    "local_session",
    "to_long",
    "with_fingerprints",
    "with_signatures",
]
