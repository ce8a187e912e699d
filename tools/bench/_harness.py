"""Measuring and reporting: order statistics, timers, RSS, the Report and result files."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = REPO / ".bench" / "tmp"
MB = 1e6  # throughput is reported in MB = 10**6 bytes of UTF-8 text


def child_env() -> dict[str, str]:
    """The environment of a benchmarked child process: this checkout first on the path,
    and bytecode written and read (a pip-installed package is compiled at install; a
    PYTHONDONTWRITEBYTECODE checkout would compile simstore at every process start,
    ~0.15 s a crawl process that its peers, read from compiled site-packages, never pay)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# --------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Stats:
    """Order statistics of a sample (never the mean)."""

    n: int
    median: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float] | np.ndarray) -> Stats:
        """Median / P90 / P99 / Max of the samples."""
        a = np.asarray(samples, dtype=np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(len(a), float(p50), float(p90), float(p99), float(a.max()))

    def scaled(self, factor: float) -> Stats:
        """The same statistics in another unit."""
        return Stats(
            self.n, self.median * factor, self.p90 * factor, self.p99 * factor,
            self.max * factor,
        )


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss() -> int:
    """Peak resident set size of this process in bytes (since the last reset, if any)."""
    kb = _proc_status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb * 1024


def current_rss() -> int:
    """Resident set size of this process now, in bytes."""
    kb = _proc_status_kb("VmRSS")
    return (kb or 0) * 1024


def timed_reps(
    fn: Callable[[], Any], reps: int, warmup: Callable[[], Any] | None = None
) -> tuple[list[float], list[float], Any]:
    """Run warmup (or fn) once untimed, then fn reps times: wall s, CPU s, last result."""
    (warmup or fn)()
    walls, cpus, out = [], [], None
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus, out


def per_call_ns(fn: Callable[[Any], Any], args: Sequence[Any]) -> np.ndarray:
    """Wall time of fn(a) for each a, in ns (perf_counter_ns around each call)."""
    out = np.empty(len(args), dtype=np.int64)
    clock = time.perf_counter_ns
    for i, a in enumerate(args):
        t0 = clock()
        fn(a)
        out[i] = clock() - t0
    return out


def du_bytes(path: Path) -> tuple[int, int]:
    """Allocated bytes (as ``du``) and apparent bytes of every file below path."""
    alloc = apparent = 0
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            alloc += st.st_blocks * 512
            apparent += st.st_size
    return alloc, apparent


@contextlib.contextmanager
def scratch_dir(workdir: Path, name: str) -> Iterator[Path]:
    """A fresh directory under workdir, removed afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=name + "-", dir=workdir))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- results


class Report:
    """Rows, notes and target verdicts of one sub-command, printed as they come."""

    def __init__(self, command: str, params: dict[str, Any]) -> None:
        self.command = command
        self.params = params
        self.rows: list[dict[str, Any]] = []
        self.targets: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.meta: dict[str, Any] = {}
        self.load_before = load_average()
        self.started = time.time()
        print(f"== {command} ==  {json.dumps(params)}", flush=True)

    def row(self, impl: str, case: str, stats: Stats | None, unit: str, **extra: Any) -> None:
        """Record and print one measured line."""
        r: dict[str, Any] = {"impl": impl, "case": case, "unit": unit, "meta": dict(self.meta)}
        if stats is not None:
            r["stats"] = asdict(stats)
        r.update(extra)
        self.rows.append(r)
        if stats is None:
            head = f"{'':>10} {'':>10} {'':>10} {'':>10}"
        else:
            head = " ".join(fmt(v) for v in (stats.median, stats.p90, stats.p99, stats.max))
        more = "  ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in extra.items())
        print(f"  {impl:<40} {case:<22} {head} {unit:<6} {more}", flush=True)

    def set_meta(self, **meta: Any) -> None:
        """Structured fields (e.g. n, k) attached to the following rows, for tables and plots."""
        self.meta = meta

    def header(self) -> None:
        """Print the column names."""
        cols = " ".join(f"{c:>10}" for c in ("median", "p90", "p99", "max"))
        print(f"  {'impl':<40} {'case':<22} {cols} unit", flush=True)

    def note(self, text: str) -> None:
        """Record and print a remark (skipped peer, capped size, mismatch...)."""
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def target(self, what: str, value: float | None, limit: float, op: str, unit: str) -> None:
        """Record whether a target (value op limit) is met; None means not measured."""
        if value is None:
            verdict = "not measured"
        else:
            ok = value >= limit if op == ">=" else value <= limit
            verdict = "met" if ok else "MISSED"
        self.targets.append(
            {"target": f"{what} {op} {limit:g} {unit}", "value": value, "verdict": verdict}
        )
        shown = "-" if value is None else f"{fmt(value)} {unit}"
        print(f"  target: {what} {op} {limit:g} {unit}: {shown} -> {verdict}", flush=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "command": self.command,
            "params": self.params,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "seconds": round(time.time() - self.started, 1),
            "loadavg_before": self.load_before,
            "loadavg_after": load_average(),
            "peak_rss_process_bytes": peak_rss(),
            "rows": self.rows,
            "targets": self.targets,
            "notes": self.notes,
        }


def fmt(v: float) -> str:
    """A number in a 10-character column."""
    if v == 0 or 0.01 <= abs(v) < 1e6:
        return f"{v:10.3f}" if abs(v) < 100 else f"{v:10.1f}"
    return f"{v:10.3g}"


# --------------------------------------------------------------------------- machine


def load_average() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages of the machine."""
    return os.getloadavg()


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, software versions and the git commit measured."""
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = _meminfo_kb("MemTotal")
    versions: dict[str, str | None] = {}
    for dist in ("simstore", "numpy", "lmdb", "simhash", "simhash-pybind", "matplotlib"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_total_bytes": None if mem_kb is None else mem_kb * 1024,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty_package": bool(git("status", "--porcelain", "--", "simstore", "csrc")),
    }


def _meminfo_kb(field: str) -> int | None:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def git(*args: str, cwd: Path = REPO) -> str | None:
    """Output of a read-only git command in cwd (stripped), or None if it fails."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    """Write a result file (if a path is given)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    print(f"wrote {path}", flush=True)
