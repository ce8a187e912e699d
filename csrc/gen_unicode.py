"""Generates csrc/unicode_tables.h from the building Python's ``unicodedata``.

Run by csrc/build_native.py before compiling, so the C tokenizer's NFKC,
lower-casing and token classes are those of the Python the reference runs on:
every property is read from Python itself (``unicodedata.normalize``,
``str.lower``, the token regex of ``simstore/text/rules.py``), never from a
copy of the Unicode data files. The output is a function of the Unicode
version and the rules only (no dates, sorted iteration): two builds on the
same Python give the same bytes. Usage: python csrc/gen_unicode.py [OUT].

Tables (two-stage lookup, as utf8proc and ICU lay theirs out): stage1 maps a
code point's high bits to a block, stage2 a block's entries to a record, a
record holds what the tokenizer asks of one code point:

- ccc: canonical combining class;
- flags: QUICK (a starter NFKC leaves alone that nothing before it composes
  with: it ends any pending normalization), the token class of its
  lower-case form, and the two properties of the final-sigma rule of
  ``str.lower`` (case-ignorable; cased);
- decomp: index into the pool of its full compatibility decomposition (NFKD),
  entries ``cp | ccc << 24``; Hangul syllables are decomposed by arithmetic;
- lower: the lower-case delta, or with LMULTI the pool index of a
  several-character lower case (entries ``cp | class << 24``).

Composition pairs (first, second) -> composite are a sorted key array.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import unicodedata

HERE = pathlib.Path(__file__).resolve().parent
RULES = HERE.parent / "simstore" / "text" / "rules.py"
SHIFT = 7
NCP = 0x110000
SBASE, LBASE, VBASE, TBASE = 0xAC00, 0x1100, 0x1161, 0x11A7
LCOUNT, VCOUNT, TCOUNT = 19, 21, 28
SCOUNT = LCOUNT * VCOUNT * TCOUNT
QUICK, CLS_SHIFT, IGN, CASED, LMULTI = 0x01, 1, 0x08, 0x10, 0x20
SIGMA = "\u03a3"


def _rules():  # noqa: ANN202 - a module object
    spec = importlib.util.spec_from_file_location("simstore_text_rules", RULES)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _hangul_nfkd(c: int) -> str:
    s = c - SBASE
    out = chr(LBASE + s // (VCOUNT * TCOUNT)) + chr(VBASE + (s % (VCOUNT * TCOUNT)) // TCOUNT)
    return out + (chr(TBASE + s % TCOUNT) if s % TCOUNT else "")


def _pairs() -> dict[tuple[int, int], int]:
    """Canonical pairs NFC composes, Hangul apart (done by arithmetic in C)."""
    pairs = {}
    for c in range(NCP):
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(c)) == chr(c):
            assert unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(c)
            assert unicodedata.combining(chr(c)) == 0, hex(c)
            pairs[(parts[0], parts[1])] = c
    return pairs


def _sigma_flags(ch: str) -> int:
    """IGN / CASED as str.lower's final-sigma rule sees ch (derived from its behaviour).

    'A' ch 'Σ' ends in final sigma iff ch is case-ignorable or cased; ch 'Σ' iff ch is
    cased and not case-ignorable. The rule never asks whether an ignorable is cased.
    """
    around = ("A" + ch + SIGMA).lower()[-1] == "\u03c2"
    before = (ch + SIGMA).lower()[-1] == "\u03c2"
    return (IGN if around and not before else 0) | (CASED if before else 0)


def build() -> tuple[str, str]:
    """(tables id, the C header text)."""
    rules = _rules()
    pairs = _pairs()
    seconds = {b for _, b in pairs} | set(range(VBASE, VBASE + VCOUNT))
    seconds |= set(range(TBASE + 1, TBASE + TCOUNT))
    # the Hangul arithmetic in C must agree with Python
    assert unicodedata.normalize("NFC", "\u1100\u1161\u11a8") == "\uac01"
    pool = [0]
    pool_at: dict[tuple[int, ...], int] = {}

    def pooled(entries: tuple[int, ...]) -> int:
        if entries not in pool_at:
            pool_at[entries] = len(pool)
            pool.extend((len(entries), *entries))
        return pool_at[entries]

    recs: list[tuple[int, int, int, int]] = []
    rec_at: dict[tuple[int, int, int, int], int] = {}
    per_cp = []
    max_decomp = 1
    for c in range(NCP):
        ch = chr(c)
        ccc = unicodedata.combining(ch)
        nfkd = unicodedata.normalize("NFKD", ch)
        hangul = SBASE <= c < SBASE + SCOUNT
        if hangul:
            assert nfkd == _hangul_nfkd(c), hex(c)
        flags = _sigma_flags(ch)
        if (ccc == 0 and unicodedata.normalize("NFKC", ch) == ch and c not in seconds
                and ord(nfkd[0]) not in seconds):
            assert unicodedata.combining(nfkd[0]) == 0, hex(c)
            flags |= QUICK
        decomp = 0
        if nfkd != ch and not hangul:
            decomp = pooled(tuple(ord(x) | unicodedata.combining(x) << 24 for x in nfkd))
            max_decomp = max(max_decomp, len(nfkd))
        low = ch.lower()
        if len(low) == 1:
            lower = ord(low) - c
            flags |= rules.token_class(low) << CLS_SHIFT
        else:
            lower = pooled(tuple(ord(x) | rules.token_class(x) << 24 for x in low))
            flags |= LMULTI
        rec = (lower, decomp, ccc, flags)
        if rec not in rec_at:
            rec_at[rec] = len(recs)
            recs.append(rec)
        per_cp.append(rec_at[rec])
    for c in range(128):  # the ASCII fast paths of unicode.c take these for granted
        lower, decomp, ccc, flags = recs[per_cp[c]]
        assert flags & QUICK and not decomp and not flags & LMULTI, hex(c)
        assert flags >> CLS_SHIFT & 3 == (rules.WORD if chr(c).isalnum() else rules.SEP), hex(c)
        assert lower == (32 if "A" <= chr(c) <= "Z" else 0), hex(c)
    for ch in ("\u03c3", "\u03c2"):
        assert rules.token_class(ch) == rules.WORD
    assert len(recs) < 1 << 16 and len(pool) < 1 << 16, (len(recs), len(pool))

    block = 1 << SHIFT
    stage1, stage2, block_at = [], [], {}
    for start in range(0, NCP, block):
        key = tuple(per_cp[start : start + block])
        if key not in block_at:
            block_at[key] = len(block_at)
            stage2.extend(key)
        stage1.append(block_at[key])
    tables_id = rules.tables_id(unicodedata.unidata_version)
    keys = sorted(pairs)
    out = [
        "/* Generated by csrc/gen_unicode.py from Python's unicodedata "
        f"{unicodedata.unidata_version}:",
        " * do not edit, do not commit (every build makes its own). */",
        "#ifndef SIMSTORE_UNICODE_TABLES_H",
        "#define SIMSTORE_UNICODE_TABLES_H",
        "#include <stdint.h>",
        f'#define SS__U_TABLES_ID "{tables_id}"',
        f"#define SS__U_SHIFT {SHIFT}",
        f"#define SS__U_MAX_DECOMP {max_decomp}",
        f"#define SS__U_QUICK {QUICK}",
        f"#define SS__U_CLS_SHIFT {CLS_SHIFT}",
        f"#define SS__U_IGN {IGN}",
        f"#define SS__U_CASED {CASED}",
        f"#define SS__U_LMULTI {LMULTI}",
        f"#define SS__U_NPAIRS {len(keys)}",
        "typedef struct { int32_t lower; uint16_t decomp; uint8_t ccc; uint8_t flags; } ss__urec;",
        _array("static const uint16_t ss__u_stage1", stage1),
        _array("static const uint16_t ss__u_stage2", stage2),
        "static const ss__urec ss__u_recs[] = {",
        *(f"{{{lo}, {d}, {cc}, {fl}}}," for lo, d, cc, fl in recs),
        "};",
        _array("static const uint32_t ss__u_pool", pool),
        _array("static const uint64_t ss__u_pair_keys", [a << 21 | b for a, b in keys], "ULL"),
        _array("static const uint32_t ss__u_pair_vals", [pairs[k] for k in keys]),
        "#endif",
        "",
    ]
    return tables_id, "\n".join(out)


def _array(decl: str, values: list[int], suffix: str = "") -> str:
    rows = [
        ", ".join(f"{v}{suffix}" for v in values[i : i + 16]) + ","
        for i in range(0, len(values), 16)
    ]
    return "\n".join([f"{decl}[{len(values)}] = {{", *rows, "};"])


def write(path: pathlib.Path) -> str:
    """Writes the tables to path (only when they changed: keeps builds incremental)."""
    tables_id, text = build()
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return tables_id


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "unicode_tables.h"
    print(write(target))
