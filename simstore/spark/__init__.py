"""The searches of simstore over Spark DataFrames (optional ``spark`` extra).

``api`` is the face's source; ``environment`` (pack the executors' environment, check
they import this simstore), ``columns`` (fingerprints and signatures as columns),
``hamming`` and ``similar`` (the distributed searches), ``graph`` (connected components),
``store`` (import and export of a store) and ``common`` (sessions, checks) do the work.
"""

from __future__ import annotations

from .api import *  # noqa: F403 - the face: api.__all__ declares the public names
from .api import __all__  # noqa: F401
