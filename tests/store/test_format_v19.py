"""Stores written in the frozen format 19 (tests/data/v19-stores, written when it was frozen)
open with every doc, time of storage and answer as written, and their bytes are what
docs/format.md says: a format change that forgets its version bump fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lmdb
import pytest

from simstore import SimStore
from simstore.store import format as F
from tests.oracles import brute_matches

DATA = Path(__file__).resolve().parents[1] / "data" / "v19-stores"
INFO = json.loads((DATA / "v19-stores.json").read_text())


def _doc_id(key: str):
    return int(key) if key.lstrip("-").isdigit() else key


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def test_the_format_version_is_19():
    """The frozen format is version 19; changing it needs a migration (docs/format.md)."""
    assert F.FORMAT_VERSION == 19 and F.FORMAT_VERSIONS == (19,)


@pytest.mark.parametrize("readonly", [True, False])
def test_a_fingerprint_store_reads_back(tmp_path, readonly):
    """Every id, fingerprint, time of storage and the insertion order come back; queries
    equal brute force; verify is clean."""
    info = INFO["v19-hamming"]
    with SimStore(_copy(tmp_path, "v19-hamming"), readonly=readonly) as s:
        assert s.k == info["k"]
        want = {_doc_id(d): int(fp) for d, (fp, _) in info["ids"].items()}
        assert dict(s.items()) == want
        assert [str(d) for d in s.snapshot()[0]] == info["order"]
        for d, (_, at) in info["ids"].items():
            assert s.stored_at(_doc_id(d)) == at
        ordered = dict(s.items())
        for q in list(want.values())[::4]:
            for k in (0, 3, 6):
                assert s.query(q, k) == brute_matches(ordered, q, k)
        assert s.verify() == []


@pytest.mark.parametrize("name", ["v19-similarity", "v19-exact"])
def test_a_similarity_store_reads_back(tmp_path, name):
    """Each stored text finds itself (exact Jaccard 1.0 in the exact store)."""
    info = INFO[name]
    with SimStore(_copy(tmp_path, name)) as s:
        assert s.exact == (name == "v19-exact")
        assert len(s) == len(info["texts"])
        for d, text in info["texts"].items():
            hits = s.similar(text if s.exact else s.signature(text), 0.99)
            assert d in [m.doc_id for m in hits]
            assert s.stored_at(d) == info["at"] + int(d[1:])
        assert s.verify() == []


def test_docs_records_are_the_documented_bytes(tmp_path):
    """docs/format.md §5: a fingerprint store's record is 03 ‖ fp u64be ‖ stored_at ms
    u64be ‖ 's' + UTF-8 (or 'i' + signed big-endian) — read with LMDB alone."""
    info = INFO["v19-hamming"]
    path = _copy(tmp_path, "v19-hamming")
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            meta = env.open_db(b"meta", txn=txn, create=False)
            assert json.loads(bytes(txn.get(b"format", db=meta))) == {
                "format": "simstore", "version": 19}
            docs = env.open_db(b"docs", txn=txn, create=False)
            recs = [bytes(v) for _, v in txn.cursor(db=docs)]
    finally:
        env.close()
    by_id = {}
    for rec in recs:
        assert rec[0] == 3
        tag, payload = rec[17:18], rec[18:]
        doc = payload.decode() if tag == b"s" else int.from_bytes(payload, "big", signed=True)
        by_id[str(doc)] = (int.from_bytes(rec[1:9], "big"), int.from_bytes(rec[9:17], "big"))
    assert by_id == {d: (int(fp), round(at * 1000)) for d, (fp, at) in info["ids"].items()}
