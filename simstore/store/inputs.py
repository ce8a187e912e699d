"""What store writes are given, in canonical form: fingerprints or signatures, and ids.

Checks that a fingerprint or Signature fits the store (a similarity store
takes signatures of its own config; a Hamming store takes fingerprints only: a
Signature there would lose its sketch and band keys without a word) and turns
bulk input into distinct encoded ids with their arrays, the last of repeats kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from .._validate import as_fingerprint_array, check_fingerprint
from ..exceptions import (
    InvalidConfigError,
    InvalidSignatureError,
    SimstoreTypeError,
    SimstoreValueError,
)
from ..text.fingerprinting import FingerprintConfig
from ..text.jaccard import ShingleSets, signatures_and_sets
from ..text.minhash import Signature, Signatures
from . import format as F, shingles as _shingles
from .longsets import LONG_SET, LongSet, coded
from .schema import Handles
from .writes import Extra, extra_of


def check_signature_config(h: Handles, config: FingerprintConfig) -> None:
    """InvalidSignatureError unless signatures of config fit the store."""
    mine = h.config
    same = config is mine or config == mine or (
        not mine.has_signature
        and (config.ngram, config.weighting, config.seed) == (mine.ngram, mine.weighting, mine.seed)
    )
    if not same:
        raise InvalidSignatureError(
            f"store {h.path!r} holds {mine.scheme}; this signature is "
            f"{config.scheme}: make it with store.signature(text)"
        )


def _not_a_signature(h: Handles, name: str, many: bool) -> SimstoreTypeError:
    what, how = ("Signatures", "signatures.fingerprints") if many else \
        ("a Signature", "signature.fingerprint")
    return SimstoreTypeError(
        f"store {h.path!r} keeps fingerprints only (Hamming distance): give "
        f"{'fingerprints' if many else 'a fingerprint'} ({how}, or store.fingerprint(text)) "
        f"as {name!r}, not {what}, whose sketch and band keys it cannot keep; for Jaccard "
        "similarity create the store with config=simstore.SIGNATURE_CONFIG"
    )


def _not_a_text(h: Handles, name: str, value: Any, many: bool) -> SimstoreTypeError:
    what = "texts (an iterable of str)" if many else "a text (str)"
    pair = "(Signatures, ShingleSets)" if many else "(Signature, ShingleSets of one set)"
    return SimstoreTypeError(
        f"store {h.path!r} keeps each doc's shingle set (exact=True): give {what} or the "
        f"pair {pair} of simstore.signatures_and_sets as {name!r}, not "
        f"{type(value).__name__}; a signature alone lacks the set"
    )


def exact_item(h: Handles, value: Any, name: str = "fp", *, encode: bool = True
               ) -> tuple[int, Extra, ShingleSets | LongSet]:
    """(fingerprint, similarity part with the set's code, the one set) of a text, or of a
    (Signature, ShingleSets) pair, given to an exact store (a query, ``encode=False``,
    gets an empty code: it writes no set). A long set comes as its code (a LongSet; a
    text's own set is handed back as it is coded)."""
    own = isinstance(value, str)
    if own:
        sigs, sets = signatures_and_sets([value], h.config)
        sig = sigs[0]
    elif (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Signature)
          and isinstance(value[1], ShingleSets)):
        sig, sets = value
        check_signature_config(h, sig.config)
        if len(sets) != 1:
            raise SimstoreValueError(
                f"{name!r}: the ShingleSets of a (Signature, ShingleSets) pair must hold one "
                f"set (got {len(sets)})"
            )
    else:
        raise _not_a_text(h, name, value, False)
    if not len(sets.hashes):
        raise SimstoreValueError(f"{name!r}: a shingle set must hold at least one hash")
    sketch, keys = extra_of(sig.sketch, sig.bands)
    if len(sets.hashes) > LONG_SET:
        long = coded(sets, own)
        return sig.fingerprint, (sketch, keys, long.code if encode else b""), long
    code = _shingles.encode(sets)[0] if encode else b""
    return sig.fingerprint, (sketch, keys, code), sets


def exact_columns(h: Handles, values: Any) -> tuple[Signatures, ShingleSets]:
    """The signatures and sets of many texts, or a (Signatures, ShingleSets) pair, given to
    an exact store."""
    if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], Signatures) \
            and isinstance(values[1], ShingleSets):
        sigs, sets = values
        check_signature_config(h, sigs.config)
        if len(sets) != len(sigs):
            raise SimstoreValueError(
                f"'fps': {len(sigs)} signatures but {len(sets)} shingle sets"
            )
    elif isinstance(values, (str, bytes, Signatures, Signature)) or \
            not isinstance(values, Iterable):
        raise _not_a_text(h, "fps", values, True)
    else:
        sigs, sets = signatures_and_sets(values, h.config)
    if len(sets) and (sets.sizes == 0).any():
        raise SimstoreValueError("'fps': every shingle set must hold at least one hash")
    return sigs, sets


def item(h: Handles, value: Any, name: str = "fp", *, query: bool = False
         ) -> tuple[int, Extra]:
    """(fingerprint, similarity part) of one fingerprint or Signature given to a write
    (a text, or a (Signature, ShingleSets) pair, in an exact store; a ``query`` may give
    an exact store a bare Signature: it has no set to write)."""
    if h.exact and not (query and isinstance(value, Signature)):
        fp, extra, _ = exact_item(h, value, name)
        return fp, extra
    if isinstance(value, Signature):
        if h.bands is None:
            raise _not_a_signature(h, name, False)
        check_signature_config(h, value.config)
        return value.fingerprint, extra_of(value.sketch, value.bands)
    if h.bands is not None:
        what = "the text itself" if isinstance(value, str) else "a bare fingerprint"
        raise SimstoreTypeError(
            f"store {h.path!r} keeps similarity signatures: give a Signature "
            f"(store.signature(text)), not {what}, as {name!r}"
        )
    return check_fingerprint(value, name), None


def query_signature(h: Handles, sig: Signature, name: str = "item") -> int:
    """The fingerprint of a Signature a similarity read asks about, checked against the
    store (its sketch and bands are read as they are: no stored form is made)."""
    if h.bands is None:
        raise _not_a_signature(h, name, False)
    check_signature_config(h, sig.config)
    return sig.fingerprint


class Many(NamedTuple):
    """A bulk write: distinct ids (encoded bytes, or an int64 array) and their columns."""

    ids: Any
    fps: np.ndarray
    sketches: np.ndarray | None
    bands: np.ndarray | None
    sets: ShingleSets | None = None  # the docs' shingle sets, in an exact store


def many(h: Handles, doc_ids: Any, values: Any) -> Many:
    """The canonical form of add_many's arguments; a doc id given twice keeps its last.

    An exact store takes texts or a (Signatures, ShingleSets) pair as values."""
    sketches = bands = None
    sets: ShingleSets | None = None
    if h.exact:
        sigs, sets = exact_columns(h, values)
        sketches, bands, arr = sigs.sketches, sigs.bands, sigs.fingerprints
    elif isinstance(values, Signatures):
        if h.bands is None:
            raise _not_a_signature(h, "fps", True)
        check_signature_config(h, values.config)
        sketches, bands = values.sketches, values.bands
        arr = values.fingerprints
    elif h.bands is not None:
        raise SimstoreTypeError(
            f"store {h.path!r} keeps similarity signatures: give Signatures "
            "(store.signatures(texts)), not bare fingerprints, as 'fps'"
        )
    else:
        arr = as_fingerprint_array(values)
    ints = F.int_id_array(doc_ids)
    ids: Any = ints if ints is not None else F.doc_ids_list(doc_ids)
    if len(ids) != len(arr):
        raise InvalidConfigError(
            f"'doc_ids' and 'fps' must have the same length (got {len(ids)} and {len(arr)})"
        )
    if ints is not None:
        _, last_rev = np.unique(ints[::-1], return_index=True)
        keep = np.sort(len(ints) - 1 - last_rev)
        ids = ints[keep]
    else:
        encs = [F.encode_id(d) for d in ids]
        last = {enc: i for i, enc in enumerate(encs)}
        keep = np.asarray(sorted(last.values()), dtype=np.int64)
        ids = [encs[i] for i in keep.tolist()]
    if len(keep) != len(arr):
        arr = arr[keep]
        sketches = None if sketches is None else sketches[keep]
        bands = None if bands is None else bands[keep]
        sets = None if sets is None else sets.take(keep)
    return Many(ids, arr, sketches, bands, sets)


def set_bytes(extra: Extra) -> int:
    """A generous estimate of the bytes one doc's set code adds to an exact store (its
    pieces and their pages), so that the map grows ahead of a long one (a write retried
    after the map filled would make its pages twice)."""
    return 2 * len(extra[2]) if extra is not None and len(extra) == 3 else 0


def bytes_needed(h: Handles, batch: Many) -> int:
    """A generous estimate of the bytes a bulk write adds (to grow the map ahead of it)."""
    per_doc = len(h.layout.tables) * 40 + 64 + h.codec.id_start * 2
    if batch.bands is not None:
        per_doc += 40 * batch.bands.shape[1]
    extra = 0 if batch.sets is None else 8 * len(batch.sets.hashes) + 48 * len(batch.sets)
    return len(batch.ids) * per_doc + extra
