"""simstore.spark on a local[2] session: every answer equals the in-memory function's."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="simstore.spark needs pyspark: pip install '.[spark]'")
pytest.importorskip("pyarrow", reason="simstore.spark needs pyarrow: pip install '.[spark]'")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("simstore.spark needs Java 17+ for a local Spark session", allow_module_level=True)

import simstore  # noqa: E402
from simstore import spark as ss  # noqa: E402
from simstore.cli import main  # noqa: E402
from simstore.exceptions import (  # noqa: E402
    InvalidDistanceError,
    InvalidDocIdError,
    InvalidFingerprintError,
    InvalidSignatureError,
    SimstoreError,
    SimstoreValueError,
)

from ..oracles import brute_pairs  # noqa: E402
from .data import (  # noqa: E402
    U64,
    assert_pairs,
    flip,
    greedy,
    pairs,
    report,
    stop_shared_session,
    synthetic_texts,
)

K = 3


@pytest.fixture(scope="module")
def spark():
    """One local[2] session for the module, 4 shuffle partitions, no UI."""
    stop_shared_session()  # the cluster tests' session, if up: else it would be handed back
    s = ss.local_session(
        "local[2]", app_name="simstore-tests", shuffle_partitions=4,
        conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fps() -> np.ndarray:
    """243k fingerprints: random, planted neighbours, a crowded header, 1,000 copies."""
    rng = np.random.default_rng(15)
    random = rng.integers(0, 2**64 - 1, size=200_000, dtype=U64, endpoint=True)
    planted = flip(rng, random[:2000], 1, K)
    top = U64(int(rng.integers(0, 2**40)) << 24)
    crowded = top | rng.choice(2**24, size=40_000, replace=False).astype(U64)
    page = random[7]
    copies = np.full(1000, page, dtype=U64)
    near_page = flip(rng, np.full(20, page, dtype=U64), 1, 2)
    out = np.concatenate([random, planted, crowded, copies, near_page])
    return out[rng.permutation(len(out))]


def _fp_frame(spark, fps):
    import pyarrow as pa

    table = pa.table({"id": np.arange(len(fps), dtype=np.int64), "fp": ss.to_long(fps)})
    return spark.createDataFrame(table).repartition(4).cache()


@pytest.fixture(scope="module")
def fp_df(spark, fps):
    """fps as a DataFrame (id long, fp long) in 4 partitions."""
    return _fp_frame(spark, fps)


@pytest.fixture(scope="module")
def small() -> np.ndarray:
    """30k fingerprints for the graph tests: random, planted, a 4k crowded header whose
    neighbours chain, and 1,000 copies with near neighbours."""
    rng = np.random.default_rng(16)
    random = rng.integers(0, 2**64 - 1, size=25_000, dtype=U64, endpoint=True)
    top = U64(int(rng.integers(0, 2**48)) << 16)
    crowded = top | rng.choice(2**16, size=4_000, replace=False).astype(U64)
    copies = np.full(1000, random[3], dtype=U64)
    out = np.concatenate([random, flip(rng, random[:500], 1, K), crowded, copies,
                          flip(rng, copies[:20], 1, 2)])
    return out[rng.permutation(len(out))]


@pytest.fixture(scope="module")
def small_df(spark, small):
    """small as a DataFrame (id long, fp long)."""
    return _fp_frame(spark, small)


def test_find_all_equals_in_memory(fp_df, fps):
    """Spark find_all gives exactly in-memory find_all's pairs on 243k fingerprints with
    planted neighbours, a 40k crowded header (salted: max_group 20,000) and 1,000 copies."""
    want = simstore.find_all(fps, K)
    assert len(want.i) > 500_000  # the copies alone give 499,500
    assert_pairs(ss.find_all(fp_df, K, max_group=20_000), want)


def test_find_all_groups_mode(fp_df, fps):
    """identical="groups" gives in-memory find_all(identical="groups")'s pairs, and
    duplicate_groups gives simstore.duplicate_groups."""
    want = simstore.find_all(fps, K, identical="groups")
    assert_pairs(ss.find_all(fp_df, K, identical="groups", check=False), want)
    t = ss.duplicate_groups(fp_df).toArrow()
    ids, group = t.column("id").to_numpy(), t.column("group").to_numpy()
    assert np.array_equal(group[np.argsort(ids)], simstore.duplicate_groups(fps))


def test_clusters_equal_in_memory(small_df, small):
    """Connected components (large-star/small-star rounds, no driver finish) equal
    simstore.clusters."""
    t = ss.clusters(small_df, k=K, check=False, driver_edges=0).toArrow()
    ids, lab = t.column("id").to_numpy(), t.column("cluster").to_numpy()
    assert np.array_equal(lab[np.argsort(ids)], simstore.clusters(small, K))


def test_dedup_representative_equals_greedy(small_df, small):
    """dedup's representative mode removes exactly the sequential greedy's rows, each
    naming its nearest earlier kept neighbour (distributed rounds to the end)."""
    want = simstore.find_all(small, K)
    oracle = greedy(len(small), want.i, want.j, want.distance)
    res = ss.dedup(small_df, k=K, check=False, driver_edges=0)
    got = report(res.removed, "distance")
    assert got == {x: (r, float(d)) for x, (r, d) in oracle.items()}
    assert res.kept.count() == len(small) - len(oracle)


def test_representative_driver_finish(spark):
    """A chain longer than max_rounds is finished on the driver with the same answer."""
    steps = [U64(0)]
    for b in range(30):  # each step flips one more bit: a path of neighbours at distance 1
        steps.append(steps[-1] ^ U64(1 << b))
    chain = np.array(steps, dtype=U64)
    df = spark.createDataFrame([(i, int(v)) for i, v in enumerate(ss.to_long(chain))], "id long, fp long")
    want = simstore.find_all(chain, 1)
    oracle = greedy(len(chain), want.i, want.j, want.distance)
    got = report(ss.dedup(df, k=1, max_rounds=2, check=False, driver_edges=0).removed,
                  "distance")
    assert got == {x: (r, float(d)) for x, (r, d) in oracle.items()}


def test_small_sets_equal_brute_force(spark):
    """Adversarial small sets (all differing bits in one block, copies at k=0, k=16,
    every key salted) give the brute-force pairs."""
    mx = (1 << 64) - 1
    cases = [
        ([0, 0b111, 0b111 << 61, (0b111 << 61) | 1] + [0xFFFF << 48, (0xFFFF << 48) ^ 0b11 << 48], 3, 2),
        ([123456789] * 30 + [123456789 ^ 1] * 5, 0, 1 << 22),
        ([mx ^ (1 << b) for b in range(64)] + [mx], 16, 8),
    ]
    for values, k, max_group in cases:
        arr = np.array(values, dtype=U64)
        df = spark.createDataFrame([(i, int(v)) for i, v in enumerate(ss.to_long(arr))],
                                   "id long, fp long")
        i, j, d = pairs(ss.find_all(df, k, max_group=max_group, check=False))
        assert (i.tolist(), j.tolist(), d.tolist()) == brute_pairs(values, k), (values, k)


# --------------------------------------------------------------------------- similarity


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """2,000 synthetic documents: near copies with edits, and 50 copies of one."""
    return synthetic_texts()


@pytest.fixture(scope="module")
def sig_df(spark, texts):
    """texts with their signatures computed on Spark."""
    df = spark.createDataFrame(list(enumerate(texts)), "id long, text string")
    return ss.with_signatures(df.repartition(4)).cache()


def test_signature_columns_equal_in_memory(sig_df, texts):
    """with_signatures computes simstore.signatures' fingerprint, sketch and band keys."""
    t = sig_df.orderBy("id").toArrow()
    want = simstore.signatures(texts)
    assert np.array_equal(ss.from_long(t.column("fp").to_numpy()), want.fingerprints)
    sk = np.frombuffer(b"".join(t.column("sketch").to_pylist()), dtype=U64).reshape(want.sketches.shape)
    assert np.array_equal(sk, want.sketches)
    bands = np.array(t.column("bands").to_pylist(), dtype=np.int64).view(U64)
    assert np.array_equal(bands, want.bands)


def test_find_similar_equals_in_memory(sig_df, texts):
    """find_similar gives in-memory find_similar's pairs and estimates (copies included)."""
    want = simstore.find_similar(simstore.signatures(texts), 0.8)
    assert len(want.i) > 1225  # the 50 copies alone give 1,225
    assert_pairs(ss.find_similar(sig_df, 0.8), want, "jaccard")


def test_similar_dedup_and_clusters(sig_df, texts):
    """Similarity dedup equals the greedy oracle; similarity clusters equal
    simstore.similar_clusters (both finished on the driver: few edges)."""
    sigs = simstore.signatures(texts)
    want = simstore.find_similar(sigs, 0.9)
    got = report(ss.dedup(sig_df, threshold=0.9, check=False).removed, "jaccard")
    assert got == greedy(len(texts), want.i, want.j, want.jaccard, nearer=-1)
    t = ss.clusters(sig_df, threshold=0.9, check=False).toArrow()
    ids, lab = t.column("id").to_numpy(), t.column("cluster").to_numpy()
    labels = simstore.similar_clusters(sigs, 0.9)
    assert np.array_equal(lab[np.argsort(ids)], labels)
    direct = {(a, b): v for a, b, v in zip(want.i.tolist(), want.j.tolist(), want.jaccard.tolist(), strict=True)}
    res = ss.dedup(sig_df, threshold=0.9, mode="clusters", check=False)
    got = {r.id: (r.kept_id, r.jaccard) for r in res.removed.collect()}
    assert got == {x: (int(c), direct.get((int(c), x))) for x, c in enumerate(labels.tolist()) if c != x}


def test_fingerprint_column_both_paths(spark, texts, monkeypatch):
    """with_fingerprints / with_signatures equal simstore.fingerprints / signatures, by
    Arrow UDF and by the pyspark 4.0 mapInArrow path; a null text gives nulls."""
    from simstore.spark import columns as _spark_columns

    rows = [(i, t) for i, t in enumerate(texts[:300])] + [(300, None)]
    df = spark.createDataFrame(rows, "id long, text string")
    want = simstore.fingerprints(texts[:300])
    sigs = simstore.signatures(texts[:300])
    for arrow_udf in (True, False):
        monkeypatch.setattr(_spark_columns, "ARROW_UDF", arrow_udf)
        t = ss.with_fingerprints(df).orderBy("id").toArrow()
        fp = t.column("fp")
        assert fp.null_count == 1 and fp[300].as_py() is None
        assert np.array_equal(ss.from_long(fp.slice(0, 300).to_numpy()), want)
        t = ss.with_signatures(df).orderBy("id").toArrow()
        assert [t.column(c).null_count for c in ("fp", "sketch", "bands")] == [1, 1, 1]
        assert np.array_equal(ss.from_long(t.column("fp").slice(0, 300).to_numpy()), sigs.fingerprints)
        sk = np.frombuffer(b"".join(t.column("sketch").slice(0, 300).to_pylist()), dtype=U64)
        assert np.array_equal(sk.reshape(sigs.sketches.shape), sigs.sketches)


# --------------------------------------------------------------------------- columns, errors


def test_fp_conversions(spark):
    """fp_from_hex / fp_to_hex / fp_from_unsigned / fp_to_unsigned keep all 64 bits."""
    from pyspark.sql import functions as F

    values = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 0xD93D35968E1855EE]
    df = spark.createDataFrame([(f"{v:016x}", str(v)) for v in values], "h string, u string")
    out = df.select(
        ss.fp_from_hex("h").alias("a"), ss.fp_from_unsigned("u").alias("b"),
        ss.fp_to_hex(ss.fp_from_hex(F.concat(F.lit("0x"), F.col("h")))).alias("h2"),
        ss.fp_to_unsigned(ss.fp_from_unsigned("u")).cast("string").alias("u2"),
    ).collect()
    assert [r.a for r in out] == ss.to_long(np.array(values, dtype=U64)).tolist()
    assert [r.b for r in out] == [r.a for r in out]
    assert [r.h2 for r in out] == [f"{v:016x}" for v in values]
    assert [r.u2 for r in out] == [str(v) for v in values]


@pytest.mark.parametrize("rows, schema, kwargs, err, words", [
    ([(1, "ab")], "id long, fp string", {}, InvalidFingerprintError, "fp_from_hex"),
    ([(1, 5)], "id long, fp int", {}, InvalidFingerprintError, "32-bit"),
    ([(1, 5), (2, None)], "id long, fp long", {}, InvalidFingerprintError, "null"),
    ([(1, 5), (1, 6)], "id long, fp long", {}, InvalidDocIdError, "duplicate ids"),
    ([(1, 5), (None, 6)], "id long, fp long", {}, InvalidDocIdError, "null"),
    ([(1.0, 5)], "id double, fp long", {}, InvalidDocIdError, "integer or string"),
    ([(1, 5)], "key long, fp long", {}, SimstoreValueError, "'id' is not in"),
    ([(1, 5)], "id long, fp long", {"k": 17}, InvalidDistanceError, "0..16"),
])
def test_bad_input_gets_simstore_errors(spark, rows, schema, kwargs, err, words):
    """Bad columns, nulls and duplicate ids are refused before any search, by message."""
    df = spark.createDataFrame(rows, schema)
    with pytest.raises(err, match=words) as info:
        ss.find_all(df, kwargs.get("k", 3))
    assert isinstance(info.value, SimstoreError)


def test_bad_signature_columns(spark):
    """A sketch of the wrong size or a missing band key is refused as InvalidSignatureError."""
    df = spark.createDataFrame([(1, b"x" * 8, [1] * 16)], "id long, sketch binary, bands array<long>")
    with pytest.raises(InvalidSignatureError, match="80 bytes"):
        ss.find_similar(df, 0.9)
    df = spark.createDataFrame([(1, b"x" * 80, [1] * 15)], "id long, sketch binary, bands array<long>")
    with pytest.raises(InvalidSignatureError, match="16 band keys"):
        ss.find_similar(df, 0.9)


# --------------------------------------------------------------------------- store, CLI


def test_store_bridge_round_trip(spark, tmp_path, fps):
    """A store exported to Parquet reads back in Spark with the same pairs as
    store.pairs, and imports into a new store with the same ids and fingerprints."""
    sub = fps[:3000]
    with simstore.SimStore(tmp_path / "a", k=K) as st:
        st.add_many([f"doc{i}" for i in range(len(sub))], sub)
        want = sorted(st.pairs(K))
    assert ss.export_store(tmp_path / "a", tmp_path / "a.parquet") == len(sub)
    df = spark.read.parquet(str(tmp_path / "a.parquet"))
    got = sorted(tuple(r) for r in ss.find_all(df, K).collect())
    assert got == sorted((min(a, b), max(a, b), d) for a, b, d in want)
    assert ss.import_store(tmp_path / "a.parquet", tmp_path / "b", k=K) == len(sub)
    with simstore.SimStore(tmp_path / "b", readonly=True) as st:
        ids, got_fps = st.snapshot()
    assert ids == [f"doc{i}" for i in range(len(sub))] and np.array_equal(got_fps, sub)


def test_similarity_store_from_spark(sig_df, texts, tmp_path):
    """Signatures computed on Spark and written to Parquet load into a similarity store
    whose similar_pairs equal in-memory find_similar."""
    sig_df.where("id < 400").write.parquet(str(tmp_path / "sigs.parquet"))
    path = tmp_path / "sim"
    n = ss.import_store(tmp_path / "sigs.parquet", path, config=simstore.SIGNATURE_CONFIG)
    assert n == 400
    with simstore.SimStore(path, readonly=True) as st:
        got = sorted((min(a, b), max(a, b), j) for a, b, j in st.similar_pairs(0.8))
    want = simstore.find_similar(simstore.signatures(texts[:400]), 0.8)
    assert got == list(zip(want.i.tolist(), want.j.tolist(), want.jaccard.tolist(), strict=True))


def test_cli_spark_dedup(spark, tmp_path, texts, capsys):
    """simstore-cli spark-dedup: 0 with the kept rows of dedup, 2 on usage errors, 1 on a
    missing input or an existing output, one line on stderr each."""
    src = tmp_path / "in.parquet"
    texts = texts[:300] + texts[1500:1650] + texts[-50:]  # near copies and copies of 0..149
    spark.createDataFrame(list(enumerate(texts)), "id long, text string").write.parquet(str(src))
    out, rem = tmp_path / "out.parquet", tmp_path / "rem.parquet"
    argv = ["spark-dedup", str(src), str(out), "--threshold", "0.9", "--removed", str(rem)]
    assert main(argv) == 0
    kept = {r.id for r in spark.read.parquet(str(out)).collect()}
    removed = {r.id for r in spark.read.parquet(str(rem)).collect()}
    want = greedy(len(texts), *simstore.find_similar(simstore.signatures(texts), 0.9), nearer=-1)
    assert removed == set(want) and kept == set(range(len(texts))) - set(want)
    capsys.readouterr()
    for failing in (argv, ["spark-dedup", str(tmp_path / "nope"), str(tmp_path / "o2")]):
        assert main(failing) == 1  # outputs exist; no input
        err = capsys.readouterr().err
        assert err.startswith("simstore-cli spark-dedup: error: ") and err.count("\n") == 1
    for bad in (["--k", "99"], ["--k", "3", "--threshold", "0.9"]):
        with pytest.raises(SystemExit) as exc:
            main(["spark-dedup", str(src), str(out), *bad])
        assert exc.value.code == 2
