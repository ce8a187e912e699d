"""The persistent store: :class:`SimStore`, an LMDB environment of docs and permutation tables.

``store`` is the face (validation and delegation); below it ``format`` (the bytes of
docs records and metadata), ``env/`` (the LMDB environment: locks, fork, transactions,
growth), ``schema`` (binds a store's databases and its table engine), ``runs/`` (the
run-table engine), the operations (``writes``, ``reads``, ``dedup_many``, ``inputs``),
``maintenance`` and ``verify``, and ``check/`` (the file read as plain bytes).
Nothing here imports the corpus workflow, Spark or the CLI.
"""

from __future__ import annotations

from .store import *  # noqa: F403 - the face: store.__all__ declares the public names
from .store import __all__  # noqa: F401
