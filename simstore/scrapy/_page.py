"""A response's text, or why it has none worth checking.

The default extractor reads the tree Scrapy's own selector builds (parsed once,
shared with the spider): the text of ``<main>`` if the page has one, else of
``<body>``, leaving out scripts, styles, templates, navigation, asides and footers
-- the parts a print view or a copy of a page changes while its content stays.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lxml import etree
from scrapy.http import HtmlResponse, Response

# Elements whose text is not the page's content.
_LEFT_OUT = ("script", "style", "noscript", "template", "nav", "aside", "footer")
_TEXT = etree.XPath(
    ".//text()[not(" + " or ".join(f"ancestor::{t}" for t in _LEFT_OUT) + ")]",
    smart_strings=False,
)
_REGIONS = (etree.XPath("//main"), etree.XPath("//body"))
_WORD = re.compile(r"\w")
BINARY_SNIFF = 8192  # bytes of the body searched for a NUL byte


def page_text(response: HtmlResponse) -> str:
    """The content text of an HTML response (``<main>``, else ``<body>``, no boilerplate)."""
    root = response.selector.root
    for region in _REGIONS:
        found = region(root)
        if found:
            return " ".join(_TEXT(found[0]))
    return " ".join(_TEXT(root))


Extractor = Callable[[HtmlResponse], Any]


def text_or_reason(response: Response, max_bytes: int, extract: Extractor) -> tuple[str, str]:
    """(text, "") for a page worth checking, else ("", the reason it is skipped).

    Reasons: ``status`` (not 2xx), ``not_html``, ``too_large`` (body above
    max_bytes), ``binary`` (a NUL byte near the start), ``empty`` (no letter or
    digit in the text), ``error`` (the extractor raised: broken markup or encoding).
    """
    if not 200 <= response.status < 300:
        return "", "status"
    if not isinstance(response, HtmlResponse):
        return "", "not_html"
    body = response.body
    if len(body) > max_bytes:
        return "", "too_large"
    if b"\x00" in body[:BINARY_SNIFF]:
        return "", "binary"
    try:
        text = extract(response)
    except Exception:  # noqa: BLE001 - any page may break a parser; it is passed on, counted
        return "", "error"
    if not isinstance(text, str) or _WORD.search(text) is None:
        return "", "empty"
    return text, ""
