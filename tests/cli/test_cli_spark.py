"""simstore-cli spark-dedup speaks dedup-corpus's words: --id-field / --text-field (the
earlier --id-col / --text-col kept, unlisted), estimated Jaccard 0.9 by default, rows
decided in input order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simstore.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/cli/..)


def test_spark_dedup_takes_the_field_flags_and_the_old_names_unlisted(capsys):
    """--id-field / --text-field set what --id-col / --text-col set; --help lists only the
    new names and says the default rule (estimated Jaccard 0.9)."""
    parser = build_parser()
    new = parser.parse_args(["spark-dedup", "a", "b", "--id-field", "url", "--text-field", "body"])
    old = parser.parse_args(["spark-dedup", "a", "b", "--id-col", "url", "--text-col", "body"])
    assert (new.id_col, new.text_col) == (old.id_col, old.text_col) == ("url", "body")
    with pytest.raises(SystemExit):
        parser.parse_args(["spark-dedup", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--id-field" in text and "--text-field" in text
    assert "--id-col" not in text and "--text-col" not in text
    assert "estimated Jaccard >= T (default 0.9)" in text


def test_spark_dedup_decides_in_input_order_by_estimated_jaccard(tmp_path):
    """A real spark-dedup process with no rule flag: estimated Jaccard >= 0.9 (a near copy
    at J ~ 0.98 goes), and of a near pair the row read first stays even though its id
    sorts after the other's; the report names it; no pandas warning on stderr."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("spark-dedup needs Java 17+")
    from ..spark.data import JAVA_OPTIONS

    a = " ".join(f"alpha{i}" for i in range(300))
    rows = [{"url": "z-first", "body": a},
            {"url": "a-second", "body": a.replace("alpha150", "beta")},
            {"url": "m-other", "body": " ".join(f"gamma{i}" for i in range(300))}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "simstore", "--json", "spark-dedup", "in.jsonl", "kept.parquet",
         "--removed", "removed.parquet", "--id-field", "url", "--text-field", "body",
         "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTIONS}"],  # a quick JVM
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "FutureWarning" not in res.stderr
    summary = json.loads(res.stdout.splitlines()[-1])
    assert summary["rule"] == "threshold=0.9" and summary["rows"] == 3 and summary["kept"] == 2
    import pyarrow.parquet as pq

    kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
    assert sorted(r["url"] for r in kept) == ["m-other", "z-first"]
    assert set(kept[0]) == {"url", "body"}
    (removed,) = pq.read_table(tmp_path / "removed.parquet").to_pylist()
    assert removed["url"] == "a-second" and removed["kept_url"] == "z-first"
    assert removed["jaccard"] >= 0.9
