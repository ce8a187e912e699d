"""Hypothesis strategies shared by the whole suite (fingerprints, neighbours, texts)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from simstore import FingerprintConfig

MAX_FP = (1 << 64) - 1

fingerprints = st.one_of(
    st.integers(min_value=0, max_value=MAX_FP),
    st.sampled_from([0, MAX_FP, 1, 1 << 63, (1 << 32) - 1, MAX_FP ^ 1]),
)


@st.composite
def near_neighbour(draw, fp: int, max_distance: int) -> int:
    """A fingerprint at most max_distance bits from fp (bits chosen anywhere)."""
    bits = draw(st.sets(st.integers(0, 63), max_size=max_distance))
    out = fp
    for b in bits:
        out ^= 1 << b
    return out


@st.composite
def packed_neighbour(draw, fp: int, distance: int) -> int:
    """A fingerprint exactly `distance` bits from fp, flips packed into one run."""
    start = draw(st.integers(0, 64 - distance)) if distance else 0
    out = fp
    for b in range(start, start + distance):
        out ^= 1 << b
    return out


@st.composite
def fingerprint_sets(draw, max_size: int = 60, max_distance: int = 8) -> list[int]:
    """Clustered fingerprints: seeds, near neighbours, packed flips and exact copies."""
    seeds = draw(st.lists(fingerprints, min_size=1, max_size=6))
    out: list[int] = list(seeds)
    n = draw(st.integers(0, max_size))
    for _ in range(n):
        base = draw(st.sampled_from(out))
        kind = draw(st.integers(0, 3))
        if kind == 0:
            out.append(base)
        elif kind == 1:
            out.append(draw(near_neighbour(base, max_distance)))
        elif kind == 2:
            out.append(draw(packed_neighbour(base, draw(st.integers(0, max_distance)))))
        else:
            out.append(draw(fingerprints))
    return out


words = st.sampled_from(
    "the of and to in a is that for it as was with be by on not he this are or his from"
    " crème brûlée naïve 東京 中文 ｆｕｌｌ ΑΒΓ привет 42 x² ﬁle".split()
)
separators = st.sampled_from([" ", "  ", "\n", "\t", ", ", ". ", "-", "_", "!", " — ", "😀"])


@st.composite
def texts(draw, max_words: int = 40) -> str:
    """Word-like texts mixing ASCII, accents, CJK, compatibility forms and emoji."""
    ws = draw(st.lists(words, max_size=max_words))
    parts = []
    for w in ws:
        parts.append(draw(st.sampled_from([w, w.upper(), w.title()])))
        parts.append(draw(separators))
    return "".join(parts)


ascii_texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=300)
any_texts = st.one_of(texts(), ascii_texts, st.text(max_size=200))


@st.composite
def crowded_sets(draw, max_size: int = 80) -> list[int]:
    """Fingerprints sharing a long common prefix (free low bits), some copied or near."""
    free = draw(st.integers(1, 24))
    prefix = draw(fingerprints) >> free << free
    low = st.integers(0, (1 << free) - 1)
    out = draw(st.lists(low.map(lambda x: prefix | x), min_size=1, max_size=max_size))
    out += draw(st.lists(st.sampled_from(out), max_size=10))
    return out


@st.composite
def signature_configs(draw, sketch_bits=(64, 128, 512)):
    """Configs with a signature: small and default sketch sizes, odd band shapes, edge seeds."""
    bands = draw(st.sampled_from([1, 3, 4, 16, 64]))
    rows = draw(st.sampled_from([r for r in (1, 2, 5, 8, 16) if bands * r <= 1024]))
    return FingerprintConfig(
        ngram=draw(st.sampled_from([1, 2, 3, 5])),
        weighting=draw(st.sampled_from(["uniform", "tf", "logtf"])),
        seed=draw(st.sampled_from([0, 1, 7, (1 << 32) - 1])),
        sketch_bits=draw(st.sampled_from(sketch_bits)),
        bands=bands,
        rows=rows,
    )


hash_sets = st.one_of(
    st.sets(fingerprints, min_size=1, max_size=3),
    st.sets(fingerprints, min_size=1, max_size=400),
)


def planted_hash_sets(
    seed: int, n_base: int, copies: int, size: int = 300
) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic documents as distinct 64-bit feature hashes: n_base random sets, each with
    `copies` near-copies (10-40% of elements replaced) and one exact copy. Returns (hashes,
    offsets) for simstore.native.core.signature_hashes, documents shuffled."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_base):
        base = rng.integers(0, 2**64, size=size, dtype=np.uint64, endpoint=False)
        docs.append(base)
        docs.append(base.copy())
        for _ in range(copies):
            swap = int(size * rng.uniform(0.0, 0.4))
            near = base.copy()
            near[rng.choice(size, swap, replace=False)] = rng.integers(
                0, 2**64, size=swap, dtype=np.uint64, endpoint=False
            )
            docs.append(near)
    order = rng.permutation(len(docs))
    docs = [np.unique(docs[i]) for i in order]
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    hashes = np.concatenate(docs) if docs else np.empty(0, dtype=np.uint64)
    return hashes, offsets


def planted_texts(seed: int, n_base: int, copies: int, words: int = 120) -> list[str]:
    """Texts of random words: n_base bases, each with `copies` edited copies (0-12 words
    replaced: Jaccard from 1 down to about 0.7) and one exact copy, in a seeded order."""
    rng = np.random.default_rng(seed)
    vocab = [f"v{i}" for i in range(2000)]
    out = []
    for _ in range(n_base):
        base = [vocab[x] for x in rng.integers(0, len(vocab), size=words)]
        out += [" ".join(base), " ".join(base)]
        for _ in range(copies):
            edited = list(base)
            for p in rng.choice(words, int(rng.integers(0, 13)), replace=False):
                edited[int(p)] = vocab[int(rng.integers(0, len(vocab)))]
            out.append(" ".join(edited))
    return [out[i] for i in rng.permutation(len(out))]


@st.composite
def near_copy_texts(draw, max_docs: int = 12, max_words: int = 60) -> list[str]:
    """A few base texts of random words and edited copies of them (words replaced,
    inserted or dropped), shuffled: Jaccard from 1 down to unrelated, near any threshold."""
    vocab = [f"w{i}" for i in range(300)]
    bases = draw(st.lists(st.lists(st.sampled_from(vocab), min_size=0, max_size=max_words),
                          min_size=1, max_size=3))
    out = [" ".join(b) for b in bases]
    for _ in range(draw(st.integers(0, max_docs - len(out)))):
        doc = list(draw(st.sampled_from(bases)))
        for _ in range(draw(st.integers(0, 6))):
            at = draw(st.integers(0, len(doc)))
            how = draw(st.sampled_from(["replace", "insert", "drop"]))
            if how == "insert" or not doc:
                doc.insert(at, draw(st.sampled_from(vocab)))
            elif how == "replace":
                doc[min(at, len(doc) - 1)] = draw(st.sampled_from(vocab))
            else:
                del doc[min(at, len(doc) - 1)]
        out.append(" ".join(doc))
    return draw(st.permutations(out))


# --- crawl payloads -----------------------------------------------------------------

_payload_leaves = (st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                   | st.floats(allow_nan=False, allow_infinity=False) | st.binary(max_size=8))
_payload_keys = (st.text(max_size=4) | st.sampled_from(["$b", "$d"]) | st.binary(max_size=4)
                 | st.integers() | st.tuples(st.integers(), st.binary(max_size=2)))


def payload_values(max_leaves: int = 30) -> st.SearchStrategy:
    """What a crawl payload may hold: None, bools, ints, finite floats, str, bytes, lists,
    tuples and dicts (keys str, bytes, ints or tuples of them, as Scrapy's headers)."""
    return st.recursive(
        _payload_leaves,
        lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(_payload_keys, inner, max_size=4)),
        max_leaves=max_leaves)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=8)


@st.composite
def request_kwargs(draw) -> dict:
    """The keyword arguments of a Scrapy ``Request`` as a spider gives them: a URL, and any
    of its other attributes, often at their defaults (callbacks named, as spider methods
    of the tests' spider: ``parse``, ``parse_item``, ``on_error``)."""
    host = draw(st.sampled_from(["a.example", "B.Example", "127.0.0.3:8000", "[::1]:81",
                                 "user:pw@c.example"]))
    path = draw(st.text("abc/%?=&é ", max_size=12))
    out: dict = {"url": f"http://{host}/{path}"}
    optional = {
        "callback": st.sampled_from([None, "parse", "parse_item"]),
        "errback": st.sampled_from([None, "on_error"]),
        "method": st.sampled_from(["GET", "POST", "HEAD"]),
        "headers": st.dictionaries(st.sampled_from(["Referer", "Accept", "X-Y", "Cookie"]),
                                   st.text("ab:/ é", max_size=8), max_size=3),
        "body": st.binary(max_size=8) | st.text("ab =", max_size=4),
        "cookies": st.dictionaries(st.text("abc", min_size=1, max_size=3),
                                   st.text("xyz", max_size=3), max_size=2),
        "meta": st.dictionaries(st.sampled_from(["depth", "x", "$b", "proxy_no"]),
                                _json_values, max_size=3),
        "encoding": st.sampled_from(["utf-8", "latin-1"]),
        "priority": st.integers(-5, 5),
        "dont_filter": st.booleans(),
        "flags": st.lists(st.text("ab", max_size=3), max_size=2),
        "cb_kwargs": st.dictionaries(st.text("kw", min_size=1, max_size=3), _json_values,
                                     max_size=2),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            out[name] = draw(strategy)
    return out
