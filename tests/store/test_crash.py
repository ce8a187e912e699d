"""Crash and disk safety: kill -9 at random points, stale readers, truncated files, file modes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lmdb
import pytest

import simstore
from simstore.exceptions import StoreError, VerifyTimeoutError
from simstore.store import SimStore, verify as _verify
from simstore.store.check.lmdbfile import read_metas
from simstore.store.check.pages import FileCheck, check_open, meta_problems
from tools.stress import damage as fuzzer
from tools.stress.__main__ import main as stress_main
from tools.stress.kills import crash_round, reader_pids

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/store/..)
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


KILL_ROUNDS = {"add": 7, "add_many": 7, "remove": 6, "rebuild": 5, "compact": 5, "churn": 6,
               "sigchurn": 4, "merge": 5}


@pytest.mark.parametrize("op", sorted(KILL_ROUNDS))
def test_sigkill_of_a_writer_loses_no_acknowledged_call(tmp_path, op) -> None:
    """SIGKILL during op: reopen verifies, acknowledged calls are there, the last is all-or-nothing."""
    for i in range(KILL_ROUNDS[op]):
        problems = crash_round(str(tmp_path), op, seed=1000 * i + len(op), max_delay=0.4)
        assert problems == [], f"round {i}: {problems}"


@pytest.mark.stress
def test_sigkill_long_run(tmp_path) -> None:
    """The long kill run: 300 rounds over every op (python -m tools.stress kills --kills 1000 is longer)."""
    assert stress_main(["kills", "--kills", "300", "--dir", str(tmp_path)]) == 0


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
        assert child.pid in reader_pids(s)  # LMDB itself keeps the stale slot
        r = run_py(f"from simstore.store import SimStore; SimStore({str(path)!r}).close()")
        assert r.returncode == 0, r.stderr
        assert child.pid not in reader_pids(s)
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


@pytest.mark.parametrize("cut", [4096 + 200, 4096 + 3182])
def test_a_file_cut_inside_the_newest_meta_page_is_refused(tmp_path, cut) -> None:
    """The file's end cuts meta page 1, the newest, past its meta: LMDB reads that meta
    (the map shows zeros past the end) and went on to pages past the end (SIGBUS, found
    by `python -m tools.stress damage`); opening refuses the file, naming its size."""
    path = tmp_path / "s"
    with SimStore(path, k=3) as s:
        s.add_many(range(1000), list(range(0, 1000 * 7919, 7919)))
        while max(m.txnid for m in read_metas(str(path / "data.mdb"), 4096) if m) % 2 == 0:
            s.add(f"x{len(s)}", 1)  # until the newest snapshot is in meta page 1
    with open(path / "data.mdb", "r+b") as fh:
        fh.truncate(cut)
    r = run_py(f"""
        from simstore.store import SimStore
        from simstore.exceptions import CorruptStoreError
        try:
            SimStore({str(path)!r})
        except CorruptStoreError as exc:
            print("refused:", exc)
    """)
    assert r.returncode == 0, f"exit {r.returncode} (negative = killed by a signal): {r.stderr}"
    assert r.stdout.startswith("refused:") and f"{cut} bytes" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------- damage inside the file


def _newest(data: Path) -> tuple[int, FileCheck]:
    """The newest snapshot's transaction id and a FileCheck that ran on it."""
    txnid = max(m.txnid for m in read_metas(str(data), 4096) if m)
    check = FileCheck(str(data), 4096)
    assert check.run(txnid) == []
    return txnid, check


def test_verify_reports_an_overwritten_middle_page_instead_of_aborting(tmp_path) -> None:
    """4 KiB of random bytes over the docs table's root page: open refuses it naming the page
    (the structural check of what opening reads), or verify() lists it; the caller lives."""
    def overwrite_docs_root(f: Path) -> None:
        _, check = _newest(f)
        root = check.names[b"docs"].root
        assert check.names[b"docs"].depth >= 2  # a branch page: LMDB asserted IS_LEAF on it
        with open(f, "r+b") as fh:
            fh.seek(root * 4096)
            fh.write(random.Random(0).randbytes(4096))

    path = _damaged_copy(tmp_path, "d", overwrite_docs_root)
    r = run_py(f"""
        import json
        from simstore import CorruptStoreError
        from simstore.store import SimStore
        try:
            with SimStore({str(path)!r}) as s:
                print(json.dumps(s.verify()))
        except CorruptStoreError as exc:
            print(json.dumps([str(exc).split("looks damaged: ", 1)[1]]))
    """)
    assert r.returncode == 0, f"exit {r.returncode} (negative = killed by a signal): {r.stderr}"
    problems = json.loads(r.stdout)
    assert problems and all(p.startswith("data.mdb: ") for p in problems), problems
    assert any("'docs'" in p for p in problems), problems


def test_verify_turns_a_dead_or_hung_checker_into_a_problem(tmp_path, monkeypatch) -> None:
    """The checking child killed by SIGABRT: a problem sentence; one past its time limit:
    VerifyTimeoutError (not a problem of the store); neither a crash."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
        monkeypatch.setattr(_verify, "_CHILD", textwrap.dedent("""
            import os, signal, sys
            sys.stderr.write("mdb.c:6273: Assertion 'IS_LEAF(mp)' failed in mdb_cursor_next()\\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGABRT)
        """))
        [problem] = s.verify()
        assert problem.startswith("the store's file is damaged: LMDB aborted while walking it")
        assert "SIGABRT" in problem and "IS_LEAF" in problem
        monkeypatch.setattr(_verify, "_CHILD", "while True: pass")  # a looping checker
        with pytest.raises(VerifyTimeoutError, match="did not finish within its limit of 0.5 s"):
            s.verify(timeout=0.5)
        monkeypatch.setattr(_verify, "_CHILD", "raise SystemExit(3)")
        with pytest.raises(StoreError, match="checking process failed"):
            s.verify()


def test_verify_inside_a_batch_checks_the_batch_s_own_writes(tmp_path, monkeypatch) -> None:
    """Outside a batch the walk runs in the child only; inside, also over the batch's writes."""
    calls = []
    real = _verify.records
    monkeypatch.setattr(_verify, "records", lambda txn, h: calls.append(1) or real(txn, h))
    with SimStore(tmp_path / "s") as s:
        s.add_many(range(100), range(100))
        assert s.verify() == [] and calls == []
        with s.batch():
            s.add("new", 12345)
            assert s.verify() == [] and calls == [1]


def test_structural_check_passes_sound_stores_of_every_shape(tmp_path) -> None:
    """Overflow ids, removals, rebuilds, compact copies, in both kinds of store: no problem."""
    rng = random.Random(5)
    for r in range(6):
        path = tmp_path / f"s{r}"
        cfg = simstore.SIGNATURE_CONFIG if r % 3 == 2 else None
        with SimStore(path, config=cfg, k=None if cfg else 3) as s:
            for step in range(4):
                n = rng.choice([1, 40, 600])
                ids = [f"{r}.{step}.{i}" + "x" * rng.choice([0, 0, 700, 9000]) for i in range(n)]
                if cfg:
                    s.add_many(ids, s.signatures([f"t {i % 7} {rng.random()}" for i in range(n)]))
                else:
                    base = rng.getrandbits(64)
                    s.add_many(ids, [base if i % 4 == 0 else rng.getrandbits(64) for i in range(n)])
                s.remove_many(rng.sample(ids, rng.randint(0, n)))
            if not cfg and r % 2:
                s.rebuild(k=2)
            s.compact(tmp_path / f"c{r}")
        for store in (path, tmp_path / f"c{r}"):
            _newest(store / "data.mdb")  # asserts no problem
            env = lmdb.open(str(store), readonly=True, max_dbs=64)
            try:
                assert check_open(env, str(store)) == []
            finally:
                env.close()


def test_open_check_reads_a_damaged_main_tree_as_bytes(tmp_path) -> None:
    """check_open (for the open path) reports a main-tree page overwritten, without LMDB reading it."""
    def overwrite_main_root(f: Path) -> None:
        txnid = max(m.txnid for m in read_metas(str(f), 4096) if m)
        [meta] = [m for m in read_metas(str(f), 4096) if m and m.txnid == txnid]
        with open(f, "r+b") as fh:
            fh.seek(meta.main.root * 4096)
            fh.write(random.Random(1).randbytes(4096))

    path = _damaged_copy(tmp_path, "d", overwrite_main_root)
    env = lmdb.open(str(path), readonly=True, max_dbs=64)
    try:
        problems = check_open(env, str(path))
    finally:
        env.close()
    assert problems and "the main tree" in problems[0], problems


def test_meta_problems_explains_a_meta_page_lmdb_cannot_map(tmp_path) -> None:
    """A meta page naming a huge last page: LMDB fails with a bare errno; meta_problems says why."""
    def huge_last_page(f: Path) -> None:
        metas = read_metas(str(f), 4096)
        slot = max(range(2), key=lambda i: metas[i].txnid)  # type: ignore[union-attr]
        with open(f, "r+b") as fh:
            fh.seek(slot * 4096 + 136)  # the last page number
            fh.write((1 << 50).to_bytes(8, "little"))

    path = _damaged_copy(tmp_path, "d", huge_last_page)
    r = run_py(f"""
        from simstore.store import SimStore
        from simstore.exceptions import SimstoreError
        try:
            SimStore({str(path)!r}, readonly=True)
        except SimstoreError as exc:
            print(type(exc).__name__)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("StoreError", "CorruptStoreError"), r.stdout
    problems = meta_problems(str(path))
    assert any("map size" in p or "last page" in p for p in problems), problems
    assert meta_problems(str(tmp_path / "orig")) == []


DAMAGE_CLASSES = {
    "refused at open", "verify: problems", "verify: raised",
    "verify: problems (LMDB died in verify's child)", "verify: problems (verify's child timed out)",
    "undetected: content and answers intact", "undetected: content or answers changed",
    "undetected: queries raised", "undetected: queries error", "undetected: queries aborted",
    "undetected: queries hung", "undetected: queries exit",
}


def test_damage_fuzzer_sample_never_kills_or_hangs_open_or_verify(tmp_path) -> None:
    """24 seeded damage cases (`python -m tools.stress damage` runs 500): open and verify never die or hang.

    Every case is classified, and each undetected one hit free pages, gaps
    or padding only (content and query answers equal the sound store's).
    """
    cases = fuzzer.run(24, seed=11, root=str(tmp_path), docs=500)
    assert len(cases) == 24
    for c in cases:
        assert c.cls in DAMAGE_CLASSES, c
        if c.cls.startswith("undetected"):
            assert c.cls == "undetected: content and answers intact" and not c.live, c
    found = {c.cls for c in cases}
    assert "verify: problems" in found and "refused at open" in found


def test_a_sound_file_ending_before_its_last_page_opens(tmp_path) -> None:
    """A rebuild can leave data.mdb shorter than last_pgno (pages taken and given back): it opens."""
    rng = random.Random(204)  # replays the store of a structural-check soundness round
    path = tmp_path / "s"
    rng.random()
    s = SimStore(path, k=rng.choice([2, 3, 4]))
    try:
        for step in range(rng.randint(1, 12)):
            n = rng.choice([1, 10, 300, 3000])
            ids = [f"r4s{step}i{i}" + ("x" * rng.choice([0, 0, 0, 600, 5000, 20000])
                                      if rng.random() < 0.05 else "") for i in range(n)]
            base = rng.getrandbits(64)
            s.add_many(ids, [base if rng.random() < 0.2 else rng.getrandbits(64) for _ in ids])
            if rng.random() < 0.5:
                every = [d for d, _ in s.items()]
                s.remove_many(rng.sample(every, min(len(every), rng.randint(0, len(every)))))
            if rng.random() < 0.1:
                s.rebuild(k=rng.choice([2, 3, 4]))
    finally:
        s.close()
    with SimStore(path) as s:
        assert s.verify() == []


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


def test_verify_on_a_busy_machine_does_not_time_out_a_healthy_store(tmp_path,
                                                                    monkeypatch) -> None:
    """A checker slowed down (waiting, as on a loaded machine) past the limit in wall time
    but not in CPU time finishes and reports the store sound; the timeout message says
    it timed out and found nothing wrong."""
    if _verify._cpu_seconds(os.getpid()) is None:
        pytest.skip("the checker's CPU time is known on Linux only")
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
        monkeypatch.setattr(_verify, "_CHILD", "import time; time.sleep(2.5); " + _verify._CHILD)
        start = time.monotonic()
        assert s.verify(timeout=1.5) == [] and time.monotonic() - start > 2.5
        monkeypatch.setattr(_verify, "_CHILD", "while True: pass")
        with pytest.raises(VerifyTimeoutError) as exc:
            s.verify(timeout=0.5)
    assert "having found nothing wrong so far" in str(exc.value)
    assert "of CPU" in str(exc.value) and "damaged" not in str(exc.value).split(";")[0]


def test_the_default_verify_limit_grows_with_the_store(tmp_path) -> None:
    """default_timeout: 120 s for an empty store, one more second per 4 MB of data.mdb."""
    with SimStore(tmp_path / "s") as s:
        s.add("a", 1)
    small = _verify.default_timeout(str(tmp_path / "s"))
    with open(tmp_path / "s" / "data.mdb", "r+b") as f:
        f.truncate(400 << 20)  # a sparse 400 MB file stands for a big store
    assert _verify.default_timeout(str(tmp_path / "s")) == pytest.approx(small + 100, abs=1)
