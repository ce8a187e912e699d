"""The scheme's token rules, written once: the Python tokenizer and the C tables both read them.

``csrc/gen_unicode.py`` loads this file by path when the C core is built (the
package cannot be imported then), so it imports only the standard library. The
C tables carry :func:`tables_id` of the Python that built them; at run time a
different id (another Unicode version, edited rules) sends text through the
Python path instead (:data:`simstore.text.fingerprinting.UNICODE_IN_C`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
"""Han, Hiragana and Katakana ranges: each character in them is a token by itself."""

TOKEN_RE = re.compile(f"[{CJK}]|[^\\W_{CJK}]+")
"""A token of the normalized (NFKC, lower-cased) text: one CJK character or a run of
letters and digits (``str.isalnum``) of any other script."""

CJK_RE = re.compile(f"[{CJK}]")

# The Python path's preparation for the byte tokenizer (see fingerprinting._prepared):
# non-ASCII characters that are not letters/digits become a space.
NON_ASCII_SEP_RE = re.compile(f"[^\\w\\x00-\\x7f{CJK}]+")

SEP, WORD, HAN = 0, 1, 2
"""Token classes of a character of the normalized text: separator, part of a word
run, a token by itself."""


def token_class(ch: str) -> int:
    """SEP, WORD or HAN for one character of normalized text, by TOKEN_RE itself."""
    if CJK_RE.fullmatch(ch):
        return HAN
    return WORD if TOKEN_RE.fullmatch(ch) else SEP


def tables_id(unidata_version: str = unicodedata.unidata_version) -> str:
    """The name of C tables made from this Unicode version and these rules."""
    rules = f"{TOKEN_RE.pattern}|{NON_ASCII_SEP_RE.pattern}".encode("utf-8", "surrogatepass")
    return f"unicode {unidata_version}; rules {hashlib.sha256(rules).hexdigest()[:16]}"
