"""simstore.hf: signature columns and dedup of Hugging Face datasets, against dedup-corpus."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

import simstore  # noqa: E402
import simstore.hf as hf  # noqa: E402
from simstore import SimstoreError, corpus  # noqa: E402
from simstore.cli import main  # noqa: E402

from ..realtext import documents, read_jsonl, write_jsonl  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No hub access; the datasets cache in the test's own directory."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def docs():
    """~150 real documents with planted near copies."""
    return documents(150)


def _load(path, tmp_path, kind="json"):
    return datasets.load_dataset(
        kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf-cache")
    )


def _removed_report(ds):
    return {r["id"]: (r["kept_id"], r["jaccard"]) for r in ds}


@pytest.mark.parametrize(
    ("keep", "exact"),
    [("first", False), ("longest", False), ("score", False), ("first", True), ("score", True)],
)
def test_dedup_equals_dedup_corpus(tmp_path, docs, keep, exact):
    """Kept rows, each removed row's representative and its Jaccard equal dedup_corpus's."""
    src = write_jsonl(tmp_path / "in.jsonl", docs)
    ds = _load(src, tmp_path)
    kept, removed = hf.dedup(ds, threshold=0.85, keep=keep, exact=exact, id_column="id")
    corpus.dedup_corpus(
        [str(src)],
        tmp_path / "k.jsonl",
        tmp_path / "r.jsonl",
        threshold=0.85,
        keep=keep,
        exact=exact,
    )
    assert kept["id"] == [d["id"] for d in read_jsonl(tmp_path / "k.jsonl")]
    want = {r["id"]: (r["kept"], r["jaccard"]) for r in read_jsonl(tmp_path / "r.jsonl")}
    assert _removed_report(removed) == want
    assert len(removed) > 10
    assert [ds[i]["id"] for i in removed["kept_index"]] == removed["kept_id"]
    assert set(removed["reason"]) == {"near-duplicate"}


def test_dedup_of_parquet_equals_the_cli(tmp_path, docs):
    """A Parquet-backed dataset without an id column: kept rows equal simstore-cli's output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(docs), src, row_group_size=40)
    ds = _load(src, tmp_path, "parquet").remove_columns(["id"])
    kept, removed = hf.dedup(ds, threshold=0.9)
    assert (
        main(
            ["dedup-corpus", str(src), "-o", str(tmp_path / "k.jsonl"), "--threshold", "0.9", "-q"]
        )
        == 0
    )
    assert kept["text"] == [d["text"] for d in read_jsonl(tmp_path / "k.jsonl")]
    assert "kept_id" not in removed.column_names
    assert len(kept) + len(removed) == len(ds)
    for r in removed.select(range(min(5, len(removed)))):
        assert simstore.signature(r["text"]).jaccard(
            simstore.signature(ds[r["kept_index"]]["text"])
        ) == pytest.approx(r["jaccard"], abs=1e-4)


def test_second_dump_against_the_store_of_the_first(tmp_path, docs):
    """store=PATH: dump 2 loses its near copies of dump 1 without reading dump 1 again,
    as dedup_corpus through a store decides."""
    d1, d2 = docs[:80], docs[80:] + [dict(docs[3], id="again-3")]
    p1, p2 = write_jsonl(tmp_path / "d1.jsonl", d1), write_jsonl(tmp_path / "d2.jsonl", d2)
    store = tmp_path / "s"
    k1, _ = hf.dedup(_load(p1, tmp_path), store=store, id_column="id")
    k2, r2 = hf.dedup(_load(p2, tmp_path), store=store, id_column="id")
    assert r2.filter(lambda r: r["id"] == "again-3")["kept_id"] == [docs[3]["id"]]
    with simstore.SimStore(store, readonly=True) as s:
        assert len(s) == len(k1) + len(k2)
    ref = tmp_path / "ref"
    corpus.dedup_corpus([str(p1)], tmp_path / "a.jsonl", store=ref)
    corpus.dedup_corpus([str(p2)], tmp_path / "b.jsonl", tmp_path / "rb.jsonl", store=ref)
    assert k2["id"] == [d["id"] for d in read_jsonl(tmp_path / "b.jsonl")]
    assert _removed_report(r2) == {
        r["id"]: (r["kept"], r["jaccard"]) for r in read_jsonl(tmp_path / "rb.jsonl")
    }
    again, gone = hf.dedup(_load(p2, tmp_path), store=store, id_column="id")
    assert again["id"] == k2["id"] and gone["id"] == r2["id"]  # a rerun decides alike


def test_sign_is_a_batched_map_function_with_num_proc(tmp_path, docs):
    """ds.map(sign, batched=True, num_proc=2) gives uint64 and fixed-size list columns
    equal to simstore.signatures; signatures_of reads them back."""
    ds = _load(write_jsonl(tmp_path / "in.jsonl", docs[:60]), tmp_path)
    feats = datasets.Features({**ds.features, **hf.signature_features()})
    out = ds.map(
        hf.sign,
        batched=True,
        batch_size=16,
        num_proc=2,
        features=feats,
        fn_kwargs={"column": "text"},
    )
    schema = out.data.schema
    assert str(schema.field("fingerprint").type) == "uint64"
    assert str(schema.field("sketch").type) == "fixed_size_list<item: uint64>[10]"
    assert str(schema.field("bands").type) == "fixed_size_list<item: uint64>[16]"
    want = simstore.signatures(ds["text"])
    got = hf.signatures_of(out)
    assert np.array_equal(got.fingerprints, want.fingerprints)
    assert np.array_equal(got.sketches, want.sketches)
    assert np.array_equal(got.bands, want.bands)
    assert hf.add_signatures(ds)["fingerprint"] == want.fingerprints.tolist()


def test_dedup_reads_arrow_batches_never_pandas(tmp_path, docs, monkeypatch):
    """The rows are read as Arrow batches: to_pandas and whole-column reads are never used."""
    ds = _load(write_jsonl(tmp_path / "in.jsonl", docs), tmp_path)

    def refuse(*a, **k):
        raise AssertionError("dedup materialized the dataset")

    monkeypatch.setattr(datasets.Dataset, "to_pandas", refuse)
    monkeypatch.setattr(datasets.Dataset, "to_list", refuse)
    kept, removed = hf.dedup(ds, exact=True, batch_size=16)
    assert len(kept) + len(removed) == len(ds)


def _bad_cases(tmp_path):
    ds = datasets.Dataset.from_dict({"text": ["a b c", None], "id": ["x", "y"], "n": [1, 2]})
    good = datasets.Dataset.from_dict(
        {"text": ["a b c", "d e f"], "id": ["x", None], "s": ["p", "q"], "jaccard": [0.1, 0.2]}
    )
    store = tmp_path / "never"
    return [
        (lambda: hf.dedup(ds, column="body"), "no column 'body'"),
        (lambda: hf.dedup(ds), "is null at row 1"),
        (lambda: hf.dedup(ds, column="n"), "must hold strings (it holds int64)"),
        (
            lambda: hf.dedup(good.remove_columns("jaccard"), store=store),
            "store= needs each row's id",
        ),
        (
            lambda: hf.dedup(good.remove_columns("jaccard"), store=store, id_column="id"),
            "row 1: 'id' is null",
        ),
        (lambda: hf.dedup(good.remove_columns("jaccard"), keep="s"), "must name a numeric"),
        (lambda: hf.dedup(good), "has a column 'jaccard'"),
        (lambda: hf.dedup(datasets.DatasetDict({"train": ds})), "pick a split"),
        (lambda: hf.dedup(ds, threshold=1.5), "'threshold' must be in (0, 1]"),
    ]


def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path):
    """Missing column, null or non-string texts, no ids for a store, reserved columns: one
    line each, a SimstoreError, and no store created."""
    for call, words in _bad_cases(tmp_path):
        with pytest.raises(SimstoreError) as err:
            call()
        assert words in str(err.value) and "\n" not in str(err.value)
    assert not os.path.exists(tmp_path / "never")


def test_import_simstore_loads_no_extra_and_a_missing_one_says_how():
    """import simstore imports neither datasets nor datatrove; without them, importing the
    integration fails in one line naming the extra."""
    code = (
        "import sys; import simstore, simstore.corpus; "
        "assert 'datasets' not in sys.modules and 'datatrove' not in sys.modules; "
        "sys.modules['datasets'] = None; sys.modules['datatrove'] = None\n"
        "for name, extra in (('hf', 'hf'), ('datatrove', 'datatrove')):\n"
        "    try:\n"
        "        __import__('simstore.' + name)\n"
        "    except simstore.SimstoreError as e:\n"
        "        assert isinstance(e, ImportError) and str(e).endswith(\n"
        "            f\"pip install 'simstore[{extra}]'\"), e\n"
        "    else:\n"
        "        raise SystemExit('imported without ' + name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


_MEMORY_CHILD = """
import os, random, sys, threading
import datasets, pyarrow as pa, pyarrow.parquet as pq
import simstore.hf as hf

datasets.disable_progress_bars()
path, n, exact = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rng = random.Random(5)
words = [f"w{i}" for i in range(50_000)]
with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as w:
    for _ in range(n // 10_000):
        w.write_table(pa.table({"text": [" ".join(rng.choices(words, k=200))
                                         for _ in range(10_000)]}))
ds = datasets.load_dataset("parquet", data_files=path, split="train",
                           cache_dir=os.path.dirname(path) + "/cache")


def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


peak, stop = [anon()], threading.Event()


def sample():
    while not stop.wait(0.02):
        peak.append(anon())


before = anon()
threading.Thread(target=sample, daemon=True).start()
kept, removed = hf.dedup(ds, exact=exact)
stop.set()
print(ds.data.nbytes, max(peak) - before, len(kept))
"""


@pytest.mark.stress
@pytest.mark.parametrize("exact", [False, True])
def test_dedup_memory_grows_with_rows_not_text(tmp_path, exact):
    """300,000 rows of ~1.4 KB (400 MB of text): the process's own memory (anonymous RSS,
    not the store's or the dataset's mapped pages) grows by far less than the text."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEMORY_CHILD,
            str(tmp_path / "d.parquet"),
            "300000",
            "1" if exact else "0",
        ],
        check=True,
        timeout=1800,
        capture_output=True,
        text=True,
    ).stdout.split()
    text_bytes, grew, kept = map(int, out[-3:])
    assert kept == 300_000
    # measured at 50,000 and 150,000 rows: keep="first" 33 and 36 MB, exact 32 and 75 MB
    # (its band keys, ~300 bytes a row), for 68 and 204 MB of text
    assert grew < (64 << 20) + 400 * kept < text_bytes / 2, (grew, text_bytes)
