"""TSV records: doc ids escaped so that ``export`` piped into ``add`` gives the same store.

An id field is the id's text with ``\\`` ``\\t`` ``\\n`` ``\\r`` written as
``\\\\``, ``\\t``, ``\\n``, ``\\r``. Int ids are written ``i:42``; a str id is
written as it is, or behind ``s:`` when it could be read as something else (it
starts with ``i:``, ``s:``, ``#`` or ``{``, or with white space). Reading undoes
exactly that: ``i:`` + an integer is an int id, ``s:`` + text a str id,
anything else a str id (or, with --int-ids, a plain integer an int id). An
unknown escape (``\\d``) is an error, so a Windows path written unescaped is
refused rather than silently changed.
"""

from __future__ import annotations

from typing import Any

from ..corpus.records import BadRecord, load_json

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
_TABLE = str.maketrans(_ESCAPES)


def format_id(doc_id: Any) -> str:
    """The TSV field of a doc id (see the module docstring)."""
    if isinstance(doc_id, int):
        return f"i:{doc_id}"
    text = str(doc_id).translate(_TABLE)
    if text.startswith(("i:", "s:", "#", "{")) or text[:1].isspace():
        return "s:" + text
    return text


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt not in _UNESCAPES:
            raise ValueError(
                f"unknown escape '\\{nxt}' in id {text!r:.60} (ids escape only \\\\ \\t \\n \\r; "
                "write a backslash as \\\\)"
            )
        out.append(_UNESCAPES[nxt])
        i += 2
    return "".join(out)


def parse_id(field: str, int_ids: bool = False) -> Any:
    """A doc id from its TSV field; ValueError saying what is wrong."""
    if field.startswith("i:"):
        try:
            return int(field[2:], 10)
        except ValueError:
            raise ValueError(f"id {field!r:.60} starts with 'i:' but is not an integer "
                             "(write a str id starting with i: as s:i:...)") from None
    if field.startswith("s:"):
        return _unescape(field[2:])
    if int_ids:
        try:
            return int(field, 10)
        except ValueError:
            raise ValueError(f"id {field!r:.60} is not an integer (--int-ids)") from None
    return _unescape(field)


def parse_fp(text: str) -> int:
    """A fingerprint written in decimal or 0x-hex."""
    t = text.strip()
    try:
        v = int(t, 16) if t.lower().startswith("0x") else int(t, 10)
    except ValueError:
        raise ValueError(f"fingerprint {t!r} is not a decimal or 0x-hex integer") from None
    if not 0 <= v < 1 << 64:
        raise ValueError(f"fingerprint {t!r} is outside 0..2**64-1")
    return v


def parse_record(line: str, int_ids: bool) -> tuple[Any, int]:
    """One ``id<TAB>fp`` TSV line or ``{"id": .., "fp": ..}`` JSON line."""
    if line.lstrip().startswith("{"):
        try:
            obj = load_json(line)
        except BadRecord as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(obj, dict) or "id" not in obj or "fp" not in obj:
            raise ValueError('a JSON line needs "id" and "fp" fields')
        fp = obj["fp"]
        if isinstance(fp, str):
            fp = parse_fp(fp)
        elif isinstance(fp, bool) or not isinstance(fp, int):
            raise ValueError(f'"fp" must be an integer or a decimal/0x-hex string (got {fp!r})')
        elif not 0 <= fp < 1 << 64:
            raise ValueError(f'"fp" {fp} is outside 0..2**64-1')
        if obj["id"] is None:
            raise ValueError('"id" is null')
        return obj["id"], fp
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != 2:
        raise ValueError(f"expected 'id<TAB>fp' (got {len(parts)} tab-separated fields)")
    return parse_id(parts[0], int_ids), parse_fp(parts[1])
