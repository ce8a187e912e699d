"""The Spark standalone cluster the slow cluster tests share (tools/spark_cluster.py), and
the one session on it."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A master and two 1-core workers (1 GB each) on 127.0.0.1 for the whole run,
    stopped at its end, its JVMs quick to start (data.JAVA_OPTIONS); skipped without
    pyspark or Java."""
    pytest.importorskip("pyspark", reason="the cluster tests need pyspark: pip install '.[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the cluster tests need Java 17+")
    from tools.spark_cluster import Cluster

    from .data import JAVA_OPTIONS, stop_shared_session

    c = Cluster(tmp_path_factory.mktemp("spark-cluster"), java_options=JAVA_OPTIONS)
    yield c
    stop_shared_session()
    c.stop()


@pytest.fixture(scope="module")
def cspark(cluster):
    """The session on the cluster, shared by the modules that ask for it (data.py's
    shared_session), stopped with the cluster at the run's end."""
    from .data import shared_session

    return shared_session(cluster)
