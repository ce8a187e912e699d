"""NearDuplicatePipeline: an item pipeline that drops items whose text field was seen before."""

from __future__ import annotations

import hashlib
from typing import Any

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from ._crawler import Checker
from ._gate import UNCHANGED, Gate
from ._settings import logger


class NearDuplicatePipeline(Checker):
    """Drops items whose ``SIMSTORE_FIELD`` (default ``text``) is near a stored item's.

    The doc id is the item's ``SIMSTORE_ID_FIELD`` (default ``url``), or, when the
    item has none, a digest of the text. Items whose field is missing, not a str
    or without words are counted as skipped and passed on. An item unchanged since it was
    stored under its id (a recrawl) is dropped too: it was passed on before.
    """

    def __init__(self, gate: Gate, stats: Any, settings: Any) -> None:
        super().__init__(gate, stats, settings)
        self.field = settings.get("SIMSTORE_FIELD") or "text"
        self.id_field = settings.get("SIMSTORE_ID_FIELD") or "url"

    def process_item(self, item: Any, spider: Any = None) -> Any:
        """The item, unless its text is near a stored item's (then DropItem, logged at DEBUG)."""
        adapter = ItemAdapter(item)
        text = adapter.get(self.field)
        if not isinstance(text, str) or not any(c.isalnum() for c in text):
            self.skip("no_text")
            return item
        doc_id = adapter.get(self.id_field)
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or doc_id == "":
            doc_id = "text:" + hashlib.blake2b(text.encode("utf-8", "replace"),
                                               digest_size=16).hexdigest()
        verdict = self.judge([doc_id], [text])[0]
        self.tally(verdict)
        if verdict is None or verdict.new:
            return item
        if verdict.status == UNCHANGED:
            drop = DropItem(f"unchanged since it was stored ({verdict.why})")
        else:
            logger.debug("Near-duplicate item %s (%s with %s)", doc_id, verdict.why,
                         verdict.kept, extra={"spider": spider})
            if not self.drops(verdict):
                return item
            drop = DropItem(f"near-duplicate of {verdict.kept} ({verdict.why})")
        drop.log_level = "DEBUG"  # read by Scrapy's log formatter where it knows it (>= 2.13)
        raise drop
