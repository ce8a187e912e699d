"""Bad input everywhere (API and CLI): a specific error that says what is allowed, no change.

Every case here has a row in docs/errors.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import numpy as np
import pytest

from simstore.cli import main
from simstore.exceptions import (
    FormatVersionError,
    InvalidConfigError,
    InvalidDistanceError,
    InvalidDocIdError,
    InvalidFingerprintError,
    NotAStoreError,
    SimstoreError,
    SimstoreTypeError,
    StoreAccessError,
)
from simstore.store import MAX_DOC_ID_BYTES, SimStore

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NAN = float("nan")
FP_MSG = r"must be an int in 0\.\.2\*\*64-1"
K_MSG = r"'k' must be an int in 0\.\.64"

# (label, call on an open store s, exception, message pattern)
API_CASES = [
    ("fp float", lambda s: s.add("x", 1.0), InvalidFingerprintError, FP_MSG),
    ("fp NaN", lambda s: s.add("x", NAN), InvalidFingerprintError, FP_MSG),
    ("fp str", lambda s: s.add("x", "5"), InvalidFingerprintError, FP_MSG),
    ("fp None", lambda s: s.add("x", None), InvalidFingerprintError, FP_MSG),
    ("fp bool", lambda s: s.add("x", True), InvalidFingerprintError, FP_MSG),
    ("fp negative", lambda s: s.add("x", -1), InvalidFingerprintError, FP_MSG),
    ("fp 2**64", lambda s: s.add("x", 2**64), InvalidFingerprintError, FP_MSG),
    ("fp numpy float", lambda s: s.add("x", np.float64(3)), InvalidFingerprintError, FP_MSG),
    ("query fp NaN", lambda s: s.query(NAN), InvalidFingerprintError, FP_MSG),
    ("add_if_new fp -1", lambda s: s.add_if_new("x", -1), InvalidFingerprintError, FP_MSG),
    ("fps float array", lambda s: s.add_many(["x"], np.array([1.0])), InvalidFingerprintError,
     r"array of unsigned 64-bit integers \(got dtype float64\)"),
    ("fps NaN array", lambda s: s.add_many(["x"], np.array([NAN])), InvalidFingerprintError,
     "dtype float64"),
    ("fps bool array", lambda s: s.add_many(["x"], np.array([True])), InvalidFingerprintError,
     "dtype bool"),
    ("fps str array", lambda s: s.add_many(["x"], np.array(["1"])), InvalidFingerprintError,
     "unsigned 64-bit"),
    ("fps 2-D array", lambda s: s.add_many(["x"], np.zeros((1, 1), np.uint64)),
     InvalidFingerprintError, r"1-D array of uint64 \(got shape \(1, 1\)\)"),
    ("fps 0-D array", lambda s: s.add_many(["x"], np.uint64(1)), InvalidFingerprintError,
     "iterable of ints"),
    ("fps negative int array", lambda s: s.add_many(["x"], np.array([-1])),
     InvalidFingerprintError, "negative values"),
    ("fps list with float", lambda s: s.add_many(["x"], [1.5]), InvalidFingerprintError,
     r"'fps\[0\]' must be an int"),
    ("fps list with 2**64", lambda s: s.add_many(["x", "y"], [1, 2**64]),
     InvalidFingerprintError, r"'fps\[1\]'"),
    ("fps a str", lambda s: s.add_many(["x"], "1"), InvalidFingerprintError, "iterable of ints"),
    ("query_many 2-D", lambda s: s.query_many(np.zeros((2, 2), np.uint64)),
     InvalidFingerprintError, "1-D array"),
    ("ids and fps lengths differ", lambda s: s.add_many(["x", "y"], [1]), InvalidConfigError,
     "same length"),
    ("doc ids a str", lambda s: s.add_many("xy", [1, 2]), SimstoreTypeError,
     "iterable of str or int ids"),
    ("doc id empty", lambda s: s.add("", 1), InvalidDocIdError, "non-empty str or an int"),
    ("doc id too long", lambda s: s.add("x" * (MAX_DOC_ID_BYTES + 1), 1), InvalidDocIdError,
     f"at most {MAX_DOC_ID_BYTES} bytes"),
    ("doc id int too big", lambda s: s.add(1 << (8 * MAX_DOC_ID_BYTES + 8), 1),
     InvalidDocIdError, f"fit in {MAX_DOC_ID_BYTES} bytes"),
    ("doc id bytes", lambda s: s.add(b"x", 1), SimstoreTypeError, r"str or an int \(got bytes\)"),
    ("doc id float", lambda s: s.add(1.0, 1), SimstoreTypeError, r"\(got float\)"),
    ("doc id None", lambda s: s.add(None, 1), SimstoreTypeError, r"\(got NoneType\)"),
    ("doc id bool", lambda s: s.add(True, 1), SimstoreTypeError, r"\(got bool\)"),
    ("doc id tuple", lambda s: s.remove(("a",)), SimstoreTypeError, r"\(got tuple\)"),
    ("doc id in add_many", lambda s: s.add_many(["ok", 2.5], [1, 2]), SimstoreTypeError,
     r"\(got float\)"),
    ("k negative", lambda s: s.query(1, -1), InvalidDistanceError, K_MSG),
    ("k 65", lambda s: s.query(1, 65), InvalidDistanceError, K_MSG),
    ("k float", lambda s: s.query(1, 2.0), InvalidDistanceError, K_MSG),
    ("k str", lambda s: s.query_many([1], "3"), InvalidDistanceError, K_MSG),
    ("k bool", lambda s: s.add_if_new("x", 1, True), InvalidDistanceError, K_MSG),
]


def digest(path: Path) -> dict[str, str]:
    """sha256 of every file of a store directory except LMDB's reader table."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.iterdir())
        if p.name != "lock.mdb"
    }


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store with a few docs, shared by the API cases (none may change it)."""
    path = tmp_path_factory.mktemp("bad") / "s"
    with SimStore(path, k=3) as s:
        s.add_many(["a", "b", 3], [1, 2, 3])
        yield s, path


@pytest.mark.parametrize("label,call,exc,msg", API_CASES, ids=[c[0] for c in API_CASES])
def test_bad_api_input_is_refused_and_changes_nothing(shared_store, label, call, exc, msg) -> None:
    """Each bad argument raises its specific error (a ValueError/TypeError too); the files stay."""
    s, path = shared_store
    before = digest(path)
    with pytest.raises(exc, match=msg) as info:
        call(s)
    assert isinstance(info.value, SimstoreError)
    assert isinstance(info.value, (ValueError, TypeError))
    assert digest(path) == before and len(s) == 3


OPEN_CASES = [
    ("k 17 at creation", dict(k=17), InvalidDistanceError, r"'k' must be an int in 0\.\.16"),
    ("k -1 at creation", dict(k=-1), InvalidDistanceError, r"0\.\.16"),
    ("k float at creation", dict(k=3.0), InvalidDistanceError, r"\(got float\)"),
    ("expected_size negative", dict(expected_size=-5), InvalidConfigError, r"int in 0\.\.2\*\*62"),
    ("map_size tiny", dict(map_size=10), InvalidConfigError, r"int in 4096\.\.2\*\*62"),
    ("max_readers 0", dict(max_readers=0), InvalidConfigError,
     r"'max_readers' must be an int in 1\.\.2\*\*20"),
    ("max_readers str", dict(max_readers="x"), SimstoreTypeError,
     r"'max_readers' must be an int in 1\.\.2\*\*20 \(got str\)"),
    ("config not a FingerprintConfig", dict(config={"ngram": 3}), SimstoreTypeError,
     "FingerprintConfig"),
]


@pytest.mark.parametrize("label,kwargs,exc,msg", OPEN_CASES, ids=[c[0] for c in OPEN_CASES])
def test_bad_open_options_are_refused_before_touching_disk(tmp_path, label, kwargs, exc, msg):
    """Bad SimStore(...) options raise their error and create nothing."""
    with pytest.raises(exc, match=msg):
        SimStore(tmp_path / "s", **kwargs)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("path", [5, None, 1.5])
def test_path_of_the_wrong_type_is_a_type_error(path) -> None:
    """SimStore(path) with a non-path raises SimstoreTypeError naming 'path'."""
    with pytest.raises(SimstoreTypeError, match="'path' must be a str, bytes or os.PathLike"):
        SimStore(path)


def test_bytes_paths_open_the_same_store_as_str_paths(tmp_path) -> None:
    """SimStore(b"path") and compact(b"dest") work as their str forms do (os.fsdecode)."""
    path = os.fsencode(str(tmp_path / "s"))
    with SimStore(path) as s:
        s.add("a", 7)
        assert s.path == str(tmp_path / "s")
        s.compact(os.fsencode(str(tmp_path / "c")))
    with SimStore(str(tmp_path / "c"), readonly=True) as c:
        assert c.get("a") == 7


def test_path_that_is_a_file_is_not_a_store(tmp_path) -> None:
    """A regular file as path raises NotAStoreError and is left alone."""
    f = tmp_path / "f"
    f.write_bytes(b"precious")
    with pytest.raises(NotAStoreError, match="is a file; a simstore store is a directory"):
        SimStore(f)
    assert f.read_bytes() == b"precious"


@pytest.mark.parametrize(("version", "says"), [
    (99, r"has format 99, newer than this simstore reads \(19\): upgrade simstore"),
    (11, r"development version of simstore \(format 11\); rewrite it with "
         r"'simstore-cli upgrade .*s' \(nothing on disk was changed\)"),
])
def test_other_format_version_is_refused_unchanged(tmp_path, version, says) -> None:
    """A store of a newer format version, or of a development one, raises
    FormatVersionError saying what to do, and keeps its bytes."""
    path = tmp_path / "s"
    SimStore(path).close()
    env = lmdb.open(str(path), max_dbs=64)
    with env.begin(write=True) as txn:
        txn.put(b"format", b'{"format":"simstore","version":%d}' % version,
                db=env.open_db(b"meta", txn=txn))
    env.close()
    before = digest(path)
    for readonly in (False, True):
        with pytest.raises(FormatVersionError, match=says):
            SimStore(path, readonly=readonly)
    assert digest(path) == before


@pytest.mark.skipif(IS_ROOT, reason="running as root: chmod 000 does not stop root")
def test_unreadable_directory_is_an_access_error(tmp_path) -> None:
    """A chmod 000 store directory raises StoreAccessError, not a raw OSError."""
    path = tmp_path / "s"
    SimStore(path).close()
    path.chmod(0)
    try:
        with pytest.raises(StoreAccessError):
            SimStore(path)
    finally:
        path.chmod(0o755)


@contextlib.contextmanager
def read_only_mount(src: Path, dst: Path):
    """Bind-mount src read-only at dst (root only); skip the test when mounting is refused."""
    dst.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot bind-mount here: {r.stderr.decode().strip()}")
    try:
        r = subprocess.run(["mount", "-o", "remount,ro,bind", str(dst)], capture_output=True)
        if r.returncode:
            pytest.skip(f"cannot remount read-only: {r.stderr.decode().strip()}")
        yield dst
    finally:
        subprocess.run(["umount", str(dst)], check=True)


@pytest.mark.skipif(not IS_ROOT, reason="a read-only mount needs root")
def test_read_only_file_system(tmp_path) -> None:
    """On a read-only mount: creating fails with StoreAccessError, readonly=True still reads."""
    src = tmp_path / "src"
    (src / "s").mkdir(parents=True)
    with SimStore(src / "s") as s:
        s.add("a", 1)
    SimStore(src / "other").close()
    with read_only_mount(src, tmp_path / "ro") as ro:
        with pytest.raises(StoreAccessError, match="give a path this process may write"):
            SimStore(ro / "new")
        with SimStore(ro / "s", readonly=True) as s:
            assert s["a"] == 1 and s.query(1, 0)[0].doc_id == "a"
        with pytest.raises(StoreAccessError, match="readonly=True"):
            SimStore(ro / "other")
        assert not (ro / "new").exists()


def test_full_map_grows_invisibly_across_processes(tmp_path) -> None:
    """A handle with a tiny map keeps working after another process grew the map many times."""
    path = tmp_path / "s"
    with SimStore(path, map_size=1 << 16) as s:
        s.add("first", 1)
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import numpy as np
            from simstore.store import SimStore
            with SimStore({str(path)!r}) as s:
                fps = np.random.default_rng(0).integers(0, 2**63, 20000, dtype=np.uint64)
                s.add_many(range(20000), fps)
                for i in range(200):
                    s.add(f"x{{i}}", i)
        """)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr
        assert len(s) == 20201 and s["x5"] == 5
        s.add_many(range(20000, 30000), range(10000))
        s.add("last", 2)
        assert len(s) == 30202 and s.query(2, 0)[-1].doc_id == "last"
        assert s.verify() == []


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_store(tmp_path, capsys):
    path = tmp_path / "s"
    assert main(["init", str(path), "--k", "3"]) == 0
    f = tmp_path / "in.tsv"
    f.write_text("a\t1\nb\t0x2\n")
    assert main(["add", str(path), str(f)]) == 0
    capsys.readouterr()
    return path


CLI_CASES = [
    ("query fp negative", ["query", "{s}", "-1"], 1, "outside 0..2**64-1"),
    ("query fp 2**64", ["query", "{s}", str(2**64)], 1, "outside 0..2**64-1"),
    ("query fp float", ["query", "{s}", "1.5"], 1, "not a decimal or 0x-hex integer"),
    ("query fp NaN", ["query", "{s}", "nan"], 1, "not a decimal or 0x-hex integer"),
    ("query k 65", ["query", "{s}", "1", "--k", "65"], 2, "k must be an integer in 0..64"),
    ("query k negative", ["query", "{s}", "1", "--k", "-1"], 2, "k must be an integer in 0..64"),
    ("query k float", ["query", "{s}", "1", "--k", "2.5"], 2, "k must be an integer in 0..64"),
    ("init k 17", ["init", "{t}/new", "--k", "17"], 1, "--k must be an int in 0..16"),
    ("add fp negative", ["add", "{s}", "{t}/neg.tsv"], 1, "outside 0..2**64-1"),
    ("add fp float (JSON)", ["add", "{s}", "{t}/float.jsonl"], 1, '"fp" must be an integer'),
    ("add empty id (JSON)", ["add", "{s}", "{t}/empty.jsonl"], 1, "non-empty str or an int"),
    ("add id float (JSON)", ["add", "{s}", "{t}/fid.jsonl"], 1, "must be a str or an int"),
    ("store path is a file", ["stats", "{t}/in.tsv"], 1, "is a file"),
    ("no store there", ["stats", "{t}/missing"], 1, "no store at"),
]


@pytest.mark.parametrize("label,argv,code,msg", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_cli_input_exits_with_one_line_and_changes_nothing(
    cli_store, tmp_path, capsys, label, argv, code, msg
) -> None:
    """Bad CLI input: exit 1 (bad data) or 2 (usage), a message saying what is allowed, no change."""
    (tmp_path / "neg.tsv").write_text("c\t-5\n")
    (tmp_path / "float.jsonl").write_text('{"id": "c", "fp": 1.5}\n')
    (tmp_path / "empty.jsonl").write_text('{"id": "", "fp": 1}\n')
    (tmp_path / "fid.jsonl").write_text('{"id": 1.5, "fp": 1}\n')
    before = digest(cli_store)
    args = [a.format(s=cli_store, t=tmp_path) for a in argv]
    try:
        got = main(args)
    except SystemExit as exc:  # argparse usage errors
        got = exc.code
    err = capsys.readouterr().err
    assert got == code, err
    assert msg in err and "Traceback" not in err
    assert digest(cli_store) == before


def test_cli_on_a_garbage_store_exits_normally(tmp_path) -> None:
    """simstore-cli stats on a garbage or truncated data.mdb exits 1 with a message, no signal."""
    for name, damage in [("garbage", lambda b: os.urandom(len(b))), ("half", lambda b: b[: len(b) // 2])]:
        path = tmp_path / name
        with SimStore(path) as s:
            s.add_many(range(3000), range(3000))
        data = path / "data.mdb"
        data.write_bytes(damage(data.read_bytes()))
        r = subprocess.run([sys.executable, "-m", "simstore", "stats", str(path)],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "damaged" in r.stderr and "Traceback" not in r.stderr
