"""Outputs that cannot be redirected, and temporaries that do not outlive their writer.

Real processes: a link planted where a run's temporary goes, a writer killed with
SIGKILL while its temporary exists (dedup-corpus, compact), then the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from simstore import SimStore
from simstore._files import TempFile, sweep

ROOT = Path(__file__).resolve().parents[1]  # the checkout (tests/..)


def _py(code: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "simstore-tmp-" in p.name)


def test_a_link_planted_at_the_temporary_name_is_never_followed(tmp_path):
    """Links to a victim file planted at the process's predictable name (NAME.tmp-PID) and
    at its first random name: dedup-corpus and -o FILE leave the victim and links alone."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"doc number {i} " * 20}) + "\n"
                           for i in range(20)))
    for out, argv in (("kept.jsonl", ["dedup-corpus", str(src), "-o", "kept.jsonl",
                                      "--removed", "rm.jsonl"]),
                      ("f.txt", ["fingerprint", str(src), "-o", "f.txt"])):
        names = [f".{out}.simstore-tmp-{'a' * 16}", f".rm.jsonl.simstore-tmp-{'a' * 16}"]
        for name in names:
            (tmp_path / name).unlink(missing_ok=True)
            (tmp_path / name).symlink_to(victim)
        proc = _py(f"""
            import itertools, os, secrets, sys
            for name in ({out!r}, "rm.jsonl"):  # the names used before random ones
                os.symlink({str(victim)!r}, f".{{name}}.tmp-{{os.getpid()}}")
            real = secrets.token_hex
            first = itertools.chain(["a" * 16, "a" * 16], iter(lambda: None, 0))
            secrets.token_hex = lambda n: next(first) or real(n)
            from simstore.cli import main
            sys.exit(main({argv!r}))
        """, cwd=tmp_path)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert victim.read_bytes() == b"precious\n"
        assert all((tmp_path / n).is_symlink() for n in names)  # not ours: left alone
        assert (tmp_path / out).stat().st_size > 0 and not (tmp_path / out).is_symlink()


def test_temporary_names_are_random_and_exclusive(tmp_path):
    """Two temporaries of one destination in one process get different unguessable names."""
    a, b = TempFile(str(tmp_path / "o")), TempFile(str(tmp_path / "o"))
    try:
        assert a.tmp != b.tmp and str(os.getpid()) not in os.path.basename(a.tmp)
        assert len(os.path.basename(a.tmp).rsplit("-", 1)[1]) == 16
    finally:
        a.discard()
        b.discard()
    assert _leftovers(tmp_path) == []


def test_sweep_removes_a_dead_writers_temporary_and_keeps_a_live_ones(tmp_path):
    """A temporary whose writer is SIGKILLed is swept; one whose writer lives stays."""
    dest = tmp_path / "out.jsonl"
    procs = [_py(f"""
        import time
        from simstore._files import TempFile
        t = TempFile({str(dest)!r})
        t.file.write(b"x" * 1000); t.file.flush()
        print(t.tmp, flush=True)
        time.sleep(60)
    """) for _ in range(2)]
    tmps = [p.stdout.readline().strip() for p in procs]
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    try:
        assert sweep(str(dest)) == 1
        assert not os.path.exists(tmps[0]) and os.path.exists(tmps[1])
    finally:
        procs[1].kill()
        procs[1].wait()
    assert sweep(str(dest)) == 1 and _leftovers(tmp_path) == []


def test_a_killed_compact_leaves_a_copy_the_next_compact_removes(tmp_path):
    """SIGKILL after compact's full-size copy is written: the next compact to that
    destination removes the copy and writes a complete store."""
    path = tmp_path / "s"
    with SimStore(path, durable=False) as s:
        s.add_many(range(20_000), list(range(0, 20_000 * 7919, 7919)))
    dest = tmp_path / "copy"
    proc = _py(f"""
        import time
        from simstore import SimStore
        from simstore.store import env as E
        real_live = E.Env.live
        class Slow:
            def __init__(self, lenv): self.lenv = lenv
            def __getattr__(self, name): return getattr(self.lenv, name)
            def copy(self, *a, **kw):
                self.lenv.copy(*a, **kw)
                print("copied", flush=True)
                time.sleep(60)
        E.Env.live = lambda self: Slow(real_live(self))
        SimStore({str(path)!r}).compact({str(dest)!r})
    """)
    assert proc.stdout.readline().strip() == "copied"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = _leftovers(tmp_path)
    assert len(left) == 1 and (tmp_path / left[0] / "data.mdb").stat().st_size > 100_000
    assert not dest.exists()
    with SimStore(path) as s:
        s.compact(dest)
    assert _leftovers(tmp_path) == []
    with SimStore(dest, readonly=True) as c:
        assert len(c) == 20_000 and c.verify() == []
