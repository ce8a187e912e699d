"""Crash and disk safety: kill -9 at random points, stale readers, truncated files, file modes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest

from simstore.store import SimStore
from tools import stress

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def run_py(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter (the repo on sys.path); return the finished process."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


def file_state(path: Path, names: tuple[str, ...] = ("data.mdb", "simstore.lock")) -> dict:
    """(size, mtime_ns, sha256) of the named files of a store directory."""
    out = {}
    for name in names:
        f = path / name
        if f.exists():
            st = f.stat()
            out[name] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
    return out


# --------------------------------------------------------------------------- kill -9


KILL_ROUNDS = {"add": 7, "add_many": 7, "remove": 6, "rebuild": 5, "compact": 5}


@pytest.mark.parametrize("op", sorted(KILL_ROUNDS))
def test_sigkill_of_a_writer_loses_no_acknowledged_call(tmp_path, op) -> None:
    """SIGKILL during op: reopen verifies, acknowledged calls are there, the last is all-or-nothing."""
    for i in range(KILL_ROUNDS[op]):
        problems = stress.crash_round(str(tmp_path), op, seed=1000 * i + len(op), max_delay=0.4)
        assert problems == [], f"round {i}: {problems}"


@pytest.mark.stress
def test_sigkill_long_run(tmp_path) -> None:
    """The long kill run: 300 rounds over every op (tools/stress.py kills --kills 1000 is longer)."""
    assert stress.main(["kills", "--kills", "300", "--dir", str(tmp_path)]) == 0


def test_stale_reader_slot_of_a_killed_process_is_cleared_on_open(tmp_path) -> None:
    """A reader killed mid-transaction leaves a slot; the next open anywhere clears it."""
    path = tmp_path / "s"
    with SimStore(path) as s:
        s.add("a", 1)
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                import time
                from simstore.store import SimStore
                s = SimStore({str(path)!r})
                txn = s._env.begin(False)
                print("ready", flush=True)
                time.sleep(60)
            """)],
            stdout=subprocess.PIPE, cwd=ROOT,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert child.pid in stress._reader_pids(s)  # LMDB itself keeps the stale slot
        r = run_py(f"from simstore.store import SimStore; SimStore({str(path)!r}).close()")
        assert r.returncode == 0, r.stderr
        assert child.pid not in stress._reader_pids(s)
        assert s.query(1, 0)[0].doc_id == "a"


# --------------------------------------------------------------------------- damaged files


def _damaged_copy(tmp_path: Path, name: str, damage) -> Path:
    src = tmp_path / "orig"
    if not src.exists():
        with SimStore(src, k=3) as s:
            s.add_many(range(5000), list(range(0, 5000 * 7919, 7919)))
    dst = tmp_path / name
    dst.mkdir()
    for f in ("data.mdb", "simstore.lock"):
        if (src / f).exists():
            (dst / f).write_bytes((src / f).read_bytes())
    damage(dst / "data.mdb")
    return dst


def _truncate(size):
    def damage(f: Path) -> None:
        with open(f, "r+b") as fh:
            fh.truncate(size(f.stat().st_size))
    return damage


DAMAGE = {
    "truncated to 100 bytes": _truncate(lambda n: 100),
    "truncated to one page": _truncate(lambda n: 4096),
    "truncated to the meta pages": _truncate(lambda n: 8192),
    "truncated to half": _truncate(lambda n: n // 2),
    "random bytes": lambda f: f.write_bytes(os.urandom(f.stat().st_size)),
    "text": lambda f: f.write_text("not a database\n" * 100),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.parametrize("readonly", [False, True])
def test_damaged_data_file_is_refused_in_a_subprocess(tmp_path, case, readonly) -> None:
    """A truncated or garbage data.mdb gives CorruptStoreError, never a signal, and stays as is."""
    path = _damaged_copy(tmp_path, "d", DAMAGE[case])
    before = file_state(path, ("data.mdb",))
    r = run_py(f"""
        from simstore.store import SimStore
        from simstore.exceptions import CorruptStoreError
        try:
            s = SimStore({str(path)!r}, readonly={readonly})
        except CorruptStoreError as exc:
            print("refused:", exc)
        else:
            print("opened", s.verify())
    """)
    assert r.returncode == 0, f"exit {r.returncode} (negative = killed by a signal): {r.stderr}"
    assert r.stdout.startswith("refused:"), r.stdout + r.stderr
    assert "data.mdb" in r.stdout or "damaged" in r.stdout or "LMDB" in r.stdout
    assert file_state(path, ("data.mdb",)) == before


# --------------------------------------------------------------------------- disk safety


def test_package_never_uses_pickle_or_eval_for_storage() -> None:
    """No module of simstore imports pickle/marshal/shelve or calls eval/exec."""
    pattern = re.compile(r"^\s*(import|from)\s+(pickle|cPickle|marshal|shelve|dill)\b|\b(eval|exec)\(")
    for f in sorted((ROOT / "simstore").glob("*.py")):
        for lineno, line in enumerate(f.read_text().splitlines(), 1):
            assert not pattern.search(line), f"{f.name}:{lineno}: {line.strip()}"


def test_every_meta_value_is_a_json_object(tmp_path) -> None:
    """Every value of the meta database parses as a JSON object (no pickles, no code)."""
    with SimStore(tmp_path / "s", k=4) as s:
        s.add("a", 1)
    env = lmdb.open(str(tmp_path / "s"), max_dbs=64, readonly=True, lock=False)
    meta = env.open_db(b"meta", create=False)
    with env.begin() as txn:
        items = [(bytes(k), bytes(v)) for k, v in txn.cursor(meta)]
    env.close()
    assert {k for k, _ in items} >= {b"format", b"layout", b"fingerprint"}
    for key, value in items:
        assert isinstance(json.loads(value.decode("utf-8")), dict), key


def test_store_files_follow_the_process_umask(tmp_path) -> None:
    """With umask 027 the store's directory and files get no permission bits for others."""
    path = tmp_path / "s"
    r = run_py(f"""
        import os
        os.umask(0o027)
        from simstore.store import SimStore
        with SimStore({str(path)!r}) as s:
            s.add("a", 1)
    """)
    assert r.returncode == 0, r.stderr
    modes = {p.name: p.stat().st_mode & 0o777 for p in [path, *path.iterdir()]}
    assert modes["s"] & 0o007 == 0 and modes["data.mdb"] & 0o007 == 0
    for name, mode in modes.items():
        assert mode & 0o007 == 0, f"{name} has mode {mode:o} despite umask 027"


def test_readonly_open_never_writes_the_data(tmp_path) -> None:
    """A readonly open, queries and close leave data.mdb and simstore.lock byte- and mtime-equal.

    lock.mdb is LMDB's shared reader table: registering a reader writes it by design.
    """
    path = tmp_path / "s"
    with SimStore(path) as s:
        s.add_many(range(100), range(100))
    before = file_state(path)
    with SimStore(path, readonly=True) as s:
        assert len(s) == 100 and s.query(5, 1) and s.verify() == []
        list(s.items())
    assert file_state(path) == before


@pytest.mark.skipif(IS_ROOT, reason="running as root: file permissions do not bind root")
def test_readonly_open_works_on_a_read_only_copy(tmp_path) -> None:
    """A chmod a-w copy opens readonly and answers queries."""
    path = tmp_path / "s"
    with SimStore(path) as s:
        s.add("a", 1)
    for p in [*path.iterdir(), path]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        with SimStore(path, readonly=True) as s:
            assert s["a"] == 1
    finally:
        for p in [path, *path.iterdir()]:
            p.chmod(p.stat().st_mode | 0o200)
