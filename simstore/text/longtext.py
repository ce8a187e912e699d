"""A long text's shingle set a block at a time: its memory bounded by the set, not the text.

One C pass over a whole text keeps ~40 bytes of scratch a token (where each token
starts and ends, its shingle hash, its count, the hash table): 13x the size of English
text, 19x of CJK. A text longer than :data:`LONG_TEXT_CHARS` is instead prepared and
hashed in blocks of about :data:`BLOCK_CHARS` characters, each block carrying the last
``ngram - 1`` tokens of the one before it, so every shingle is seen once; each block's
distinct hashes are appended to one array, then sorted and cut to the distinct ones in
place (8 bytes a distinct shingle), in a mapping of its own (:mod:`simstore._mapped`:
an exact store hands its pages back as it codes the set). The set gives the same
fingerprint (uniform weighting: the simhash of the set), signature (MinHash reads a
set) and shingle set as the one pass; tests compare the two on texts cut at every kind
of boundary.

A block ends before an ASCII white-space character or a Han character: there NFKC,
lower-casing (Greek final sigma included) and the tokenizer read the two sides
apart exactly as they read the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from .. import _mapped
from ..native import core as _core

LONG_TEXT_CHARS = 1 << 21
"""Texts longer than this (characters) are hashed in blocks (docs/errors.md, record costs)."""
BLOCK_CHARS = 1 << 14
"""About the characters of one block: bounds the one-pass scratch to about a MB."""
_MERGE_CHUNK = 1 << 16  # hashes compacted at a time once the blocks' are sorted together

# Where a block may end: before ASCII white space, or before a Han character (a
# starter that composes with nothing before it and is a token by itself).
_CUT = re.compile("[ \t\n\r\f\v\u3400-\u4dbf\u4e00-\u9fff]")
_WORD = re.compile(rb"[0-9A-Za-z\x80-\xff]+")  # a token of the byte tokenizer


def _is_word(b: int) -> bool:
    """The byte tokenizer's word bytes (csrc/simhash.c is_word_byte)."""
    return 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122 or b >= 0x80


def _tail(data: bytes, ntok: int) -> bytes:
    """The last ntok tokens of data (from the first one's start), or all of data."""
    i, seen = len(data), 0
    while i > 0 and seen < ntok:
        while i > 0 and not _is_word(data[i - 1]):
            i -= 1
        while i > 0 and _is_word(data[i - 1]):
            i -= 1
        seen += 1
    return data[i:]


def _has_tokens(data: bytes, n: int) -> bool:
    """Whether the byte tokenizer finds at least n tokens in data."""
    for i, _ in enumerate(_WORD.finditer(data), 1):
        if i >= n:
            return True
    return False


def shingle_set(text: str, ngram: int, seed: int, prepare: Callable[[str], bytes],
                block: int | None = None) -> np.ndarray | None:
    """The sorted distinct shingle hashes (uint64) of text, a block at a time (each block
    made bytes for the byte tokenizer by ``prepare``); None when the text has fewer than
    ngram tokens (its one feature spans them all: the one-pass path makes it).
    ``block``: characters a block (default :data:`BLOCK_CHARS`)."""
    block = BLOCK_CHARS if block is None else block
    # each block's distinct hashes, one after another: room for a token a character
    # (pages are touched only as they are written; a text whose NFKC form has more
    # tokens than characters grows it), in a mapping of its own (simstore._mapped)
    out, at = _mapped.empty(len(text) + 1, np.uint64), 0
    carry, pos, size = b"", 0, len(text)
    while pos < size:
        cut = _CUT.search(text, min(pos + block, size))
        end = size if cut is None else cut.start()
        data = carry + prepare(text[pos:end])
        pos = end
        if not _has_tokens(data, ngram):
            carry = data  # too few tokens for a shingle yet: all of it goes on
            continue
        hashes = np.unique(_core.features(data, np.array([0, len(data)], dtype=np.int64),
                                          ngram, seed)[0])
        if at + len(hashes) > len(out):
            grown = _mapped.empty(max(2 * len(out), at + len(hashes)), np.uint64)
            grown[:at] = out[:at]
            out = grown
        out[at : at + len(hashes)] = hashes
        at += len(hashes)
        carry = _tail(data, ngram - 1) + b" " if ngram > 1 else b""
    if not at:
        return None
    return _distinct(out[:at])


def _distinct(out: np.ndarray) -> np.ndarray:
    """out sorted and cut to its distinct values, in place (the pages past them handed
    back)."""
    out.sort()
    kept, last = 0, None
    for a in range(0, len(out), _MERGE_CHUNK):
        chunk = out[a : a + _MERGE_CHUNK]
        keep = np.empty(len(chunk), dtype=bool)
        keep[0] = last is None or chunk[0] != last
        np.not_equal(chunk[1:], chunk[:-1], out=keep[1:])
        last = chunk[-1]
        new = chunk[keep]  # a copy: written back over hashes already read
        out[kept : kept + len(new)] = new
        kept += len(new)
    _mapped.release(out, kept, len(out))
    return out[:kept]
