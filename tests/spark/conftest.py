"""The Spark standalone cluster the slow cluster tests share (tools/spark_cluster.py)."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A master and two 1-core workers (1 GB each) on 127.0.0.1 for the whole run,
    stopped at its end; skipped without pyspark or Java."""
    pytest.importorskip("pyspark", reason="the cluster tests need pyspark: pip install '.[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the cluster tests need Java 17+")
    from tools.spark_cluster import Cluster

    c = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cspark(cluster):
    """A session on the cluster for one test module (its executors import the driver's
    simstore files), stopped at the module's end."""
    from simstore import spark as ss

    s = ss.cluster_session(cluster.url, app_name="simstore-cluster-tests", conf=cluster.conf())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
