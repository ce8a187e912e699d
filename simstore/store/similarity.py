"""The similarity half of SimStore's face: signatures, similar() and similar_pairs().

A mixin of :class:`simstore.SimStore`, kept apart so each module has one job;
the work is done by :mod:`simstore.store.reads` and :mod:`simstore.similar`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..exceptions import NotSimilarityStoreError, SimstoreTypeError
from ..search.similar import DEFAULT_THRESHOLD, check_threshold, similar_pairs_arrays
from ..text.fingerprinting import FingerprintConfig
from ..text.jaccard import ShingleSets
from ..text.minhash import Signature, Signatures, signature, signatures
from . import format as F, inputs as _inputs, reads as _reads, shingles as _shingles
from .format import DocId, decode_id
from .reads import SimilarMatch

if TYPE_CHECKING:
    from .env import Env
    from .schema import Handles


class SimilarityMethods:
    """Similarity calls of a store created with a signature config."""

    _h: Handles
    _env: Env
    _config: FingerprintConfig
    path: Any

    def signature(self, text: str) -> Signature:
        """The signature of a text under this store's recorded config (a similarity store)."""
        return signature(text, self._similarity_config())

    def signatures(self, texts: Iterable[str]) -> Signatures:
        """Signatures of many texts under this store's recorded config."""
        return signatures(texts, self._similarity_config())

    def _similarity_config(self) -> FingerprintConfig:
        if self._h.bands is None:
            raise NotSimilarityStoreError(
                f"store {self.path!r} holds fingerprints only ({self._config.scheme}); "
                "similarity needs a store created with a signature config, e.g. "
                "SimStore(path, config=simstore.SIGNATURE_CONFIG), and the documents indexed "
                "again with signatures"
            )
        return self._config

    def similar(
        self, item: str | Signature | tuple[Signature, ShingleSets],
        threshold: float = DEFAULT_THRESHOLD, *, since: float | None = None,
    ) -> list[SimilarMatch]:
        """Stored docs whose estimated Jaccard with a text (or Signature) is >= threshold.

        Candidates share a MinHash band key with it; each is checked by its
        stored sketch. Best first: Jaccard descending, then insertion order.

        In an exact store (``exact=True``) a text, or a ``(Signature, ShingleSets)``
        pair of :func:`simstore.signatures_and_sets`, is checked by the exact Jaccard
        of the shingle sets instead, and each match's ``jaccard`` is that exact
        value; a bare Signature (no set) falls back to the sketch estimate.
        ``since``: only docs stored at or after this time (seconds since the epoch).
        """
        self._similarity_config()
        t = check_threshold(threshold)
        after = None if since is None else F.at_ms(since, "since")
        if self._h.exact and (isinstance(item, str) or isinstance(item, tuple)):
            fp, extra, query = _inputs.exact_item(self._h, item, "item", encode=False)
            assert extra is not None
            with self._env.reading() as txn:
                return _shingles.similar(self._h, txn, fp, query, extra[1], t, after)
        sig = self.signature(item) if isinstance(item, str) else item
        if not isinstance(sig, Signature):
            raise SimstoreTypeError(
                f"'item' must be a str or a Signature (got {type(item).__name__})"
            )
        fp, extra = _inputs.item(self._h, sig, "item", query=True)
        assert extra is not None
        with self._env.reading() as txn:
            return _reads.similar(self._h, txn, fp, sig.sketch, extra[1], t, after)

    def similar_pairs(
        self, threshold: float = DEFAULT_THRESHOLD
    ) -> Iterator[tuple[DocId, DocId, float]]:
        """Every pair of stored docs by :func:`simstore.find_similar`'s rule, with the Jaccard."""
        self._similarity_config()
        t = check_threshold(threshold)
        with self._env.reading() as txn:
            cols = self._h.codec.walk(txn.cursor(self._h.docs).iternext(), with_sketches=True)
        assert cols.encs is not None
        found = similar_pairs_arrays(cols.sketches, cols.bands, t)
        ids = [decode_id(e) for e in cols.encs]
        for i, j, s in zip(found.i.tolist(), found.j.tolist(), found.jaccard.tolist(),
                           strict=True):
            yield ids[i], ids[j], s
