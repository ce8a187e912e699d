"""Damaged run tables named by verify() (:mod:`simstore.store.runs.check`), and queries
that refuse them.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from simstore.store import SimStore
from simstore.store.runs.tables import State

from ...oracles import brute_matches
from ...testlib import (
    near,
    runs_env_edit,
    small,
    state_of,
)
from ..test_crash import run_py

# --- 5. damaged run tables -------------------------------------------------------------


def _nth_run(txn: Any, db: Any, level: int, n: int) -> tuple[bytes, bytearray]:
    """(key, value) of the n-th run record of one level (its index record not counted)."""
    rows = [(bytes(k), bytearray(v)) for k, v in txn.cursor(db) if k[0] == level and len(k) == 9]
    return rows[n]


def _flip_key_byte(txn: Any, dbs: list[Any], meta: Any) -> None:
    key, val = _nth_run(txn, dbs[0], 0, 1)
    val[8 + 8 * 2] ^= 0xFF  # the low byte of the run's third key: the order stays
    txn.put(key, bytes(val), db=dbs[0])


def _delete_run(txn: Any, dbs: list[Any], meta: Any) -> None:
    second = State.unpack(txn.get(b"state", db=meta)).levels[1].id
    for db in dbs:  # the first run of the second level in both tables: docs in both are lost
        txn.delete(_nth_run(txn, db, second, 0)[0], db=db)


def _index_chunks(txn: Any, db: Any, level: int) -> list[bytes]:
    """The keys of one level's index chunks (0xFF, level, 4-byte number), in order."""
    return [bytes(k) for k, _ in txn.cursor(db) if len(k) == 6 and k[:2] == bytes((0xFF, level))]


def _index_short(txn: Any, dbs: list[Any], meta: Any) -> None:
    level = State.unpack(txn.get(b"state", db=meta)).levels[0].id
    for db in dbs:  # in both tables, so docs are lost: only the level's first run named
        first, *rest = _index_chunks(txn, db, level)
        txn.put(first, bytes(txn.get(first, db=db))[:8], db=db)
        for key in rest:
            txn.delete(key, db=db)


def _index_torn(txn: Any, dbs: list[Any], meta: Any) -> None:
    level = State.unpack(txn.get(b"state", db=meta)).levels[0].id
    first = _index_chunks(txn, dbs[1], level)[0]
    txn.put(first, bytes(txn.get(first, db=dbs[1]))[:-3], db=dbs[1])


def _swap_keys(txn: Any, dbs: list[Any], meta: Any) -> None:
    key, val = _nth_run(txn, dbs[0], 0, 2)
    val[16:24], val[24:32] = val[24:32], val[16:24]  # its second and third keys
    txn.put(key, bytes(val), db=dbs[0])


def _first_key_off(txn: Any, dbs: list[Any], meta: Any) -> None:
    key, val = _nth_run(txn, dbs[0], 0, 2)
    txn.put(key[:8] + bytes((key[8] ^ 1,)), bytes(val), db=dbs[0])  # its key, not its keys
    txn.delete(key, db=dbs[0])


def _bad_width(txn: Any, dbs: list[Any], meta: Any) -> None:
    key, val = _nth_run(txn, dbs[1], 0, 0)
    val[4] = 5
    txn.put(key, bytes(val), db=dbs[1])


def _short_state(txn: Any, dbs: list[Any], meta: Any) -> None:
    txn.put(b"state", bytes(txn.get(b"state", db=meta))[:-1], db=meta)


def _stale_count(txn: Any, dbs: list[Any], meta: Any) -> None:
    st_ = State.unpack(txn.get(b"state", db=meta))
    txn.put(b"state", st_._replace(stale=st_.stale + 2).pack(), db=meta)


# case: (damage, words verify must say, what queries may do)
DAMAGE = {
    "a key's byte flipped": (_flip_key_byte, "table r00: 1 docs missing", "answers"),
    # a query that fetches the run its level's index names raises; the others answer
    "a run deleted": (_delete_run, "docs missing", "subset or raise"),
    "an index record short": (_index_short, "names 1 runs, not its 10", "subset"),
    "an index record torn": (_index_torn, "index record of table level 0 is malformed",
                             "raise"),
    # Read in place, a run's keys are not re-checked at query time (that would read every
    # page): queries answer, maybe missing hits, and verify names the damage.
    "keys out of order": (_swap_keys, "out of key order", "answers"),
    "a run's iid width 5": (_bad_width, "malformed", "subset or raise"),
    "a run keyed off its first key": (_first_key_off, "does not begin at its key",
                                      "subset or raise"),
    "state record too short": (_short_state, "state record is missing or malformed", "raise"),
    "stale count off by 2": (_stale_count, "2 stale docs and 0 tombstones left to delete, but 0",
                             "exact"),
}

_QUERY_CHILD = """
import json, sys
from simstore.exceptions import SimstoreError
from simstore.store import SimStore, format as F
out = {}
for name, path in json.loads(sys.argv[1]).items():
    rows = out[name] = []
    try:
        s = SimStore(path)
    except SimstoreError as exc:
        rows.append(["open: " + type(exc).__name__])
        continue
    for q in json.loads(sys.argv[2]):
        for k in range(s.k + 1):
            try:
                rows.append([[m.doc_id, m.distance] for m in s.query(q, k)])
            except SimstoreError as exc:
                rows.append(type(exc).__name__)
            except Exception as exc:
                rows.append("NOT A SIMSTORE ERROR: " + repr(exc))
    s.close()
print(json.dumps(out))
"""


def test_damaged_run_tables_are_named_by_verify(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A flipped key byte, a deleted run, keys out of order, a bad run header, a short state
    record, a wrong stale count: verify() names each in a sentence; queries (in a child
    process, reading the runs in place) answer or raise a simstore error, never crash; on
    a wrong stale count alone the answers stay exact."""
    small(monkeypatch)
    rng = random.Random(5)
    src = tmp_path / "sound"
    model = {f"d{i}": rng.getrandbits(64) for i in range(150)}
    with SimStore(src, k=3, expected_size=1000) as s:
        s.add_many(list(model), list(model.values()))  # the base: ten runs a table
        for i in range(20):  # two new levels (merged or not), two recent docs
            model[f"e{i}"] = near(rng, model[f"d{i}"], 3)
            s.add(f"e{i}", model[f"e{i}"])
        st_ = state_of(s)
        assert len(st_.levels) >= 2 and st_.levels[0].id == 0 and st_.levels[0].hi == 150
        assert st_.flushed == 168 and st_.next == 170
    paths = {}
    for name, (damage, words, _) in DAMAGE.items():
        dst = tmp_path / f"case{len(paths)}"
        dst.mkdir()
        shutil.copyfile(src / "data.mdb", dst / "data.mdb")
        runs_env_edit(dst, damage)
        paths[name] = str(dst)
        with SimStore(dst) as s:
            problems = s.verify()
        assert problems and all(isinstance(p, str) for p in problems), name
        assert any(words in p for p in problems), (name, problems)
    queries = [model[f"d{i}"] for i in range(0, 150, 10)] + [model[f"e{i}"] for i in range(20)]
    r = run_py(_QUERY_CHILD.replace("sys.argv[1]", repr(json.dumps(paths)))
               .replace("sys.argv[2]", repr(json.dumps(queries))))
    assert r.returncode == 0, f"exit {r.returncode} (negative: killed by a signal): {r.stderr}"
    got = json.loads(r.stdout)
    want = [[[m.doc_id, m.distance] for m in brute_matches(model, q, k)]
            for q in queries for k in range(4)]
    for name, (_, _, queries_do) in DAMAGE.items():
        rows = got[name]
        assert not [x for x in rows if isinstance(x, str) and x.startswith("NOT")], name
        if queries_do == "raise":
            assert set(map(str, rows)) == {"CorruptStoreError"}, (name, rows[:3])
        elif queries_do == "exact":
            assert rows == want, name
        elif queries_do == "subset":
            assert all(isinstance(x, list) and all(m in w for m in x)
                       for x, w in zip(rows, want, strict=True)), name
            assert rows != want, f"{name}: no answer lost"
        elif queries_do == "subset or raise":
            assert all(x == "CorruptStoreError" or all(m in w for m in x)
                       for x, w in zip(rows, want, strict=True)), name
            assert "CorruptStoreError" in rows, name  # (a level read whole once 1/8 is)


