"""The CI entry point (.ci/run) fails when pytest fails, and when it collects no test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _fake_checkout(tmp_path: Path, tests: str) -> Path:
    """A checkout holding .ci/run and `tests`, with a python3 whose 'venv' makes a .venv
    whose pip does nothing and whose python is this interpreter."""
    co = tmp_path / "co"
    (co / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", co / ".ci" / "run")
    (co / "tests").mkdir()
    if tests:
        (co / "tests" / "test_x.py").write_text(tests)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(
        "#!/bin/sh\n"  # python3 -m venv .venv
        'mkdir -p "$3/bin"\n'
        f'printf \'#!/bin/sh\\nexit 0\\n\' > "$3/bin/pip"\n'
        f'printf \'#!/bin/sh\\nexec {sys.executable} "$@"\\n\' > "$3/bin/python"\n'
        'chmod +x "$3/bin/pip" "$3/bin/python"\n')
    (fake / "python3").chmod(0o755)
    return co


def _run(co: Path, tmp_path: Path) -> int:
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(["bash", str(co / ".ci" / "run"), "-q", "-p", "no:cacheprovider"],
                          cwd=co, env=env, capture_output=True, text=True, timeout=120).returncode


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_fails_when_no_test_is_collected_and_passes_only_on_green(tmp_path):
    """No test collected: CI exits 5 (was turned into 0); a passing test: 0; a failing: 1."""
    assert _run(_fake_checkout(tmp_path / "a", ""), tmp_path / "a") == 5
    assert _run(_fake_checkout(tmp_path / "b", "def test_ok():\n    pass\n"), tmp_path / "b") == 0
    assert _run(_fake_checkout(tmp_path / "c", "def test_no():\n    assert 0\n"),
                tmp_path / "c") == 1
