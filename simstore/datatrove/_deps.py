"""datatrove, the optional ``datatrove`` extra: imported here, or one line saying how."""

from __future__ import annotations

from ..corpus.parquet import MissingDependencyError

INSTALL = "pip install 'simstore[datatrove]'"

try:
    from datatrove.data import Document, DocumentsPipeline
    from datatrove.io import DataFolderLike, get_datafolder
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.writers.disk_base import DiskWriter
    from datatrove.utils.batching import batched
    from datatrove.utils.typeshelper import StatHints
except ImportError:
    raise MissingDependencyError(f"simstore.datatrove needs datatrove: {INSTALL}") from None

__all__ = [
    "INSTALL",
    "DataFolderLike",
    "DiskWriter",
    "Document",
    "DocumentsPipeline",
    "MissingDependencyError",
    "PipelineStep",
    "StatHints",
    "batched",
    "get_datafolder",
]
