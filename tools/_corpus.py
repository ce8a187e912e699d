"""Real text found on a Debian machine: the one corpus reader of the tools.

``load`` gives the evaluation corpus of ``python -m tools.quality``;
``english_documents`` cuts the fixed-size documents of the benchmarks
(``python -m tools.bench fingerprint``) from the ``licenses`` and ``copyright`` sources.

Sources (each optional; a missing one is reported, not fatal):

``copyright``  ``/usr/share/doc/*/copyright``: Debian package copyright files, full of
               near-identical GPL/BSD/MIT texts under different headers.
``licenses``   ``/usr/share/common-licenses/*``: the canonical license texts.
``pydist``     LICENSE/COPYING/NOTICE files in ``*.dist-info`` of the Python
               site-packages under ``/root/.pyenv`` and ``/usr/lib/python3*``.
``man``        ``/usr/share/man/man1/*.gz``, roff stripped crudely; a seeded random
               subsample fills the corpus up to ``max_docs``.

Every path is resolved (symlinks count once) and sorted. Documents with fewer than
``min_tokens`` tokens are dropped, and so is every document whose token sequence
equals an earlier one's (exact duplicates sit at Hamming 0 and would inflate scores).
"""

from __future__ import annotations

import glob
import gzip
import os
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import simstore

SOURCES = ("copyright", "licenses", "pydist", "man")
_LICENSE_NAME = re.compile(r"(?i)^(licen[cs]e|copying|notice)")
_ROFF_ESCAPE = re.compile(
    r"\\f(?:\(..|\[[^\]]*\]|.)"  # font changes \fB \fI \fR \f(CW \f[..]
    r"|\\s[-+]?\d+"  # size changes \s-1
    r"|\\\(.."  # special characters \(em
    r"|\\\*(?:\(..|\[[^\]]*\]|.)"  # strings \*(lq \*[x] \*R
    r"|\\\[[^\]]*\]"  # \[em]
    r"|\\."  # anything else: \- \& \, \/ \e ...
)


@dataclass
class Corpus:
    """Kept documents (sorted by source, then path) and what happened on the way."""

    names: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tokens: list[list[str]] = field(default_factory=list)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def strip_roff(text: str) -> str:
    """Crude roff to text: drop request and comment lines, remove escapes."""
    out = []
    for line in text.splitlines():
        if line.startswith((".", "'", '\\"')):
            continue
        out.append(_ROFF_ESCAPE.sub(lambda m: "-" if m.group() == "\\-" else "", line))
    return "\n".join(out)


def _unique_files(paths: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for p in sorted(paths):
        real = os.path.realpath(p)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(p)
    return out


def _copyright_paths() -> list[str]:
    return _unique_files(glob.glob("/usr/share/doc/*/copyright"))


def _licenses_paths() -> list[str]:
    return _unique_files(glob.glob("/usr/share/common-licenses/*"))


def _pydist_paths() -> list[str]:
    roots = glob.glob("/root/.pyenv/versions/*/lib/python*/site-packages")
    for kind in ("site-packages", "dist-packages"):
        roots += glob.glob(f"/usr/lib/python3*/{kind}")
    found = []
    for root in roots:
        for info in glob.glob(os.path.join(root, "*.dist-info")):
            for dirpath, _, files in os.walk(info):
                found += [os.path.join(dirpath, f) for f in files if _LICENSE_NAME.match(f)]
    return _unique_files(found)


def _man_paths() -> list[str]:
    return _unique_files(glob.glob("/usr/share/man/man1/*.gz"))


_FINDERS: dict[str, Callable[[], list[str]]] = {
    "copyright": _copyright_paths,
    "licenses": _licenses_paths,
    "pydist": _pydist_paths,
    "man": _man_paths,
}
_WORD = re.compile(r"\S+\s*")


def _read(source: str, path: str) -> str | None:
    try:
        if source == "man":
            with gzip.open(path, "rb") as f:
                return strip_roff(f.read().decode("utf-8", errors="replace"))
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def load(
    sources: Iterable[str] = SOURCES,
    max_docs: int = 6000,
    seed: int = 0,
    min_tokens: int = 20,
    keep_duplicates: bool = False,
) -> Corpus:
    """Read, clean and deduplicate the corpus; man pages fill up to ``max_docs``.

    ``keep_duplicates`` keeps exact duplicates (still counted in the stats), for
    comparison with evaluations that do not drop them.

    Non-man sources are taken whole (then cut to ``max_docs`` in path order if
    they alone exceed it); man pages are visited in a seeded random order.
    """
    corpus = Corpus()
    seen: set[tuple[str, ...]] = set()
    kept: list[tuple[str, str, str, list[str]]] = []
    wanted = [s for s in SOURCES if s in set(sources)]
    for source in wanted:
        paths = _FINDERS[source]()
        st = {
            "found": len(paths),
            "read": 0,
            "unreadable": 0,
            "short": 0,
            "duplicate": 0,
            "kept": 0,
        }
        corpus.stats[source] = st
        if not paths:
            corpus.notes.append(f"source {source!r}: nothing found on this machine")
            continue
        if source == "man":
            random.Random(seed).shuffle(paths)
        for path in paths:
            if len(kept) >= max_docs:
                break
            text = _read(source, path)
            st["read"] += 1
            if text is None:
                st["unreadable"] += 1
                continue
            toks = simstore.tokens(text)
            if len(toks) < min_tokens:
                st["short"] += 1
                continue
            key = tuple(toks)
            if key in seen:
                st["duplicate"] += 1
                if not keep_duplicates:
                    continue
            seen.add(key)
            st["kept"] += 1
            kept.append((source, path, text, toks))
    kept.sort(key=lambda d: (SOURCES.index(d[0]), d[1]))
    for source, path, text, toks in kept:
        corpus.sources.append(source)
        corpus.names.append(path)
        corpus.texts.append(text)
        corpus.tokens.append(toks)
    return corpus


def english_documents(n_docs: int, doc_bytes: int, seed: int) -> list[str]:
    """Seeded English documents of at most doc_bytes UTF-8 bytes, cut at word boundaries.

    The ``licenses`` and ``copyright`` files (each read once, symlinks resolved,
    line ends normalised to ``\\n``) are shuffled with the seed and concatenated;
    documents are cut from that stream at whitespace, starting at a seeded word.
    """
    paths = sorted({os.path.realpath(p) for p in _licenses_paths() + _copyright_paths()})
    rng = random.Random(seed)
    rng.shuffle(paths)
    words: list[str] = []
    for path in paths:
        text = _read("licenses", path)
        if text is not None:
            words.extend(_WORD.findall(text.replace("\r\n", "\n").replace("\r", "\n")))
    if not words:
        raise SystemExit("no English text found under /usr/share/common-licenses and "
                         "/usr/share/doc/*/copyright")
    docs: list[str] = []
    i = rng.randrange(len(words))
    while len(docs) < n_docs:
        parts: list[str] = []
        size = 0
        while True:
            w = words[i % len(words)]
            b = len(w.encode("utf-8"))
            if size + b > doc_bytes and parts:
                break
            parts.append(w)
            size += b
            i += 1
        docs.append("".join(parts))
    return docs


def _catalog_paths() -> list[str]:
    return _unique_files(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"))


def _catalog_text(path: str) -> str | None:
    """A gettext catalog's translations (msgstr), one per line; None if it does not parse."""
    import gettext

    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a catalog that does not parse is skipped
        return None
    lines = [v for k, v in catalog.items() if k and isinstance(v, str) and v.strip()]
    return "\n".join(lines) if lines else None


def _cut(text: str, sizes: Callable[[], int]) -> list[str]:
    """text cut at line ends into pieces of about sizes() UTF-8 bytes (a short tail dropped)."""
    out, parts, size, want = [], [], 0, sizes()
    for line in text.split("\n"):
        parts.append(line)
        size += len(line.encode("utf-8", "surrogatepass")) + 1
        if size >= want:
            out.append("\n".join(parts))
            parts, size, want = [], 0, sizes()
    return out


def translation_documents(n_docs: int, seed: int, sizes: tuple[int, int] = (2000, 20000),
                          ) -> list[tuple[str, str]]:
    """Seeded (locale, document) pairs cut from the gettext catalogs under /usr/share/locale.

    Real translated text in every script the machine has (the catalogs of GTK, glib,
    iso-codes, ...): catalogs of non-English locales in a seeded order, each cut at
    message boundaries into documents of sizes[0]..sizes[1] UTF-8 bytes; one document
    per catalog in turn, so the languages mix.
    """
    rng = random.Random(seed)
    paths = [p for p in _catalog_paths() if not p.split("/")[4].startswith("en")]
    rng.shuffle(paths)
    pools: list[tuple[str, list[str]]] = []
    for path in paths:
        text = _catalog_text(path)
        if text:
            pieces = _cut(text, lambda: rng.randint(*sizes))
            if pieces:
                pools.append((path.split("/")[4], pieces))
        if sum(len(p) for _, p in pools) >= 2 * n_docs:
            break
    if not pools:
        raise SystemExit("no gettext catalogs found under /usr/share/locale")
    docs: list[tuple[str, str]] = []
    while len(docs) < n_docs and any(p for _, p in pools):
        for locale, pieces in pools:
            if pieces and len(docs) < n_docs:
                docs.append((locale, pieces.pop(0)))
    return docs


def mixed_documents(n_docs: int, seed: int, translated: float = 2 / 3,
                    sizes: tuple[int, int] = (2000, 20000)) -> list[tuple[str, str]]:
    """Seeded (locale, document) pairs: translations (:func:`translation_documents`) and
    English (:func:`english_documents`, locale "en") in the given share, shuffled."""
    rng = random.Random(seed)
    n_tr = round(n_docs * translated)
    docs = translation_documents(n_tr, seed, sizes)
    for text in english_documents(n_docs - len(docs), sizes[1], seed):
        docs.append(("en", text[: rng.randint(*sizes)]))
    rng.shuffle(docs)
    return docs
