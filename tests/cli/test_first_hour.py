"""A new user's mistakes (issue 26), each refused in words by a real simstore-cli process.

Output paths are refused before the first input byte: these runs read standard input
from a pipe that never ends, so a command that read its input first would hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/cli/..)


def cli(*args: str, cwd: Path, stdin: int | None = subprocess.DEVNULL,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m simstore ARGS`` on this checkout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "simstore", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, stdin=stdin, timeout=timeout)


def refused_before_reading(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run with stdin a pipe nobody writes or closes: exit before reading it, or time out."""
    r, w = os.pipe()
    try:
        return cli(*args, cwd=cwd, stdin=r, timeout=30)
    finally:
        os.close(r)
        os.close(w)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".simstore-tmp-" in p.name)


def write_jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


DOCS = [{"id": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 400}" for j in range(40)),
         "score": i} for i in range(30)]


@pytest.mark.parametrize("flag", ["-o", "--removed"])
def test_an_output_that_is_a_directory_is_refused_before_any_input(tmp_path, flag):
    """-o DIR / --removed DIR: one line naming the flag and the path, before stdin is read."""
    (tmp_path / "outdir").mkdir()
    other = ["-o", "kept.jsonl"] if flag == "--removed" else []
    res = refused_before_reading("dedup-corpus", "-", *other, flag, "outdir", cwd=tmp_path)
    assert res.returncode == 1
    assert f"{flag} 'outdir' is a directory" in res.stderr and "Traceback" not in res.stderr
    assert temporaries(tmp_path) == [] and not (tmp_path / "kept.jsonl").exists()


@pytest.mark.parametrize("flag", ["-o", "--removed"])
def test_an_output_in_a_missing_folder_is_refused_before_any_input(tmp_path, flag):
    """A missing parent folder is named with its flag before anything is read."""
    other = ["-o", "kept.jsonl"] if flag == "--removed" else []
    res = refused_before_reading("dedup-corpus", "-", *other, flag, "nope/out.jsonl",
                                 cwd=tmp_path)
    assert res.returncode == 1
    assert f"{flag} 'nope/out.jsonl': folder" in res.stderr and "does not exist" in res.stderr
    assert temporaries(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not bind root")
def test_an_output_in_an_unwritable_folder_is_refused_before_any_input(tmp_path):
    """A folder this user cannot write is refused with the flag and the reason."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = refused_before_reading("dedup-corpus", "-", "-o", "ro/k.jsonl", cwd=tmp_path)
    finally:
        ro.chmod(0o755)
    assert res.returncode == 1 and "-o 'ro/k.jsonl': cannot write in folder" in res.stderr


def test_an_output_that_is_an_input_and_a_store_that_is_a_file_are_refused(tmp_path):
    """-o naming an input, and --store naming a regular file, are refused before reading."""
    src = write_jsonl(tmp_path / "in.jsonl", DOCS)
    res = cli("dedup-corpus", str(src), "-o", str(src), cwd=tmp_path)
    assert res.returncode == 1 and f"-o {str(src)!r} is also an input" in res.stderr
    assert len(src.read_text().splitlines()) == len(DOCS)
    (tmp_path / "plain").write_text("x")
    res = refused_before_reading("dedup-corpus", "-", "-o", "k.jsonl", "--store", "plain",
                                 cwd=tmp_path)
    assert res.returncode == 1 and "is a file" in res.stderr
    assert temporaries(tmp_path) == [] and not (tmp_path / "k.jsonl").exists()


def test_export_and_query_outputs_are_checked_before_any_work(tmp_path):
    """export -o DIR and query -o in a missing folder: refused with the flag, no temporary."""
    store = tmp_path / "s"
    assert cli("init", str(store), cwd=tmp_path).returncode == 0
    (tmp_path / "outdir").mkdir()
    for args in (["export", str(store), "-o", "outdir"],
                 ["export", str(store), "--format", "parquet", "-o", "outdir"],
                 ["query", str(store), "5", "-o", "nope/q.tsv"]):
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 1, args
        assert "-o 'outdir' is a directory" in res.stderr or \
            "-o 'nope/q.tsv': folder" in res.stderr, res.stderr
    assert temporaries(tmp_path) == []


def test_a_failed_run_removes_its_temporaries(tmp_path):
    """A bad record found after the outputs were opened: exit 1 and no temporary left."""
    src = write_jsonl(tmp_path / "in.jsonl", DOCS)
    with open(src, "a", encoding="utf-8") as f:
        f.write("{not json\n")
    for extra in ([], ["--store", "st"], ["--keep", "longest"]):
        res = cli("dedup-corpus", str(src), "-o", "k.jsonl", "--removed", "rm.jsonl", *extra,
                  cwd=tmp_path)
        assert res.returncode == 1 and "in.jsonl:31" in res.stderr
        assert temporaries(tmp_path) == []
        assert not (tmp_path / "k.jsonl").exists() and not (tmp_path / "rm.jsonl").exists()


def test_keep_a_field_no_record_has_is_refused_naming_the_fields(tmp_path):
    """--keep scroe (misspelt): exit 1 naming the field and the first record's fields; no
    output; a field some records lack is counted in the summary."""
    src = write_jsonl(tmp_path / "in.jsonl", DOCS)
    res = cli("dedup-corpus", str(src), "-o", "k.jsonl", "--keep", "scroe", cwd=tmp_path)
    assert res.returncode == 1, res.stdout
    assert "--keep scroe: no record has a value for 'scroe'" in res.stderr
    assert "'id', 'text', 'score'" in res.stderr
    assert not (tmp_path / "k.jsonl").exists() and temporaries(tmp_path) == []
    some = write_jsonl(tmp_path / "some.jsonl",
                       [d if i % 3 else {k: v for k, v in d.items() if k != "score"}
                        for i, d in enumerate(DOCS)])
    res = cli("dedup-corpus", str(some), "-o", "k.jsonl", "--keep", "score", "--json",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["keep_field_missing"] == 10
    res = cli("dedup-corpus", str(some), "-o", "k2.jsonl", "--keep", "score", cwd=tmp_path)
    assert "10 documents have no 'score' value (ranked last)" in res.stdout


def test_keep_a_field_with_text_file_inputs_is_refused(tmp_path):
    """Text files have no fields: --keep FIELD over them is refused, not silently 'first'."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("some text here")
    res = cli("dedup-corpus", "docs", "-o", "k.jsonl", "--keep", "score", cwd=tmp_path)
    assert res.returncode == 1 and "is a text file, whose documents have no fields" in res.stderr


@pytest.mark.parametrize("command", ["dedup-corpus", "index"])
def test_hostile_json_lines_get_file_line_messages_not_tracebacks(tmp_path, command):
    """A JSON line nested 100,000 deep and an id of 5,000 digits: exit 1 with file:line."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"id": "a", "text": "fine words here"}\n'
                    '{"id": "b", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    big = tmp_path / "big.jsonl"
    big.write_text('{"id": ' + "7" * 5000 + ', "text": "fine words here"}\n')
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"id": "c", "text": "abc}\n{"id": "d", "text": "x\\u12"}\n')
    for src, where, what in ((deep, "deep.jsonl:2", "nested too deeply"),
                             (big, "big.jsonl:1", "4300 digits"),
                             (cut, "cut.jsonl:1", "invalid JSON")):
        args = (["dedup-corpus", str(src), "-o", "k.jsonl"] if command == "dedup-corpus"
                else ["index", str(tmp_path / "st"), str(src)])
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert where in res.stderr and what in res.stderr
        assert " at at " not in res.stderr


def test_a_mistyped_flag_shows_the_command_s_usage_and_the_closest_flag(tmp_path):
    """--treshold: the dedup-corpus usage (not the top level's) and 'did you mean --threshold?'."""
    res = cli("dedup-corpus", "in.jsonl", "-o", "k.jsonl", "--treshold", "0.8", cwd=tmp_path)
    assert res.returncode == 2
    assert "usage: simstore-cli dedup-corpus" in res.stderr and "COMMAND" not in res.stderr
    assert "unrecognized arguments: --treshold" in res.stderr
    assert "(did you mean --threshold?)" in res.stderr
    res = cli("query", "s", "5", "--kk", "3", cwd=tmp_path)
    assert res.returncode == 2 and "usage: simstore-cli query" in res.stderr
    assert "did you mean --k?" in res.stderr


def test_query_text_of_a_missing_file_names_the_flag_not_an_errno(tmp_path):
    """query --text MISSING: one line naming --text and the path, no '[Errno 2]'."""
    assert cli("init", "s", cwd=tmp_path).returncode == 0
    res = cli("query", "s", "--text", "MISSING", cwd=tmp_path)
    assert res.returncode == 1
    assert "--text 'MISSING': No such file or directory" in res.stderr
    assert "Errno" not in res.stderr


def test_a_failed_run_into_a_new_store_leaves_no_store_behind(tmp_path):
    """index NEW bad.jsonl and dedup-corpus --store NEW: exit 1 and no empty store; an existing
    store stays."""
    src = write_jsonl(tmp_path / "in.jsonl", DOCS)
    with open(src, "a", encoding="utf-8") as f:
        f.write('{"id": null, "text": "x"}\n')
    res = cli("index", "new.simstore", str(src), cwd=tmp_path)
    assert res.returncode == 1 and "in.jsonl:31" in res.stderr
    assert not (tmp_path / "new.simstore").exists()
    res = cli("dedup-corpus", str(src), "-o", "k.jsonl", "--store", "new2", cwd=tmp_path)
    assert res.returncode == 1 and not (tmp_path / "new2").exists()
    assert cli("init", "old", cwd=tmp_path).returncode == 0
    assert cli("index", "old", str(src), cwd=tmp_path).returncode == 1
    assert (tmp_path / "old" / "data.mdb").exists()


def test_a_threshold_below_the_reliable_range_is_warned_on_stderr_only(tmp_path):
    """--threshold 0.6: a warning on stderr pointing to --exact; the --json stdout stays pure
    JSON; 0.8 gets no warning."""
    src = write_jsonl(tmp_path / "in.jsonl", DOCS)
    res = cli("--json", "dedup-corpus", str(src), "-o", "k.jsonl", "--threshold", "0.6",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "warning: --threshold 0.6 is below 0.75" in res.stderr and "--exact" in res.stderr
    assert [json.loads(line) for line in res.stdout.splitlines()]  # every line is JSON
    assert "warning" not in res.stdout
    res = cli("dedup-corpus", str(src), "-o", "k2.jsonl", "--threshold", "0.8", cwd=tmp_path)
    assert res.returncode == 0 and "warning" not in res.stderr


def test_the_documented_common_mistakes_print_what_the_docs_say(tmp_path):
    """Each command of docs/cli.md 'Common mistakes' prints exactly the line shown under it."""
    readme = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = readme.split("## Common mistakes", 1)[1].split("```console", 1)[1].split("```")[0]
    lines = [line for line in block.strip().splitlines()]
    pairs = list(zip(lines[0::2], lines[1::2], strict=True))
    assert len(pairs) == 4
    write_jsonl(tmp_path / "crawl.jsonl",
                [{"url": "https://example.org/a", "text": "one two three four", "score": 3}])
    (tmp_path / "outdir").mkdir()
    for command, said in pairs:
        argv = command.removeprefix("$ simstore-cli ").split("#")[0].split()
        res = cli(*argv, cwd=tmp_path)
        err = res.stderr.strip().splitlines()
        if res.returncode == 2:  # a usage error: argparse's usage, then the error line
            assert err[0].startswith("usage: ") and err[-1] == said, (command, res.stderr)
            assert not any(line.startswith("simstore-cli") for line in err[:-1])
        else:
            assert res.returncode == 1 and err == [said], (command, res.stderr)
