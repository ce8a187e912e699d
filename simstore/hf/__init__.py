"""simstore over Hugging Face ``datasets``: signature columns and dedup of a ``Dataset``.

Needs the ``hf`` extra (``pip install 'simstore[hf]'``); ``import simstore`` never
imports ``datasets``. In one screen::

    import simstore.hf

    ds = ds.map(simstore.hf.sign, batched=True, num_proc=4,
                features=..., fn_kwargs={"column": "text"})   # or add_signatures(ds)
    kept, removed = simstore.hf.dedup(ds, column="text", threshold=0.9)
    kept, removed = simstore.hf.dedup(dump2, store="dumps.simstore", id_column="id")

:func:`dedup` decides as ``simstore-cli dedup-corpus`` does on the same rows, reading
the dataset as Arrow batches (memory-mapped; never ``to_pandas``); ``removed`` names
each row's kept representative and the Jaccard to it. See docs/hf.md.
"""

from __future__ import annotations

from ._dedup import REMOVED_COLUMNS, dedup
from ._deps import MissingDependencyError
from ._signatures import COLUMNS, add_signatures, sign, signature_features, signatures_of

__all__ = [
    "COLUMNS",
    "REMOVED_COLUMNS",
    "MissingDependencyError",
    "add_signatures",
    "dedup",
    "sign",
    "signature_features",
    "signatures_of",
]
