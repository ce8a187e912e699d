"""Odd arguments to simstore.hf, simstore.datatrove and the CLI's store commands: simstore's
own one-line error naming the argument, before anything is written (issue 55 item 10)."""

from __future__ import annotations

import os

import pytest

from simstore import SimstoreError
from simstore.cli import main

HF_CALLS = {
    "dedup store=5": ("store", lambda hf, ds, tmp: hf.dedup(ds, store=5, id_column="id")),
    "sign without the column": ("column", lambda hf, ds, tmp: hf.sign({"other": ["a"]})),
    "sign of a non-batch": ("batch", lambda hf, ds, tmp: hf.sign(5)),
    "add_signatures batch_size=0": (
        "batch_size", lambda hf, ds, tmp: hf.add_signatures(ds, batch_size=0)),
    "add_signatures num_proc=0": (
        "num_proc", lambda hf, ds, tmp: hf.add_signatures(ds, num_proc=0)),
    "add_signatures config=5": ("config", lambda hf, ds, tmp: hf.add_signatures(ds, config=5)),
}


@pytest.mark.parametrize("case", sorted(HF_CALLS))
def test_hf_arguments_are_refused_by_name(case, tmp_path):
    """Each odd simstore.hf argument raises a SimstoreError naming it, in one line."""
    datasets = pytest.importorskip("datasets")
    from simstore import hf

    ds = datasets.Dataset.from_dict({"text": ["a b c d e f", "a b c d e g"], "id": ["x", "y"]})
    name, call = HF_CALLS[case]
    with pytest.raises(SimstoreError) as info:
        call(hf, ds, tmp_path)
    assert f"'{name}'" in str(info.value) and "\n" not in str(info.value)


DATATROVE_CALLS = {
    "filter batch_size=0": ("batch_size", lambda dt, tmp: dt.NearDedupFilter(tmp, batch_size=0)),
    "filter batch_size='x'": (
        "batch_size", lambda dt, tmp: dt.NearDedupFilter(tmp, batch_size="x")),
    "filter path=5": ("path", lambda dt, tmp: dt.NearDedupFilter(5)),
    "filter exact='yes'": ("exact", lambda dt, tmp: dt.NearDedupFilter(tmp, exact="yes")),
    "signature config=5": ("config", lambda dt, tmp: dt.NearDedupSignature(tmp, config=5)),
    "buckets config=5": ("config", lambda dt, tmp: dt.NearDedupBuckets(tmp, tmp, config=5)),
}


@pytest.mark.parametrize("case", sorted(DATATROVE_CALLS))
def test_datatrove_arguments_are_refused_at_construction(case, tmp_path):
    """Each odd argument of a datatrove step is refused when the step is built (not when a
    task runs it), by name, and nothing is written."""
    pytest.importorskip("datatrove")
    import simstore.datatrove as dt

    name, call = DATATROVE_CALLS[case]
    store = tmp_path / "s"
    with pytest.raises(SimstoreError) as info:
        call(dt, store)
    assert f"'{name}'" in str(info.value) and "\n" not in str(info.value)
    assert not store.exists()


@pytest.mark.parametrize("command", [["expire", "--older-than", "1d"], ["upgrade"]])
@pytest.mark.parametrize("where", ["empty directory", "missing path"])
def test_store_commands_never_create_a_store(tmp_path, capsys, command, where):
    """expire and upgrade on an empty directory or a missing path exit non-zero with one
    line and leave the directory as it was (no store created)."""
    path = tmp_path / "s"
    if where == "empty directory":
        path.mkdir()
    assert main([command[0], str(path), *command[1:]]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no " in err and "store" in err, err
    assert (os.listdir(path) == []) if where == "empty directory" else not path.exists()
