"""What ``dedup-corpus --store`` decided, kept in the store, so a rerun decides nothing
twice and writes what one uninterrupted run writes.

Two named databases of the store's environment (docs/format.md §9, ``corpus.*``):

- ``corpus.kept``: encoded doc id (format §5.3) -> where the kept document was read
  (UTF-8, ``file:line`` as the removed report names it);
- ``corpus.removed``: encoded doc id -> the removed report's fields about it beyond its
  own id and place, canonical JSON: ``{"kept": id, "kept_source": place, "jaccard": j}``
  (or ``"distance": d``), ``kept_source`` absent when the kept document's place is
  unknown (stored by ``index`` or by hand).

Both are written in the write transaction that stores the chunk deciding them, so they
hold exactly the decisions of committed chunks. A reader of the store that does not know
them ignores them (they are not part of what queries read).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..exceptions import CorruptStoreError
from .format import decode_id, encode_id

PREFIX = "corpus."
KEPT_DB = b"corpus.kept"
REMOVED_DB = b"corpus.removed"


def canonical(record: dict[str, Any]) -> bytes:
    """A record as canonical JSON (keys sorted, no whitespace, UTF-8)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Decisions:
    """The corpus decisions kept in a store (see the module docstring). The store handle
    stays the caller's: this never opens or closes it."""

    def __init__(self, store: Any) -> None:
        self._path = store.path
        self._dbs = store.databases([KEPT_DB, REMOVED_DB], "the corpus databases")

    def removed(self, doc_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
        """The remembered records of those ids a run removed (the others are left out)."""
        def op(txn: Any, dbs: list[Any]) -> dict[Any, dict[str, Any]]:
            out: dict[Any, dict[str, Any]] = {}
            for doc_id in doc_ids:
                raw = txn.get(encode_id(doc_id), db=dbs[1])
                if raw is not None:
                    out[doc_id] = self._parse(raw, doc_id)
            return out
        return self._dbs.read(op)

    def _parse(self, raw: Any, doc_id: Any) -> dict[str, Any]:
        try:
            rec = json.loads(bytes(raw))
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or "kept" not in rec:
            raise CorruptStoreError(
                f"store {self._path!r}: the corpus.removed record of {doc_id!r} is "
                f"not a JSON object naming the kept document ({bytes(raw)[:40]!r})"
            )
        return rec

    def record(
        self, kept: list[tuple[Any, str]], removed: list[tuple[Any, Any, dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """In the store's open batch (the chunk's write transaction): remember where each
        kept (id, place) was read, then each removed (id, kept id, nearness) with the kept
        document's place; the removed records, in order."""
        return self._dbs.write(_record, kept, removed)


def _record(
    txn: Any,
    dbs: list[Any],
    kept: list[tuple[Any, str]],
    removed: list[tuple[Any, Any, dict[str, Any]]],
) -> list[dict[str, Any]]:
    kept_db, removed_db = dbs
    for doc_id, place in kept:
        txn.put(encode_id(doc_id), place.encode(), db=kept_db)
    out = []
    for doc_id, kept_id, nearness in removed:
        enc_kept = encode_id(kept_id)
        rec: dict[str, Any] = {"kept": decode_id(enc_kept)}
        place = txn.get(enc_kept, db=kept_db)
        if place is not None:
            rec["kept_source"] = bytes(place).decode()
        rec.update(nearness)
        txn.put(encode_id(doc_id), canonical(rec), db=removed_db)
        out.append(rec)
    return out
