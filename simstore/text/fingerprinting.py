"""Text -> 64-bit simhash fingerprints (Charikar), batched through the C core.

The scheme (``simhash64/v1``), fixed so stored indexes stay valid:

1. Normalize: Unicode NFKC, then ``str.lower()``.
2. Tokenize: a token is a maximal run of letters and digits in any script;
   every Han, Hiragana and Katakana character is a token by itself (those
   scripts do not separate words with spaces). Everything else separates.
3. Features: word n-gram shingles, tokens joined by one space; a text with
   fewer than n tokens gives one shingle of all its tokens.
4. Feature hash: low 64 bits of murmur3_x64_128 of the UTF-8 shingle
   (``mmh3.hash64(shingle, seed, signed=False)[0]``).
5. Weights: ``uniform`` (each distinct shingle once: a set, like the
   Jaccard similarity it estimates), ``tf`` (occurrence count) or ``logtf``
   (1 + ln count); optionally times an :class:`IdfTable` weight.
6. Bit b of the fingerprint is 1 iff the weighted vote on bit b is > 0.

Texts with no letter or digit at all (empty, whitespace, punctuation, emoji)
have no features. Rather than giving them all one fingerprint, simstore then
hashes their whole normalized text (whitespace collapsed) as the single
feature: they match only texts identical to them after normalization. All
empty and whitespace-only texts share :data:`EMPTY_FINGERPRINT`.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._validate import as_fingerprint_array, check_fingerprint, check_str
from ..exceptions import InvalidConfigError, SimstoreTypeError
from ..native import core as _core, single as _single
from . import longtext, parallel
from .rules import CJK_RE, NON_ASCII_SEP_RE, TOKEN_RE, tables_id

SCHEME_VERSION = 1
WEIGHTINGS = ("uniform", "tf", "logtf")
_WEIGHTING_CODE = {"uniform": 0, "tf": 1, "logtf": 2}
_NO_FEATURE_PREFIX = b"\x00simstore:no-features\x00"

UNICODE_IN_C = _core.unicode_tables_id() == tables_id()
"""Whether the C core tokenizes any script itself: its Unicode tables were built from this
Python's Unicode version and these rules (else text is prepared in Python first: slower,
the same fingerprints)."""


@dataclass(frozen=True)
class FingerprintConfig:
    """How texts become fingerprints; a store records it and refuses others.

    ngram: words per shingle (1..16). weighting: 'uniform', 'tf' or 'logtf'.
    seed: murmur3 seed (0..2**32-1); changing it changes every fingerprint.
    sketch_bits, bands, rows: the similarity signature (see ``signature``):
    odd-sketch bits (a multiple of 64 in 64..4096) and LSH bands x rows
    (bands 1..64, rows 1..32, bands * rows <= 1024); all 0 (the default)
    for a Hamming-only config.
    """

    ngram: int = 3
    weighting: str = "uniform"
    seed: int = 0
    sketch_bits: int = 0
    bands: int = 0
    rows: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.ngram, bool) or not isinstance(self.ngram, numbers.Integral):
            raise InvalidConfigError(f"'ngram' must be an int in 1..16 (got {self.ngram!r})")
        if not 1 <= self.ngram <= 16:
            raise InvalidConfigError(f"'ngram' must be an int in 1..16 (got {self.ngram})")
        if self.weighting not in WEIGHTINGS:
            raise InvalidConfigError(
                f"'weighting' must be one of {', '.join(WEIGHTINGS)} (got {self.weighting!r})"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise InvalidConfigError(f"'seed' must be an int in 0..2**32-1 (got {self.seed!r})")
        if not 0 <= self.seed < 1 << 32:
            raise InvalidConfigError(f"'seed' must be an int in 0..2**32-1 (got {self.seed})")
        self._check_signature()

    def _check_signature(self) -> None:
        for name, allowed in (
            ("sketch_bits", "0 or a multiple of 64 in 64..4096"),
            ("bands", "an int in 0..64"),
            ("rows", "an int in 0..32"),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidConfigError(f"{name!r} must be {allowed} (got {value!r})")
        b, nb, nr = self.sketch_bits, self.bands, self.rows
        if not (b == 0 or (64 <= b <= 4096 and b % 64 == 0)):
            raise InvalidConfigError(
                f"'sketch_bits' must be 0 or a multiple of 64 in 64..4096 (got {b})"
            )
        if not 0 <= nb <= 64:
            raise InvalidConfigError(f"'bands' must be an int in 0..64 (got {nb})")
        if not 0 <= nr <= 32:
            raise InvalidConfigError(f"'rows' must be an int in 0..32 (got {nr})")
        if nb * nr > 1024:
            raise InvalidConfigError(f"'bands' * 'rows' must be at most 1024 (got {nb}x{nr})")
        if (b > 0) != (nb > 0) or (nb > 0) != (nr > 0):
            raise InvalidConfigError(
                "'sketch_bits', 'bands' and 'rows' must be all > 0 (a similarity signature) "
                f"or all 0 (Hamming only) (got sketch_bits={b}, bands={nb}, rows={nr})"
            )

    @property
    def has_signature(self) -> bool:
        """Whether this config defines a similarity signature (sketch + bands)."""
        return self.sketch_bits > 0

    @property
    def scheme(self) -> str:
        """A stable name of the exact text -> fingerprint (and signature) function."""
        base = (
            f"simhash64/v{SCHEME_VERSION};ngram={self.ngram};"
            f"weighting={self.weighting};seed={self.seed}"
        )
        if not self.has_signature:
            return base
        return f"{base};sketch=odd{self.sketch_bits};bands={self.bands}x{self.rows}"

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (for a store's metadata); signature fields only when set."""
        out = {"version": SCHEME_VERSION, **asdict(self)}
        if not self.has_signature:
            for name in ("sketch_bits", "bands", "rows"):
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FingerprintConfig:
        """Inverse of :meth:`to_dict`; refuses another scheme version."""
        version = data.get("version")
        if version != SCHEME_VERSION:
            raise InvalidConfigError(
                f"fingerprint scheme version {version!r} is not supported "
                f"(this simstore reads version {SCHEME_VERSION})"
            )
        return cls(**{k: v for k, v in data.items() if k != "version"})


DEFAULT_CONFIG = FingerprintConfig()
SIGNATURE_CONFIG = FingerprintConfig(sketch_bits=640, bands=16, rows=8)
"""The default config of ``signature()`` / ``signatures()``: DEFAULT_CONFIG plus a signature."""


def check_config(config: Any) -> FingerprintConfig:
    """A FingerprintConfig: THE check of every ``config`` argument."""
    if not isinstance(config, FingerprintConfig):
        raise SimstoreTypeError(
            f"'config' must be a FingerprintConfig (got {type(config).__name__})"
        )
    return config


def _config(config: FingerprintConfig | None, options: Mapping[str, Any]) -> FingerprintConfig:
    if config is not None:
        check_config(config)
    base = config or DEFAULT_CONFIG
    if not options:
        return base
    unknown = set(options) - {"ngram", "weighting", "seed"}
    if unknown:
        raise InvalidConfigError(
            f"unknown fingerprint option(s) {sorted(unknown)}; allowed: ngram, weighting, seed"
        )
    return FingerprintConfig(**{**asdict(base), **options})


class IdfTable:
    """Per-feature weights (e.g. inverse document frequency) keyed by shingle text.

    Features missing from the table get ``default``. The table multiplies the
    configured weighting. Its :attr:`digest` is a hash of its contents, for a caller
    to tell tables apart: nothing records it (a store's metadata does not say which
    table, if any, weighted its fingerprints).
    """

    def __init__(self, weights: Mapping[str, float], default: float, seed: int = 0) -> None:
        if not isinstance(weights, Mapping):
            raise SimstoreTypeError(
                f"'weights' must be a mapping of str to float (got {type(weights).__name__})"
            )
        items = []
        for key, w in weights.items():
            check_str(key, "weights key")
            items.append((_core.murmur3_x64_128(key.encode("utf-8"), seed)[0], _finite(w, key)))
        items.sort()
        self.hashes = np.array([h for h, _ in items], dtype=np.uint64)
        self.values = np.array([w for _, w in items], dtype=np.float64)
        self.default = _finite(default, "default")
        self.seed = seed
        raw = self.hashes.tobytes() + self.values.tobytes() + repr(self.default).encode()
        self.digest = f"{_core.murmur3_x64_128(raw, 0)[0]:016x}"

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Weights of the given feature hashes."""
        if not len(self.hashes):
            return np.full(len(hashes), self.default)
        pos = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
        return np.where(self.hashes[pos] == hashes, self.values[pos], self.default)


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidConfigError(f"weight for {name!r} must be a finite number (got {value!r})")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidConfigError(f"weight for {name!r} must be a finite number (got {v})")
    return v


def normalize(text: str) -> str:
    """NFKC + lower-case, the first step of the scheme."""
    return unicodedata.normalize("NFKC", check_str(text, "text")).lower()


def tokens(text: str) -> list[str]:
    """The tokens of a text, as the scheme sees them."""
    return TOKEN_RE.findall(normalize(text))


def features(text: str, config: FingerprintConfig | None = None, **options: Any) -> list[str]:
    """The shingles of a text, in order, with repeats (for inspection and IDF tables)."""
    cfg = _config(config, options)
    toks = tokens(text)
    n = cfg.ngram
    if not toks:
        return []
    if len(toks) < n:
        return [" ".join(toks)]
    return [" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1)]


_CJK_RUN_RE = re.compile(CJK_RE.pattern + "+")


def _prepared(text: str) -> bytes:
    # The Python path, for a C core without this Python's Unicode tables (and the
    # IDF path). ASCII text is NFKC-stable; the byte tokenizer lower-cases and
    # splits it exactly as the token regex would. In other text, the non-ASCII
    # characters that separate tokens become spaces and every Han/Kana
    # character is spaced out; the byte tokenizer, which takes every byte >= 0x80
    # as part of a word and splits on ASCII non-alphanumerics, then sees the
    # same tokens as the regex (tests check this against the reference).
    if text.isascii():
        return text.encode("ascii")
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    text = NON_ASCII_SEP_RE.sub(" ", text.lower())
    if CJK_RE.search(text):  # a run at a time: a template per character is 10x slower
        text = _CJK_RUN_RE.sub(lambda m: f" {' '.join(m.group())} ", text)
    return text.encode("utf-8", "surrogatepass")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates kept, as the reference does


def encoder(native: bool) -> Callable[[str], bytes]:
    """How texts are handed to C: as UTF-8 (the C core tokenizes) or prepared in Python."""
    return _utf8 if native else _prepared


def _no_feature_fingerprint(text: str, seed: int) -> int:
    flat = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    raw = flat.encode("utf-8", "surrogatepass")  # lone surrogates are kept, not refused
    return _core.murmur3_x64_128(_NO_FEATURE_PREFIX + raw, seed)[0]


EMPTY_FINGERPRINT = _core.murmur3_x64_128(_NO_FEATURE_PREFIX, 0)[0]
"""The fingerprint of every empty or whitespace-only text (default seed)."""


_ENCODE = encoder(UNICODE_IN_C)  # how one text goes to the C core


def _checked_texts(texts: Iterable[str]) -> list[str]:
    if isinstance(texts, (str, bytes, bytearray)):
        raise SimstoreTypeError(
            f"'texts' must be an iterable of str, not a single {type(texts).__name__}"
        )
    if not isinstance(texts, Iterable):
        raise SimstoreTypeError(f"'texts' must be an iterable of str (got {type(texts).__name__})")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise SimstoreTypeError(f"'texts[{i}]' must be a str (got {type(t).__name__})")
    return out


def long_set(text: str, cfg: FingerprintConfig) -> np.ndarray | None:
    """The sorted shingle set of a text long enough to be hashed in blocks (8 bytes a
    distinct shingle, :mod:`.longtext`), else None: the one-pass path takes it."""
    if len(text) <= longtext.LONG_TEXT_CHARS:
        return None
    return longtext.shingle_set(text, cfg.ngram, cfg.seed, _prepared)


def set_aside_long(items: list[str]) -> tuple[list[str], list[int]]:
    """items with each text too long for a batch pass replaced by "" (each is made apart,
    in blocks), and where they stood."""
    longs = [i for i, t in enumerate(items) if len(t) > longtext.LONG_TEXT_CHARS]
    if not longs:
        return items, []
    batch = list(items)
    for i in longs:
        batch[i] = ""
    return batch, longs


def _set_fingerprint(hashes: np.ndarray) -> int:
    """The uniform-weighting fingerprint of a shingle set: its simhash."""
    return int(_core.simhash_batch(hashes, None, np.array([0, len(hashes)], np.int64))[0])


def fingerprints(
    texts: Iterable[str],
    config: FingerprintConfig | None = None,
    *,
    idf: IdfTable | None = None,
    threads: int | None = None,
    **options: Any,
) -> np.ndarray:
    """Fingerprints (uint64 array) of many texts, one C pass per chunk, on `threads` threads.

    threads: how many chunks run at once (None: every core); the result never depends on it.
    """
    cfg = _config(config, options)
    given = _checked_texts(texts)
    if idf is not None and not isinstance(idf, IdfTable):
        raise SimstoreTypeError(f"'idf' must be an IdfTable (got {type(idf).__name__})")
    nthreads = parallel.thread_count(threads)
    native = UNICODE_IN_C and idf is None
    out = np.empty(len(given), dtype=np.uint64)
    # a long text apart, in blocks (one pass's scratch: ~13x an English text)
    uniform = idf is None and cfg.weighting == "uniform"
    items, longs = set_aside_long(given) if uniform else (given, [])

    def work(start: int, blob: bytes, offsets: np.ndarray) -> None:
        if idf is None:
            fps, nfeat = _core.fingerprint_texts(
                blob, offsets, cfg.ngram, cfg.seed, _WEIGHTING_CODE[cfg.weighting], native
            )
        else:
            fps, nfeat = _weighted_fingerprints(blob, offsets, cfg, idf)
        for j in np.flatnonzero(nfeat == 0):
            fps[j] = _no_feature_fingerprint(items[start + j], cfg.seed)
        out[start : start + len(fps)] = fps

    parallel.run(items, encoder(native), work, nthreads)
    for i in longs:
        out[i] = fingerprint(given[i], cfg)
    return out


def _weighted_fingerprints(
    blob: bytes, offsets: np.ndarray, cfg: FingerprintConfig, idf: IdfTable | None
) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline in numpy over C feature hashes (IDF weights; cross-check of C)."""
    hashes, hoff = _core.features(blob, offsets, cfg.ngram, cfg.seed)
    ndocs = len(offsets) - 1
    doc = np.repeat(np.arange(ndocs, dtype=np.int64), np.diff(hoff))
    order = np.lexsort((hashes, doc))
    h, d = hashes[order], doc[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = (h[1:] != h[:-1]) | (d[1:] != d[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(h))).astype(np.float64)
    uh, ud = h[starts], d[starts]
    if cfg.weighting == "uniform":
        w = np.ones(len(uh))
    elif cfg.weighting == "tf":
        w = counts
    else:
        w = 1.0 + np.log(counts)
    if idf is not None:
        w = w * idf.lookup(uh)
    nfeat = np.bincount(ud, minlength=ndocs).astype(np.int64)
    uoff = np.zeros(ndocs + 1, dtype=np.int64)
    np.cumsum(nfeat, out=uoff[1:])
    return _core.simhash_batch(np.ascontiguousarray(uh), np.ascontiguousarray(w), uoff), nfeat


def fingerprint(
    text: str,
    config: FingerprintConfig | None = None,
    *,
    idf: IdfTable | None = None,
    **options: Any,
) -> int:
    """The 64-bit simhash fingerprint of one text: one C call, no batch (with an IdfTable,
    the batch path; a text longer than :data:`~simstore.text.longtext.LONG_TEXT_CHARS`:
    in blocks). The same value as ``fingerprints([text], ...)[0]``."""
    check_str(text, "text")
    if idf is not None:
        return int(fingerprints([text], config, idf=idf, threads=1, **options)[0])
    cfg = _config(config, options)
    if cfg.weighting == "uniform" and (hashes := long_set(text, cfg)) is not None:
        return _set_fingerprint(hashes)
    fp, nfeat = _single.fingerprint_one(
        _ENCODE(text), cfg.ngram, cfg.seed, _WEIGHTING_CODE[cfg.weighting], UNICODE_IN_C
    )
    return int(fp) if nfeat else _no_feature_fingerprint(text, cfg.seed)


def simhash(feature_hashes: Any, weights: Any = None) -> int:
    """Fingerprint of given 64-bit feature hashes (each counted as given), weights optional."""
    h = as_fingerprint_array(feature_hashes, "feature_hashes")
    w = None
    if weights is not None:
        w = np.asarray(weights)
        if w.dtype.kind not in "iuf" or w.shape != h.shape:
            raise InvalidConfigError(
                f"'weights' must be real numbers, one per feature hash (got dtype {w.dtype}, "
                f"shape {w.shape} for {len(h)} hashes)"
            )
        w = np.ascontiguousarray(w, dtype=np.float64)
        if not np.isfinite(w).all():
            raise InvalidConfigError("'weights' must all be finite")
    offsets = np.array([0, len(h)], dtype=np.int64)
    return int(_core.simhash_batch(h, w, offsets)[0])


def hamming(a: Any, b: Any) -> int:
    """Number of differing bits of two fingerprints."""
    return (check_fingerprint(a, "a") ^ check_fingerprint(b, "b")).bit_count()
