"""Small levels probe wider (``runcache.SMALL_LEVEL``): a level holding at most 1/8 of its
table's keys has each of its sets span as many low header bits as keep a range at a few
keys, the big level none of its own; answers stay the brute-force ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simstore import SimStore
from simstore.native import probe as _probe
from simstore.store.runs import cache as runcache

from ...oracles import brute_matches
from ...testlib import cache


def test_small_levels_span_wider_and_answer_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    with SimStore(tmp_path / "s", k=8, durable=False, expected_size=200_000) as s:
        s.add_many(range(160_000), rng.integers(0, 2**64 - 1, 160_000, dtype=np.uint64,
                                                 endpoint=True))
        for lo in range(160_000, 168_000, 4_000):  # two small levels (4,096 a flush)
            s.add_many(range(lo, lo + 4_000), rng.integers(0, 2**64 - 1, 4_000,
                                                           dtype=np.uint64, endpoint=True))
        stored = dict(s.items())
        fps = list(stored.values())
        queries = [fp ^ 0b1011 for fp in fps[::20_000]] + [fps[-1] ^ (1 << 63)]
        for q in queries:
            assert s.query(q, 8) == brute_matches(stored, q, 8)
            assert s.query(q, 3) == brute_matches(stored, q, 3)
        rt = cache(s)
        prober = rt._prober
        sets = prober._sets[2]
        header = [s._layout.header_bits(t) for t in range(len(s._layout.tables))]
        levels = s.stats()["levels"]
    assert len(levels) >= 2, levels
    spans = [rs.span for rs in sets if rs.table >= 0]
    assert spans and spans.count(0) >= len(header)  # the big level: none of its own
    small = [rs for rs in sets if rs.table >= 0 and rs.span]
    assert small  # the small levels probe wider
    for rs in small:
        assert 0 < rs.span <= header[rs.table] - 1
        assert rs.span >= _probe.span_bits(header[rs.table], 168_000)  # wider than the table's
    assert runcache.SMALL_LEVEL_KEYS < _probe.SPAN_KEYS
