"""Stores written by development versions (formats 1-18, kept under tests/data/dev-stores):
refused in one line naming ``simstore-cli upgrade`` with nothing on disk changed, then
upgraded with every doc, fingerprint, signature and shingle set kept."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import simstore
from simstore import SimStore
from simstore.cli import main
from tests.oracles import brute_jaccard, brute_matches, shingle_set

DATA = Path(__file__).resolve().parents[1] / "data" / "dev-stores"
INFO = json.loads((DATA / "dev-stores.json").read_text())
FP_STORES = ["dev1-dupsort", "dev17-hamming"]
SIG_STORES = ["dev17-similarity", "dev18-exact"]


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.iterdir()) if p.name == "data.mdb"}


def _doc_id(key: str):
    return int(key) if key.isdigit() else key


@pytest.mark.parametrize("name", FP_STORES + SIG_STORES)
def test_old_store_refused_in_one_line_nothing_changed(tmp_path, name):
    """Opening a development-format store raises FormatVersionError naming the upgrade
    command; its data file is unchanged."""
    path = _copy(tmp_path, name)
    before = _digest(path)
    for readonly in (False, True):
        with pytest.raises(simstore.FormatVersionError) as info:
            SimStore(path, readonly=readonly)
        msg = str(info.value)
        assert "\n" not in msg and f"simstore-cli upgrade {path}" in msg
    assert _digest(path) == before


@pytest.mark.parametrize("name", FP_STORES)
def test_upgrade_keeps_every_fingerprint_store_doc(tmp_path, name):
    """A fingerprint store upgraded: the same ids and fingerprints, queries equal brute
    force, verify clean, writes work, and a second upgrade does nothing."""
    path = _copy(tmp_path, name)
    got = simstore.upgrade(path)
    expected = {_doc_id(k): int(v) for k, v in INFO[name]["ids"].items()}
    assert got["to"] == simstore.store.format.FORMAT_VERSION and got["documents"] == len(expected)
    with SimStore(path) as s:
        assert s.k == INFO[name]["k"]
        assert dict(s.items()) == expected
        ordered = dict(s.items())  # insertion order as stored
        for q in list(expected.values())[:10]:
            assert s.query(q, 3) == brute_matches(ordered, q, 3)
        assert s.verify() == []
        assert s.stored_at("doc-0") is not None
        s.add("new", 12345)
        assert s.query(12345, 0)[0].doc_id == "new"
    assert simstore.upgrade(path)["documents"] is None  # already current


@pytest.mark.parametrize("name", SIG_STORES)
def test_upgrade_keeps_signatures_and_sets(tmp_path, name):
    """A similarity or exact store upgraded: each stored text is found again as its own
    match (exact Jaccard 1.0 in the exact store), and near copies as brute force says."""
    path = _copy(tmp_path, name)
    texts = INFO[name]["texts"]
    simstore.upgrade(path)
    with SimStore(path) as s:
        assert len(s) == len(texts)
        exact = name.endswith("exact")
        assert s.exact == exact
        for doc, text in list(texts.items())[:12]:
            got = s.similar(text if exact else s.signature(text), 0.99)
            assert doc in [m.doc_id for m in got]
        if exact:
            for probe in INFO[name]["probes"][:5]:
                want = {d for d, t in texts.items()
                        if brute_jaccard(shingle_set(probe, s.config.ngram),
                                         shingle_set(t, s.config.ngram)) >= 0.9}
                assert {m.doc_id for m in s.similar(probe, 0.9)} >= want
        assert s.verify() == []


def test_upgrade_needs_the_store_alone(tmp_path):
    """upgrade refuses while another handle holds the store (StoreInUseError), leaving it
    unchanged; refuses a path that is no store."""
    path = _copy(tmp_path, "dev17-hamming")
    simstore.upgrade(path)
    with SimStore(path):
        with pytest.raises(simstore.StoreInUseError):
            simstore.upgrade(path)
    with pytest.raises(simstore.NotAStoreError):
        simstore.upgrade(tmp_path / "nothing")


def test_cli_upgrade_and_message(tmp_path, capsys):
    """simstore-cli: a command on an old store exits 1 with one line naming upgrade;
    upgrade exits 0; then the command works."""
    path = _copy(tmp_path, "dev17-hamming")
    assert main(["stats", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "upgrade" in err and "Traceback" not in err
    assert main(["upgrade", str(path)]) == 0
    assert "from format 17" in capsys.readouterr().out
    assert main(["stats", str(path)]) == 0


def test_killed_upgrade_leaves_old_or_new(tmp_path):
    """An upgrade killed at a random moment leaves a store that is either the old one
    (refused, upgradable) or the new one (complete)."""
    code = ("import sys, simstore; simstore.upgrade(sys.argv[1])")
    for delay in (0.05, 0.15, 0.3):
        path = tmp_path / f"s{delay}"
        shutil.copytree(DATA / "dev17-hamming", path)
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        simstore.upgrade(path)  # from the old store, or nothing to do
        with SimStore(path) as s:
            assert len(s) == len(INFO["dev17-hamming"]["ids"])
            assert s.verify() == []
