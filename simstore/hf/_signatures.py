"""Signatures as ``Dataset`` columns: a batched ``Dataset.map`` function and its features.

:func:`sign` turns a batch's texts into three columns an Arrow table keeps as they are:
``fingerprint`` (uint64), ``sketch`` (the odd sketch, ``sketch_bits / 64`` uint64 words)
and ``bands`` (the LSH band keys, one uint64 each), both fixed-size lists. It is a plain
module-level function, so ``map(..., num_proc=N)`` pickles it by name; each call runs
one C pass over the batch (``threads`` 1 by default: ``num_proc`` sets the parallelism).
:func:`signatures_of` reads the columns back as :class:`simstore.Signatures`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import check_int
from ..text.fingerprinting import SIGNATURE_CONFIG, FingerprintConfig, check_config
from ..text.minhash import Signatures, signatures
from ._checks import check_batch, check_dataset
from ._deps import datasets

COLUMNS = ("fingerprint", "sketch", "bands")


def signature_features(config: FingerprintConfig = SIGNATURE_CONFIG) -> Any:
    """The ``datasets.Features`` of :func:`sign`'s columns (fixed-size uint64 lists)."""
    u64 = datasets.Value("uint64")
    return datasets.Features(
        {
            "fingerprint": u64,
            "sketch": datasets.List(u64, length=config.sketch_bits // 64),
            "bands": datasets.List(u64, length=config.bands),
        }
    )


def sign(
    batch: dict[str, list[Any]],
    column: str = "text",
    threads: int = 1,
    config: FingerprintConfig = SIGNATURE_CONFIG,
) -> dict[str, np.ndarray]:
    """The signature columns of a batch: ``ds.map(sign, batched=True, fn_kwargs=...)``."""
    texts = check_batch(batch, column)
    sigs = signatures(texts, config, threads=threads)
    return {"fingerprint": sigs.fingerprints, "sketch": sigs.sketches, "bands": sigs.bands}


def add_signatures(
    ds: Any,
    column: str = "text",
    *,
    num_proc: int | None = None,
    batch_size: int = 1000,
    config: FingerprintConfig = SIGNATURE_CONFIG,
) -> Any:
    """``ds`` with :func:`sign`'s three columns added (checked first: a missing, null or
    non-string text column is refused before any work)."""
    check_dataset(ds, column)
    check_config(config)
    check_int(batch_size, "batch_size", 1)
    if num_proc is not None:
        check_int(num_proc, "num_proc", 1)
    features = datasets.Features({**ds.features, **signature_features(config)})
    return ds.map(
        sign,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        features=features,
        fn_kwargs={"column": column, "config": config},
        desc="simstore signatures",
    )


def signatures_of(ds: Any, config: FingerprintConfig = SIGNATURE_CONFIG) -> Signatures:
    """The :class:`Signatures` held in ``ds``'s signature columns (in memory: ~220 bytes
    a row; the texts are not read)."""
    cols = ds.select_columns(list(COLUMNS)).with_format("numpy")
    n, words = len(ds), config.sketch_bits // 64
    fps = np.empty(n, dtype=np.uint64)
    sketches = np.empty((n, words), dtype=np.uint64)
    bands = np.empty((n, config.bands), dtype=np.uint64)
    at = 0
    for batch in cols.iter(batch_size=10_000):
        m = len(batch["fingerprint"])
        fps[at : at + m] = batch["fingerprint"]
        sketches[at : at + m] = np.asarray(batch["sketch"]).reshape(m, words)
        bands[at : at + m] = np.asarray(batch["bands"]).reshape(m, config.bands)
        at += m
    return Signatures(config, fps, sketches, bands)
