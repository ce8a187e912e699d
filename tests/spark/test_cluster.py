"""simstore.spark on a standalone cluster (master + two 1-core workers on 127.0.0.1,
executors in their own JVMs): answers equal the in-memory functions', also when an
executor is killed mid-job."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="simstore.spark needs pyspark: pip install '.[spark]'")
pytest.importorskip("pyarrow", reason="simstore.spark needs pyarrow: pip install '.[spark]'")

import simstore  # noqa: E402
from simstore import spark as ss  # noqa: E402

from .data import U64, assert_pairs, flip, greedy, report, synthetic_texts  # noqa: E402

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def fps() -> np.ndarray:
    """30k fingerprints: random, planted neighbours at 1..6 bits, a 3k crowded header,
    300 copies of one and near copies of it."""
    rng = np.random.default_rng(24)
    random = rng.integers(0, 2**64 - 1, size=25_000, dtype=U64, endpoint=True)
    top = U64(int(rng.integers(0, 2**48)) << 16)
    crowded = top | rng.choice(2**16, size=3_000, replace=False).astype(U64)
    copies = np.full(300, random[5], dtype=U64)
    out = np.concatenate([random, flip(rng, random[:1500], 1, 6), crowded, copies,
                          flip(rng, copies[:20], 1, 3)])
    return out[rng.permutation(len(out))]


@pytest.fixture(scope="module")
def fp_df(cspark, fps):
    """fps as a DataFrame (id long, fp long) in 4 partitions, cached on the executors."""
    import pyarrow as pa

    table = pa.table({"id": np.arange(len(fps), dtype=np.int64), "fp": ss.to_long(fps)})
    return cspark.createDataFrame(table).repartition(4).cache()


@pytest.mark.parametrize("k", [3, 6])
def test_find_all_equals_in_memory(fp_df, fps, k):
    """find_all on the cluster gives in-memory find_all's pairs (k = 3 with the crowded
    header salted, k = 6)."""
    want = simstore.find_all(fps, k)
    assert len(want.i) > 44_850  # the copies alone give 44,850
    assert_pairs(ss.find_all(fp_df, k, max_group=2_000), want)


def test_clusters_and_dedup(fp_df, fps):
    """clusters equal simstore.clusters; dedup's representative mode removes the
    sequential greedy's rows (the rounds run to the end in test_spark, local[2])."""
    t = ss.clusters(fp_df, k=3, check=False).toArrow()
    ids, lab = t.column("id").to_numpy(), t.column("cluster").to_numpy()
    assert np.array_equal(lab[np.argsort(ids)], simstore.clusters(fps, 3))
    want = simstore.find_all(fps, 3)
    oracle = greedy(len(fps), want.i, want.j, want.distance)
    res = ss.dedup(fp_df, k=3, check=False)
    assert report(res.removed, "distance") == {x: (r, float(d)) for x, (r, d) in oracle.items()}
    assert res.kept.count() == len(fps) - len(oracle)


def test_text_to_signatures_to_find_similar(cspark):
    """Texts -> with_signatures -> find_similar on the executors give in-memory
    find_similar's pairs and estimates."""
    texts = synthetic_texts(400, seed=24)
    df = cspark.createDataFrame(list(enumerate(texts)), "id long, text string").repartition(4)
    want = simstore.find_similar(simstore.signatures(texts), 0.8)
    assert len(want.i) > 1225  # the 50 copies alone give 1,225
    assert_pairs(ss.find_similar(ss.with_signatures(df), 0.8), want, "jaccard")


def test_executor_killed_mid_job(cluster, cspark, fp_df, fps):
    """An executor SIGKILLed while the search runs (after some of its tasks finished):
    Spark reruns the lost work on a new executor and the answer is unchanged."""
    ss.check_executors(cspark)  # done already in a full run: not the job to interrupt
    sc = cspark.sparkContext
    want = simstore.find_all(fps, 3)
    got: dict[str, object] = {}

    def run() -> None:
        try:
            got["pairs"] = ss.find_all(fp_df, 3, check=False, partitions=24).toArrow()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            got["error"] = exc

    before = set(cluster.executors())
    job = threading.Thread(target=run)
    job.start()
    killed = None
    end = time.monotonic() + 120
    while killed is None and job.is_alive() and time.monotonic() < end:
        for sid in sc.statusTracker().getActiveStageIds():
            info = sc.statusTracker().getStageInfo(sid)
            if info and info.numCompletedTasks >= 2 and info.numActiveTasks >= 1:
                killed = cluster.kill_executor()
                break
        time.sleep(0.05)
    job.join(timeout=300)
    assert killed in before, "the job ended before an executor could be killed"
    assert "error" not in got, got.get("error")
    assert_pairs(got["pairs"], want)
    assert killed not in cluster.executors()
