"""The executors' environment: pack the driver's simstore for them, check they import it.

simstore has a C extension, so ``--py-files`` cannot carry it: every executor's Python
needs simstore and its native build. :func:`pack_environment` (or ``python -m
simstore.spark.environment ENV.tar.gz``) packs a virtual environment holding this
process's simstore, files and compiled module as imported here, and the driver's
versions of its dependencies (venv-pack; pyspark itself comes from the cluster's Spark).
Ship it with ``spark.archives=ENV.tar.gz#simstore_env`` and run the executors' Python as
``./simstore_env/bin/python`` (``common.cluster_session`` does both).

:func:`check_executors` runs before the first job of an application: one tiny job (a task
per default-parallelism slot) asks the Python workers for their simstore version and the
SHA-256 of their compiled module; any answer other than the driver's, or workers that do
not start, is refused with :class:`ExecutorEnvironmentError`, one line naming what differs
and the recipe. ``spark.simstore.checkExecutors=false`` skips it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .._version import __version__
from ..exceptions import NativeModuleError

ENV_DIR = "simstore_env"  # where executors unpack the archive (its '#' alias)
EXECUTOR_PYTHON = f"./{ENV_DIR}/bin/python"
RECIPE = ("ship the driver's environment: python -m simstore.spark ENV.tar.gz, "
          f"then spark.archives=ENV.tar.gz#{ENV_DIR} with PYSPARK_PYTHON={EXECUTOR_PYTHON} "
          "(docs/scaling.md, 'Shipping the environment')")
CONF = "spark.simstore.checkExecutors"
_checked: set[str] = set()  # application ids whose executors passed


class ExecutorEnvironmentError(NativeModuleError):
    """Spark's executors do not import the driver's simstore (missing, another version or
    another native build), or their Python workers do not start."""


# pyspark (4.x) warns on each pandas check, so on every run, when pandas >= 3 is installed
PANDAS3_WARNING = "PySpark does not yet fully support pandas >= 3"


def quiet_pandas3_warning() -> None:
    """Ignore pyspark's FutureWarning about pandas >= 3, that one only (by category and
    the start of its message): simstore's jobs use Arrow batches and numpy, none of the
    pandas features it warns of. Installed where simstore starts a Spark session."""
    warnings.filterwarnings("ignore", message=re.escape(PANDAS3_WARNING),
                            category=FutureWarning)


# --------------------------------------------------------------------------- check


def _make_probe() -> Any:
    """The function each executor runs. A closure, so cloudpickle ships it by value:
    unpickling it on an executor must not import simstore (which may be absent)."""

    def probe() -> tuple[str, ...]:
        import hashlib
        import importlib
        import sys

        try:  # the whole package, as a user's job would: any simstore version answers
            installed = importlib.import_module("simstore")
            native = importlib.import_module("simstore.native._native")
        except Exception as exc:  # noqa: BLE001 - any import failure is the answer
            return ("error", f"{type(exc).__name__}: {exc}", sys.executable)
        with open(native.__file__, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        return ("ok", installed.__version__, digest, sys.executable)

    return probe


@lru_cache(maxsize=1)
def driver_build() -> tuple[str, ...]:
    """("ok", version, native SHA-256 prefix, python) of this process's simstore."""
    return _make_probe()()


def _cause(exc: BaseException) -> str:
    """The telling line of a failed Spark job's (long, nested) error text."""
    text = str(exc)
    for pattern in (r"Cannot run program [^\n]*", r"Python in worker has different[^\n]*",
                    r"(?:ModuleNotFound|Import)Error: [^\n]*"):
        found = re.findall(pattern, text)
        if found:
            return found[-1].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def check_executors(spark: Any) -> None:
    """Refuse a session whose executors import no simstore or another build of it (once
    per application; ``spark.simstore.checkExecutors=false`` skips it)."""
    sc = spark.sparkContext
    app = sc.applicationId
    if app in _checked or sc.getConf().get(CONF, "true").lower() == "false":
        return
    probe = _make_probe()
    n = max(2, sc.defaultParallelism)
    sc.setJobDescription("simstore: executors' build check")
    try:
        answers = set(sc.parallelize(range(n), n).map(lambda _: probe()).collect())
    except Exception as exc:  # noqa: BLE001 - Py4J and PySpark errors of every kind
        raise ExecutorEnvironmentError(
            f"Spark executors could not run simstore's build check ({_cause(exc)}); " + RECIPE
        ) from None
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    want = driver_build()
    for answer in sorted(answers):
        if answer[0] == "error":
            raise ExecutorEnvironmentError(
                f"Spark executors' Python ({answer[2]}) cannot import simstore ({answer[1]}); "
                + RECIPE
            )
        if answer[1:3] != want[1:3]:
            raise ExecutorEnvironmentError(
                f"Spark executors' Python ({answer[3]}) imports simstore {answer[1]}, native "
                f"build {answer[2]}; the driver {want[1]}, native build {want[2]}; " + RECIPE
            )
    _checked.add(app)


# --------------------------------------------------------------------------- pack


def _pins() -> list[str]:
    """simstore's run-time requirements (and the spark extra's pyarrow and pandas) at the
    driver's installed versions; pyspark is the cluster's own."""
    names = ["lmdb", "mmh3", "numpy", "cffi", "tqdm", "pyarrow", "pandas"]
    try:
        reqs = metadata.requires("simstore") or []
        names = list(dict.fromkeys(
            [m.group(0) for r in reqs if "extra" not in r
             and (m := re.match(r"[A-Za-z0-9_.-]+", r))] + ["pyarrow", "pandas"]))
    except metadata.PackageNotFoundError:  # pragma: no cover - a bare checkout
        pass
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def _copy_simstore(site: Path) -> None:
    """This process's simstore package, compiled module included, into site-packages,
    with the dist-info that gives its version."""
    src = Path(__file__).resolve().parent.parent  # the simstore package
    shutil.copytree(src, site / "simstore", ignore=shutil.ignore_patterns("__pycache__", ".*"))
    info = site / f"simstore-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: simstore\nVersion: {__version__}\n")
    (info / "INSTALLER").write_text("simstore.spark.environment\n")
    files = sorted(p.relative_to(site).as_posix() for p in (site / "simstore").rglob("*")
                   if p.is_file())
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


def _run(cmd: list[str], quiet: bool) -> None:
    out = subprocess.DEVNULL if quiet else None
    done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise ExecutorEnvironmentError(f"{' '.join(cmd[:4])} ... failed: {tail[0]}")


def pack_environment(
    out: str | os.PathLike[str], *, python: str | None = None,
    python_prefix: str | None = None, overwrite: bool = False, quiet: bool = True,
) -> Path:
    """Pack a virtual environment for Spark executors into out (.tar.gz): a new venv of
    python (default: this interpreter's base Python; the executors' Python must be the
    driver's minor version) holding the driver's dependency versions (pip) and this
    process's simstore as imported here. Needs pip access to the packages (or a cache).

    The venv's ``bin/python`` links to that base Python: executors need it at the same
    path, or give python_prefix, where their hosts have that Python (venv-pack's option).
    """
    out = Path(out).absolute()
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (overwrite=True replaces it)")
    base = python or getattr(sys, "_base_executable", sys.executable)
    with tempfile.TemporaryDirectory(prefix="simstore-env-") as tmp:
        env = Path(tmp) / "env"
        _run([base, "-m", "venv", str(env)], quiet)
        py = str(env / "bin" / "python")
        _run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q",
              *_pins(), "venv-pack"], quiet)
        site = subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True).stdout.strip()
        _copy_simstore(Path(site))
        cmd = [str(env / "bin" / "venv-pack"), "-p", str(env), "-o", str(out), "-q"]
        if python_prefix:
            cmd += ["--python-prefix", python_prefix]
        if overwrite:
            cmd.append("-f")
        _run(cmd, quiet)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m simstore.spark ENV.tar.gz``: pack the executors' env."""
    p = argparse.ArgumentParser(
        prog="python -m simstore.spark",
        description="Pack a virtual environment with this simstore (and its compiled core) "
                    "for Spark executors; ship it with spark.archives=ENV.tar.gz#"
                    f"{ENV_DIR} and PYSPARK_PYTHON={EXECUTOR_PYTHON}.")
    p.add_argument("out", metavar="ENV.tar.gz", help="the archive to write")
    p.add_argument("--python", help="base Python of the venv (default: this one's)")
    p.add_argument("--python-prefix",
                   help="where the executors' hosts have that Python (venv-pack's option)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing archive")
    args = p.parse_args(argv)
    try:
        path = pack_environment(args.out, python=args.python, python_prefix=args.python_prefix,
                                overwrite=args.overwrite, quiet=False)
    except (ExecutorEnvironmentError, FileExistsError) as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: spark.archives={path}#{ENV_DIR}, PYSPARK_PYTHON={EXECUTOR_PYTHON}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
