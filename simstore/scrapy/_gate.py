"""The crawl's one decision: is this page new? One store, one rule, one transaction per page.

Framework-free (no Scrapy here): the middleware and the pipeline both ask a
:class:`Gate`. The rule comes from the store unless the settings say otherwise:
a similarity store (the default for a new path) keeps a page unless a stored one
has estimated Jaccard >= ``threshold`` (0.9); a fingerprint-only store checks
Hamming distance <= its own k. ``k`` asks for a Hamming check on either kind.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._validate import check_k
from ..exceptions import SimstoreValueError
from ..search.similar import DEFAULT_THRESHOLD, check_threshold
from ..store import DEFAULT_K, DocId, SimStore
from ..text.fingerprinting import DEFAULT_CONFIG, SIGNATURE_CONFIG


@dataclass(frozen=True)
class Verdict:
    """A page's fate: new (stored now), or a near-duplicate of ``kept`` (how near: ``why``)."""

    new: bool
    kept: DocId | None = None
    why: str = ""


def _is_store(path: str) -> bool:
    """Whether path holds something already (a store, or files SimStore will refuse)."""
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except (FileNotFoundError, NotADirectoryError):
        return os.path.lexists(path) and not os.path.isdir(path)


class Gate:
    """``add_if_new`` on one store under one rule, for texts.

    A new path is created as a similarity store (a fingerprint store when ``k`` is
    given, with at least the default k). Processes opening one path share it:
    each call is one write transaction, so across processes a page is kept once.
    """

    def __init__(self, path: str | os.PathLike[str], *, k: int | None = None,
                 threshold: float | None = None, durable: bool = True) -> None:
        if k is not None and threshold is not None:
            raise SimstoreValueError("give a Jaccard threshold or a Hamming k, not both")
        kk = None if k is None else check_k(k)
        t = None if threshold is None else check_threshold(threshold)
        spath = os.fspath(path)
        if _is_store(spath):
            store = SimStore(spath, durable=durable)
        else:
            cfg = DEFAULT_CONFIG if kk is not None else SIGNATURE_CONFIG
            store = SimStore(spath, durable=durable, config=cfg,
                             k=None if kk is None else max(kk, DEFAULT_K))
        try:
            self._sign = store.config.has_signature
            if t is not None and not self._sign:
                raise SimstoreValueError(
                    f"store {spath!r} keeps fingerprints only: a Jaccard threshold needs a "
                    "similarity store (give k for Hamming, or a new path)")
            if kk is None and not self._sign:
                kk = store.k
            if kk is not None and kk > store.k:
                raise SimstoreValueError(
                    f"store {spath!r} serves k <= {store.k}; k = {kk} would scan the whole "
                    f"store per page (simstore-cli rebuild PATH --k {kk} first)")
        except BaseException:
            store.close()
            raise
        self.store = store
        self.k = kk
        self.threshold = (DEFAULT_THRESHOLD if t is None else t) if kk is None else None

    @property
    def rule(self) -> str:
        """The rule in words, for logs."""
        if self.k is None:
            return f"estimated Jaccard >= {self.threshold}"
        return f"Hamming distance <= {self.k}"

    def check(self, doc_id: DocId, text: str) -> Verdict:
        """Store the text under doc_id unless a stored doc is near it (one transaction)."""
        return self.check_many([doc_id], [text])[0]

    def check_many(self, doc_ids: Sequence[DocId], texts: Sequence[str]) -> list[Verdict]:
        """:meth:`check` for each text in order, in ONE transaction (one commit)."""
        s = self.store
        if self.k is None:
            found = s.add_if_new_many(doc_ids, s.signatures(texts), threshold=self.threshold)
        else:
            items = s.signatures(texts) if self._sign else s.fingerprint_texts(texts)
            found = s.add_if_new_many(doc_ids, items, self.k)
        return [self._verdict(m) for m in found]

    def _verdict(self, found: list[Any]) -> Verdict:
        if not found:
            return Verdict(True)
        if self.k is None:
            best = max(found, key=lambda m: m.jaccard)
            return Verdict(False, best.doc_id, f"Jaccard {best.jaccard:.2f}")
        best = min(found, key=lambda m: m.distance)
        return Verdict(False, best.doc_id, f"Hamming distance {best.distance}")

    def close(self) -> None:
        """Close the store (idempotent)."""
        self.store.close()
