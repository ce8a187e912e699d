"""verify() in a child process: a damaged data.mdb may kill the child, never the caller.

LMDB trusts its pages: walking a damaged one can abort the process
(``assert``), crash it (SIGSEGV/SIGBUS) or loop. So :func:`isolated`, run in
the caller's process, starts a fresh interpreter (never a fork of a process
holding LMDB handles) that

1. opens the store read-only (LMDB is multi-process: the caller keeps its
   own handle open) and checks what opening reads
   (:func:`simstore.store.check.pages.check_open`);
2. pins a snapshot with a read transaction and runs the structural check
   of every page in use (:class:`simstore.store.check.pages.FileCheck`), which
   reads the file as bytes, without LMDB;
3. only if that finds nothing, lets LMDB walk the records and cross-check
   them (:func:`records`: docs, ids, permutation and band tables, shingle sets);

and prints one JSON line. The caller turns a child killed by a signal into a
problem sentence (it never dies with it), and one stopped at the time limit
into VerifyTimeoutError: running out of time says nothing of the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import lmdb

from ..exceptions import SimstoreError, StoreError, VerifyTimeoutError
from . import schema as _schema, shingles as _shingles
from .check.pages import check_open, check_pinned
from .env import MAX_DBS, translate
from .schema import Handles

_ATTEMPTS = 5  # snapshots tried when writers in other processes keep committing
TIMEOUT_BASE = 120.0  # seconds, plus one per TIMEOUT_RATE bytes of data.mdb
TIMEOUT_RATE = 4 << 20  # about 10x slower than a full check runs on a laptop
# The limit counts the checking process's CPU time where the system tells it (Linux), so a
# busy machine does not make a healthy check run out; wall time may reach WALL_FACTOR x.
WALL_FACTOR = 10.0
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from simstore.store.verify import child_main; sys.exit(child_main(sys.argv[2]))"
)
_SIGNALED = (
    "the store's file is damaged: LMDB {verb} while walking it ({why}); restore data.mdb "
    "from a copy, or index the documents again into a new store (rebuild reads the damaged "
    "pages too)"
)


@dataclass
class Report:
    """What a check found: problem sentences, and the snapshot (transaction id) checked."""

    problems: list[str] = field(default_factory=list)
    txnid: int | None = None


# Problems of the file itself (its pages, a docs record): only a copy of data.mdb mends them.
# A rebuild reads the docs table's pages, frees the run tables' by reading them (all of
# a table whose runs fill overflow pages) and keeps the shingle sets (they come from the
# texts); it re-derives what the other problems name.
_FILE_DAMAGE = ("data.mdb: ", "the store's file is damaged", "docs record ")


def needs_restore(problems: list[str]) -> bool:
    """Whether verify's problems name damage a rebuild cannot mend (data.mdb's pages, a
    docs record): then data.mdb must be restored from a copy."""
    return any(p.startswith(_FILE_DAMAGE) for p in problems)


# --------------------------------------------------------------------------- the caller


def default_timeout(path: str) -> float:
    """Seconds (of the checker's CPU time) a check of the store at path may take before it
    is stopped: TIMEOUT_BASE plus one per TIMEOUT_RATE bytes of data.mdb."""
    try:
        size = os.path.getsize(os.path.join(path, "data.mdb"))
    except OSError:
        size = 0
    return TIMEOUT_BASE + size / TIMEOUT_RATE


def isolated(path: str, *, timeout: float | None = None) -> Report:
    """Check the store at path in a child process; never dies of what the child meets.

    Raises StoreError only when no check could run (the child could not
    start, or failed for a reason other than the store: readers full, ...), and
    VerifyTimeoutError when the check ran past ``timeout`` (default:
    :func:`default_timeout`) seconds of CPU.
    """
    limit = default_timeout(path) if timeout is None else float(timeout)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, _ROOT, path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise StoreError(
            f"store {path!r}: verify could not start its checking process "
            f"({sys.executable!r}): {exc}"
        ) from exc
    try:
        out, err = _communicate(proc, limit)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise VerifyTimeoutError(
            f"verify of {path!r} did not finish within its limit of {limit:g} s "
            f"({exc.output}) and was stopped, having found nothing wrong so far; give it "
            "longer (store.verify(timeout=SECONDS), simstore-cli verify --timeout SECONDS). "
            "If a much longer run still times out, a damaged page may be making LMDB loop"
        ) from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return _read_report(path, proc.returncode, out, err)


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) of a child so far, or None where /proc does not tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def _communicate(proc: subprocess.Popen[bytes], limit: float) -> tuple[bytes, bytes]:
    """proc's output; TimeoutExpired (its output: what ran out) once it has used ``limit``
    s of CPU, or ``limit`` s of wall time where CPU time is unknown (WALL_FACTOR x else)."""
    start = time.monotonic()
    while True:
        try:
            return proc.communicate(timeout=min(0.5, max(limit, 0.05)))
        except subprocess.TimeoutExpired:
            pass
        wall = time.monotonic() - start
        cpu = _cpu_seconds(proc.pid)
        if cpu is None and wall > limit:
            raise subprocess.TimeoutExpired(proc.args, limit, output=f"{wall:.0f} s")
        if cpu is not None and (cpu > limit or wall > limit * WALL_FACTOR):
            raise subprocess.TimeoutExpired(
                proc.args, limit, output=f"{cpu:.0f} s of CPU in {wall:.0f} s")


def _read_report(path: str, code: int, out: bytes, err: bytes) -> Report:
    text = err.decode("utf-8", "replace")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        said = [ln.strip() for ln in text.splitlines() if "ssertion" in ln or "mdb.c" in ln]
        why = name + (f": {said[-1][:200]}" if said else "")
        verb = "aborted" if -code == signal.SIGABRT else "crashed"
        return Report([_SIGNALED.format(verb=verb, why=why)])
    try:
        got = json.loads(out.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = text.strip().splitlines()[-1:] or ["no output"]
        raise StoreError(
            f"store {path!r}: verify's checking process failed (exit {code}): {tail[0][:300]}"
        ) from None
    if "error" in got:
        if got["error"] == "CorruptStoreError" or got.get("unexpected"):
            return Report([got["message"]], got.get("txnid"))
        raise StoreError(got["message"])
    return Report(list(got["problems"]), got["txnid"])


# --------------------------------------------------------------------------- the child


def child_main(path: str) -> int:
    """The checking process: one JSON line on stdout (problems, or an error)."""
    try:
        report = _check(path)
        line: dict[str, Any] = {"problems": report.problems, "txnid": report.txnid}
    except SimstoreError as exc:
        line = {"error": type(exc).__name__, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported to the caller as a problem
        line = {
            "error": type(exc).__name__, "unexpected": True,
            "message": f"verify's check stopped on an unexpected {type(exc).__name__}: {exc}",
        }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return 0


def check_here(path: str) -> Report:
    """The child's whole check, run in this process: for a caller that is itself a
    throwaway process (a damaged file may kill it, as it may kill the child)."""
    return _check(path)


def _check(path: str) -> Report:
    try:
        env = lmdb.open(
            path, readonly=True, lock=True, subdir=True, create=False, max_dbs=MAX_DBS
        )
    except lmdb.Error as exc:
        raise translate(exc, path) from exc
    try:
        for _ in range(_ATTEMPTS):
            try:
                report = _check_env(env, path)
            except lmdb.MapResizedError:
                env.set_mapsize(0)  # a writer grew the map: adopt it and start again
                continue
            if report is not None:
                return report
        raise StoreError(f"store {path!r}: writers kept committing; verify could not pin one")
    except lmdb.Error as exc:
        raise translate(exc, path) from exc
    finally:
        env.close()


def _check_env(env: Any, path: str) -> Report | None:
    """The check of one snapshot; None if writers replaced it before it was pinned."""
    problems = check_open(env, path)
    if problems:
        return Report(problems)
    h = _schema.load(env, path, None, None)
    pinned = check_pinned(env, path)
    if pinned is None:
        return None
    txn, found = pinned
    try:  # only a snapshot sound in structure is walked by LMDB
        return Report(found or records(txn, h), txn.id())
    finally:
        txn.abort()


def records(txn: Any, h: Handles) -> list[str]:
    """Every broken invariant of the records, as sentences; [] when all hold.

    Walks the docs table and checks each doc against its ids index, every
    permutation table and every band table, and in an exact store its shingle
    set. LMDB reads the pages: run it only on a snapshot whose structure was
    checked (or that this process wrote itself).
    """
    problems: list[str] = []
    cols = h.codec.walk(txn.cursor(h.docs).iternext(), with_sketches=True, problems=problems)
    assert cols.encs is not None
    problems.extend(h.idx.check(txn, cols.keys, cols.encs))
    problems.extend(h.tables.check(txn, cols.iids, cols.fps))
    if h.bands is not None:
        problems.extend(h.bands.check(txn, cols.iids, cols.bands))
    if h.shingles is not None:
        problems.extend(_shingles.check(txn, h, cols.iids))
    return problems
