"""The corpus workflow: JSON lines, Parquet and text files in, kept documents out.

``api`` holds :func:`index_corpus`, :func:`dedup_corpus`, :func:`to_arrow` and
:func:`representative_clusters`; below it ``sources`` (finding files), ``records`` and
``readers`` (bounded-memory input), ``writers`` (kept documents, removed report),
``ingest`` (the streaming writer), ``twopass`` (keep=longest/FIELD), ``exact``,
``summary`` (what a run did), ``parquet`` and ``progress``; ``stores`` opens the store a
run decides through (:func:`open_store`).

The engines other integrations run (``simstore.hf``, ``simstore.datatrove``, the CLI) are
re-exported here: :func:`open_store`, :class:`ExactPass` (the exact pass),
:func:`drop_if_new_and_empty` and :data:`DECOMPRESS_ERRORS`.
"""

from __future__ import annotations

from . import api
from .api import *  # noqa: F403 - the face: api.__all__ declares the public names
from .exact import ExactPass, Prepared
from .sources import DECOMPRESS_ERRORS
from .stores import OpenStore, drop_if_new_and_empty, open_store

__all__ = [*api.__all__, "DECOMPRESS_ERRORS", "ExactPass", "OpenStore", "Prepared",
           "drop_if_new_and_empty", "open_store"]
