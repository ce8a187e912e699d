"""simstore-cli, in-process through main([...]), plus one real subprocess run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import simstore
from simstore.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run main(argv); return (exit code, stdout, stderr)."""
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture
def store_path(tmp_path, capsys):
    path = str(tmp_path / "s")
    assert run(capsys, "init", path, "--k", "4")[0] == 0
    return path


@pytest.fixture
def corpus(tmp_path):
    """A directory of text files: two near-duplicates, one exact copy, one unrelated."""
    d = tmp_path / "docs"
    d.mkdir()
    base = " ".join(f"word{i}" for i in range(300))
    (d / "a.txt").write_text(base)
    (d / "b.txt").write_text(base.replace("word150", "changed"))
    (d / "c.txt").write_text(base)
    (d / "z.txt").write_text(" ".join(f"other{i}" for i in range(300)))
    return d


def test_init_creates_a_store_and_refuses_existing_paths(tmp_path, capsys):
    """init creates a store; a second init on the same path fails with exit 1."""
    path = str(tmp_path / "s")
    code, out, _ = run(capsys, "init", path, "--k", "3")
    assert code == 0 and "created" in out
    code, _, err = run(capsys, "init", path)
    assert code == 1 and "already exists" in err


def test_plan_prints_layout(capsys):
    """plan prints tables and header bits for k and a size, as JSON with --json."""
    code, out, _ = run(capsys, "--json", "plan", "--k", "3", "--expected-size", "1000000")
    assert code == 0
    info = json.loads(out)
    assert info["tables"] >= 1 and info["k"] == 3


def test_add_tsv_and_jsonl_then_query(store_path, tmp_path, capsys):
    """add reads TSV (decimal and hex) and JSONL; query finds the neighbours."""
    f = tmp_path / "in.tsv"
    f.write_text("doc1\t0x00000000000000ff\ndoc2\t254\n# comment\n\n{\"id\": 7, \"fp\": 1}\n")
    code, out, _ = run(capsys, "add", store_path, str(f))
    assert code == 0 and "added 3" in out
    code, out, _ = run(capsys, "--json", "query", store_path, "0xff", "--k", "2")
    assert code == 0
    got = {json.loads(line)["id"]: json.loads(line)["distance"] for line in out.splitlines()}
    assert got == {"doc1": 0, "doc2": 1}
    code, out, _ = run(capsys, "query", store_path, "1", "--k", "0")
    assert out.split("\t")[0] == "7"


def test_add_bad_line_reports_file_line_and_adds_nothing(store_path, tmp_path, capsys):
    """A bad line names file:line, exits 1, and nothing of the file is added."""
    f = tmp_path / "bad.tsv"
    f.write_text("ok1\t5\nbroken line\nok2\t6\n")
    code, _, err = run(capsys, "add", store_path, str(f))
    assert code == 1 and f"{f}:2" in err and "Traceback" not in err
    with simstore.SimStore(store_path, readonly=True) as s:
        assert len(s) == 0
    code, out, err = run(capsys, "add", store_path, str(f), "--skip-bad")
    assert code == 0 and "added 2" in out and f"{f}:2" in err


@pytest.mark.parametrize("fp", ["-1", "0x1" + "0" * 16, "abc", "1.5"])
def test_add_rejects_bad_fingerprints(store_path, tmp_path, capsys, fp):
    """Negative, too large and non-integer fingerprints are reported with exit 1."""
    f = tmp_path / "bad.tsv"
    f.write_text(f"x\t{fp}\n")
    code, _, err = run(capsys, "add", store_path, str(f))
    assert code == 1 and f"{f}:1" in err


def test_index_directory_and_dedup_clusters(store_path, corpus, capsys):
    """index adds one document per file; dedup --clusters groups the near-duplicates."""
    code, out, _ = run(capsys, "index", store_path, str(corpus))
    assert code == 0 and "indexed 4" in out
    code, out, _ = run(capsys, "--json", "dedup", store_path, "--clusters")
    clusters = [sorted(json.loads(line)["cluster"]) for line in out.splitlines()]
    names = [sorted(os.path.basename(p) for p in c) for c in clusters]
    assert names == [["a.txt", "b.txt", "c.txt"]]
    code, out, _ = run(capsys, "dedup", store_path)
    pairs = {
        tuple(sorted(os.path.basename(x) for x in line.split("\t")[:2]))
        for line in out.splitlines()
    }
    assert pairs == {("a.txt", "b.txt"), ("a.txt", "c.txt"), ("b.txt", "c.txt")}


def test_index_dedup_mode_skips_near_duplicates(store_path, corpus, capsys):
    """index --dedup K adds only documents with no stored near-duplicate."""
    code, out, _ = run(capsys, "--json", "index", store_path, str(corpus), "--dedup", "4")
    assert code == 0
    info = json.loads(out.splitlines()[-1])
    assert info["added"] == 2 and info["near_duplicates_skipped"] == 2


def test_index_jsonl_with_fields(store_path, tmp_path, capsys):
    """JSONL input uses --id-field and --text-field; a bad line names file:line."""
    f = tmp_path / "docs.jsonl"
    f.write_text(json.dumps({"url": "u1", "body": "hello there world"}) + "\n"
                 + json.dumps({"url": "u2", "body": "something else entirely"}) + "\n")
    fields = ("--id-field", "url", "--text-field", "body")
    code, out, _ = run(capsys, "index", store_path, str(f), *fields)
    assert code == 0 and "indexed 2" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"url": "u3", "body": "x"}) + "\n{not json\n")
    code, _, err = run(capsys, "index", store_path, str(bad), *fields)
    assert code == 1 and f"{bad}:2" in err
    with simstore.SimStore(store_path, readonly=True) as s:
        assert len(s) == 2


def test_query_by_text(store_path, corpus, capsys):
    """query --text FILE fingerprints the file and finds its copies."""
    run(capsys, "index", store_path, str(corpus))
    code, out, _ = run(capsys, "query", store_path, "--text", str(corpus / "a.txt"), "--k", "0")
    ids = sorted(os.path.basename(line.split("\t")[0]) for line in out.splitlines())
    assert code == 0 and ids == ["a.txt", "c.txt"]


def test_verify_stats_export_compact_rebuild(store_path, corpus, tmp_path, capsys):
    """verify passes, stats counts, export lists every doc, compact and rebuild keep them."""
    run(capsys, "index", store_path, str(corpus))
    code, out, _ = run(capsys, "verify", store_path)
    assert code == 0 and "ok" in out
    code, out, _ = run(capsys, "--json", "stats", store_path)
    assert json.loads(out)["count"] == 4
    code, out, _ = run(capsys, "export", store_path)
    assert len(out.splitlines()) == 4
    dest = str(tmp_path / "copy")
    assert run(capsys, "compact", store_path, dest)[0] == 0
    code, out, _ = run(capsys, "export", dest)
    assert len(out.splitlines()) == 4
    code, out, _ = run(capsys, "--json", "rebuild", store_path, "--k", "6")
    assert code == 0 and json.loads(out)["k"] == 6
    assert run(capsys, "verify", store_path)[0] == 0
    code, out, _ = run(capsys, "--json", "dedup", store_path, "--clusters", "--k", "6")
    assert len(out.splitlines()) == 1


def test_missing_store_and_usage_errors(tmp_path, capsys):
    """A missing store is exit 1 with a hint; a bad k is a usage error, exit 2."""
    code, _, err = run(capsys, "stats", str(tmp_path / "nope"))
    assert code == 1 and "init" in err
    with pytest.raises(SystemExit) as exc:
        main(["query", str(tmp_path), "1", "--k", "65"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_path_that_is_not_a_store(tmp_path, capsys):
    """Opening a plain file or a foreign directory is a one-line error, exit 1."""
    f = tmp_path / "file.txt"
    f.write_text("hello")
    code, _, err = run(capsys, "stats", str(f))
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1


def test_installed_entry_point_runs(tmp_path):
    """The installed simstore-cli script runs end to end in a subprocess."""
    exe = shutil.which("simstore-cli", path=os.path.dirname(sys.executable))
    assert exe is not None, "simstore-cli is not installed next to this interpreter"
    path = str(tmp_path / "s")
    subprocess.run([exe, "init", path], check=True, capture_output=True)
    res = subprocess.run([exe, "add", path, "-"], input="a\t1\nb\t3\n", text=True,
                         capture_output=True, check=True)
    assert "added 2" in res.stdout
    res = subprocess.run([sys.executable, "-m", "simstore", "query", path, "1", "--k", "1"],
                         capture_output=True, text=True, check=True)
    assert sorted(line.split("\t")[0] for line in res.stdout.splitlines()) == ["a", "b"]


class _FakeTty:
    """A stderr stand-in that claims to be a terminal and records what it gets."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_progress_shows_only_on_a_terminal():
    """Status lines and counters go to a terminal's stderr, never into a pipe."""
    from simstore.cli import _Progress, _working

    tty, pipe = _FakeTty(True), _FakeTty(False)
    for stream in (tty, pipe):
        with _working("rebuilding x", stream):
            pass
        p = _Progress("indexing", total=3, stream=stream)
        p.update(3)
        p.close()
    assert "rebuilding x: done in" in tty.text and "indexing: 3 done" in tty.text
    assert pipe.text == ""


def test_index_and_query_use_the_store_config(tmp_path, capsys):
    """A store created with ngram=5 is filled and queried with ngram=5 fingerprints by the CLI."""
    cfg = simstore.FingerprintConfig(ngram=5, seed=7)
    path = str(tmp_path / "s5")
    simstore.SimStore(path, k=3, config=cfg).close()
    d = tmp_path / "docs"
    d.mkdir()
    text = " ".join(f"tok{i % 37} w{i}" for i in range(200))
    (d / "one.txt").write_text(text)
    for argv in (("index", path, str(d)), ("index", path, str(d), "--dedup", "3")):
        assert run(capsys, *argv)[0] == 0
        with simstore.SimStore(path, readonly=True) as s:
            (doc_id,) = list(s)
            assert s[doc_id] == simstore.fingerprint(text, cfg)
            assert s[doc_id] != simstore.fingerprint(text)
    code, out, _ = run(capsys, "query", path, "--text", str(d / "one.txt"), "--k", "0")
    assert code == 0 and out.split("\t")[1] == "0"


def test_similarity_store_from_the_cli(tmp_path, capsys):
    """init --similarity, index, query/dedup/index --threshold: Jaccard-based answers end to end."""
    path = str(tmp_path / "sim")
    code, out, _ = run(capsys, "init", path, "--similarity")
    assert code == 0 and "80 B sketch + 64 B band keys" in out
    d = tmp_path / "docs"
    d.mkdir()
    words = [f"w{i}" for i in range(400)]
    (d / "a.txt").write_text(" ".join(words))
    (d / "b.txt").write_text(" ".join(words[:200] + ["edit"] + words[201:]))
    (d / "z.txt").write_text(" ".join(f"other{i}" for i in range(400)))
    assert run(capsys, "index", path, str(d))[0] == 0
    code, out, _ = run(capsys, "query", path, "--text", str(d / "a.txt"), "--threshold", "0.9")
    hits = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and [os.path.basename(h[0]) for h in hits] == ["a.txt", "b.txt"]
    assert float(hits[0][1]) == 1.0 and 0.9 <= float(hits[1][1]) < 1.0
    code, out, _ = run(capsys, "dedup", path, "--threshold", "0.9")
    assert code == 0 and len(out.splitlines()) == 1 and "a.txt" in out and "b.txt" in out
    code, out, _ = run(capsys, "dedup", path, "--threshold", "0.9", "--clusters")
    assert code == 0 and len(out.splitlines()) == 1
    fresh = str(tmp_path / "sim2")
    assert run(capsys, "init", fresh, "--sketch-bits", "256")[0] == 0
    code, out, _ = run(capsys, "index", fresh, str(d), "--threshold", "0.9")
    assert code == 0 and "skipped 1 near-duplicates" in out
    code, out, _ = run(capsys, "--json", "stats", fresh)
    info = json.loads(out)
    assert info["similarity"] and info["sketch_bytes"] == 32 and info["count"] == 2
    code, out, _ = run(capsys, "plan", "--k", "3", "--expected-size", "1000", "--similarity")
    assert code == 0 and "band_key_bytes_per_document: 64" in out


def test_threshold_on_a_hamming_store_and_bad_thresholds_are_refused(store_path, corpus, capsys):
    """--threshold on a fingerprint-only store exits 1 with a hint; a bad T is a usage error."""
    run(capsys, "index", store_path, str(corpus))
    code, _, err = run(capsys, "dedup", store_path, "--threshold", "0.9")
    assert code == 1 and "--similarity" in err
    for bad in ("0", "1.5", "x"):
        with pytest.raises(SystemExit) as exc:
            main(["dedup", store_path, "--threshold", bad])
        assert exc.value.code == 2
    capsys.readouterr()
