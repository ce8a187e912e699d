"""A text given where a fingerprint belongs gets a hint naming the call that makes one."""

from __future__ import annotations

import pytest

from simstore import SIGNATURE_CONFIG, InvalidFingerprintError, SimStore, SimstoreTypeError


def test_a_text_as_a_fingerprint_names_store_fingerprint(tmp_path) -> None:
    """add/add_if_new/query with a str in a fingerprint store: the error says to give
    store.fingerprint(text); in a similarity store, store.signature(text)."""
    with SimStore(tmp_path / "fp") as s:
        for call in (
            lambda: s.add("a", "some text"),
            lambda: s.add_if_new("a", "some text"),
            lambda: s.query("some text"),
        ):
            with pytest.raises(InvalidFingerprintError, match=r"store\.fingerprint\(text\)"):
                call()
    with SimStore(tmp_path / "sim", config=SIGNATURE_CONFIG) as s:
        with pytest.raises(
            SimstoreTypeError, match=r"store\.signature\(text\)\), not the text itself"
        ):
            s.add("a", "some text")
