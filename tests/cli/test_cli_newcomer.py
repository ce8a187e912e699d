"""What a newcomer hit (issue #48, small things), as real simstore-cli processes: swapped
index arguments, a query --text that finds nothing, stats fields explained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m simstore ARGS`` in cwd (no --quiet: notes on stderr are wanted)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "simstore", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def corpus(tmp_path) -> Path:
    docs = [
        {"id": f"d{i}", "text": f"document {i} " + " ".join(f"w{i}x{j}" for j in range(40))}
        for i in range(3)
    ]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return tmp_path


@pytest.mark.parametrize("existing", [False, True])
def test_index_with_swapped_arguments_says_so(corpus, existing) -> None:
    """index FILE STORE (a new store, or an existing one): exit 2, the error says the
    arguments look swapped and gives the command in order; nothing is created."""
    if existing:
        assert run("index", "-q", "s.simstore", "docs.jsonl", cwd=corpus).returncode == 0
    before = sorted(os.listdir(corpus))
    res = run("index", "docs.jsonl", "s.simstore", cwd=corpus)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert "the arguments look swapped" in last
    assert last.endswith("simstore-cli index s.simstore docs.jsonl")
    assert sorted(os.listdir(corpus)) == before


def test_query_text_without_a_match_says_so_on_stderr(corpus) -> None:
    """query --text with no near-duplicate: nothing on stdout, one note on stderr, exit 0;
    --quiet silences the note; a match prints as before with no note."""
    assert run("index", "-q", "s.simstore", "docs.jsonl", cwd=corpus).returncode == 0
    (corpus / "q.txt").write_text("zebra quux entirely unrelated words")
    res = run("query", "s.simstore", "--text", "q.txt", cwd=corpus)
    assert (res.returncode, res.stdout) == (0, "")
    assert res.stderr.strip() == (
        "simstore-cli: no near-duplicate of --text 'q.txt' (Hamming distance <= 5)"
    )
    res = run("query", "-q", "s.simstore", "--text", "q.txt", cwd=corpus)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    (corpus / "d0.txt").write_text(
        json.loads((corpus / "docs.jsonl").read_text().splitlines()[0])["text"]
    )
    res = run("query", "s.simstore", "--text", "d0.txt", cwd=corpus)
    assert res.returncode == 0 and res.stdout.startswith("d0\t0\t") and res.stderr == ""


def test_stats_help_explains_its_fields(tmp_path) -> None:
    """stats --help explains levels, radius and replanned_cost_us (and every other key)."""
    res = run("stats", "--help", cwd=tmp_path)
    assert res.returncode == 0
    from simstore import SimStore

    with SimStore(tmp_path / "s") as s:
        keys = s.stats()
    for key in keys:
        assert key in res.stdout or key == "path", key
    for key in ("levels", "radius", "replanned_cost_us"):
        assert f"- {key}:" in res.stdout


def test_a_bad_value_is_named_by_the_flag_typed_not_the_python_name(tmp_path, capsys):
    """expire --older-than banana and init --k 17 name --older-than and --k, not older_than, k."""
    from simstore.cli import main

    assert main(["init", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert main(["expire", str(tmp_path / "s"), "--older-than", "banana"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("simstore-cli expire: error: --older-than must be a duration")
    assert "older_than" not in err
    assert main(["init", str(tmp_path / "t"), "--k", "17"]) == 1
    assert capsys.readouterr().err.startswith("simstore-cli init: error: --k must be an int in 0..16")


def test_flag_naming_leaves_other_quoted_words_alone():
    """Only a quoted dest followed by 'must' becomes its flag; field names and values stay."""
    from simstore.cli._parser import build_parser, name_the_flags

    sub = build_parser().commands["dedup-corpus"]
    said = "'id_field' must be a str; the first record's fields are 'threshold', 'text'"
    assert name_the_flags(sub, said) == (
        "--id-field must be a str; the first record's fields are 'threshold', 'text'")
    assert name_the_flags(sub, "'inputs' must be a path") == "INPUT must be a path"
