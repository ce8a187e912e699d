"""The corpus workflow: JSON lines, Parquet and text files in, kept documents out.

``api`` holds :func:`index_corpus`, :func:`dedup_corpus`, :func:`to_arrow` and
:func:`representative_clusters`; below it ``sources`` (finding files), ``records`` and
``readers`` (bounded-memory input), ``writers`` (kept documents, removed report),
``ingest`` (the streaming writer), ``twopass`` (keep=longest/FIELD), ``exact``,
``summary`` (what a run did), ``parquet`` and ``progress``.
"""

from __future__ import annotations

from .api import *  # noqa: F403 - the face: api.__all__ declares the public names
from .api import __all__  # noqa: F401
