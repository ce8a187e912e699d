"""The crawl's one decision: is this page new? One store, one rule, one transaction a call.

A page is judged against the others stored: near one stored under ANOTHER id it is a
near-duplicate; near the one stored under its own id it is unchanged (a recrawl or a
resumed crawl: passed on, its time of storage refreshed); else it is stored, as new or,
under an id stored before, as changed. With ``expire`` only pages stored within that
many seconds count (older ones are passed over, and replaced where the id is the same).

Framework-free (no Scrapy here): the middleware and the pipeline both ask a
:class:`Gate`. The rule comes from the store unless the settings say otherwise:
a similarity store (the default for a new path) keeps a page unless a stored one
has estimated Jaccard >= ``threshold`` (0.9); a fingerprint-only store checks
Hamming distance <= its own k. ``k`` asks for a Hamming check on either kind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._validate import check_k
from ..exceptions import SimstoreValueError
from ..search.similar import DEFAULT_THRESHOLD, check_threshold
from ..store import DocId
from ._stores import acquire, release

NEW, CHANGED, UNCHANGED, NEAR_DUPLICATE = "new", "changed", "unchanged", "near_duplicate"
# request.meta: the page answered 304 but the store does not hold it (expired, removed):
# its next revisit asks for it whole, so that it is stored again
REFETCH_KEY = "simstore_refetch"


@dataclass(frozen=True)
class Verdict:
    """A page's fate: new or changed (stored now, ``new`` true), unchanged (near the
    version stored under its own id; stored anew where that version had expired), or a
    near-duplicate of ``kept``, a page stored under another id (how near: ``why``)."""

    new: bool
    kept: DocId | None = None
    why: str = ""
    status: str = NEW
    refetch: bool = False  # a 304 of a page not stored: fetch it whole next time

    @property
    def passes(self) -> bool:
        """Whether the page goes on (its links followed): all but near-duplicates."""
        return self.status != NEAR_DUPLICATE


class Gate:
    """``add_if_new`` on one store under one rule, for texts.

    A new path is created as a similarity store (a fingerprint store when ``k`` is
    given, with at least the default k). Processes opening one path share it:
    each call is one write transaction, so across processes a page is kept once.
    Components of one process share one handle (:mod:`simstore.scrapy._stores`).
    """

    def __init__(self, path: str | os.PathLike[str], *, k: int | None = None,
                 threshold: float | None = None, durable: bool = True,
                 expire: float | None = None, allow_shared: bool = True) -> None:
        if expire is not None and not (isinstance(expire, (int, float)) and expire > 0):
            raise SimstoreValueError(f"'expire' must be seconds > 0 (got {expire!r})")
        if k is not None and threshold is not None:
            raise SimstoreValueError("give a Jaccard threshold or a Hamming k, not both")
        kk = None if k is None else check_k(k)
        t = None if threshold is None else check_threshold(threshold)
        spath = os.fspath(path)
        store = acquire(spath, k=kk, durable=durable, allow_shared=allow_shared)
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
            release(store)
            raise
        self.store = store
        self._held = True
        self.k = kk
        self.threshold = (DEFAULT_THRESHOLD if t is None else t) if kk is None else None
        self.expire = expire

    @property
    def rule(self) -> str:
        """The rule in words, for logs."""
        if self.k is None:
            return f"estimated Jaccard >= {self.threshold}"
        return f"Hamming distance <= {self.k}"

    def check(self, doc_id: DocId, text: str) -> Verdict:
        """Store the text under doc_id unless a stored doc is near it (one transaction)."""
        return self.check_many([doc_id], [text])[0]

    def check_many(self, doc_ids: Sequence[DocId], texts: Sequence[str | None]
                   ) -> list[Verdict]:
        """:meth:`check` for each text in order, in ONE store call (one transaction, one
        commit): the near-duplicate test, the stores and the unchanged pages' new times
        (:meth:`SimStore.recrawl_many`). A None text is a page its server answered 304
        (Not Modified): unchanged, its time of storage refreshed (in a commit of their
        own); one the store does not hold is marked ``refetch``."""
        same = [i for i, t in enumerate(texts) if t is None]
        if not same:
            return self._check(doc_ids, texts)
        renewed = self.store.touch_many([doc_ids[i] for i in same])
        verdicts = {i: Verdict(False, doc_ids[i], "not modified", UNCHANGED) if held else
                    Verdict(False, None, "not modified, not stored", UNCHANGED, refetch=True)
                    for i, held in zip(same, renewed, strict=True)}
        checked = [i for i, t in enumerate(texts) if t is not None]
        if checked:
            got = self._check([doc_ids[i] for i in checked], [texts[i] for i in checked])
            verdicts.update(zip(checked, got, strict=True))
        return [verdicts[i] for i in range(len(doc_ids))]

    def _check(self, doc_ids: Sequence[DocId], texts: Sequence[Any]) -> list[Verdict]:
        s = self.store
        since = None if self.expire is None else time.time() - self.expire
        items = s.signatures(texts) if self.k is None or self._sign else \
            s.fingerprint_texts(texts)
        if self.k is None:
            rows = s.recrawl_many(doc_ids, items, threshold=self.threshold, since=since)
        else:
            rows = s.recrawl_many(doc_ids, items, self.k, since=since)
        return [self._verdict(d, *row) for d, row in zip(doc_ids, rows, strict=True)]

    def _verdict(self, doc_id: DocId, found: list[Any], known: bool, own: bool) -> Verdict:
        if not found:
            status = UNCHANGED if own else CHANGED if known else NEW
            return Verdict(True, status=status)
        if self.k is None:
            best = max(found, key=lambda m: m.jaccard)
            why = f"Jaccard {best.jaccard:.2f}"
        else:
            best = min(found, key=lambda m: m.distance)
            why = f"Hamming distance {best.distance}"
        if any(m.doc_id == doc_id for m in found):
            return Verdict(False, doc_id, why, UNCHANGED)
        return Verdict(False, best.doc_id, why, NEAR_DUPLICATE)

    def close(self) -> None:
        """Let go of the store: closed unless another component of this process holds it
        (idempotent)."""
        if self._held:
            self._held = False
            release(self.store)
