"""Fingerprinting: known answers, the pure-Python oracle, and bad input."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import FingerprintConfig
from simstore.text.reference import reference_fingerprint, reference_simhash

from ..kat_texts import KAT_TEXTS
from ..strategies import any_texts, ascii_texts, fingerprints, texts

# Pinned outputs of simhash64/v1 with ngram=3, weighting=uniform, seed=0.
# A change here changes every stored index: bump SCHEME_VERSION instead.
KAT_V1 = {
    "ascii": 0xF8130A3876855016,
    "ascii_case_punct": 0xF8130A3876855016,
    "accents": 0x3CB171B451347E27,
    "nfkc": 0x6CF15FE9763A1342,
    "cjk": 0xA89433382067C185,
    "emoji_mixed": 0xD49220E22001268C,
    "emoji_only": 0x2AC30A1794A61F86,
    "short": 0x533F6046EB7F610E,
    "one_word": 0xCBD8A7B341BD9B02,
    "empty": 0x00A7ABEBDA1BBA76,
    "whitespace": 0x00A7ABEBDA1BBA76,
    "punctuation": 0xCCC081A341F7AE59,
    "very_long": 0x80E7F7C7E4971821,
    "cyrillic_greek": 0x02199143086A1040,
}
V1 = FingerprintConfig(ngram=3, weighting="uniform", seed=0)
CONFIGS = [
    FingerprintConfig(ngram=n, weighting=w)
    for n in (1, 2, 3, 5)
    for w in ("uniform", "tf", "logtf")
]


@pytest.mark.parametrize("name", sorted(KAT_V1))
def test_known_answers(name):
    """Each pinned text still gives its pinned fingerprint, single and batched."""
    assert simstore.fingerprint(KAT_TEXTS[name], V1) == KAT_V1[name]
    assert simstore.fingerprints([KAT_TEXTS[name]], V1)[0] == KAT_V1[name]


def test_known_answers_batched_together():
    """A batch of all known-answer texts gives the same values as one by one."""
    names = sorted(KAT_V1)
    got = simstore.fingerprints([KAT_TEXTS[n] for n in names], V1)
    assert [int(x) for x in got] == [KAT_V1[n] for n in names]


def test_known_answers_match_reference():
    """The pure-Python reference agrees with every pinned value."""
    for name, fp in KAT_V1.items():
        assert reference_fingerprint(KAT_TEXTS[name], V1) == fp


def test_single_feature_is_its_mmh3_hash():
    """A one-word text's fingerprint is mmh3.hash64 of the lower-cased word."""
    assert simstore.fingerprint("Hello") == mmh3.hash64(b"hello", 0, signed=False)[0]


def test_default_config_is_pinned_scheme():
    """The default configuration is the one the known answers pin."""
    assert simstore.DEFAULT_CONFIG == V1
    assert V1.scheme == "simhash64/v1;ngram=3;weighting=uniform;seed=0"


@settings(max_examples=300, deadline=None)
@given(text=any_texts, cfg=st.sampled_from(CONFIGS))
def test_c_pipeline_equals_reference(text, cfg):
    """The fused C pipeline equals the pure-Python reference on any text."""
    assert simstore.fingerprint(text, cfg) == reference_fingerprint(text, cfg)


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(st.one_of(texts(), ascii_texts), max_size=20), cfg=st.sampled_from(CONFIGS))
def test_numpy_weighted_path_equals_c(batch, cfg):
    """The numpy weighting path (used for IDF) equals the fused C path."""
    neutral = simstore.IdfTable({}, default=1.0)
    a = simstore.fingerprints(batch, cfg)
    b = simstore.fingerprints(batch, cfg, idf=neutral)
    assert a.dtype == np.uint64 and a.shape == (len(batch),)
    assert np.array_equal(a, b)


def test_idf_weights_change_the_vote():
    """An IDF table that mutes one shingle equals the fingerprint without it."""
    text = "alpha beta gamma delta"
    idf = simstore.IdfTable({"alpha beta gamma": 0.0}, default=1.0)
    cfg = FingerprintConfig(ngram=3)
    expected = simstore.simhash([mmh3.hash64(b"beta gamma delta", 0, signed=False)[0]])
    assert simstore.fingerprint(text, cfg, idf=idf) == expected


def test_case_punctuation_and_width_do_not_matter():
    """Normalization: case, punctuation runs and NFKC width forms give equal fingerprints."""
    a = simstore.fingerprint("Hello, World -- again")
    assert a == simstore.fingerprint("hello world again")
    assert simstore.fingerprint("ｈｅｌｌｏ world again") == a


def test_near_duplicates_are_close_and_unrelated_texts_far():
    """A one-word edit in a long text moves few bits; an unrelated text about half."""
    words = [f"token{i}" for i in range(400)]
    a = simstore.fingerprint(" ".join(words))
    words[200] = "changed"
    b = simstore.fingerprint(" ".join(words))
    c = simstore.fingerprint(" ".join(f"other{i}" for i in range(400)))
    assert simstore.hamming(a, b) <= 6
    assert simstore.hamming(a, c) >= 16


def test_featureless_texts_do_not_collide():
    """Texts without letters/digits only match texts identical after normalization."""
    fps = simstore.fingerprints(["!!!", "???", "😀", "😃", "...", "-- --"])
    assert len(set(fps.tolist())) == 6
    assert simstore.fingerprint("!!!") == simstore.fingerprint("!!!")
    assert simstore.fingerprint("") == simstore.fingerprint("  \n") == simstore.EMPTY_FINGERPRINT
    assert simstore.fingerprint("a!!!") == simstore.fingerprint("a???")


@pytest.mark.parametrize(
    "text",
    [
        "\u3040",
        "e\u0301te",
        "a <\u0338 b",
        "ΟΔΟΣ ΟΔΟΣ x",
        "İstanbul ßtraße",
        "ﬁle ＡＢＣ",
        "x\u200by",
        "٣ ١٢ arabic digits",
        "mixed中文and english",
        "tab\u00a0nbsp\u3000ideographic",
    ],
)
def test_unicode_edge_cases_match_reference(text):
    """Composition, final sigma, special lower-casing, odd spaces: C path equals reference."""
    for n in (1, 2, 3):
        cfg = FingerprintConfig(ngram=n)
        assert simstore.fingerprint(text, cfg) == reference_fingerprint(text, cfg)


def test_lone_surrogates_do_not_raise():
    """Texts holding lone surrogates (e.g. from bad decoding) still get fingerprints."""
    assert simstore.fingerprint("\ud800") == simstore.fingerprint("\ud800")
    assert simstore.fingerprint("abc \udfff def") == simstore.fingerprint("abc def")


def test_cjk_characters_are_tokens():
    """Han and Kana characters split into one token each; other scripts keep words."""
    assert simstore.tokens("東京タワー") == ["東", "京", "タ", "ワ", "ー"] or simstore.tokens(
        "東京タワー"
    ) == ["東", "京", "タ", "ワ"]
    assert simstore.tokens("Привет, мир") == ["привет", "мир"]
    assert simstore.tokens("snake_case x2") == ["snake", "case", "x2"]


def test_features_lists_shingles():
    """features() shows the shingles the fingerprint is made of."""
    assert simstore.features("a b c d") == ["a b c", "b c d"]
    assert simstore.features("a b", ngram=3) == ["a b"]
    assert simstore.features("...") == []
    assert simstore.features("a b c", ngram=1) == ["a", "b", "c"]


@settings(max_examples=100, deadline=None)
@given(
    hashes=st.lists(fingerprints, max_size=30),
    data=st.data(),
)
def test_simhash_equals_reference(hashes, data):
    """simhash() over given hashes and weights equals the Python definition."""
    weights = data.draw(
        st.lists(st.floats(-5, 5, allow_nan=False), min_size=len(hashes), max_size=len(hashes))
    )
    assert simstore.simhash(hashes) == reference_simhash(hashes, [1.0] * len(hashes))
    got = simstore.simhash(np.array(hashes, dtype=np.uint64), weights)
    assert got == reference_simhash(hashes, weights)


@given(a=fingerprints, b=fingerprints)
def test_hamming_is_popcount_of_xor(a, b):
    """hamming() is the bit count of the xor, symmetric, zero on equal inputs."""
    assert simstore.hamming(a, b) == bin(a ^ b).count("1") == simstore.hamming(b, a)
    assert simstore.hamming(a, a) == 0


@pytest.mark.parametrize("bad", [b"bytes", None, 42, 3.5, ["list"]])
def test_text_type_errors_name_the_argument(bad):
    """A non-str text raises TypeError naming the argument."""
    with pytest.raises(TypeError, match="'text'"):
        simstore.fingerprint(bad)
    with pytest.raises(simstore.SimstoreTypeError, match=r"'texts\[1\]'"):
        simstore.fingerprints(["ok", bad])


def test_texts_must_be_an_iterable_not_a_str():
    """fingerprints('abc') is refused rather than fingerprinting three letters."""
    with pytest.raises(TypeError, match="'texts'"):
        simstore.fingerprints("abc")
    with pytest.raises(TypeError, match="'texts'"):
        simstore.fingerprints(5)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"ngram": 0}, "'ngram' must be an int in 1..16"),
        ({"ngram": 2.0}, "'ngram' must be an int"),
        ({"ngram": True}, "'ngram' must be an int"),
        ({"weighting": "bm25"}, "'weighting' must be one of uniform, tf, logtf"),
        ({"seed": -1}, "'seed' must be an int in 0..2\\*\\*32-1"),
        ({"shingle": 3}, "unknown fingerprint option"),
    ],
)
def test_invalid_options_say_what_is_allowed(options, message):
    """Invalid options raise ValueError (InvalidConfigError) listing what is allowed."""
    with pytest.raises(simstore.InvalidConfigError, match=message):
        simstore.fingerprint("some text", **options)
    assert issubclass(simstore.InvalidConfigError, ValueError)


@pytest.mark.parametrize("bad", [-1, 1 << 64, 2.0, "5", None, True, float("nan")])
def test_bad_fingerprints_raise_invalid_fingerprint(bad):
    """hamming() refuses non-integers and values outside 0..2**64-1, never wrapping."""
    with pytest.raises(simstore.InvalidFingerprintError):
        simstore.hamming(bad, 0)
    with pytest.raises(ValueError):
        simstore.hamming(0, bad)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0, 2.0]),
        np.array([-1, 2], dtype=np.int64),
        np.zeros((2, 2), dtype=np.uint64),
        np.array(["a"]),
        [1, -1],
        [1, 1 << 64],
        "abc",
        5,
    ],
)
def test_simhash_refuses_bad_hash_arrays(bad):
    """simhash() refuses float, negative, 2-D, string and oversize inputs."""
    with pytest.raises(simstore.InvalidFingerprintError):
        simstore.simhash(bad)


def test_simhash_refuses_bad_weights():
    """Weights must be finite reals, one per hash."""
    with pytest.raises(simstore.InvalidConfigError):
        simstore.simhash([1, 2], [1.0])
    with pytest.raises(simstore.InvalidConfigError):
        simstore.simhash([1, 2], [1.0, float("nan")])


def test_config_round_trips_and_refuses_other_versions():
    """to_dict/from_dict round-trip; another scheme version is refused."""
    cfg = FingerprintConfig(ngram=4, weighting="tf", seed=7)
    assert FingerprintConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(simstore.InvalidConfigError, match="version"):
        FingerprintConfig.from_dict({**cfg.to_dict(), "version": 99})


def test_large_batch_crosses_chunks(monkeypatch):
    """Batches larger than the internal chunk give the same values as single calls."""
    from simstore.text import parallel

    monkeypatch.setattr(parallel, "CHUNK_CHARS", 64)
    batch = [f"document number {i} with some shared words" for i in range(50)] + ["", "!!"]
    got = simstore.fingerprints(batch)
    monkeypatch.undo()
    assert [int(x) for x in got] == [simstore.fingerprint(t) for t in batch]
