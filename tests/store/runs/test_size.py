"""Run directories: how fine their buckets are, that full runs fill their pages, and that
a bulk level of a dense table (buckets of one header value, no search) answers exactly."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from simstore import SimStore
from simstore.native.probe import run_dir
from simstore.store.runs import tables as runs
from simstore.store.runs.size import FINE_DIR_MIN, dir_bits, run_bytes

from ...testlib import RUN_HEAD, check_answers, near, reading, small, state_of, tables

PAGE = 4096
OVERFLOW_HEAD = 16  # LMDB heads an overflow record's first page with 16 bytes


@pytest.mark.parametrize("pages, entries", [(runs.RUN_PAGES, runs.RUN_ENTRIES),
                                            (runs.BULK_RUN_PAGES, runs.BULK_RUN_ENTRIES)])
def test_a_full_run_fills_its_pages(pages: int, entries: int) -> None:
    """The longest run that fits its pages, with the directory its length gets: one key
    more would take another page, and at most 32 bytes of the pages go unused."""
    budget = pages * PAGE - OVERFLOW_HEAD
    assert run_bytes(entries) <= budget < run_bytes(entries + 1)
    assert budget - run_bytes(entries) <= 32


@pytest.mark.parametrize("n, values, lo, hi", [
    (runs.RUN_ENTRIES, None, 4, 8), (FINE_DIR_MIN - 1, None, 4, 8), (FINE_DIR_MIN, None, 2, 4),
    (runs.BULK_RUN_ENTRIES, None, 2, 4), (runs.BULK_RUN_ENTRIES, 4096, 2, 4),
    (runs.BULK_RUN_ENTRIES, 4097, 4, 8), (runs.BULK_RUN_ENTRIES, 10**6, 4, 8)])
def test_keys_a_bucket(n: int, values: int | None, lo: int, hi: int) -> None:
    """Short runs (the small levels') get 4-8 keys a bucket; long ones 2-4 where their
    buckets can be single header values (values: the header values a run spans), else
    4-8; with values unknown, the finer (a record's largest)."""
    assert lo <= n / (1 << dir_bits(n, values)) < hi


def test_a_full_bulk_run_of_a_dense_table_is_bucketed_by_header_value() -> None:
    """A 22-bit header over 10M keys holds ~2.4 keys a value: a full bulk run's directory
    then has one header value a bucket (shift = the tail bits), so a probe's range starts
    at its bucket."""
    rng = np.random.default_rng(5)
    n, tail = runs.BULK_RUN_ENTRIES, 42
    heads = rng.integers(0, int(n / 2.4), size=n, dtype=np.uint64) + np.uint64(123_456)
    keys = np.sort((heads << np.uint64(tail)) | rng.integers(0, 1 << tail, size=n,
                                                              dtype=np.uint64))
    d, shift = run_dir(keys, dir_bits(n), tail)
    assert shift == tail and len(d) - 1 >= int(heads.max() - heads.min()) + 1
    top = keys >> np.uint64(tail)
    for b in rng.integers(0, len(d) - 1, size=200):  # bucket b: the keys of header b
        assert (top[d[b]:d[b + 1]] == top[0] + np.uint64(b)).all()


def run_heads(store: SimStore, level: int) -> list[tuple[int, int, int, int, int]]:
    """The headers (keys, id width, key width, directory bits, shift) of every run of a
    level in table 0, in key order."""
    with reading(store) as txn:
        return [RUN_HEAD.unpack_from(bytes(val)) for key, val in
                txn.cursor(tables(store).dbs[0]) if len(key) == 9 and key[0] == level]


def test_a_sparse_bulk_level_keeps_the_coarse_directory(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A k = 3 store planned for 100M (two 32-bit headers): a full bulk run spans far more
    header values than buckets, so it keeps 4-8 keys a bucket (the run header's dbits
    11 for 9,555 keys); answers as brute force."""
    small(monkeypatch, BULK_DOCS=20_000, RUN_ENTRIES=2557, DIR_MIN_ENTRIES=256)
    rng = random.Random(4)
    model = {i: rng.getrandbits(64) for i in range(30_000)}
    with SimStore(tmp_path / "s", k=3, expected_size=100_000_000, durable=False) as s:
        assert s.stats()["header_bits"] == [32, 32]
        s.add_many(list(model), list(model.values()))
        (level,) = [lv.id for lv in state_of(s).levels]
        heads = run_heads(s, level)
        full = {dbits for n, _w, _kw, dbits, _shift in heads if n == runs.BULK_RUN_ENTRIES}
        assert full == {dir_bits(runs.BULK_RUN_ENTRIES) - 1} == {11}, heads
        picks = rng.sample(sorted(model), 10)
        check_answers(s, model, [near(rng, model[i], 3) for i in picks])


def test_a_dense_bulk_level_answers_exactly(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """A k = 8 store planned for 10M (headers of 22/21/21 bits) holding 30k docs packed
    into ~9k values of each header: its bulk level's full runs are bucketed by header
    value (the table's 42 tail bits), and every k answers as brute force, near copies
    and ranges crossing runs included, before and after more adds, a remove and a merge."""
    small(monkeypatch, BULK_DOCS=20_000, RUN_ENTRIES=2557, RECENT_MAX=64, MERGE_STEP=4096,
          DIR_MIN_ENTRIES=256)
    rng = random.Random(3)

    def packed() -> int:  # each 21-22-bit block drawn from a narrow range: dense headers
        a, b, c = rng.randrange(9000), rng.randrange(9000), rng.randrange(9000)
        return (a + 777) << 42 | (b + 555) << 21 | (c + 333)

    model = {i: packed() for i in range(30_000)}
    with SimStore(tmp_path / "s", k=8, expected_size=10_000_000, durable=False) as s:
        assert s.stats()["header_bits"] == [22, 21, 21]
        s.add_many(list(model), list(model.values()))
        (level,) = [lv.id for lv in state_of(s).levels]
        heads = run_heads(s, level)
        full = {shift for n, _w, _kw, _dbits, shift in heads if n == runs.BULK_RUN_ENTRIES}
        assert full == {42}, heads
        picks = rng.sample(sorted(model), 20)
        queries = [near(rng, model[i], 8) for i in picks] + [packed() for _ in range(5)]
        check_answers(s, model, queries)
        for i in range(30_000, 30_300):
            model[i] = near(rng, model[rng.randrange(30_000)], 3)
            s.add(i, model[i])
        assert s.remove(picks[0])
        del model[picks[0]]
        check_answers(s, model, queries[1:] + [model[30_000], model[30_299]])
        assert s.verify() == []
