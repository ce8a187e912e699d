"""The C Unicode tokenizer: known answers in many scripts, every code point, arbitrary text."""

from __future__ import annotations

import pathlib
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simstore
from simstore import FingerprintConfig
from simstore.native import core
from simstore.text import fingerprinting, minhash, parallel
from simstore.text.reference import reference_fingerprint, reference_signature
from simstore.text.rules import tables_id

from ..kat_scripts import SCRIPT_TEXTS

# Pinned outputs of simhash64/v1 (ngram=3, uniform, seed 0), computed by the reference.
KAT_SCRIPTS = {
    "latin_diacritics": 0x19F8BDA0733C7E30,
    "latin_decomposed": 0x8BE5475A469807E4,
    "greek": 0x42244784A30F3100,
    "cyrillic": 0x22822309561E5902,
    "arabic": 0x867870CD721B634D,
    "hebrew": 0x6E4E8A130745E180,
    "devanagari": 0x1B08293354B2FBEA,
    "thai": 0x60215C10C16CBC4A,
    "cjk": 0x983985D1BD202250,
    "hangul": 0xE886CF814220EB78,
    "emoji": 0x29A84284D042B721,
    "combining": 0x15642583A260AB52,
    "fullwidth": 0x31E4D887D6633E6A,
    "ligatures": 0xDC9A9706866D1739,
    "turkish": 0x168083341108A6A0,
    "german": 0x188C6B10C282E006,
    "mixed_long": 0x49415849A391269D,
}
CONFIGS = [FingerprintConfig(ngram=n, weighting=w) for n in (1, 2, 3) for w in ("uniform", "tf")]
CSRC = pathlib.Path(__file__).resolve().parents[2] / "csrc"


def _c_nfkc(text: str) -> str:
    return core.unicode_nfkc(text.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")


def _c_tokens(text: str) -> list[str]:
    raw = core.unicode_tokens(text.encode("utf-8", "surrogatepass"))
    return raw.decode("utf-8", "surrogatepass").split(" ") if raw else []


def test_this_build_tokenizes_in_c():
    """The C tables were generated from this Python's Unicode data and these rules."""
    assert core.unicode_tables_id() == tables_id()
    assert unicodedata.unidata_version in tables_id()
    assert fingerprinting.UNICODE_IN_C


@pytest.mark.parametrize("name", sorted(KAT_SCRIPTS))
def test_script_known_answers(name):
    """Each script's pinned fingerprint comes out of C and of the reference alike."""
    text = SCRIPT_TEXTS[name]
    assert simstore.fingerprint(text) == KAT_SCRIPTS[name]
    assert reference_fingerprint(text) == KAT_SCRIPTS[name]


def test_script_texts_equal_reference_under_every_config():
    """Fingerprints and signatures of every script text equal the reference, batched."""
    texts = list(SCRIPT_TEXTS.values())
    for cfg in CONFIGS:
        got = simstore.fingerprints(texts, cfg)
        assert [int(x) for x in got] == [reference_fingerprint(t, cfg) for t in texts]
    sigs = simstore.signatures(texts)
    for t, sig in zip(texts, sigs, strict=True):
        fp, words, keys = reference_signature(t, simstore.SIGNATURE_CONFIG)
        assert (sig.fingerprint, sig.sketch.tolist(), sig.bands.tolist()) == (fp, words, keys)


@pytest.mark.parametrize("context", ["{}", "a{}\u0301", "\u1100{}\u11a8", "A\u03a3{}\u03a3", "{}\u0323\u0302e"])
def test_every_code_point_in_context(context):
    """For every code point (surrogates too) in a context, C's NFKC and tokens equal Python's."""
    chars = [chr(c) for c in range(0x110000)]
    for start in range(0, len(chars), 1 << 15):
        text = "|".join(context.format(ch) for ch in chars[start : start + (1 << 15)])
        assert _c_nfkc(text) == unicodedata.normalize("NFKC", text), hex(start)
        assert _c_tokens(text) == simstore.tokens(text), hex(start)


composing = st.sampled_from(
    list("aeiouAEIOUnNcCsSzZ\u03a3\u03c3 .'-") + ["\u0130", "\u0131", "\u1100", "\u1161", "\u11a8",
     "\uac00", "\u0cbf", "\u0cd5", "\u0915", "\u093c", "\u05e9", "\u05c1", "\u3099", "\u304b",
     "\ufb01", "\u00df", "\u1e9e", "\u212b", "\u2126"]
    + [chr(c) for c in (0x300, 0x301, 0x302, 0x308, 0x323, 0x327, 0x338, 0x345, 0x344, 0x1dce, 0x20dd)]
)
arbitrary = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=composing, max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x2FFFF), max_size=60),
)


@settings(max_examples=300, deadline=None)
@given(text=arbitrary)
def test_c_tokens_and_nfkc_equal_python_on_arbitrary_unicode(text):
    """Arbitrary Unicode (lone surrogates, marks in any order): C's NFKC and tokens equal Python's."""
    assert _c_nfkc(text) == unicodedata.normalize("NFKC", text)
    assert _c_tokens(text) == simstore.tokens(text)


@settings(max_examples=150, deadline=None)
@given(text=arbitrary, cfg=st.sampled_from(CONFIGS))
def test_c_fingerprints_equal_reference_on_arbitrary_unicode(text, cfg):
    """Fingerprints of arbitrary Unicode through the C tokenizer equal the reference."""
    assert simstore.fingerprint(text, cfg) == reference_fingerprint(text, cfg)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_malformed_utf8_reads_as_replacement_characters(data):
    """Bytes that are not UTF-8 read as U+FFFD (a separator): the tokens of Python's 'replace' decoding."""
    got = core.unicode_tokens(data).decode("utf-8", "surrogatepass")
    assert (got.split(" ") if got else []) == simstore.tokens(data.decode("utf-8", "replace"))


def test_python_path_gives_the_same_fingerprints(monkeypatch):
    """Without C tables for this Python (another Unicode version), the Python path gives equal results."""
    texts = list(SCRIPT_TEXTS.values()) + ["", "!!", "plain ascii words here"]
    native_fps = simstore.fingerprints(texts)
    native_sigs = simstore.signatures(texts)
    monkeypatch.setattr(fingerprinting, "UNICODE_IN_C", False)
    monkeypatch.setattr(minhash, "UNICODE_IN_C", False)
    assert np.array_equal(simstore.fingerprints(texts), native_fps)
    fallback = simstore.signatures(texts)
    assert np.array_equal(fallback.sketches, native_sigs.sketches)
    assert np.array_equal(fallback.bands, native_sigs.bands)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threads_give_the_same_arrays(monkeypatch, threads):
    """Any thread count gives exactly the one-thread fingerprints and signatures."""
    texts = [SCRIPT_TEXTS[k] * (1 + i % 3) for i, k in enumerate(sorted(SCRIPT_TEXTS) * 6)]
    texts += ["", "...", "x"]
    one_fp = simstore.fingerprints(texts, threads=1)
    one_sig = simstore.signatures(texts, threads=1)
    monkeypatch.setattr(parallel, "_MIN_PARALLEL_CHUNK", 500)
    fps = simstore.fingerprints(texts, threads=threads)
    sigs = simstore.signatures(texts, threads=threads)
    assert len(parallel._ranges(texts, threads)) > 1 or threads == 1
    assert np.array_equal(fps, one_fp)
    assert np.array_equal(sigs.sketches, one_sig.sketches)
    assert np.array_equal(sigs.bands, one_sig.bands)


def test_parallel_chunks_start_and_end_small(monkeypatch):
    """Several threads: chunks cover the texts in order, growing at first (every thread
    starts its C pass soon) and shrinking at the end (the threads finish together)."""
    monkeypatch.setattr(parallel, "_MIN_PARALLEL_CHUNK", 10)
    texts = ["x" * 100] * 400
    spans = parallel._ranges(texts, 2)
    assert spans[0][0] == 0 and spans[-1][1] == len(texts)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    sizes = [stop - start for start, stop in spans]
    assert sizes[0] < sizes[1] < sizes[2] < sizes[3] == max(sizes)
    assert sizes[-1] < max(sizes) // 4
    assert parallel._ranges(texts, 1) == [(0, len(texts))]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_thread_counts_are_refused(bad):
    """threads must be an int >= 1 (or None for every core)."""
    with pytest.raises((simstore.InvalidConfigError, simstore.SimstoreTypeError), match="'threads'"):
        simstore.fingerprints(["a b c"], threads=bad)
    with pytest.raises((simstore.InvalidConfigError, simstore.SimstoreTypeError), match="'threads'"):
        simstore.signatures(["a b c"], threads=bad)


@pytest.mark.skipif(not (CSRC / "gen_unicode.py").exists(), reason="needs the source tree")
def test_generated_tables_are_reproducible():
    """Generating the tables twice gives the same bytes, named by this Python's tables id."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_unicode", CSRC / "gen_unicode.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    first_id, first = gen.build()
    second_id, second = gen.build()
    assert first == second and first_id == second_id == tables_id()
