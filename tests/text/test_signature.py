"""Similarity signatures: C equals the reference, known answers, densification, the estimator,
the Signature/Signatures containers, config validation and bad input."""

from __future__ import annotations

import struct

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import (
    SIGNATURE_CONFIG,
    FingerprintConfig,
    InvalidConfigError,
    InvalidSignatureError,
    Signature,
    Signatures,
    SimstoreTypeError,
    sketch_jaccard,
)
from simstore.native import core as _core
from simstore.text.minhash import jaccard_from_distance
from simstore.text.reference import (
    _SALT_TAGS,
    _fmix64,
    reference_densify,
    reference_jaccard,
    reference_signature,
    reference_signature_of_hashes,
)

from ..kat_texts import KAT_TEXTS
from ..strategies import any_texts, hash_sets, signature_configs, texts

# Pinned outputs: (fingerprint, murmur3 of the little-endian sketch words, band keys).
# A change here changes every stored signature: bump the scheme instead.
KAT_A = FingerprintConfig(sketch_bits=256, bands=8, rows=4)
KAT_B = FingerprintConfig(ngram=1, weighting="tf", seed=7, sketch_bits=64, bands=4, rows=2)
KAT_SIG: dict[tuple[FingerprintConfig, str], tuple[int, int, list[int]]] = {
    (KAT_A, "ascii"): (0xF8130A3876855016, 0x6A56BA436FCB4A4B, [0x6E6D05666AE6A49D, 0x5C1B0B33D9EBAD7A, 0x53E39FD532CEE890, 0xF237C5D7216BB34D, 0xC0332E8408B6389D, 0x430B78BC9A573098, 0x32AF808AFD58996C, 0x70AD4DB3D4882CD2]),
    (KAT_A, "cjk"): (0xA89433382067C185, 0xCBF433BAD2DDCBC0, [0x9DB1F1F98A020687, 0x7A3C9293FEE556A9, 0xAD19FA9FC0876846, 0x76E7E50CB7AA9E7B, 0x1140767FBF1E50C6, 0xCE36497FB6C20385, 0xBF69AE5D5988000D, 0x17280BE988D74444]),
    (KAT_A, "one_word"): (0xCBD8A7B341BD9B02, 0xECCFD378BB146ECA, [0xE1941B12E6A79A7C, 0xE87897AC3134E969, 0xB725CF4847172150, 0x2E279781092015CB, 0x6E29110A8A07F602, 0x013CC1365232B9C0, 0xFCF990DC7BCF96C7, 0xD19EC7584611998E]),
    (KAT_A, "empty"): (0x00A7ABEBDA1BBA76, 0x30C882437F07DCA2, [0xF2C1A1BFEC9E2FE0, 0xB14CA753AE3BF23B, 0x9DF7B96296206766, 0x8BDD0E98B6946E2B, 0xDCD05931F6DA56FD, 0xE964446DDC539C68, 0xBDF6F8814BC0126B, 0x476FD14B7CFE5821]),
    (KAT_A, "punctuation"): (0xCCC081A341F7AE59, 0xC7FFE954EFAC09E6, [0x79DF8339196FA4C6, 0x93820EE118FA8B3E, 0x88A6EE2F1390A024, 0xCD9DB2A20DCDDC1D, 0x032B60B25B21A2A6, 0xE766D2DE6C04A0AC, 0x9AC6833377FF0D6E, 0x6D90F32573E8A23D]),
    (KAT_B, "ascii"): (0x30A96B5FBF18617E, 0xBD7713A43BCA4D37, [0xF042AE71CB4E7918, 0x981BCE2A57123FC3, 0xFDDCBC5A6461527F, 0x493DC53D123DDA54]),
    (KAT_B, "cjk"): (0x0116E7A3CC52B512, 0x10E003552B1BEB71, [0x5CE79EFA070A0238, 0x0483C8BC9D0D8B95, 0x96E382406A63D271, 0xE7CE2BD99C49D045]),
    (KAT_B, "one_word"): (0x47EB53181008E729, 0xF11EEC3C703E8E35, [0xFBB0453DBBE3BB72, 0x3A90C0125EBFF837, 0x0952A82E73BCAC61, 0x28D69EA9E2D4CE08]),
    (KAT_B, "empty"): (0xFD6A3B285F58372E, 0xFCB81E93CF94E8D9, [0x7D6D44F2786A52DE, 0x7B20FC51C81CFD45, 0x84AC5918CCA60639, 0x06624D13A712E2F8]),
    (KAT_B, "punctuation"): (0x125743829A7B71E1, 0xD7F5DE3D3454ED6F, [0xA3A2186353D9554A, 0xADC1F9103BC1C448, 0x6171CE83CE7765CB, 0xD9F6D5CA2B5BA7D9]),
}


def _digest(sketch: np.ndarray) -> int:
    return mmh3.hash64(np.asarray(sketch, dtype="<u8").tobytes(), 0, signed=False)[0]


def _as_tuple(sig: Signature) -> tuple[int, list[int], list[int]]:
    return sig.fingerprint, sig.sketch.tolist(), sig.bands.tolist()


def _sets_signatures(sets: list[np.ndarray], cfg: FingerprintConfig) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sets], out=offsets[1:])
    return _core.signature_hashes(
        np.concatenate(sets).astype(np.uint64), offsets, cfg.seed, cfg.sketch_bits, cfg.bands, cfg.rows
    )


# --- C pipeline == reference ---------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(text=any_texts, cfg=signature_configs())
def test_c_pipeline_equals_reference(text, cfg):
    """The fused C signature pipeline equals the pure-Python reference on any text and config."""
    assert _as_tuple(simstore.signature(text, cfg)) == reference_signature(text, cfg)


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(st.one_of(texts(), any_texts), max_size=12), cfg=signature_configs())
def test_batch_equals_reference_and_fingerprints(batch, cfg):
    """Batched signatures equal the reference per text; fingerprints equal fingerprints()."""
    sigs = simstore.signatures(batch, cfg)
    assert len(sigs) == len(batch)
    assert np.array_equal(sigs.fingerprints, simstore.fingerprints(batch, cfg))
    for text, sig in zip(batch, sigs, strict=True):
        assert _as_tuple(sig) == reference_signature(text, cfg)


@settings(max_examples=100, deadline=None)
@given(hashes=hash_sets, cfg=signature_configs())
def test_hash_set_entry_point_equals_reference(hashes, cfg):
    """The C hash-set entry point equals the reference for any set, tiny sets included."""
    arr = np.array(sorted(hashes), dtype=np.uint64)
    sk, bk = _sets_signatures([arr, arr[::-1].copy()], cfg)
    words, keys = reference_signature_of_hashes(hashes, cfg)
    assert sk[0].tolist() == sk[1].tolist() == words
    assert bk[0].tolist() == bk[1].tolist() == keys


def test_largest_shape_equals_reference():
    """The largest allowed sketch and band shape also equals the reference."""
    cfg = FingerprintConfig(seed=(1 << 32) - 1, sketch_bits=4096, bands=64, rows=16)
    for text in ("a b c d e f g h", KAT_TEXTS["accents"], ""):
        assert _as_tuple(simstore.signature(text, cfg)) == reference_signature(text, cfg)


def test_chunked_batches_equal_single_calls(monkeypatch):
    """Batches crossing the internal chunk size give the same signatures as one by one."""
    from simstore.text import parallel

    batch = [f"document number {i} with some shared words" for i in range(30)] + ["", "!!", "x"]
    monkeypatch.setattr(parallel, "CHUNK_CHARS", 64)
    got = simstore.signatures(batch)
    monkeypatch.undo()
    assert [_as_tuple(s) for s in got] == [_as_tuple(simstore.signature(t)) for t in batch]


def test_weighting_changes_only_the_fingerprint():
    """Signatures are set-based: weighting changes the fingerprint, never sketch or bands."""
    text = "spam spam spam eggs spam bacon spam spam eggs"
    sigs = [
        simstore.signature(text, FingerprintConfig(ngram=1, weighting=w, sketch_bits=128, bands=4, rows=2))
        for w in ("uniform", "tf", "logtf")
    ]
    assert all(np.array_equal(s.sketch, sigs[0].sketch) for s in sigs)
    assert all(np.array_equal(s.bands, sigs[0].bands) for s in sigs)
    assert len({s.fingerprint for s in sigs}) > 1


def test_featureless_texts_use_the_no_feature_hash():
    """Texts without tokens get their no-feature hash as fingerprint and only feature."""
    a, b, c, d = simstore.signatures(["!!!", "???", "", " \n "])
    assert a != b and c == d
    assert c.fingerprint == simstore.EMPTY_FINGERPRINT
    words, keys = reference_signature_of_hashes({simstore.EMPTY_FINGERPRINT}, SIGNATURE_CONFIG)
    assert c.sketch.tolist() == words and c.bands.tolist() == keys


# --- known answers ---------------------------------------------------------------------


@pytest.mark.parametrize("cfg, name", list(KAT_SIG))
def test_known_answers(cfg, name):
    """Each pinned text still gives its pinned fingerprint, sketch digest and band keys."""
    fp, digest, keys = KAT_SIG[(cfg, name)]
    sig = simstore.signature(KAT_TEXTS[name], cfg)
    assert (sig.fingerprint, _digest(sig.sketch), sig.bands.tolist()) == (fp, digest, keys)
    ref_fp, ref_words, ref_keys = reference_signature(KAT_TEXTS[name], cfg)
    assert (ref_fp, _digest(np.array(ref_words, dtype=np.uint64)), ref_keys) == (fp, digest, keys)


def test_known_answers_batched_together():
    """A batch of the pinned texts gives the pinned values, whatever its neighbours."""
    names = sorted({n for _, n in KAT_SIG})
    sigs = simstore.signatures([KAT_TEXTS[n] for n in names], KAT_A)
    for name, sig in zip(names, sigs, strict=True):
        assert _digest(sig.sketch) == KAT_SIG[(KAT_A, name)][1]


# --- densification ----------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [KAT_A, KAT_B, SIGNATURE_CONFIG])
def test_one_feature_fills_every_bin_with_its_value(cfg):
    """A one-feature set: every densified sketch and band bin holds that feature's value."""
    h = 0x0123456789ABCDEF
    sk, bk = _sets_signatures([np.array([h], dtype=np.uint64)], cfg)
    v_sketch = _fmix64(h ^ _fmix64(cfg.seed ^ _SALT_TAGS["sketch"])) & 0xFFFFFFFF
    v_band = _fmix64(h ^ _fmix64(cfg.seed ^ _SALT_TAGS["bands"])) & 0xFFFFFFFF
    salt_o, b = _fmix64(cfg.seed ^ _SALT_TAGS["odd"]), cfg.sketch_bits
    odd = 0
    for i in range(2 * b):
        odd ^= 1 << ((_fmix64(salt_o ^ ((i << 32) | v_sketch)) >> 32) * b >> 32)
    assert sk[0].tolist() == [(odd >> (64 * w)) & ((1 << 64) - 1) for w in range(b // 64)]
    row = struct.pack(f"<{cfg.rows}I", *[v_band] * cfg.rows)
    seeds = [(cfg.seed + 1 + beta) % (1 << 32) for beta in range(cfg.bands)]
    assert bk[0].tolist() == [mmh3.hash64(row, s, signed=False)[0] for s in seeds]


@settings(max_examples=200, deadline=None)
@given(
    occupied=st.dictionaries(st.integers(0, 127), st.integers(0, 2**32 - 1), min_size=1),
    salt=st.integers(0, 2**64 - 1),
)
def test_densify_fills_from_originally_occupied_bins_only(occupied, salt):
    """Densification keeps occupied bins and fills each empty one from an originally occupied one."""
    bins = [occupied.get(i) for i in range(128)]
    out = reference_densify(bins, salt)
    assert all(out[i] == v for i, v in occupied.items())
    assert set(out) <= set(occupied.values())


@pytest.mark.parametrize("occupied", [{0: 7}, {0: 7, 1: 9}, {5: 1, 40: 2, 63: 3}])
def test_densify_never_borrows_a_borrowed_value(occupied):
    """Each empty bin takes the first originally occupied bin of its own sequence, never a filled one."""
    n, salt = 64, 12345
    bins = [occupied.get(i) for i in range(n)]
    out = reference_densify(bins, salt)
    for i in range(n):
        if i in occupied:
            continue
        tries = [(_fmix64(salt ^ ((i << 32) | a)) >> 32) * n >> 32 for a in range(1, 33)]
        hits = [j for j in tries if j in occupied]
        j = hits[0] if hits else next(k % n for k in range(tries[-1] + 1, tries[-1] + n + 1) if k % n in occupied)
        assert out[i] == occupied[j]


# --- the estimator ----------------------------------------------------------------------


@pytest.mark.parametrize("bits", [64, 512, 4096])
def test_formula_equals_reference_for_every_distance(bits):
    """jaccard_from_distance equals the scalar formula for every d in 0..b."""
    d = np.arange(bits + 1)
    got = jaccard_from_distance(d, bits)
    assert np.allclose(got, [reference_jaccard(int(x), bits) for x in d], rtol=0, atol=1e-12)
    assert jaccard_from_distance(0, bits) == 1.0 and jaccard_from_distance(bits // 2, bits) == 0.0
    assert np.all(np.diff(got) <= 0)


def test_identical_texts_estimate_one():
    """Identical texts (and text equal after normalization) estimate Jaccard 1.0."""
    a = simstore.signature(KAT_TEXTS["ascii"])
    b = simstore.signature(KAT_TEXTS["ascii_case_punct"])
    assert a == b and a.jaccard(b) == 1.0
    sigs = simstore.signatures([KAT_TEXTS["ascii"]] * 3)
    assert sketch_jaccard(a, sigs).tolist() == [1.0] * 3


def _planted_pairs(rng, jaccard: float, union: int, trials: int, cfg) -> np.ndarray:
    """Estimates for `trials` pairs of random hash sets whose true Jaccard is `jaccard`."""
    common = round(jaccard * union)
    only = (union - common) // 2
    x = rng.integers(0, 2**64, size=(trials, common + 2 * only), dtype=np.uint64)
    a, b = x[:, : common + only], np.concatenate([x[:, :common], x[:, common + only :]], axis=1)
    sk, _ = _sets_signatures(list(a) + list(b), cfg)
    return sketch_jaccard(sk[:trials], sk[trials:])


@pytest.mark.parametrize("true_j", [0.8, 0.9, 0.95])
def test_mean_estimate_is_unbiased_at_high_similarity(true_j):
    """Over many planted pairs the mean estimate is within 5 standard errors of the true J."""
    rng = np.random.default_rng(20240601)
    est = _planted_pairs(rng, true_j, 1000, 600, SIGNATURE_CONFIG)
    se = est.std(ddof=1) / np.sqrt(len(est))
    assert abs(est.mean() - true_j) < 5 * se
    # A wrong scale (Delta / 2b instead of Delta / 4b) would sit at 1 - 2(1 - J).
    assert abs(est.mean() - (2 * true_j - 1)) > 40 * se


def test_median_estimate_at_half_similarity():
    """At J = 0.5 the median estimate is near 0.5 (the mean is biased low: sketches saturate)."""
    rng = np.random.default_rng(7)
    est = _planted_pairs(rng, 0.5, 1000, 1000, SIGNATURE_CONFIG)
    assert abs(np.median(est) - 0.5) < 0.05
    assert est.mean() < 0.5  # saturated pairs (2d >= b) estimate 0


@pytest.mark.parametrize("bits", [512, 640])
def test_disjoint_sets_estimate_low(bits):
    """Disjoint sets never reach near-duplicate levels (>= 0.8); most stay far below.

    The odd sketch saturates for unrelated sets (about half its bits differ), so
    their estimates spread over 0..~0.7: the noise floor docs/quality.md reports.
    """
    rng = np.random.default_rng(11)
    cfg = FingerprintConfig(sketch_bits=bits, bands=16, rows=8)
    est = _planted_pairs(rng, 0.0, 1000, 500, cfg)
    assert est.max() < 0.8
    assert np.mean(est >= 0.7) < 0.02
    assert est.mean() < 0.45


def test_sketch_jaccard_shapes_and_c_distances():
    """One-one gives a float, one-many and row-wise arrays; C distances equal numpy popcounts."""
    sigs = simstore.signatures([f"text {i} shared words here and there" for i in range(5)])
    one = sketch_jaccard(sigs[0], sigs[1])
    assert isinstance(one, float) and one == sigs[0].jaccard(sigs[1])
    many = sketch_jaccard(sigs[0], sigs)
    assert many.shape == (5,) and many[0] == 1.0 and many[1] == one
    assert np.array_equal(sketch_jaccard(sigs, sigs[0]), many)
    assert np.array_equal(sketch_jaccard(sigs, sigs), np.ones(5))
    assert np.array_equal(sketch_jaccard(sigs.sketches, sigs.sketches[0]), many)
    xor = sigs.sketches ^ sigs.sketches[::-1]
    popcount = np.unpackbits(xor.view(np.uint8), axis=1).sum(axis=1)
    d = _core.sketch_distance_pairwise(sigs.sketches, np.ascontiguousarray(sigs.sketches[::-1]))
    assert d.tolist() == popcount.tolist()
    to_last = np.unpackbits((sigs.sketches ^ sigs.sketches[4]).view(np.uint8), axis=1).sum(axis=1)
    assert _core.sketch_distance_one(sigs.sketches[4], sigs.sketches).tolist() == to_last.tolist()


def test_near_duplicate_texts_estimate_high_and_unrelated_low():
    """A one-word edit in a long text keeps J high; an unrelated text estimates near 0."""
    words = [f"token{i}" for i in range(400)]
    a = simstore.signature(" ".join(words))
    words[200] = "changed"
    b = simstore.signature(" ".join(words))
    c = simstore.signature(" ".join(f"other{i}" for i in range(400)))
    assert a.jaccard(b) > 0.95
    assert a.jaccard(c) < 0.8
    assert (a.bands == b.bands).sum() >= SIGNATURE_CONFIG.bands // 2


# --- containers -------------------------------------------------------------------------


def test_signature_is_frozen_read_only_and_equal_by_value():
    """Signature arrays are read-only copies; equal signatures compare and hash equal."""
    src = simstore.signatures(["alpha beta gamma", "alpha beta gamma"])
    a, b = src[0], src[1]
    assert a == b and hash(a) == hash(b) and a is not b
    with pytest.raises(ValueError):
        a.sketch[0] = 1
    with pytest.raises(AttributeError):
        a.fingerprint = 1  # type: ignore[misc]
    sketch = a.sketch.copy()
    c = Signature(a.config, a.fingerprint, sketch, a.bands.copy())
    sketch[0] ^= 1
    assert c == a and c != Signature(a.config, a.fingerprint, sketch, a.bands.copy())
    assert "fingerprint=0x" in repr(a)


def test_signatures_indexing_iteration_and_concat():
    """Signatures index by int, slice, int array and bool mask; iterate; concat in order."""
    batch = [f"doc {i} with several words in it" for i in range(6)]
    sigs = simstore.signatures(batch)
    assert len(sigs) == 6 and [s.fingerprint for s in sigs] == sigs.fingerprints.tolist()
    assert sigs[-1] == sigs[5] == simstore.signature(batch[5])
    assert sigs[1:3].fingerprints.tolist() == sigs.fingerprints[1:3].tolist()
    picked = sigs[np.array([4, 0])]
    assert [s.fingerprint for s in picked] == [sigs[4].fingerprint, sigs[0].fingerprint]
    mask = np.array([True, False] * 3)
    assert len(sigs[mask]) == 3 and sigs[mask][1] == sigs[2]
    both = Signatures.concat([sigs[:2], sigs[2:]])
    assert both.sketches.tolist() == sigs.sketches.tolist()
    assert both.bands.tolist() == sigs.bands.tolist()
    assert all(a.flags.c_contiguous and a.dtype == np.uint64 for a in (both.sketches, picked.bands))
    assert len(simstore.signatures([])) == 0
    with pytest.raises(IndexError):
        sigs[6]


def test_default_config_and_signature_config():
    """None means SIGNATURE_CONFIG: DEFAULT_CONFIG's fingerprint plus a signature."""
    sig = simstore.signature("hello there world")
    assert sig.config == SIGNATURE_CONFIG and SIGNATURE_CONFIG.has_signature
    assert sig.fingerprint == simstore.fingerprint("hello there world")
    assert sig.sketch.shape == (SIGNATURE_CONFIG.sketch_bits // 64,)
    assert sig.bands.shape == (SIGNATURE_CONFIG.bands,)


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [b"bytes", None, 42, ["list"]])
def test_non_str_texts_raise_type_errors(bad):
    """A non-str text raises SimstoreTypeError naming it, as fingerprints() does."""
    with pytest.raises(SimstoreTypeError, match="'text'"):
        simstore.signature(bad)
    with pytest.raises(SimstoreTypeError, match=r"'texts\[1\]'"):
        simstore.signatures(["ok", bad])
    with pytest.raises(SimstoreTypeError, match="'texts'"):
        simstore.signatures("abc")


def test_configs_without_signature_are_refused():
    """A Hamming-only config is refused with a hint to SIGNATURE_CONFIG; a non-config too."""
    with pytest.raises(InvalidConfigError, match="SIGNATURE_CONFIG"):
        simstore.signature("text", FingerprintConfig())
    with pytest.raises(InvalidConfigError, match="sketch_bits"):
        simstore.signatures(["text"], simstore.DEFAULT_CONFIG)
    with pytest.raises(SimstoreTypeError, match="'config'"):
        simstore.signature("text", {"sketch_bits": 64})  # type: ignore[arg-type]


def test_signature_constructor_checks_shape_and_dtype():
    """Wrong sketch size, band count, dtype or container raise InvalidSignatureError."""
    sig = simstore.signature("some words here")
    words = SIGNATURE_CONFIG.sketch_bits // 64
    cases = [
        (np.zeros(words + 1, np.uint64), sig.bands, rf"'sketch' must have shape \({words},\)"),
        (sig.sketch, np.zeros(3, np.uint64), rf"'bands' must have shape \({SIGNATURE_CONFIG.bands},\)"),
        (sig.sketch.astype(np.int64), sig.bands, "'sketch' must be a uint64 numpy array"),
        (sig.sketch.tolist(), sig.bands, r"got list"),
        (sig.sketch[None, :], sig.bands, "must have shape"),
    ]
    for sketch, bands, message in cases:
        with pytest.raises(InvalidSignatureError, match=message):
            Signature(SIGNATURE_CONFIG, sig.fingerprint, sketch, bands)
    with pytest.raises(simstore.InvalidFingerprintError):
        Signature(SIGNATURE_CONFIG, -1, sig.sketch, sig.bands)
    with pytest.raises(InvalidConfigError):
        Signature(FingerprintConfig(), sig.fingerprint, sig.sketch, sig.bands)
    assert issubclass(InvalidSignatureError, ValueError)
    assert issubclass(InvalidSignatureError, simstore.SimstoreValueError)


def test_signatures_constructor_checks_shapes_and_dtypes():
    """Signatures refuses arrays whose dtype, width or length do not fit the config."""
    s = simstore.signatures(["a b c", "d e f"])
    cfg = s.config
    with pytest.raises(InvalidSignatureError, match="'fingerprints' must be a uint64"):
        Signatures(cfg, s.fingerprints.astype(np.int64), s.sketches, s.bands)
    with pytest.raises(InvalidSignatureError, match="'sketches' must have shape"):
        Signatures(cfg, s.fingerprints, s.sketches[:, :1], s.bands)
    with pytest.raises(InvalidSignatureError, match="'bands' must have shape"):
        Signatures(cfg, s.fingerprints, s.sketches, s.bands[:1])
    with pytest.raises(InvalidSignatureError, match="'sketches' must be a uint64"):
        Signatures(cfg, s.fingerprints, s.sketches.astype(np.float64), s.bands)
    with pytest.raises(SimstoreTypeError, match="indices"):
        s[np.array([0.5])]


def test_mixed_configs_are_refused():
    """concat and sketch_jaccard refuse signatures of different configs or sizes."""
    a = simstore.signatures(["a b c d"], KAT_A)
    b = simstore.signatures(["a b c d"], FingerprintConfig(seed=1, sketch_bits=256, bands=8, rows=4))
    c = simstore.signatures(["a b c d"], KAT_B)
    with pytest.raises(InvalidSignatureError, match="different configs"):
        Signatures.concat([a, b])
    with pytest.raises(InvalidSignatureError, match="at least one"):
        Signatures.concat([])
    with pytest.raises(SimstoreTypeError, match=r"'items\[1\]'"):
        Signatures.concat([a, a[0]])  # type: ignore[list-item]
    with pytest.raises(InvalidSignatureError, match="different configs"):
        sketch_jaccard(a[0], b[0])
    with pytest.raises(InvalidSignatureError, match="different configs"):
        a[0].jaccard(b[0])
    with pytest.raises(InvalidSignatureError, match="sketch sizes differ"):
        sketch_jaccard(a.sketches, c.sketches)
    with pytest.raises(InvalidSignatureError, match="equal lengths"):
        sketch_jaccard(simstore.signatures(["x", "y"], KAT_A), a)
    with pytest.raises(InvalidSignatureError, match="uint64 sketch array"):
        sketch_jaccard(a.sketches.astype(np.int64), a)
    with pytest.raises(SimstoreTypeError, match="'other'"):
        a[0].jaccard(a.sketches)  # type: ignore[arg-type]


# --- config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sketch_bits": 100, "bands": 1, "rows": 1}, "'sketch_bits' must be 0 or a multiple of 64 in 64..4096"),
        ({"sketch_bits": 4160, "bands": 1, "rows": 1}, "'sketch_bits' must be 0 or a multiple of 64"),
        ({"sketch_bits": -64, "bands": 1, "rows": 1}, "'sketch_bits' must be 0 or a multiple of 64"),
        ({"sketch_bits": 64.0, "bands": 1, "rows": 1}, "'sketch_bits' must be 0 or a multiple"),
        ({"sketch_bits": 64, "bands": 65, "rows": 1}, r"'bands' must be an int in 0..64"),
        ({"sketch_bits": 64, "bands": True, "rows": 1}, r"'bands' must be an int in 0..64"),
        ({"sketch_bits": 64, "bands": 1, "rows": 33}, r"'rows' must be an int in 0..32"),
        ({"sketch_bits": 64, "bands": 64, "rows": 17}, r"'bands' \* 'rows' must be at most 1024"),
        ({"sketch_bits": 64}, "all > 0"),
        ({"bands": 4, "rows": 4}, "all > 0"),
        ({"sketch_bits": 64, "bands": 4}, "all > 0"),
    ],
)
def test_invalid_signature_fields_say_what_is_allowed(fields, message):
    """Invalid sketch_bits / bands / rows raise InvalidConfigError saying what is allowed."""
    with pytest.raises(InvalidConfigError, match=message):
        FingerprintConfig(**fields)


def test_largest_and_smallest_shapes_are_valid():
    """The range limits themselves are accepted."""
    FingerprintConfig(sketch_bits=64, bands=1, rows=1)
    FingerprintConfig(sketch_bits=4096, bands=64, rows=16)
    FingerprintConfig(sketch_bits=4096, bands=32, rows=32)


def test_scheme_strings():
    """Hamming-only schemes are unchanged; signature configs append sketch and bands."""
    assert FingerprintConfig().scheme == "simhash64/v1;ngram=3;weighting=uniform;seed=0"
    assert not FingerprintConfig().has_signature
    cfg = FingerprintConfig(ngram=2, weighting="tf", seed=9, sketch_bits=256, bands=8, rows=4)
    assert cfg.scheme == "simhash64/v1;ngram=2;weighting=tf;seed=9;sketch=odd256;bands=8x4"


def test_to_dict_round_trips_and_old_dicts_read_back():
    """to_dict/from_dict round-trip; dicts without signature keys read back Hamming-only."""
    assert FingerprintConfig().to_dict() == {"version": 1, "ngram": 3, "weighting": "uniform", "seed": 0}
    old = {"version": 1, "ngram": 3, "weighting": "uniform", "seed": 0}
    assert FingerprintConfig.from_dict(old) == FingerprintConfig() == simstore.DEFAULT_CONFIG
    for cfg in (SIGNATURE_CONFIG, KAT_B, FingerprintConfig(ngram=5, seed=3)):
        assert FingerprintConfig.from_dict(cfg.to_dict()) == cfg
    assert SIGNATURE_CONFIG.to_dict()["sketch_bits"] == SIGNATURE_CONFIG.sketch_bits


def test_c_core_refuses_bad_shapes():
    """The C entry points return -2 (mapped to a package error) for shapes the config forbids."""
    h = np.array([1, 2, 3], dtype=np.uint64)
    with pytest.raises(simstore.SimstoreError):
        _core.signature_hashes(h, np.array([0, 3], dtype=np.int64), 0, 100, 1, 1)
    with pytest.raises(simstore.SimstoreError):
        _core.signature_hashes(h, np.array([0, 0, 3], dtype=np.int64), 0, 64, 1, 1)
    assert _core.lib.ss_sketch_distance_one(_core.ffi.NULL, _core.ffi.NULL, 0, 0, _core.ffi.NULL) == -2
