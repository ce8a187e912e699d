"""simstore-cli spark-dedup against the standalone cluster: on JSON lines and Parquet it
keeps and removes exactly what dedup-corpus does on the same input; a malformed line, a
row without a text and a missing column are refused in one line naming them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="simstore.spark needs pyspark: pip install '.[spark]'")
pa = pytest.importorskip("pyarrow", reason="simstore.spark needs pyarrow: pip install '.[spark]'")
import pyarrow.parquet as pq  # noqa: E402

from simstore.cli import main  # noqa: E402

from .data import stop_shared_session, synthetic_texts  # noqa: E402

pytestmark = pytest.mark.slow
TEXTS = synthetic_texts(300, seed=3)  # 410 rows: near copies of 0..89, 50 copies of 3


def _conf(cluster) -> list[str]:
    return [a for k, v in cluster.conf().items() for a in ("--conf", f"{k}={v}")]


def _write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The same documents (int ids in input order) as JSON lines and as Parquet."""
    d = tmp_path_factory.mktemp("cli-in")
    rows = [{"id": i, "text": t, "lang": "en"} for i, t in enumerate(TEXTS)]
    pq.write_table(pa.Table.from_pylist(rows), d / "docs.parquet")
    return _write_jsonl(d / "docs.jsonl", rows), str(d / "docs.parquet")


def _corpus_answer(src, tmp_path, rule) -> tuple[set, dict]:
    """dedup-corpus's kept ids and {removed id: kept id}."""
    kept, rem = tmp_path / "c-kept.jsonl", tmp_path / "c-rem.jsonl"
    assert main(["dedup-corpus", src, "-o", str(kept), "--removed", str(rem), *rule]) == 0
    ids = {json.loads(x)["id"] for x in kept.read_text().splitlines()}
    removed = {r["id"]: r["kept"] for r in map(json.loads, rem.read_text().splitlines())}
    return ids, removed


def _spark_answer(src, tmp_path, rule, extra=()) -> tuple[set, dict]:
    """spark-dedup's kept ids and {removed id: kept id}, read back with pyarrow."""
    kept, rem = tmp_path / "s-kept.parquet", tmp_path / "s-rem.parquet"
    assert main(["spark-dedup", src, str(kept), "--removed", str(rem), *rule, *extra]) == 0
    ids = set(pq.read_table(kept).column("id").to_pylist())
    t = pq.read_table(rem)
    return ids, dict(zip(t.column("id").to_pylist(), t.column("kept_id").to_pylist(),
                         strict=True))


def test_jsonl_against_master_equals_dedup_corpus(cluster, inputs, tmp_path):
    """spark-dedup --master spark://... on JSON lines (its own session on the cluster)
    keeps and removes what dedup-corpus does (estimated Jaccard >= 0.9)."""
    stop_shared_session()  # else spark-dedup would be handed that session, not start its own
    want = _corpus_answer(inputs[0], tmp_path, ["--threshold", "0.9"])
    got = _spark_answer(inputs[0], tmp_path, ["--threshold", "0.9"],
                        ["--master", cluster.url, *_conf(cluster)])
    assert len(want[1]) > 49 and got == want
    assert len(got[0]) + len(got[1]) == len(TEXTS)



def test_parquet_equals_dedup_corpus(cspark, inputs, tmp_path):
    """On Parquet, by Hamming distance (k = 3): the same kept and removed rows."""
    want = _corpus_answer(inputs[1], tmp_path, ["--k", "3"])
    assert len(want[1]) > 49 and _spark_answer(inputs[1], tmp_path, ["--k", "3"]) == want


@pytest.mark.parametrize("case", ["malformed line", "no text", "missing column"])
def test_bad_input_is_named(cspark, tmp_path, capsys, case):
    """A line that is not JSON (its file and text), rows without a text (their ids) and a
    missing column (its name and the columns there are): exit 1, one line, no output."""
    rows = [{"id": i, "text": t} for i, t in enumerate(TEXTS[:20])]
    argv_extra: list[str] = []
    if case == "malformed line":
        src = tmp_path / "bad.jsonl"
        _write_jsonl(src, rows)
        src.write_text(src.read_text() + '{"id": 20, "text": "cut off\n')
        words = [str(src), "not a JSON object", "cut off"]
    elif case == "no text":
        src = tmp_path / "bad.jsonl"
        _write_jsonl(src, rows[:5] + [{"id": 5}, {"id": 6, "text": None}] + rows[7:])
        words = ["rows without a 'text' value", "id 5, 6"]
    else:
        src = tmp_path / "docs.parquet"
        pq.write_table(pa.Table.from_pylist(rows), src)
        argv_extra = ["--text-field", "body"]
        words = ["has no column 'body' (columns: id, text)", "--text-field"]
    capsys.readouterr()
    out = tmp_path / "out.parquet"
    assert main(["spark-dedup", str(src), str(out), *argv_extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("simstore-cli spark-dedup: error: ") and err.count("\n") == 1
    for w in words:
        assert w in err, err
    assert not out.exists()
