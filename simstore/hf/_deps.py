"""datasets and pyarrow, the optional ``hf`` extra: imported here, or one line saying how."""

from __future__ import annotations

from typing import Any

from ..corpus.parquet import MissingDependencyError, pyarrow

INSTALL = "pip install 'simstore[hf]'"


def _load() -> tuple[Any, Any]:
    """(datasets, pyarrow); pyarrow first, so it gets simstore's memory pool."""
    try:
        pa = pyarrow()
        import datasets
    except ImportError:
        raise MissingDependencyError(f"simstore.hf needs datasets and pyarrow: {INSTALL}") from None
    return datasets, pa


datasets, pa = _load()

__all__ = ["INSTALL", "MissingDependencyError", "datasets", "pa"]
