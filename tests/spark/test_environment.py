"""Shipping simstore to executors, on the standalone cluster: executors whose Python has
no simstore (or another build, or no Python at all) are refused with one
ExecutorEnvironmentError naming the recipe; the packed environment shipped with
spark.archives runs the jobs (that test is marked stress: it packs ~115 MB)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="simstore.spark needs pyspark: pip install '.[spark]'")
pytest.importorskip("pyarrow", reason="simstore.spark needs pyarrow: pip install '.[spark]'")

import simstore  # noqa: E402
from simstore import spark as ss  # noqa: E402
from simstore.exceptions import SimstoreError  # noqa: E402

from .data import U64, assert_pairs, flip, stop_shared_session  # noqa: E402

pytestmark = pytest.mark.slow
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """The Python of a fresh ``python -m venv``: no simstore, no numpy."""
    env = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(env)], check=True)
    return str(env / "bin" / "python")


def _fps(n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(5)
    random = rng.integers(0, 2**64 - 1, size=n, dtype=U64, endpoint=True)
    return np.concatenate([random, flip(rng, random[: n // 10], 1, 3)])


def _session(cluster, monkeypatch, python=None, archive=None, **conf):
    stop_shared_session()  # else cluster_session would hand back that one, as it is
    if python is not None:
        monkeypatch.setenv("PYSPARK_PYTHON", python)
    s = ss.cluster_session(cluster.url, archive, app_name="simstore-env-tests",
                           conf={**cluster.conf(source=False), **conf})
    s.sparkContext.setLogLevel("ERROR")
    return s


def _refusal(spark) -> str:
    df = spark.createDataFrame([(1, 5), (2, 7)], "id long, fp long")
    with pytest.raises(ss.ExecutorEnvironmentError) as info:
        ss.find_all(df, 3)
    assert isinstance(info.value, SimstoreError) and isinstance(info.value, ImportError)
    msg = str(info.value)
    assert "\n" not in msg and "python -m simstore.spark ENV.tar.gz" in msg
    assert "Py4J" not in msg and "Traceback" not in msg
    return msg


@pytest.mark.parametrize("case", ["no simstore", "another build", "no python"])
def test_executors_without_this_simstore_are_refused(cluster, bare_python, tmp_path,
                                                     monkeypatch, case):
    """Executors running a fresh venv (no simstore), a simstore of another version on
    their path, or a Python that does not exist: one clear error, before any search."""
    if case == "no simstore":
        spark = _session(cluster, monkeypatch, bare_python)
        words = [f"Python ({bare_python}) cannot import simstore",
                 "No module named 'simstore'"]
    elif case == "another build":
        fake = tmp_path / "fake" / "simstore"
        (fake / "native").mkdir(parents=True)
        (fake / "__init__.py").write_text("__version__ = '0.0.1'\n")
        (fake / "native" / "__init__.py").write_text("")
        (fake / "native" / "_native.py").write_text("# not the C core\n")
        spark = _session(cluster, monkeypatch, bare_python,
                         **{"spark.executorEnv.PYTHONPATH": str(fake.parent)})
        words = ["imports simstore 0.0.1", f"the driver {simstore.__version__}"]
    else:
        spark = _session(cluster, monkeypatch, str(tmp_path / "nowhere" / "python"))
        words = ["could not run simstore's build check (Cannot run program"]
    try:
        msg = _refusal(spark)
    finally:
        spark.stop()
    for w in words:
        assert w in msg, msg


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> str:
    """This simstore packed for executors (python -m simstore.spark)."""
    out = tmp_path_factory.mktemp("packed") / "env.tar.gz"
    done = subprocess.run([sys.executable, "-m", "simstore.spark", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "spark.archives=" in done.stdout
    return str(out)


@pytest.mark.stress  # ~90 s: pip installs and packs ~115 MB, each executor unpacks it
def test_packed_environment_runs_the_jobs(cluster, packed, monkeypatch):
    """Executors whose own Python has no simstore run the packed environment shipped
    with spark.archives: they import simstore from it, pass the build check, and
    find_all equals the in-memory answer (-m stress)."""
    monkeypatch.setenv("PYSPARK_PYTHON", BASE_PYTHON)  # cluster_session must override it
    spark = _session(cluster, monkeypatch, archive=packed)
    try:
        sc = spark.sparkContext
        where = sc.parallelize(range(4), 4).map(
            lambda _: __import__("simstore").__file__).distinct().collect()
        assert where and all("/simstore_env/" in w for w in where), where
        fps = _fps()
        df = spark.createDataFrame(
            [(i, int(v)) for i, v in enumerate(ss.to_long(fps))], "id long, fp long")
        want = simstore.find_all(fps, 3)
        assert len(want.i) >= 200
        assert_pairs(ss.find_all(df, 3), want)
    finally:
        spark.stop()


def test_missing_archive_is_refused(cluster):
    """A session asked to ship an archive that does not exist is refused up front."""
    with pytest.raises(ss.ExecutorEnvironmentError, match="does not exist"):
        ss.cluster_session(cluster.url, "/nonexistent/env.tar.gz")
