"""What a record just under the size cap costs: less than 4x its size on every path.

Each path (``tools.bench.record_cost.PATHS``: fingerprint, signature, shingle set; an
exact store's add, and similar and add_if_new against a stored copy; the JSON-lines
reader, dedup_corpus over it and its exact pass) is measured in a child process by
``tools.bench.record_cost``: the peak RSS over the process before, divided by the
record's UTF-8 size, for an English-like and a CJK text of 8 MB (over 2 Mi characters
in both: hashed in blocks). The Parquet paths are left out: pyarrow's reader and writer
alone take over 4x a value of a dictionary page (docs/errors.md, "What a record costs").
"""

from __future__ import annotations

import sys

import pytest

from tools.bench import record_cost

RECORD = 8 << 20  # bytes
PATHS = [p for p in record_cost.PATHS if "parquet" not in p]


@pytest.fixture(scope="module")
def inputs_dir(tmp_path_factory):
    """The inputs of the paths that read files or a stored copy, written once per script
    (by another child process)."""
    return tmp_path_factory.mktemp("record-cost")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.parametrize("script", record_cost.SCRIPTS)
@pytest.mark.parametrize("path", PATHS)
def test_a_record_costs_less_than_4x_its_size(path, script, inputs_dir):
    """The peak memory of an 8 MB record on the path < 4x its size."""
    cost = record_cost.cost(path, script, RECORD, inputs_dir / script)
    assert 0 < cost < 4, f"{path} ({script}) peaks at {cost:.2f}x the record's size"
