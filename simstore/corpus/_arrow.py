"""pyarrow, the optional ``parquet`` extra, imported on first use with a lean memory pool."""

from __future__ import annotations

import os
import sys
from typing import Any

from ..exceptions import SimstoreError


class MissingDependencyError(SimstoreError, ImportError):
    """An optional dependency (pyarrow, for Parquet and Arrow) is not installed."""


_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def pyarrow() -> Any:
    """The pyarrow module, or MissingDependencyError saying how to install it.

    Imported here first, pyarrow takes jemalloc as its memory pool on Linux (where its
    wheels include it) unless ARROW_DEFAULT_MEMORY_POOL names one: the default mimalloc
    keeps more of what it frees, so dedup-corpus of Parquet peaks higher with it
    (docs/bench/journal.md, "Corpus"). The variable is read when
    the pool is first used, and only then: set for the import alone, then restored.
    """
    choose = ("pyarrow" not in sys.modules and sys.platform.startswith("linux")
              and not os.environ.get(_POOL_VARIABLE))
    if choose:
        os.environ[_POOL_VARIABLE] = "jemalloc"
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401 - loads pa.parquet

        if choose:
            pa.default_memory_pool()  # Arrow reads the variable now, once
    except ImportError:
        raise MissingDependencyError(
            "Parquet and Arrow need pyarrow: pip install 'simstore[parquet]'"
        ) from None
    finally:
        if choose:
            del os.environ[_POOL_VARIABLE]
    return pa
