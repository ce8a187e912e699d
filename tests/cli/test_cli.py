"""simstore-cli, in-process through main([...]), plus one real subprocess run."""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import subprocess
import sys

import pytest

import simstore
from simstore.cli import build_parser, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run main(argv); return (exit code, stdout, stderr)."""
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def stdin_bytes(monkeypatch, data: bytes) -> None:
    """Make sys.stdin read these bytes (as a terminal-less pipe would)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


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


def jsonl(path, docs) -> str:
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    return str(path)


def lines_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- basics


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


def test_version_and_help_show_defaults_k_and_examples(capsys):
    """--version prints the version; every command's help has examples and shown defaults;
    the top-level help explains store k vs query k."""
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and simstore.__version__ in capsys.readouterr().out
    parser = build_parser()
    top = parser.format_help()
    assert "store k and query k" in top and "(default: 30.0)" in top
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, p in sub.choices.items():
        text = " ".join(p.format_help().split())
        assert "examples:" in text, name
        for action in p._actions:
            if action.default not in (None, False, argparse.SUPPRESS) and action.help:
                assert f"(default: {action.default})" in text, (name, action.dest)
    assert "store k and query k" in sub.choices["query"].format_help()


def test_add_tsv_and_jsonl_then_query(store_path, tmp_path, capsys):
    """add reads TSV (decimal and hex) and JSONL; query finds the neighbours."""
    f = tmp_path / "in.tsv"
    f.write_text("doc1\t0x00000000000000ff\ndoc2\t254\n# comment\n\n{\"id\": 7, \"fp\": 1}\n")
    code, out, _ = run(capsys, "add", store_path, str(f))
    assert code == 0 and "added 3" in out
    code, out, _ = run(capsys, "--json", "query", store_path, "0xff", "--k", "2")
    assert code == 0
    got = {r["id"]: (r["distance"], r["fp"]) for r in lines_of(out)}
    assert got == {"doc1": (0, "0x00000000000000ff"), "doc2": (1, "0x00000000000000fe")}
    code, out, _ = run(capsys, "query", store_path, "1", "--k", "0")
    assert out.split("\t")[0] == "i:7"
    code, out, _ = run(capsys, "query", store_path, "1", "--k", "0", "--json", "--int-fps")
    assert lines_of(out) == [{"query": "1", "id": 7, "fp": 1, "distance": 0}]


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


AWKWARD_IDS = ["plain", "tab\there", "new\nline", "cr\rhere", "back\\slash", "i:3", "s:x",
               "#hash", "{brace", " lead", "\\t literally", "ünïcødé ✓", "trailing\\", 42, -7,
               2**70, 0]


@pytest.mark.parametrize("fmt", ["tsv", "jsonl"])
def test_export_add_round_trip_with_awkward_ids(tmp_path, capsys, monkeypatch, fmt):
    """export | add copies a store exactly: escaped tabs, newlines and backslashes; int ids
    (i:42) kept apart from str ids that look like them."""
    src, dst = tmp_path / "src", str(tmp_path / "dst")
    with simstore.SimStore(src) as s:
        s.add_many(AWKWARD_IDS, range(1, len(AWKWARD_IDS) + 1))
    code, out, _ = run(capsys, "export", str(src), "--format", fmt)
    assert code == 0 and len(out.splitlines()) == len(AWKWARD_IDS)
    stdin_bytes(monkeypatch, out.encode())
    code, added, err = run(capsys, "add", dst, "-")
    assert code == 0, err
    with simstore.SimStore(dst, readonly=True) as s:
        assert list(s.items()) == list(zip(AWKWARD_IDS, range(1, len(AWKWARD_IDS) + 1), strict=True))


def test_tsv_unknown_escapes_and_bad_int_ids_are_refused(store_path, tmp_path, capsys):
    """An unescaped backslash (C:\\dir) and an i: id that is no integer are bad lines."""
    f = tmp_path / "bad.tsv"
    f.write_text("C:\\dir\t1\n")
    code, _, err = run(capsys, "add", store_path, str(f))
    assert code == 1 and "unknown escape" in err and f"{f}:1" in err
    f.write_text("i:x\t1\n")
    code, _, err = run(capsys, "add", store_path, str(f))
    assert code == 1 and "not an integer" in err


def test_output_file_is_complete_or_absent(store_path, tmp_path, capsys):
    """-o FILE gets the records (stdout stays empty); a failing command leaves no FILE."""
    f = tmp_path / "in.tsv"
    f.write_text("a\t1\nb\t3\n")
    run(capsys, "add", store_path, str(f))
    dest = tmp_path / "hits.tsv"
    code, out, _ = run(capsys, "query", store_path, "1", "--k", "1", "-o", str(dest))
    assert code == 0 and out == "" and dest.read_text().splitlines()[0].startswith("a\t0\t")
    missing = tmp_path / "nope.tsv"
    code, _, _ = run(capsys, "query", str(tmp_path / "missing"), "1", "-o", str(missing))
    assert code == 1 and not missing.exists()
    assert not [p for p in os.listdir(tmp_path) if "tmp-" in p]


# --------------------------------------------------------------------------- index


def test_index_directory_and_dedup_clusters(store_path, corpus, capsys):
    """index adds one document per file; dedup --clusters names each cluster's representative."""
    code, out, _ = run(capsys, "index", store_path, str(corpus))
    assert code == 0 and "indexed 4 new documents" in out
    code, out, _ = run(capsys, "--json", "dedup", store_path, "--clusters")
    (cluster,) = lines_of(out)
    assert os.path.basename(cluster["representative"]) == "a.txt"
    members = {os.path.basename(m["id"]): m["distance"] for m in cluster["members"]}
    assert members["c.txt"] == 0 and 0 < members["b.txt"] <= 4
    code, out, _ = run(capsys, "dedup", store_path)
    pairs = {
        tuple(sorted(os.path.basename(x) for x in line.split("\t")[:2]))
        for line in out.splitlines()
    }
    assert pairs == {("a.txt", "b.txt"), ("a.txt", "c.txt"), ("b.txt", "c.txt")}


def test_dedup_representatives_do_not_chain_and_hide_exact_copies(store_path, tmp_path, capsys):
    """a~b~c with a, c 6 bits apart: representatives keep c out, components chain it in;
    --hide-exact leaves out exact copies."""
    f = tmp_path / "in.tsv"
    f.write_text("a\t0\nb\t0x7\nc\t0x3f\nd\t0\n")
    run(capsys, "add", store_path, str(f))
    code, out, err = run(capsys, "dedup", store_path, "--clusters", "--k", "3")
    assert code == 0 and out.splitlines() == ["a\tb\t3", "a\td\t0"] and "1 clusters" in err
    code, out, _ = run(capsys, "dedup", store_path, "--clusters", "--components", "--k", "3")
    assert out.splitlines() == ["a\tb\tc\td"]
    code, out, err = run(capsys, "dedup", store_path, "--clusters", "--k", "3", "--hide-exact")
    assert out.splitlines() == ["a\tb\t3"] and "1 exact copies hidden" in err


def test_index_dedup_mode_skips_near_duplicates(store_path, corpus, capsys):
    """index --dedup K adds only documents with no stored near-duplicate, and says so."""
    code, out, _ = run(capsys, "--json", "index", store_path, str(corpus), "--dedup", "4")
    assert code == 0
    info = json.loads(out.splitlines()[-1])
    assert info["new"] == 2 and info["near_duplicates_skipped"] == 2
    code, out, _ = run(capsys, "index", store_path, str(corpus), "--dedup", "4")
    assert "0 new documents, 2 already stored, 2 near-duplicates skipped" in out


def test_index_skips_stored_ids_without_fingerprinting(store_path, tmp_path, capsys, monkeypatch):
    """A second index run fingerprints only the ids not stored yet."""
    import simstore.corpus.ingest as ingest

    src = jsonl(tmp_path / "d.jsonl", [{"id": i, "text": f"text number {i}"} for i in range(30)])
    assert run(capsys, "index", store_path, src, "--chunk", "7")[0] == 0
    more = jsonl(tmp_path / "e.jsonl", [{"id": i, "text": f"text number {i}"} for i in range(35)])
    seen = []
    real = ingest._items
    monkeypatch.setattr(ingest, "_items", lambda st, texts: seen.extend(texts) or real(st, texts))
    code, out, _ = run(capsys, "index", store_path, more)
    assert code == 0 and "5 new documents, 30 already stored" in out
    assert sorted(seen) == sorted(f"text number {i}" for i in range(30, 35))


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


def _good(i: int) -> bytes:
    return (json.dumps({"id": f"g{i}", "text": f"good document {i} with words"}) + "\n").encode()


def _compressed(opener, data: bytes, keep: float) -> bytes:
    buf = io.BytesIO()
    with opener(buf, "wb") as f:
        f.write(data)
    raw = buf.getvalue()
    return raw[: int(len(raw) * keep)]


BAD_INPUTS = {
    "truncated .gz": ("in.jsonl.gz", lambda: _compressed(
        lambda b, m: gzip.GzipFile(fileobj=b, mode=m), b"".join(_good(i) for i in range(400)), 0.6)),
    "truncated .bz2": ("in.jsonl.bz2", lambda: _compressed(
        lambda b, m: bz2.BZ2File(b, m), b"".join(_good(i) for i in range(400)), 0.6)),
    "truncated .xz": ("in.jsonl.xz", lambda: _compressed(
        lambda b, m: lzma.LZMAFile(b, m), b"".join(_good(i) for i in range(400)), 0.6)),
    "undecodable bytes": ("in.jsonl", lambda: _good(1) + b'{"id": "x", "text": "caf\xe9"}\n'
                          + _good(2)),
    "bad line in the middle": ("in.jsonl", lambda: _good(1) + b"{oops\n" + _good(2)),
    "null id": ("in.jsonl", lambda: _good(1) + b'{"id": null, "text": "t"}\n' + _good(2)),
    "lone surrogate id": ("in.jsonl", lambda: _good(1) + b'{"id": "a\\ud800", "text": "t"}\n'
                          + _good(2)),
    "text not a string": ("in.jsonl", lambda: _good(1) + b'{"id": "y", "text": 5}\n' + _good(2)),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("dedup", [[], ["--dedup", "3"]])
def test_index_bad_input_names_file_line_and_adds_nothing(store_path, tmp_path, capsys, case,
                                                          dedup):
    """Truncated .gz/.bz2/.xz, undecodable bytes, a bad line, a null or lone-surrogate id:
    file:line, exit 1, nothing added; --skip-bad adds the good records."""
    name, make = BAD_INPUTS[case]
    f = tmp_path / name
    f.write_bytes(make())
    code, _, err = run(capsys, "index", store_path, str(f), *dedup)
    assert code == 1 and "Traceback" not in err
    assert f"{f}:" in err and "nothing was added" in err, err
    with simstore.SimStore(store_path, readonly=True) as s:
        assert len(s) == 0
    code, out, err = run(capsys, "--json", "index", store_path, str(f), "--skip-bad", *dedup)
    assert code == 0 and f"{f}:" in err
    info = json.loads(out.splitlines()[-1])
    # bz2 decompresses whole 900 kB blocks: a truncated small file yields no line at all
    assert info["new"] >= (0 if "bz2" in case else 2) and info["bad_records"] == 1


def test_index_stdin_jsonl_is_detected_and_plain_text_refused(store_path, capsys, monkeypatch):
    """JSON lines on stdin are indexed; plain text on stdin is refused with a hint."""
    stdin_bytes(monkeypatch, b"\n  " + _good(1) + _good(2))
    code, out, _ = run(capsys, "index", store_path, "-")
    assert code == 0 and "indexed 2" in out
    stdin_bytes(monkeypatch, b"just some text\n")
    code, _, err = run(capsys, "index", store_path, "-")
    assert code == 1 and "<stdin>:1" in err and "save it to a file" in err


def test_index_skips_symlinks_binary_and_excluded_files(store_path, tmp_path, capsys):
    """Symlinks, NUL-byte files, .png/.pdf.gz/.tar.gz and --exclude matches are left out."""
    d = tmp_path / "tree"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("a real text document here")
    (d / "sub" / "b.md").write_text("another real text document")
    os.symlink(d / "a.txt", d / "link.txt")
    os.symlink(d / "sub", d / "linkdir")
    (d / "nul.txt").write_bytes(b"text\0with a nul")
    (d / "img.png").write_bytes(b"\x89PNG not really")
    for name in ("doc.pdf.gz", "arch.tar.gz"):
        with gzip.open(d / name, "wb") as f:
            f.write(b"plain looking text")
    (d / "skip.log").write_text("excluded text")
    with gzip.open(d / "man.1.gz", "wb") as f:
        f.write(b"a compressed manual page")
    code, out, err = run(capsys, "--json", "index", store_path, str(d), "--exclude", "*.log")
    assert code == 0
    with simstore.SimStore(store_path, readonly=True) as s:
        assert sorted(os.path.relpath(p, d) for p in s) == ["a.txt", "man.1.gz", "sub/b.md"]
    assert "2 symbolic links" in err and "4 binary files" in err and "1 excluded" in err
    code, out, _ = run(capsys, "index", store_path, str(d), "--follow-symlinks")
    assert "indexed 3 new documents" in out  # link.txt, linkdir/b.md, skip.log


def test_index_interrupted_says_how_far_and_resumes(store_path, tmp_path, capsys, monkeypatch):
    """Ctrl-C keeps the committed chunks, says how far it got; the rerun goes on from there."""
    import simstore.corpus.ingest as ingest

    src = jsonl(tmp_path / "d.jsonl", [{"id": i, "text": f"doc {i} words"} for i in range(50)])
    real, calls = ingest._items, [0]

    def flaky(st, texts):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return real(st, texts)

    monkeypatch.setattr(ingest, "_items", flaky)
    code, _, err = run(capsys, "index", store_path, src, "--chunk", "10")
    assert code == 130 and "30 documents committed" in err and f"{src}:30" in err
    monkeypatch.setattr(ingest, "_items", real)
    code, out, _ = run(capsys, "index", store_path, src, "--chunk", "10")
    assert "20 new documents, 30 already stored" in out


def test_progress_lines_when_stderr_is_not_a_terminal(store_path, corpus, capsys):
    """--progress-every prints progress lines to a non-terminal stderr; --quiet prints none."""
    code, _, err = run(capsys, "index", store_path, str(corpus), "--progress-every", "0.000001")
    assert code == 0 and "simstore-cli: indexing:" in err and "docs/s" in err
    code, _, err = run(capsys, "-q", "index", store_path, str(corpus), "--progress-every",
                       "0.000001")
    assert code == 0 and err == ""


def test_progress_bar_on_a_terminal_and_lines_in_a_pipe():
    """A terminal gets a tqdm bar with counts; a pipe gets periodic lines; quiet gets nothing."""
    from simstore.corpus.progress import Progress

    class Stream(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    tty, pipe, quiet = Stream(True), Stream(False), Stream(False)
    for stream, q in ((tty, False), (pipe, False), (quiet, True)):
        p = Progress(quiet=q, every=1e-9, stream=stream)
        with p.bar("indexing", 1000) as bar:
            bar.update(500, docs=10, new=7)
        with p.step("verifying x"):
            pass
    assert "indexing" in tty.getvalue() and "B/s" in tty.getvalue()
    assert "verifying x: done in" in tty.getvalue()
    assert "indexing: 500 B of 1.0 kB (50%" in pipe.getvalue() and "10 docs" in pipe.getvalue()
    assert quiet.getvalue() == ""


def test_index_and_export_parquet(store_path, tmp_path, capsys):
    """index reads Parquet id/text columns; export --format parquet -o writes id and uint64 fp."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"doc": [1, 2, 3], "body": ["one text", "two texts", "three"]}), src)
    code, out, _ = run(capsys, "index", store_path, str(src), "--id-field", "doc",
                       "--text-field", "body")
    assert code == 0 and "indexed 3" in out
    dest = tmp_path / "out.parquet"
    code, _, _ = run(capsys, "export", store_path, "--format", "parquet", "-o", str(dest))
    t = pq.read_table(dest)
    assert code == 0 and t.column("id").to_pylist() == [1, 2, 3]
    assert t.schema.field("fp").type == pa.uint64()
    with simstore.SimStore(store_path, readonly=True) as s:
        assert t.column("fp").to_pylist() == [s[i] for i in (1, 2, 3)]
    code, _, err = run(capsys, "export", store_path, "--format", "parquet")
    assert code == 2 and "-o FILE" in err


def test_query_by_text(store_path, corpus, capsys):
    """query --text FILE fingerprints the file and finds its copies."""
    run(capsys, "index", store_path, str(corpus))
    code, out, _ = run(capsys, "query", store_path, "--text", str(corpus / "a.txt"), "--k", "0")
    ids = sorted(os.path.basename(line.split("\t")[0]) for line in out.splitlines())
    assert code == 0 and ids == ["a.txt", "c.txt"]


def test_fingerprint_command(tmp_path, capsys, monkeypatch):
    """fingerprint prints id and hex fp of files and stdin; --similarity adds the signature;
    --store uses the store's recorded scheme."""
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog")
    code, out, _ = run(capsys, "fingerprint", str(f))
    assert code == 0 and out == f"{f}\t0x{simstore.fingerprint(f.read_text()):016x}\n"
    stdin_bytes(monkeypatch, b"the quick brown fox jumps over the lazy dog")
    code, out, _ = run(capsys, "fingerprint")
    assert out.split("\t")[0] == "-"
    code, out, _ = run(capsys, "--json", "fingerprint", str(f), "--similarity")
    (rec,) = lines_of(out)
    sig = simstore.signature(f.read_text())
    assert rec["fp"] == f"0x{sig.fingerprint:016x}" and len(rec["bands"]) == 16
    assert bytes.fromhex(rec["sketch"]) == sig.sketch.astype(">u8").tobytes()
    cfg = simstore.FingerprintConfig(ngram=5, seed=7)
    simstore.SimStore(tmp_path / "s5", config=cfg).close()
    code, out, _ = run(capsys, "fingerprint", str(f), "--store", str(tmp_path / "s5"))
    assert out.split("\t")[1].strip() == f"0x{simstore.fingerprint(f.read_text(), cfg):016x}"


# --------------------------------------------------------------------------- dedup-corpus


def _corpus_docs(n: int = 40) -> list[dict]:
    words = [f"w{i}" for i in range(2000)]
    out = []
    for i in range(n):
        base = words[(i // 2) * 40 : (i // 2) * 40 + 200]
        text = " ".join(base if i % 2 == 0 else base[:100] + ["edit"] + base[101:])
        out.append({"id": f"d{i}", "text": text + " x" * (i % 3), "n": i})
    return out


def test_dedup_corpus_writes_kept_lines_and_a_removed_report(tmp_path, capsys):
    """dedup-corpus copies kept JSONL lines whole, compressed by suffix, and reports each
    removed document with its kept representative and similarity."""
    src = jsonl(tmp_path / "in.jsonl", _corpus_docs())
    kept, removed = tmp_path / "kept.jsonl.gz", tmp_path / "removed.jsonl"
    code, out, _ = run(capsys, "dedup-corpus", src, "-o", str(kept), "--removed", str(removed),
                       "--threshold", "0.9")
    assert code == 0 and "removed" in out
    with gzip.open(kept, "rt") as f:
        got = [json.loads(line) for line in f]
    rm = lines_of(removed.read_text())
    assert len(got) + len(rm) == 40 and all(set(d) == {"id", "text", "n"} for d in got)
    assert {r["id"] for r in rm}.isdisjoint({d["id"] for d in got})
    assert all(r["jaccard"] >= 0.9 and r["kept"] in {d["id"] for d in got} for r in rm)
    code, out, _ = run(capsys, "--json", "dedup-corpus", src, "-o", str(tmp_path / "k.jsonl"),
                       "--k", "5", "--removed", str(removed))
    assert json.loads(out)["removed"] == len(lines_of(removed.read_text()))
    assert all("distance" in r for r in lines_of(removed.read_text()))


def test_dedup_corpus_incremental_store_and_keep_policies(tmp_path, capsys):
    """--store makes runs incremental; --keep longest and --keep FIELD pick other survivors."""
    docs = _corpus_docs()
    a = jsonl(tmp_path / "a.jsonl", docs[:20])
    b = jsonl(tmp_path / "b.jsonl", [dict(d, id=f"b{i}") for i, d in enumerate(docs[:20])])
    store = str(tmp_path / "seen")
    code, out, _ = run(capsys, "--json", "dedup-corpus", a, "-o", str(tmp_path / "k1.jsonl"),
                       "--store", store)
    first = json.loads(out)
    code, out, _ = run(capsys, "--json", "dedup-corpus", b, "-o", str(tmp_path / "k2.jsonl"),
                       "--store", store)
    assert code == 0 and json.loads(out)["kept"] == 0 and json.loads(out)["removed"] == 20
    for keep, best in (("longest", lambda d: len(d["text"])), ("n", lambda d: d["n"])):
        code, _, _ = run(capsys, "dedup-corpus", a, "-o", str(tmp_path / f"{keep}.jsonl"),
                         "--keep", keep)
        kept = lines_of((tmp_path / f"{keep}.jsonl").read_text())
        assert code == 0 and len(kept) == first["kept"]
        for d in kept:
            pair = [x for x in docs[:20] if x["n"] // 2 == d["n"] // 2]
            assert best(d) == max(best(x) for x in pair)


def test_dedup_corpus_reads_text_directories_and_parquet(tmp_path, corpus, capsys):
    """Text files come out as {id, text} lines; Parquet in gives Parquet out."""
    code, _, _ = run(capsys, "dedup-corpus", str(corpus), "-o", str(tmp_path / "k.jsonl"))
    kept = lines_of((tmp_path / "k.jsonl").read_text())
    assert code == 0 and [os.path.basename(d["id"]) for d in kept] == ["a.txt", "z.txt"]
    assert kept[0]["text"] == (corpus / "a.txt").read_text()
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(_corpus_docs()), src)
    code, _, _ = run(capsys, "dedup-corpus", str(src), "-o", str(tmp_path / "k.parquet"))
    t = pq.read_table(tmp_path / "k.parquet")
    assert code == 0 and t.column_names == ["id", "text", "n"] and 0 < t.num_rows < 40
    code, _, err = run(capsys, "dedup-corpus", str(corpus), "-o", str(tmp_path / "x.parquet"))
    assert code == 1 and "Parquet output needs Parquet inputs" in err


def test_dedup_corpus_bad_input_writes_nothing(tmp_path, capsys):
    """A bad line stops dedup-corpus with file:line before any output or store write."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(_good(1) + b'{"id": null, "text": "x"}\n')
    for extra in ([], ["--store", str(tmp_path / "st")]):
        code, _, err = run(capsys, "dedup-corpus", str(src), "-o", str(tmp_path / "k.jsonl"),
                           *extra)
        assert code == 1 and f"{src}:2" in err and "nothing was written" in err
        assert not (tmp_path / "k.jsonl").exists()
    assert not (tmp_path / "st").exists()  # the new store it made is gone with it


# --------------------------------------------------------------------------- maintenance


def test_verify_stats_export_compact_rebuild(store_path, corpus, tmp_path, capsys):
    """verify passes, stats counts, export lists every doc, compact keeps them, rebuild says
    what changed."""
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
    code, out, _ = run(capsys, "rebuild", store_path, "--k", "6")
    assert code == 0 and "max k 4 -> 6" in out and "tables" in out
    code, out, _ = run(capsys, "--json", "rebuild", store_path)
    info = json.loads(out)
    assert info["k"] == 6 and info["changed"] == {}
    assert run(capsys, "verify", store_path)[0] == 0
    code, out, _ = run(capsys, "--json", "dedup", store_path, "--clusters", "--k", "6")
    assert len(out.splitlines()) == 1


def test_a_store_grown_past_its_layout_is_told_to_rebuild():
    """The model behind stats' advice: a k = 8 layout planned for the default 1M holding
    10M costs 6.7x one planned for 10M (measured: ~300 against ~30 µs), so a rebuild is
    advised; not for a layout planned for its size, nor at k = 3 (every size plans the
    same), nor for a small store."""
    from simstore.search.layout import plan
    from simstore.store.maintenance import REPLAN_FROM, layout_fit

    cost, replanned, advised = layout_fit(plan(8, 10**6).layout, 10**7)
    assert advised and 6 < cost / replanned < 7.5
    assert not layout_fit(plan(8, 10**7).layout, 10**7)[2]
    assert not layout_fit(plan(3, 1000).layout, 10**7)[2]
    assert not layout_fit(plan(8, 10).layout, REPLAN_FROM - 1)[2]


def test_stats_names_rebuild_when_advised(store_path, corpus, capsys, monkeypatch):
    """stats prints the advice on stderr (stdout keeps the record) exactly when the store's
    stats advise a rebuild."""
    from simstore.store import maintenance as upkeep

    run(capsys, "index", store_path, str(corpus))
    code, out, err = run(capsys, "--json", "stats", store_path)
    assert code == 0 and json.loads(out)["rebuild_advised"] is False and err == ""
    monkeypatch.setattr(upkeep, "REPLAN_FROM", 1)
    monkeypatch.setattr(upkeep, "REPLAN_AT", 0.5)  # any layout: the wiring, not the model
    code, out, err = run(capsys, "--json", "stats", store_path)
    info = json.loads(out)
    assert code == 0 and info["rebuild_advised"] is True and info["count"] == 4
    assert f"rebuild {store_path}" in err and "4 documents" in err and err.count("\n") == 1


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
    code, out, _ = run(capsys, "--json", "dedup", path, "--threshold", "0.9", "--clusters")
    (cluster,) = lines_of(out)
    assert os.path.basename(cluster["representative"]) == "a.txt"
    assert 0.9 <= cluster["members"][0]["jaccard"] < 1.0
    fresh = str(tmp_path / "sim2")
    assert run(capsys, "init", fresh, "--sketch-bits", "256")[0] == 0
    code, out, _ = run(capsys, "index", fresh, str(d), "--threshold", "0.9")
    assert code == 0 and "1 near-duplicates skipped" in out
    code, out, _ = run(capsys, "--json", "stats", fresh)
    info = json.loads(out)
    assert info["similarity"] and info["sketch_bytes"] == 32 and info["count"] == 2
    code, out, _ = run(capsys, "plan", "--k", "3", "--expected-size", "1000", "--similarity")
    assert code == 0 and "band_key_bytes_per_document: 64" in out
    new = str(tmp_path / "made-by-index")
    code, out, _ = run(capsys, "index", new, str(d), "--threshold", "0.9")
    assert code == 0 and "2 new documents" in out


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


def test_spark_dedup_is_a_command_of_the_parser(capsys):
    """spark-dedup is parsed like every command (its --help, its usage errors, exit 2)."""
    for argv, code in ((["spark-dedup", "--help"], 0), (["spark-dedup"], 2),
                       (["spark-dedup", "a", "b", "--k", "17"], 2)):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == code
    cap = capsys.readouterr()
    assert "--threshold" in cap.out and "simstore-cli spark-dedup: error: " in cap.err
    assert "0..16" in cap.err


def test_parsing_imports_no_pyspark():
    """The CLI imports pyspark only when spark-dedup runs, never to parse a command."""
    code = ("import sys; from simstore.cli import build_parser; "
            "build_parser().parse_args(['spark-dedup', 'a', 'b']); "
            "assert 'pyspark' not in sys.modules, 'pyspark imported'")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, capture_output=True)
