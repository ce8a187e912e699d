"""Runs fetched where LMDB maps them, from their leaf nodes, and the readahead choice.

A query's first probe into a run fetches it. py-lmdb reads every page of a value it
returns, so without readahead (a store larger than memory) the run tables learn the
map's address from the first run they get from py-lmdb (per map epoch) and place every
later one from its leaf node (:mod:`simstore.native.lmdbmap`). Answers are checked
against brute force, through a map that grows under the store.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from simstore import SimStore
from simstore.exceptions import SimstoreTypeError
from simstore.native import lmdbmap
from simstore.native.core import ffi
from simstore.store.env import readahead as R
from simstore.store.runs import cache as runcache

from ...oracles import brute_neighbours
from ...testlib import cache, env, lmdb_env


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the map addresses learned, the runs placed from their leaf nodes and those
    declined though their value has pages of its own."""
    seen = {"bases": 0, "placed": 0, "declined": 0}
    base, value = lmdbmap.map_base, lmdbmap.map_value

    def counted_base(*a):
        got = base(*a)
        seen["bases"] += got is not None
        return got

    def counted_value(base_, pages, psize, key):
        got = value(base_, pages, psize, key)
        if got is not None:
            seen["placed"] += 1
        else:  # declined: fine for a record held inline in its leaf (a short run), only
            node = ffi.cast("uint16_t *", ffi.from_buffer("uint8_t[]", key)) - 4
            seen["declined"] += bool(node[2] & 1)  # F_BIGDATA: one of its own pages
        return got

    monkeypatch.setattr(runcache._lmdbmap, "map_base", counted_base)
    monkeypatch.setattr(runcache._lmdbmap, "map_value", counted_value)
    return seen


def _check(s: SimStore, fps: np.ndarray, rng: np.random.Generator, k: int = 3) -> None:
    for q in [int(fps[i]) ^ (1 << int(rng.integers(64))) for i in rng.integers(len(fps), size=40)]:
        got = sorted((int(m.doc_id), m.distance) for m in s.query(q, k))
        assert got == brute_neighbours(fps.tolist(), q, k)


def test_runs_are_placed_from_their_nodes_across_map_growth(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _counting(monkeypatch)
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 60_000, dtype=np.uint64, endpoint=True)
    with SimStore(tmp_path / "s", k=3, map_size=1 << 16, durable=False) as s:
        s.add_many(range(30_000), fps[:30_000])
    with SimStore(tmp_path / "s", map_size=1 << 16, durable=False, readahead=False) as s:
        _check(s, fps[:30_000], rng)
        assert seen["bases"] == 1  # learned once, from the first run py-lmdb returned
        assert seen["placed"] > 10 and seen["declined"] == 0
        epoch = env(s).epoch
        s.add_many(range(30_000, 60_000), fps[30_000:])  # the map grows: a new epoch
        assert env(s).epoch != epoch
        _check(s, fps, rng)
        assert seen["bases"] == 2 and seen["declined"] == 0


def test_with_readahead_runs_come_from_lmdb(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """A store that fits in memory reads a fetched run whole (its pages mapped at once,
    as later probes want them): no run is placed from its node."""
    seen = _counting(monkeypatch)
    rng = np.random.default_rng(6)
    fps = rng.integers(0, 2**64 - 1, 30_000, dtype=np.uint64, endpoint=True)
    with SimStore(tmp_path / "s", k=3, durable=False, readahead=True) as s:
        s.add_many(range(30_000), fps)
        _check(s, fps, rng)
    assert seen == {"bases": 0, "placed": 0, "declined": 0}


def test_the_readahead_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = tmp_path / "data.mdb"
    assert R.wants_readahead(str(data))  # no file yet
    data.write_bytes(bytes(5000))
    monkeypatch.setattr(R, "memory_limit", lambda: 10_000)
    assert R.wants_readahead(str(data))  # half the limit holds it
    monkeypatch.setattr(R, "memory_limit", lambda: 9_000)
    assert not R.wants_readahead(str(data))
    monkeypatch.setattr(R, "memory_limit", lambda: None)
    assert R.wants_readahead(str(data))


def test_the_memory_limit_is_the_machines_or_less() -> None:
    import os

    limit = R.memory_limit()
    assert limit is not None and 0 < limit <= os.sysconf("SC_PHYS_PAGES") * os.sysconf(
        "SC_PAGE_SIZE")


def test_readahead_is_passed_to_lmdb_and_kept_by_pickling(tmp_path: Path) -> None:
    with SimStore(tmp_path / "s", readahead=False) as s:
        s.add("a", 1)
        assert lmdb_env(s).flags()["readahead"] is False
        _, args = s.__reduce__()
        assert args[-1] is False  # a pickled handle opens the same way
    again = pickle.loads(pickle.dumps(s))
    try:
        assert lmdb_env(again).flags()["readahead"] is False
    finally:
        again.close()
    with SimStore(tmp_path / "s") as s:  # a small store on this machine: LMDB's default
        assert lmdb_env(s).flags()["readahead"] is True
    with pytest.raises(SimstoreTypeError, match="readahead"):
        SimStore(tmp_path / "t", readahead="no")  # type: ignore[arg-type]
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("readahead", [False, True])
def test_a_sparse_reader_never_fetches_a_level_whole(tmp_path: Path, readahead: bool) -> None:
    """Without readahead a process fetches the runs its probes land in, and no more; with
    it, once it has fetched 1 / WHOLE_AT of a level's runs it fetches them all."""
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64, endpoint=True)
    with SimStore(tmp_path / "s", k=3, durable=False) as s:
        s.add_many(range(len(fps)), fps)
    with SimStore(tmp_path / "s", readonly=True, readahead=readahead) as s:
        for i in range(12):  # exact queries: a run a table
            assert [m.doc_id for m in s.query(int(fps[i * 1000]), 0)] == [i * 1000]
        rt = cache(s)
        sets = [lev.sets[t] for lev in rt._levels.values() for t in range(len(rt.dbs))]
        assert sets and min(rs.nruns for rs in sets) <= 11 * runcache.WHOLE_AT
        if readahead:
            assert all(rs.loaded == rs.nruns for rs in sets)
        else:
            assert all(rs.loaded <= 12 < rs.nruns for rs in sets)


WRITER = r"""
import sys
import numpy as np
from simstore import SimStore
path, rounds = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(9)
with SimStore(path, durable=False, map_size=1 << 16) as s:
    for r in range(rounds):  # flushes, merges (removes make them purge) and map growth
        n = int(rng.integers(500, 6000))
        s.add_many([f"c{r}-{i}" for i in range(n)],
                   rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
        if r:
            s.remove_many([f"c{r - 1}-{i}" for i in range(0, 400, 3)])
print("done")
"""


def test_a_sparse_reader_beside_a_writer_in_another_process(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """A reader placing runs from their nodes (readahead off) keeps finding every doc that
    stays, exactly and near, while another process adds, removes, merges and grows the
    map under it; then it answers the whole store as brute force does."""
    import subprocess
    import sys

    seen = _counting(monkeypatch)
    rng = np.random.default_rng(8)
    fps = rng.integers(0, 2**64 - 1, 40_000, dtype=np.uint64, endpoint=True)
    path = tmp_path / "s"
    with SimStore(path, k=3, durable=False, map_size=1 << 16) as s:
        s.add_many(range(len(fps)), fps)
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "40"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checked = live = 0
    with SimStore(path, readonly=True, readahead=False, map_size=1 << 16) as s:
        while (running := child.poll() is None) or checked < 200:
            i = int(rng.integers(len(fps)))
            near = int(fps[i]) ^ (1 << int(rng.integers(64))) ^ (1 << int(rng.integers(64)))
            assert i in [m.doc_id for m in s.query(int(fps[i]), 0)]
            assert i in [m.doc_id for m in s.query(near, 3)]
            checked += 1
            live += running
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0 and out.strip() == "done", err
        assert env(s).epoch > 0 and live > 50  # the map grew under it as it queried
        everything = {d: fp for d, fp in s.items()}
        ids, allfps = list(everything), np.array(list(everything.values()), dtype=np.uint64)
        for q in [int(allfps[j]) ^ 5 for j in rng.integers(len(allfps), size=30)]:
            got = sorted((str(m.doc_id), m.distance) for m in s.query(q, 3))
            want = sorted((str(ids[j]), d) for j, d in brute_neighbours(allfps.tolist(), q, 3))
            assert got == want
        assert s.verify() == []
    assert seen["placed"] > 0 and seen["bases"] >= 2 and seen["declined"] == 0


def _cgroups(tmp_path: Path, proc: str, files: dict[str, str]) -> int | None:
    tmp_path.mkdir()
    (tmp_path / "cgroup").write_text(proc)
    for rel, text in files.items():
        (tmp_path / "fs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / rel).write_text(text)
    return R._cgroup_limit(tmp_path / "cgroup", tmp_path / "fs")


def test_the_cgroup_limit_is_the_least_up_the_tree(tmp_path: Path) -> None:
    v2 = {"a/memory.max": "3000000\n", "a/b/memory.max": "max\n", "memory.max": "1000\n"}
    # v2: the process's own group has no limit, its ancestors do: the least counts
    assert _cgroups(tmp_path / "v2", "0::/a/b\n", v2) == 1000
    assert _cgroups(tmp_path / "v2b", "0::/a/b\n", {"a/memory.max": "3000000"}) == 3000000
    v1 = {"memory/x/memory.limit_in_bytes": "9223372036854771712",
          "memory/memory.limit_in_bytes": "9223372036854771712"}
    assert _cgroups(tmp_path / "v1", "12:cpu,cpuacct:/x\n5:memory:/x\n", v1) is None
    v1["memory/x/memory.limit_in_bytes"] = "268435456"
    assert _cgroups(tmp_path / "v1b", "5:memory:/x\n", v1) == 268435456
    # a line it cannot read, or no file at all: no limit, never an error
    assert _cgroups(tmp_path / "bad", "garbage\n0::/nowhere\n", {}) is None
    assert R._cgroup_limit(tmp_path / "missing", tmp_path) is None


def test_a_sparse_similarity_store_answers_as_a_whole_read_one(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """Band keys and ids are run databases too: similar() and lookups by id give the same
    answers with runs placed from their nodes as with runs read whole."""
    import simstore

    cfg = simstore.SIGNATURE_CONFIG
    g = np.random.default_rng(3)
    n = 30_000
    sigs = simstore.Signatures(cfg, *(
        g.integers(0, 2**64 - 1, shape, dtype=np.uint64, endpoint=True)
        for shape in (n, (n, cfg.sketch_bits // 64), (n, cfg.bands))))
    with SimStore(tmp_path / "s", k=3, config=cfg, durable=False) as s:
        s.add_many([f"doc-{i}" for i in range(n)], sigs)
    picks = [int(i) for i in g.integers(n, size=25)]
    answers = {}
    for readahead in (True, False):
        seen = _counting(monkeypatch)
        with SimStore(tmp_path / "s", readonly=True, readahead=readahead) as s:
            got = [sorted((m.doc_id, round(m.jaccard, 9)) for m in s.similar(sigs[i], 0.5))
                   for i in picks]
            ids = [s.get(f"doc-{i}") for i in picks]
        assert all((f"doc-{i}", 1.0) in row for i, row in zip(picks, got, strict=True))
        assert ids == [int(sigs.fingerprints[i]) for i in picks]
        answers[readahead] = got
        assert (seen["placed"] > 0) == (not readahead) and seen["declined"] == 0
    assert answers[True] == answers[False]


def _advised(data_file: Path) -> list[bool]:
    """Per mapping of data_file in this process: whether it carries the huge-page advice
    (smaps' VmFlags ``hg``)."""
    out, mine = [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            mine = line.endswith(str(data_file))
        elif mine and line.startswith("VmFlags:"):
            out.append("hg" in head[1:])
    return out


@pytest.mark.skipif(not Path("/proc/self/smaps").exists()
                    or not Path("/sys/kernel/mm/transparent_hugepage").exists(),
                    reason="Linux with transparent huge pages only")
def test_with_readahead_the_map_is_advised_into_huge_pages_across_growth(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64 - 1, size=3000, dtype=np.uint64, endpoint=True)
    with SimStore(tmp_path / "a") as s:
        s.add_many(range(1000), fps[:1000])
        data = Path(s.path) / "data.mdb"
        assert _advised(data) == [True]
        size = lmdb_env(s).info()["map_size"]
        env(s).grow()  # a remap: a new mapping, advised again
        assert lmdb_env(s).info()["map_size"] > size
        assert _advised(data) == [True]
        s.add_many(range(1000, 3000), fps[1000:])
        _check(s, fps, rng)
    with SimStore(tmp_path / "b", readahead=False) as s:  # larger than memory: 4 KB reads
        s.add_many(range(1000), fps[:1000])
        assert _advised(Path(s.path) / "data.mdb") == [False]
        _check(s, fps[:1000], rng)


def _maps(tmp_path: Path, *more: str) -> tuple[Path, Path]:
    """A data file and a /proc/self/maps of it: a 1 MiB shared mapping from its start, one
    not from its start, one of 64 KiB, then the lines more (formatted with the file's ino,
    another file's, other, and data)."""
    data = tmp_path / "data.mdb"
    data.write_bytes(bytes(4096))
    ino = data.stat().st_ino
    maps = tmp_path / "maps"
    lines = [
        "7f0000000000-7f0000100000 r--s 00000000 fe:00 {ino}    {data}",
        "7f0000200000-7f0000300000 r--s 00001000 fe:00 {ino}    {data}",  # not from 0
        "7f0000400000-7f0000410000 r--s 00000000 fe:00 {ino}    {data}",  # another size
        *more,
    ]
    maps.write_text("".join(line.format(ino=ino, other=ino + 1, data=data) + "\n" for line in lines))
    return data, maps


def test_the_map_regions_are_found_by_inode_offset_and_size(tmp_path: Path) -> None:
    data, maps = _maps(
        tmp_path,
        "7f0000500000-7f0000600000 r--s 00000000 fe:00 {other}    {data}",  # another file
        "7f0000600000-7f0000700000 rw-p 00000000 00:00 0 ",
        "garbage")
    assert R.map_regions(str(data), 0x100000, maps) == [(0x7F0000000000, 0x100000)]
    assert R.map_regions(str(tmp_path / "missing"), 0x100000, maps) == []
    assert R.map_regions(str(data), 0x100000, tmp_path / "no-maps") == []
    assert not lmdbmap.advise_huge(4097, 4096)  # not page-aligned: refused, nothing done


def _resident(data_file: Path) -> int:
    """Bytes of this process's mappings of data_file that are resident (smaps' Rss)."""
    total, mine = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            mine = line.endswith(str(data_file))
        elif mine and line.startswith("Rss:"):
            total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux only")
def test_a_bulk_load_lets_go_of_the_map_pages_its_merges_read(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bulk load's merges leave little of the map resident, and answers stand after."""
    rng = np.random.default_rng(12)
    fps = rng.integers(0, 2**64 - 1, size=120_000, dtype=np.uint64, endpoint=True)
    resident = {}
    for release in (True, False):
        if not release:
            monkeypatch.setattr("simstore.store.runs.tables.release_map", lambda _: 0)
        with SimStore(tmp_path / f"s{release}", readahead=False) as s:
            data = Path(s.path) / "data.mdb"
            for lo in range(0, len(fps), 30_000):  # each merges the levels before it
                s.add_many(range(lo, lo + 30_000), fps[lo : lo + 30_000])
                resident[release] = _resident(data)
                _check(s, fps[: lo + 30_000], rng)  # read in place, then released
            assert R.release_map(str(data)) == 1  # pages the queries read go too ...
            assert _resident(data) < 64 << 10
            _check(s, fps, rng)  # ... and come back, the same bytes
    assert resident[True] * 4 < resident[False], resident


def test_the_map_regions_of_any_size_are_the_shared_ones(tmp_path: Path) -> None:
    """release_map's regions: every shared mapping of the file from its start."""
    data, maps = _maps(
        tmp_path, "7f0000500000-7f0000600000 r--p 00000000 fe:00 {ino}    {data}")  # private
    assert R.map_regions(str(data), None, maps) == [(0x7F0000000000, 0x100000),
                                                    (0x7F0000400000, 0x10000)]
    assert not lmdbmap.release(4097, 4096)  # not page-aligned: refused, nothing done
