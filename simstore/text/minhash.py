"""Similarity signatures: Jaccard estimates and LSH band keys, batched through the C core.

A fingerprint answers "how many bits differ"; a signature answers "what share
of shingles do two texts have in common" (Jaccard similarity of their sets of
distinct features) and gives band keys to find candidates by exact lookup.
The config's ``sketch_bits``, ``bands`` and ``rows`` fix its shape
(:data:`SIGNATURE_CONFIG` by default); its weighting affects only the
fingerprint, never the set-based sketch or bands.

The scheme, on the distinct feature hashes of the fingerprint pipeline (a text
without a token has the single no-feature hash as its feature):

1. One-permutation MinHash into K = 2 * sketch_bits sketch bins and
   L = bands * rows band bins, each keeping its smallest 32-bit value.
2. Optimal densification fills empty bins from non-empty ones.
3. The K (bin, value) pairs are folded into an odd sketch of sketch_bits bits;
   the popcount d of two sketches' XOR estimates the size of the symmetric
   difference of their pairs, hence J = 1 - Delta / (2K)
   (:func:`jaccard_from_distance`).
4. Band b's key is murmur3 of its rows densified band bins: texts with
   Jaccard J share a given band's key with probability about J ** rows.

``simstore.text.reference.reference_signature`` spells the scheme out in Python.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_fingerprint, check_str
from ..exceptions import InvalidConfigError, InvalidSignatureError, SimstoreTypeError
from ..native import core as _core, single as _single
from . import parallel
from .fingerprinting import (
    _ENCODE,
    _WEIGHTING_CODE,
    SIGNATURE_CONFIG,
    UNICODE_IN_C,
    FingerprintConfig,
    _checked_texts,
    _no_feature_fingerprint,
    _set_fingerprint,
    encoder,
    long_set,
    set_aside_long,
)

_WORD_BITS = 64


def _signature_config(config: Any) -> FingerprintConfig:
    """config, or SIGNATURE_CONFIG for None; refuses a config without a signature."""
    if config is None:
        return SIGNATURE_CONFIG
    if not isinstance(config, FingerprintConfig):
        raise SimstoreTypeError(
            f"'config' must be a FingerprintConfig (got {type(config).__name__})"
        )
    if not config.has_signature:
        raise InvalidConfigError(
            "this config has no similarity signature: use one with sketch_bits, bands and "
            f"rows set, e.g. SIGNATURE_CONFIG ({SIGNATURE_CONFIG.scheme})"
        )
    return config


def _uint64_array(value: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    """value as a C-contiguous uint64 array of exactly `shape` (-1: any length)."""
    dims = ["n" if s < 0 else str(s) for s in shape]
    want = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    if not isinstance(value, np.ndarray) or value.dtype != np.uint64:
        got = f"dtype {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
        raise InvalidSignatureError(
            f"{name!r} must be a uint64 numpy array of shape {want} (got {got})"
        )
    if value.ndim != len(shape) or any(
        s >= 0 and g != s for g, s in zip(value.shape, shape, strict=True)
    ):
        raise InvalidSignatureError(
            f"{name!r} must have shape {want} for this config (got {value.shape})"
        )
    return np.ascontiguousarray(value)


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class Signature:
    """The signature of one text: its fingerprint, odd sketch and LSH band keys.

    sketch: config.sketch_bits / 64 uint64 words; bands: config.bands uint64
    keys. Both are read-only copies. Equal by value.
    """

    config: FingerprintConfig
    fingerprint: int
    sketch: np.ndarray
    bands: np.ndarray

    def __post_init__(self) -> None:
        cfg = _signature_config(self.config)
        words = cfg.sketch_bits // _WORD_BITS
        sketch = _uint64_array(self.sketch, (words,), "sketch").copy()
        bands = _uint64_array(self.bands, (cfg.bands,), "bands").copy()
        object.__setattr__(self, "config", cfg)
        object.__setattr__(self, "fingerprint", check_fingerprint(self.fingerprint, "fingerprint"))
        object.__setattr__(self, "sketch", _read_only(sketch))
        object.__setattr__(self, "bands", _read_only(bands))

    @classmethod
    def _of(
        cls, config: FingerprintConfig, fingerprint: int, sketch: np.ndarray, bands: np.ndarray
    ) -> Signature:
        """A Signature of parts the C core just made (read-only, of config's shape): the
        one-text path, which skips the checks and copies of outside input."""
        sig = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(sig, "config", config)
        setattr_(sig, "fingerprint", fingerprint)
        setattr_(sig, "sketch", sketch)
        setattr_(sig, "bands", bands)
        return sig

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return (
            self.config == other.config
            and self.fingerprint == other.fingerprint
            and bool(np.array_equal(self.sketch, other.sketch))
            and bool(np.array_equal(self.bands, other.bands))
        )

    def __hash__(self) -> int:
        return hash((self.config, self.fingerprint, self.sketch.tobytes(), self.bands.tobytes()))

    def __repr__(self) -> str:
        return f"Signature(fingerprint=0x{self.fingerprint:016x}, scheme={self.config.scheme!r})"

    def jaccard(self, other: Signature) -> float:
        """Estimated Jaccard similarity of the two texts' feature sets (0..1)."""
        if not isinstance(other, Signature):
            raise SimstoreTypeError(f"'other' must be a Signature (got {type(other).__name__})")
        return float(sketch_jaccard(self, other))


class Signatures:
    """Signatures of a batch of texts, as arrays.

    fingerprints (n,), sketches (n, sketch_bits / 64) and bands (n, bands),
    all uint64 C-contiguous and read-only views (not copies of C-contiguous
    input). Indexing by int gives a Signature; by slice, int array or bool
    mask a Signatures.
    """

    __slots__ = ("config", "fingerprints", "sketches", "bands")

    config: FingerprintConfig
    fingerprints: np.ndarray
    sketches: np.ndarray
    bands: np.ndarray

    def __init__(
        self, config: FingerprintConfig, fingerprints: Any, sketches: Any, bands: Any
    ) -> None:
        cfg = _signature_config(config)
        fps = _uint64_array(fingerprints, (-1,), "fingerprints")
        n = len(fps)
        words = cfg.sketch_bits // _WORD_BITS
        self.config = cfg
        self.fingerprints = _read_only(fps)
        self.sketches = _read_only(_uint64_array(sketches, (n, words), "sketches"))
        self.bands = _read_only(_uint64_array(bands, (n, cfg.bands), "bands"))

    def __len__(self) -> int:
        return len(self.fingerprints)

    def __repr__(self) -> str:
        return f"Signatures(n={len(self)}, scheme={self.config.scheme!r})"

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, numbers.Integral) and not isinstance(key, (bool, np.bool_)):
            i = int(key)
            if not -len(self) <= i < len(self):
                raise IndexError(f"signature index {i} out of range for {len(self)} signatures")
            fp = int(self.fingerprints[i])
            return Signature(self.config, fp, self.sketches[i], self.bands[i])
        if not isinstance(key, slice):
            key = np.asarray(key)
            if key.dtype.kind not in "iub" or key.ndim != 1:
                raise SimstoreTypeError(
                    "Signatures indices must be an int, a slice, a 1-D int array or a bool "
                    f"mask (got {key.dtype} array of shape {key.shape})"
                )
        return Signatures(
            self.config,
            np.ascontiguousarray(self.fingerprints[key]),
            np.ascontiguousarray(self.sketches[key]),
            np.ascontiguousarray(self.bands[key]),
        )

    def __iter__(self) -> Iterator[Signature]:
        for i in range(len(self)):
            yield self[i]

    @classmethod
    def concat(cls, items: Iterable[Signatures]) -> Signatures:
        """One Signatures of several, in order; all must share one config."""
        parts = list(items)
        for i, p in enumerate(parts):
            if not isinstance(p, Signatures):
                raise SimstoreTypeError(
                    f"'items[{i}]' must be a Signatures (got {type(p).__name__})"
                )
        if not parts:
            raise InvalidSignatureError("Signatures.concat needs at least one Signatures")
        cfg = parts[0].config
        for i, p in enumerate(parts):
            if p.config != cfg:
                raise InvalidSignatureError(
                    f"cannot concatenate signatures of different configs: items[0] is "
                    f"{cfg.scheme}, items[{i}] is {p.config.scheme}"
                )
        return cls(
            cfg,
            np.concatenate([p.fingerprints for p in parts]),
            np.concatenate([p.sketches for p in parts]),
            np.concatenate([p.bands for p in parts]),
        )


def signatures(
    texts: Iterable[str], config: FingerprintConfig | None = None, *, threads: int | None = None
) -> Signatures:
    """Signatures of many texts, one C pass per chunk (SIGNATURE_CONFIG by default).

    threads: how many chunks run at once (None: every core); the result never depends on it.
    """
    cfg = _signature_config(config)
    given = _checked_texts(texts)
    # a long text apart, in blocks (one pass's scratch: ~13x an English text)
    items, longs = set_aside_long(given) if cfg.weighting == "uniform" else (given, [])
    nthreads = parallel.thread_count(threads)
    n, words = len(items), cfg.sketch_bits // _WORD_BITS
    fps = np.empty(n, dtype=np.uint64)
    sketches = np.empty((n, words), dtype=np.uint64)
    bands = np.empty((n, cfg.bands), dtype=np.uint64)
    shape = (cfg.seed, cfg.sketch_bits, cfg.bands, cfg.rows)

    def work(start: int, blob: bytes, offsets: np.ndarray) -> None:
        fp, sk, bk, nfeat = _core.signature_texts(
            blob, offsets, cfg.ngram, cfg.seed, _WEIGHTING_CODE[cfg.weighting], *shape[1:],
            UNICODE_IN_C,
        )
        featureless = np.flatnonzero(nfeat == 0)
        if len(featureless):
            # Their one feature is the no-feature hash, which is also their fingerprint.
            h = np.array(
                [_no_feature_fingerprint(items[start + j], cfg.seed) for j in featureless],
                dtype=np.uint64,
            )
            one_each = np.arange(len(h) + 1, dtype=np.int64)
            fp[featureless] = h
            sk[featureless], bk[featureless] = _core.signature_hashes(h, one_each, *shape)
        stop = start + len(fp)
        fps[start:stop], sketches[start:stop], bands[start:stop] = fp, sk, bk

    parallel.run(items, encoder(UNICODE_IN_C), work, nthreads)
    for i in longs:
        one = signature(given[i], cfg)
        fps[i], sketches[i], bands[i] = one.fingerprint, one.sketch, one.bands
    return Signatures(cfg, fps, sketches, bands)


def signature(text: str, config: FingerprintConfig | None = None) -> Signature:
    """The signature of one text (SIGNATURE_CONFIG by default): one C call, no batch (a
    text longer than :data:`~simstore.text.longtext.LONG_TEXT_CHARS`: in blocks).

    The same Signature as ``signatures([text], config)[0]``.
    """
    check_str(text, "text")
    cfg = _signature_config(config)
    if cfg.weighting == "uniform" and (hashes := long_set(text, cfg)) is not None:
        sk, bk = _core.signature_hashes(hashes, np.array([0, len(hashes)], np.int64),
                                        cfg.seed, cfg.sketch_bits, cfg.bands, cfg.rows)
        sk.flags.writeable = bk.flags.writeable = False
        return Signature._of(cfg, _set_fingerprint(hashes), sk[0], bk[0])
    words = cfg.sketch_bits // _WORD_BITS
    out = _single.signature_one(
        _ENCODE(text), cfg.ngram, cfg.seed, _WEIGHTING_CODE[cfg.weighting], UNICODE_IN_C,
        cfg.sketch_bits, cfg.bands, cfg.rows,
    )
    if not out[-1]:  # no token: the batch path fills in the no-feature hash
        result: Signature = signatures([text], cfg, threads=1)[0]
        return result
    out.flags.writeable = False
    return Signature._of(cfg, int(out[0]), out[1 : 1 + words], out[1 + words : -1])


def jaccard_from_distance(d: Any, sketch_bits: int) -> Any:
    """Jaccard estimates from odd-sketch bit distances d (scalar or array) of sketch_bits sketches.

    Delta = -(b/2) ln(1 - 2d/b) estimates the symmetric difference of the two
    sets of K = 2b (bin, value) pairs; each mismatching bin adds 2 to it, so
    J = 1 - Delta / (2K), clipped to 0..1; 0 once 2d >= b (saturated).
    """
    if isinstance(sketch_bits, bool) or not isinstance(sketch_bits, numbers.Integral):
        raise SimstoreTypeError(f"'sketch_bits' must be an int (got {type(sketch_bits).__name__})")
    if sketch_bits <= 0:
        raise InvalidSignatureError(f"'sketch_bits' must be positive (got {sketch_bits})")
    arr = np.asarray(d)
    if arr.dtype.kind not in "iuf":
        raise SimstoreTypeError(f"'d' must be a number or numeric array (got dtype {arr.dtype})")
    b = float(sketch_bits)
    x = 2.0 * arr.astype(np.float64) / b
    saturated = x >= 1.0
    delta = -(b / 2.0) * np.log1p(-np.where(saturated, 0.0, x))
    j = np.where(saturated, 0.0, np.clip(1.0 - delta / (2.0 * (2.0 * b)), 0.0, 1.0))
    return float(j) if j.ndim == 0 else j


def _sketch_rows(x: Any, name: str) -> tuple[np.ndarray, bool, FingerprintConfig | None]:
    """(rows as a C-contiguous (n, words) array, whether x is one sketch, its config)."""
    if isinstance(x, Signature):
        return x.sketch[None, :], True, x.config
    if isinstance(x, Signatures):
        return x.sketches, False, x.config
    if not isinstance(x, np.ndarray) or x.dtype != np.uint64 or x.ndim not in (1, 2):
        is_arr = isinstance(x, np.ndarray)
        got = f"{x.dtype} array of shape {x.shape}" if is_arr else type(x).__name__
        raise InvalidSignatureError(
            f"{name!r} must be a Signature, Signatures or a uint64 sketch array of shape "
            f"(words,) or (n, words) (got {got})"
        )
    if not 1 <= x.shape[-1] <= 4096 // _WORD_BITS:
        raise InvalidSignatureError(
            f"{name!r} sketches must have 1..64 uint64 words (got {x.shape[-1]})"
        )
    rows = x[None, :] if x.ndim == 1 else x
    return np.ascontiguousarray(rows), x.ndim == 1, None


def sketch_jaccard(a: Any, b: Any) -> Any:
    """Estimated Jaccard similarities of sketches: one-one (float), one-many or row-wise (array).

    a and b are Signature, Signatures or uint64 sketch arrays ((words,) or
    (n, words)) of the same sketch size and config.
    """
    ra, one_a, cfg_a = _sketch_rows(a, "a")
    rb, one_b, cfg_b = _sketch_rows(b, "b")
    if cfg_a is not None and cfg_b is not None and cfg_a != cfg_b:
        raise InvalidSignatureError(
            f"cannot compare signatures of different configs: {cfg_a.scheme} vs {cfg_b.scheme}"
        )
    if ra.shape[1] != rb.shape[1]:
        raise InvalidSignatureError(
            f"sketch sizes differ: {ra.shape[1]} words vs {rb.shape[1]} words"
        )
    bits = ra.shape[1] * _WORD_BITS
    if one_a:
        d = _core.sketch_distance_one(ra[0], rb)
    elif one_b:
        d = _core.sketch_distance_one(rb[0], ra)
    elif len(ra) != len(rb):
        raise InvalidSignatureError(
            f"row-wise comparison needs equal lengths (got {len(ra)} and {len(rb)})"
        )
    else:
        d = _core.sketch_distance_pairwise(ra, rb)
    j = jaccard_from_distance(d, bits)
    return float(j[0]) if one_a and one_b else j


def band_keys32(bands: np.ndarray) -> np.ndarray:
    """The 32-bit keys of 64-bit band keys (any shape): what stores keep and searches compare."""
    return (np.asarray(bands, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


@functools.lru_cache(maxsize=8)
def jaccard_table(bits: int) -> np.ndarray:
    """The Jaccard estimate of every sketch distance 0..bits (float64): one lookup per pair."""
    return np.asarray(jaccard_from_distance(np.arange(bits + 1), bits), dtype=np.float64)
