"""The persistent store: :class:`SimStore`, an LMDB environment of docs and permutation tables.

``store`` is the face (validation and delegation); below it ``format`` (the on-disk
format, written down once), ``env`` (the LMDB environment: locks, fork, transactions,
growth), ``schema`` (binds a store's databases and its table engine), the run tables
(``runs``, ``runfile`` and their helpers), the operations
(``writes``, ``reads``, ``dedup_many``, ``inputs``) and ``maintenance`` with ``check/``.
Nothing here imports the corpus workflow, Spark or the CLI.
"""

from __future__ import annotations

from .store import *  # noqa: F403 - the face: store.__all__ declares the public names
from .store import __all__  # noqa: F401
