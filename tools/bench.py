"""simstore benchmarks against peer libraries, measured in one process run.

Run ``python tools/bench.py --help``; every sub-command has its own ``--help``.
Each sub-command builds seeded data, warms up, times at least three repetitions
and prints Median / P90 / P99 / Max (never the mean) with the peak RSS, then
writes a JSON result file (``--out``). Peer libraries run in the same process
when they import; a peer that does not import is skipped with a warning and no
number is written for it. ``all`` runs everything at default sizes, writes
``docs/bench/all.json`` and regenerates the tables of ``docs/benchmarks.md``
and the plot ``docs/bench/scaling.png``.

Peers (the ``[bench]`` extra; never runtime dependencies of simstore):

* ``simhash`` (PyPI, leonsim): ``Simhash`` fingerprints, ``SimhashIndex``.
* ``simhash-pybind``: a C++ ``find_all``. It installs its own ``simhash``
  package over the PyPI one, so the two cannot share a site-packages; install
  it aside with ``pip install --target .bench/peers/simhash-pybind
  simhash-pybind`` and this tool loads it from there (``--pybind-dir``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import simstore

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PYBIND_DIR = REPO / ".bench" / "peers" / "simhash-pybind"
DEFAULT_WORKDIR = REPO / ".bench" / "tmp"
DOCS_MD = REPO / "docs" / "benchmarks.md"
DOCS_BENCH = REPO / "docs" / "bench"
TEXT_SOURCES = ("/usr/share/common-licenses/*", "/usr/share/doc/*/copyright")
GEN_BEGIN = "<!-- bench.py all: generated tables begin -->"
GEN_END = "<!-- bench.py all: generated tables end -->"
MB = 1e6  # throughput is reported in MB = 10**6 bytes of UTF-8 text
U64 = np.uint64


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
        self.load_before = os.getloadavg()
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
            head = " ".join(_fmt(v) for v in (stats.median, stats.p90, stats.p99, stats.max))
        more = "  ".join(f"{k}={_fmt(v) if isinstance(v, float) else v}" for k, v in extra.items())
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
        shown = "-" if value is None else f"{_fmt(value)} {unit}"
        print(f"  target: {what} {op} {limit:g} {unit}: {shown} -> {verdict}", flush=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "command": self.command,
            "params": self.params,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "seconds": round(time.time() - self.started, 1),
            "loadavg_before": self.load_before,
            "loadavg_after": os.getloadavg(),
            "peak_rss_process_bytes": peak_rss(),
            "rows": self.rows,
            "targets": self.targets,
            "notes": self.notes,
        }


def _fmt(v: float) -> str:
    if v == 0 or 0.01 <= abs(v) < 1e6:
        return f"{v:10.3f}" if abs(v) < 100 else f"{v:10.1f}"
    return f"{v:10.3g}"


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
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_package": bool(_git("status", "--porcelain", "--", "simstore", "csrc")),
    }


def _meminfo_kb(field: str) -> int | None:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
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


# --------------------------------------------------------------------------- peers


def load_simhash() -> ModuleType | None:
    """The PyPI ``simhash`` package (Simhash, SimhashIndex), or None with a warning."""
    try:
        mod = importlib.import_module("simhash")
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip this peer"
        warnings.warn(f"peer 'simhash' skipped: it does not import ({exc})", stacklevel=2)
        return None
    if not hasattr(mod, "Simhash") or not hasattr(mod, "SimhashIndex"):
        warnings.warn(
            "peer 'simhash' skipped: the module named simhash is not the PyPI simhash "
            "package (simhash-pybind installs over it; reinstall simhash and put "
            "simhash-pybind in --pybind-dir)",
            stacklevel=2,
        )
        return None
    return mod


def load_simhash_pybind(pybind_dir: Path) -> ModuleType | None:
    """simhash-pybind's module (``find_all``), loaded from pybind_dir, or None with a warning."""
    with contextlib.suppress(Exception):
        mod = importlib.import_module("simhash")
        if hasattr(mod, "c_find_all"):
            return mod
    init = pybind_dir / "simhash" / "__init__.py"
    if not init.is_file():
        warnings.warn(
            f"peer 'simhash-pybind' skipped: not found in {pybind_dir} (install it with "
            f"'pip install --target {pybind_dir} simhash-pybind')",
            stacklevel=2,
        )
        return None
    name = "_bench_simhash_pybind"
    if name in sys.modules:
        return sys.modules[name]
    try:
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip this peer"
        sys.modules.pop(name, None)
        warnings.warn(f"peer 'simhash-pybind' skipped: it does not import ({exc})", stacklevel=2)
        return None
    return mod


# --------------------------------------------------------------------------- data


def english_documents(n_docs: int, doc_bytes: int, seed: int) -> list[str]:
    """Seeded ~doc_bytes English documents cut at word boundaries from this machine's texts.

    The license texts and Debian copyright files are read (each once, symlinks
    resolved), shuffled with the seed and concatenated; documents are cut from
    that stream at whitespace, each at most doc_bytes of UTF-8.
    """
    paths = sorted({str(Path(p).resolve()) for pat in TEXT_SOURCES for p in glob.glob(pat)})
    rng = random.Random(seed)
    rng.shuffle(paths)
    words: list[str] = []
    for p in paths:
        with contextlib.suppress(OSError):
            words.extend(re.findall(r"\S+\s*", Path(p).read_text("utf-8", errors="replace")))
    if not words:
        raise SystemExit(f"no English text found under {', '.join(TEXT_SOURCES)}")
    docs: list[str] = []
    i = rng.randrange(len(words))
    while len(docs) < n_docs:
        parts: list[str] = []
        size = 0
        while True:
            w = words[i % len(words)]
            b = len(w.encode("utf-8"))
            if size + b > doc_bytes and parts:
                break
            parts.append(w)
            size += b
            i += 1
        docs.append("".join(parts))
    return docs


def random_fps(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct uniformly random 64-bit fingerprints."""
    out = np.unique(rng.integers(0, 2**64 - 1, size=n, dtype=U64, endpoint=True))
    while len(out) < n:
        extra = rng.integers(0, 2**64 - 1, size=n - len(out), dtype=U64, endpoint=True)
        out = np.unique(np.concatenate([out, extra]))
    return rng.permutation(out[:n])


def clustered_fps(rng: np.random.Generator, n: int, shared_bits: int) -> np.ndarray:
    """n distinct fingerprints sharing their top shared_bits bits (random low bits)."""
    free = 64 - shared_bits
    top = U64(int(rng.integers(0, 2**shared_bits)) << free)
    low = rng.choice(2**free, size=n, replace=False).astype(U64)
    return top | low


def flip_bits(rng: np.random.Generator, fps: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Each fingerprint with a random number in lo..hi of distinct random bits flipped."""
    out = fps.copy()
    dist = rng.integers(lo, hi + 1, size=len(fps))
    for i, d in enumerate(dist):
        bits = rng.choice(64, size=int(d), replace=False)
        mask = 0
        for b in bits:
            mask |= 1 << int(b)
        out[i] ^= U64(mask)
    return out


def popcount(x: np.ndarray) -> np.ndarray:
    """Bits set in each uint64 (numpy >= 2.0 has bitwise_count; else a byte table)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
    return table[x.view(np.uint8).reshape(-1, 8)].sum(axis=1, dtype=np.uint8)


# --------------------------------------------------------------------------- fingerprint


def cmd_fingerprint(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.fingerprints on 5 KB English docs, MB/s on one thread, vs peers."""
    rep = Report(
        "fingerprint",
        {k: getattr(args, k) for k in ("docs", "doc_bytes", "peer_docs", "reference_docs",
                                       "reps", "seed")},
    )
    docs = english_documents(args.docs, args.doc_bytes, args.seed)
    sizes = [len(d.encode("utf-8")) for d in docs]
    nonascii = sum(not d.isascii() for d in docs)
    rep.note(
        f"{len(docs)} docs, {sum(sizes) / MB:.2f} MB, median {int(np.median(sizes))} bytes/doc, "
        f"{nonascii} with non-ASCII characters; MB = 10^6 bytes of UTF-8; one thread"
    )
    rep.header()

    def throughput(impl: str, subset: list[str], walls: list[float], cpus: list[float],
                   per_doc: np.ndarray | None = None, **extra: Any) -> tuple[float, float]:
        mbytes = sum(len(d.encode("utf-8")) for d in subset) / MB
        mb_s = mbytes / float(np.median(walls))
        cpu_mb_s = mbytes / float(np.median(cpus))
        stats = Stats.of(walls)
        rep.row(impl, f"{len(subset)} docs/rep", stats, "s/rep", mb_s=mb_s, mb_per_cpu_s=cpu_mb_s,
                reps=len(walls), **extra)
        if per_doc is not None:
            rep.row(impl, "per call", Stats.of(per_doc / 1e3), "us", calls=len(per_doc))
        return mb_s, cpu_mb_s

    walls, cpus, fps = timed_reps(
        lambda: simstore.fingerprints(docs), args.reps,
        warmup=lambda: simstore.fingerprints(docs[:100]),
    )
    batched, batched_cpu = throughput("simstore.fingerprints", docs, walls, cpus)
    rep.target("simstore.fingerprints per CPU-second", batched_cpu, 50, ">=", "MB/s")
    rep.target("simstore.fingerprints wall clock", batched, 50, ">=", "MB/s")
    for label, keep in (("ASCII docs", True), ("non-ASCII docs", False)):
        part = [d for d in docs if d.isascii() == keep]
        if part:
            walls, cpus, _ = timed_reps(partial(simstore.fingerprints, part), args.reps)
            throughput(f"simstore.fingerprints ({label})", part, walls, cpus)

    def single_calls(fn: Callable[[str], Any], subset: list[str]) -> tuple[list, list, np.ndarray]:
        fn(subset[0])
        samples, walls, cpus = [], [], []
        for _ in range(args.reps):
            c0 = time.process_time()
            ns = per_call_ns(fn, subset)
            cpus.append(time.process_time() - c0)
            walls.append(float(ns.sum()) / 1e9)
            samples.append(ns)
        return walls, cpus, np.concatenate(samples)

    w, c, ns = single_calls(simstore.fingerprint, docs)
    single, _ = throughput("simstore.fingerprint (1 text/call)", docs, w, c, ns)

    ratios: dict[str, float] = {}
    sh = load_simhash()
    if sh is None:
        rep.note("peer 'simhash' not importable: skipped")
    else:
        peer_docs, failed = [], 0
        for d in docs[: args.peer_docs]:
            try:
                sh.Simhash(d)
                peer_docs.append(d)
            except OverflowError:
                failed += 1
        if failed:
            rep.note(
                f"simhash.Simhash(text) raised OverflowError on {failed} of {args.peer_docs} docs "
                "(a 4-char feature counted > 255 times overflows its uint8 under numpy 2); "
                "both simhash rows time only the docs it accepts"
            )
        w, c, ns = single_calls(sh.Simhash, peer_docs)
        ratios["simhash.Simhash(text)"] = batched / throughput(
            "simhash.Simhash(text)", peer_docs, w, c, ns
        )[0]

        def shingled(text: str) -> Any:
            toks = re.findall(r"\w+", text.lower())
            return sh.Simhash([" ".join(toks[i : i + 3]) for i in range(len(toks) - 2)])

        w, c, ns = single_calls(shingled, peer_docs)
        ratios["simhash.Simhash(3-word shingles)"] = batched / throughput(
            "simhash.Simhash(3-word shingles)", peer_docs, w, c, ns
        )[0]

    try:
        from datasketch import MinHash
    except ImportError:
        rep.note("peer 'datasketch' not importable: skipped")
    else:
        # A different method (MinHash sketches for Jaccard, usually with LSH), but the
        # one users weigh against simhash: sketch the same 3-word shingles.
        def minhash(text: str) -> Any:
            toks = re.findall(r"\w+", text.lower())
            m = MinHash(num_perm=128)
            m.update_batch([" ".join(toks[i : i + 3]).encode() for i in range(len(toks) - 2)])
            return m

        mh_docs = docs[: args.peer_docs]
        w, c, ns = single_calls(minhash, mh_docs)
        ratios["datasketch.MinHash(128 perms, 3-word shingles)"] = batched / throughput(
            "datasketch.MinHash(128 perms, 3-word shingles)", mh_docs, w, c, ns
        )[0]

    from simstore._reference import reference_fingerprint

    ref_docs = docs[: args.reference_docs]
    w, c, ns = single_calls(reference_fingerprint, ref_docs)
    agree = sum(reference_fingerprint(d) == int(fps[i]) for i, d in enumerate(ref_docs))
    ratios["simstore._reference (pure Python)"] = batched / throughput(
        "simstore._reference (pure Python)", ref_docs, w, c, ns,
        equal_to_simstore=f"{agree}/{len(ref_docs)}",
    )[0]
    for name, r in ratios.items():
        rep.note(f"simstore.fingerprints is {r:.1f}x {name} (MB/s, same run)")
    out = rep.to_dict()
    out["headline"] = {"simstore_mb_s": batched, "simstore_mb_per_cpu_s": batched_cpu,
                       "single_call_mb_s": single,
                       "speedup_vs": ratios}
    return out


# --------------------------------------------------------------------------- query


def open_store(path: Path, k: int, expected_size: int) -> Any:
    """A new durable SimStore at path, planned for k and expected_size."""
    from simstore.store import SimStore

    return SimStore(path, k=k, expected_size=expected_size, durable=True)


def build_store(path: Path, k: int, fps: np.ndarray) -> tuple[Any, float]:
    """A store holding fps under ids 0..n-1, and the seconds add_many took."""
    store = open_store(path, k, len(fps))
    t0 = time.perf_counter()
    store.add_many(range(len(fps)), fps)
    return store, time.perf_counter() - t0


def scan_numpy(fps: np.ndarray, k: int) -> Callable[[int], np.ndarray]:
    """Brute-force query over the whole array in numpy: indices within k."""
    def run(q: int) -> np.ndarray:
        return np.flatnonzero(popcount(fps ^ U64(q)) <= k)
    return run


def scan_c(fps: np.ndarray, k: int) -> Callable[[int], Any]:
    """Brute-force query over the whole array in simstore's C (one call)."""
    from simstore._core import hamming_within

    def run(q: int) -> Any:
        return hamming_within(q, fps, k)
    return run


def latency_row(rep: Report, impl: str, case: str, fn: Callable[[Any], Any],
                queries: Sequence[Any], reps: int, **extra: Any) -> Stats:
    """Warm up on a few queries, then time each query reps times; a row in µs."""
    per_call_ns(fn, queries[: max(1, len(queries) // 10)])
    ns = np.concatenate([per_call_ns(fn, queries) for _ in range(reps)])
    stats = Stats.of(ns / 1e3)
    rep.row(impl, case, stats, "us", queries=len(queries), reps=reps, **extra)
    return stats


def cmd_query(args: argparse.Namespace) -> dict[str, Any]:
    """Query latency of a store of N random fps plus planted neighbours, vs peers and scans."""
    sizes = args.sizes + ([10_000_000] if args.large else [])
    rep = Report("query", {"sizes": sizes, "ks": args.ks, "queries": args.queries,
                           "scan_queries": args.scan_queries,
                           "simhash_index_max": args.simhash_index_max,
                           "reps": args.reps, "seed": args.seed})
    rep.note("every query has one planted neighbour at distance 1..k; recall = share found")
    rep.header()
    sh = load_simhash()
    if sh is None:
        rep.note("peer 'simhash' not importable: SimhashIndex skipped")
    for n in sizes:
        rng = np.random.default_rng([args.seed, n])
        base = random_fps(rng, n)
        queries = random_fps(rng, args.queries)
        qlist = [int(q) for q in queries]
        for k in args.ks:
            rep.set_meta(n=n, k=k)
            planted = flip_bits(rng, queries, 1, k)
            fps = np.concatenate([base, planted])
            case = f"N={n:,} k={k}"
            with scratch_dir(args.workdir, f"query-{n}-{k}") as d:
                store, build_s = build_store(d / "store", k, fps)
                found = sum(n + i in {m.doc_id for m in store.query(q)}
                            for i, q in enumerate(qlist))
                stats = latency_row(
                    rep, "simstore SimStore.query", case, store.query, qlist, args.reps,
                    recall=f"{found}/{len(qlist)}", tables=len(store.layout.tables),
                    build_s=round(build_s, 2),
                )
                store.close()
                alloc, apparent = du_bytes(d / "store")
            rep.row("simstore store size", case, None, "B/fp",
                    du_bytes_per_fp=round(alloc / len(fps), 1),
                    apparent_bytes_per_fp=round(apparent / len(fps), 1))
            if k == 3 and n == 1_000_000:
                rep.target("query p50 at N=1M k=3", stats.median, 25, "<=", "us")
                rep.target("query p99 at N=1M k=3", stats.p99, 100, "<=", "us")
            if k == 3 and n == 10_000_000:
                rep.target("query p50 at N=10M k=3", stats.median, 35, "<=", "us")
            sq = qlist[: args.scan_queries]
            latency_row(rep, "simstore._core.hamming_within (C scan)", case, scan_c(fps, k), sq,
                        args.reps)
            latency_row(rep, "numpy brute-force scan", case, scan_numpy(fps, k), sq, args.reps)
            if k == 3 and sh is not None and args.simhash_index_max > 0:
                simhash_index_row(rep, sh, base, planted, qlist, n, args)
            if k == args.ks[0] and n <= args.lsh_max:
                minhash_lsh_row(rep, rng, n, args)
    if 1_000_000 not in sizes or 3 not in args.ks:
        rep.target("query p50 at N=1M k=3", None, 25, "<=", "us")
        rep.target("query p99 at N=1M k=3", None, 100, "<=", "us")
    if 10_000_000 not in sizes or 3 not in args.ks:
        rep.target("query p50 at N=10M k=3", None, 35, "<=", "us")
    return rep.to_dict()


def simhash_index_row(rep: Report, sh: ModuleType, base: np.ndarray, planted: np.ndarray,
                      qlist: list[int], n: int, args: argparse.Namespace) -> None:
    """simhash.SimhashIndex(k=3) over the first fps (capped) plus the planted ones."""
    m = min(n, args.simhash_index_max)
    fps = np.concatenate([base[:m], planted])
    rep.set_meta(n=n, k=3, index_size=len(fps))
    t0 = time.perf_counter()
    index = sh.SimhashIndex(
        [(str(i), sh.Simhash(int(f))) for i, f in enumerate(fps)], f=64, k=3
    )
    build_s = time.perf_counter() - t0
    objs = [sh.Simhash(q) for q in qlist]
    found = sum(str(m + i) in index.get_near_dups(o) for i, o in enumerate(objs))
    case = f"N={n:,} k=3" + ("" if m == n else f" (index {len(fps):,})")
    latency_row(rep, "simhash.SimhashIndex.get_near_dups", case, index.get_near_dups, objs,
                args.reps, recall=f"{found}/{len(objs)}", index_size=len(fps),
                build_s=round(build_s, 2))
    if m < n:
        rep.note(f"SimhashIndex for N={n:,} holds {len(fps):,} fps (--simhash-index-max {m:,})")


def minhash_lsh_row(rep: Report, rng: np.random.Generator, n: int,
                    args: argparse.Namespace) -> None:
    """datasketch MinHashLSH (threshold 0.9, 128 perms), in memory, over n random sketches.

    A different method (Jaccard sketches, banded LSH, approximate) that users weigh
    against simhash; each query has one planted near copy (3 of 128 slots changed).
    """
    try:
        from datasketch import LeanMinHash, MinHash, MinHashLSH
    except ImportError:
        rep.note("peer 'datasketch' not importable: MinHashLSH skipped")
        return
    scheme = MinHash(num_perm=128).scheme
    sigs = rng.integers(0, 2**32 - 1, (n, 128), dtype=np.uint64)
    queries = rng.integers(0, 2**32 - 1, (args.queries, 128), dtype=np.uint64)
    planted = queries.copy()
    planted[:, :3] = rng.integers(0, 2**32 - 1, (args.queries, 3), dtype=np.uint64)
    rep.set_meta(n=n)
    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=0.9, num_perm=128)
    with lsh.insertion_session() as session:
        for i in range(n):
            session.insert(i, LeanMinHash(seed=1, hashvalues=sigs[i], scheme=scheme))
        for i in range(args.queries):
            session.insert(n + i, LeanMinHash(seed=1, hashvalues=planted[i], scheme=scheme))
    build_s = time.perf_counter() - t0
    objs = [LeanMinHash(seed=1, hashvalues=q, scheme=scheme) for q in queries]
    found = sum(n + i in lsh.query(o) for i, o in enumerate(objs))
    latency_row(rep, "datasketch.MinHashLSH.query (in memory)", f"N={n:,}", lsh.query, objs,
                args.reps, recall=f"{found}/{len(objs)}", build_s=round(build_s, 2))


# --------------------------------------------------------------------------- load


def cmd_load(args: argparse.Namespace) -> dict[str, Any]:
    """Bulk load (add_many into an empty store) and durable batched adds into a full store."""
    sizes = args.sizes + ([10_000_000] if args.large else [])
    rep = Report("load", {"sizes": sizes, "k": args.k, "add_store_size": args.add_store_size,
                          "add_batch": args.add_batch, "add_batches": args.add_batches,
                          "reps": args.reps, "seed": args.seed,
                          "peak_rss_reset": reset_peak_rss()})
    rep.note("load = open a new durable store + add_many(range(N), fps) + close; "
             "peak RSS = whole-process VmHWM during the rep (includes the input arrays)")
    rep.header()
    for n in sizes:
        rng = np.random.default_rng([args.seed, n, 1])
        fps = random_fps(rng, n)
        rep.set_meta(n=n, k=args.k)

        def load(m: int, n: int = n, fps: np.ndarray = fps) -> tuple[float, int, int]:
            with scratch_dir(args.workdir, f"load-{n}") as d:
                reset_peak_rss()
                base_rss = current_rss()
                t0 = time.perf_counter()
                store = open_store(d / "store", args.k, m)
                store.add_many(range(m), fps[:m])
                store.close()
                secs = time.perf_counter() - t0
                return secs, peak_rss() - base_rss, peak_rss()

        load(max(1, n // 10))
        runs = [load(n) for _ in range(args.reps)]
        secs = [r[0] for r in runs]
        peak = max(r[2] for r in runs)
        rep.row("simstore add_many (bulk load)", f"N={n:,} k={args.k}", Stats.of(secs), "s",
                fps_per_s=round(n / float(np.median(secs))), peak_rss_mb=round(peak / 2**20, 1),
                rss_growth_mb=round(max(r[1] for r in runs) / 2**20, 1))
        if n == 10_000_000:
            rep.target("bulk load of 10M", float(np.median(secs)), 60, "<=", "s")
            rep.target("peak RSS of 10M load", peak / 2**30, 2, "<=", "GiB")
    if 10_000_000 not in sizes:
        rep.note("the 10M load targets (<= 60 s, <= 2 GB) need --large; not measured here")
        rep.target("bulk load of 10M", None, 60, "<=", "s")
        rep.target("peak RSS of 10M load", None, 2, "<=", "GiB")
    add_rate(rep, args)
    return rep.to_dict()


def add_rate(rep: Report, args: argparse.Namespace) -> None:
    """Durable adds, add_batch per ``with store.batch()`` commit, into a store of add_store_size."""
    n, b = args.add_store_size, args.add_batch
    total = b * (args.add_batches * args.reps + 1)
    rng = np.random.default_rng([args.seed, n, 2])
    rep.set_meta(n=n, k=args.k)
    fps = random_fps(rng, n + total)
    with scratch_dir(args.workdir, "add") as d:
        store, _ = build_store(d / "store", args.k, fps[:n])
        next_id = n

        def one_batch() -> float:
            nonlocal next_id
            t0 = time.perf_counter()
            with store.batch():
                for i in range(next_id, next_id + b):
                    store.add(i, int(fps[i]))
            next_id += b
            return time.perf_counter() - t0

        one_batch()
        rates, lat = [], []
        for _ in range(args.reps):
            times = [one_batch() for _ in range(args.add_batches)]
            lat.extend(times)
            rates.append(b * len(times) / sum(times))
        store.close()
    rate = float(np.median(rates))
    rep.row(f"simstore add, {b}/commit (durable)", f"into N={n:,} k={args.k}",
            Stats.of(lat).scaled(1e3), "ms/commit", adds_per_s=round(rate),
            commits=len(lat))
    if n >= 1_000_000:
        rep.target(f"durable adds into a {n:,} store (k={args.k})", rate, 20_000, ">=", "adds/s")
    else:
        rep.target("durable adds into a 1M store", None, 20_000, ">=", "adds/s")


# --------------------------------------------------------------------------- find-all


def block_bounds(k: int) -> list[tuple[int, int]]:
    """(shift, width) of k+1 nearly equal blocks tiling 64 bits, top block first."""
    nb = k + 1
    widths = [64 // nb + (1 if i < 64 % nb else 0) for i in range(nb)]
    out, top = [], 64
    for w in widths:
        top -= w
        out.append((top, w))
    return out


def numpy_find_all(fps: np.ndarray, k: int, max_candidates: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, int]:
    """Pairs i < j within k by block permutation in numpy, or None if over max_candidates.

    Pigeonhole: split the bits into k+1 blocks; a pair within k agrees on one.
    Pass p sorts by block p and compares every pair inside each run of equal
    block values (one vectorized step per offset), keeping a pair only if p
    is the first block it agrees on. Returns (i, j, d) and the candidate count.
    """
    blocks = [(fps >> U64(sh)) & U64((1 << w) - 1) for sh, w in block_bounds(k)]
    candidates = 0
    for bv in blocks:
        counts = np.unique(bv, return_counts=True)[1].astype(np.int64)
        candidates += int((counts * (counts - 1) // 2).sum())
    if candidates > max_candidates:
        return None, candidates
    n = len(fps)
    pos = np.arange(n)
    parts_i, parts_j, parts_d = [], [], []
    for p, bv in enumerate(blocks):
        order = np.argsort(bv, kind="stable")
        sv = bv[order]
        starts = np.flatnonzero(np.concatenate([[True], sv[1:] != sv[:-1]]))
        lengths = np.diff(np.append(starts, n))
        run_end = np.repeat(starts + lengths, lengths)
        active = pos[run_end - pos > 1]
        step = 1
        while active.size:
            a, b = order[active], order[active + step]
            dist = popcount(fps[a] ^ fps[b])
            hit = dist <= k
            a, b, dist = a[hit], b[hit], dist[hit]
            first = np.ones(len(a), dtype=bool)
            for q in range(p):
                first &= blocks[q][a] != blocks[q][b]
            parts_i.append(np.minimum(a, b)[first])
            parts_j.append(np.maximum(a, b)[first])
            parts_d.append(dist[first])
            step += 1
            active = active[run_end[active] - active > step]
    if not parts_i:
        empty = np.empty(0, dtype=np.int64)
        return (empty, empty, np.empty(0, dtype=np.uint8)), candidates
    return (np.concatenate(parts_i), np.concatenate(parts_j), np.concatenate(parts_d)), candidates


def brute_find_all(fps: np.ndarray, k: int, chunk: int = 256) -> int:
    """Number of pairs i < j within k, by comparing every pair in numpy (row chunks)."""
    n, found = len(fps), 0
    cols = np.arange(n)
    for s in range(0, n, chunk):
        rows = fps[s : s + chunk]
        d = popcount(rows[:, None] ^ fps[None, :])
        upper = cols[None, :] > np.arange(s, s + len(rows))[:, None]
        found += int(np.count_nonzero((d <= k) & upper))
    return found


def cmd_find_all(args: argparse.Namespace) -> dict[str, Any]:
    """simstore.batch.find_all vs simhash-pybind, a numpy block-permutation and brute force."""
    from simstore.batch import find_all

    sizes = args.sizes + ([10_000_000] if args.large else [])
    rep = Report("find-all", {"sizes": sizes, "k": args.k, "planted": args.planted,
                              "clustered": args.clustered,
                              "shared_bits": args.shared_bits,
                              "pybind_blocks": args.pybind_blocks,
                              "numpy_max_candidates": args.numpy_max_candidates,
                              "brute_max": args.brute_max, "reps": args.reps,
                              "seed": args.seed})
    rep.note("time per whole call; warm-up on the first tenth of the input; "
             "peers get their input pre-converted (untimed)")
    rep.header()
    pyb = load_simhash_pybind(args.pybind_dir)
    if pyb is None:
        rep.note("peer 'simhash-pybind' not importable: skipped")
    cases: list[tuple[str, np.ndarray]] = []
    for n in sizes:
        rng = np.random.default_rng([args.seed, n, 3])
        planted = min(args.planted, n // 2)
        fps = random_fps(rng, n - planted)
        near = flip_bits(rng, fps[:planted], 1, args.k)
        cases.append((f"random N={n:,}", rng.permutation(np.concatenate([fps, near]))))
    if args.planted:
        rep.note(f"each random case holds {args.planted:,} planted near copies (distance "
                 f"1..{args.k} from another fp), so the pair counts can be cross-checked")
    if args.clustered:
        rng = np.random.default_rng([args.seed, args.clustered, 4])
        cases.append((f"top {args.shared_bits} bits shared N={args.clustered:,}",
                      clustered_fps(rng, args.clustered, args.shared_bits)))
    k = args.k
    for case, fps in cases:
        rep.set_meta(n=len(fps), k=k, random=case.startswith("random"))
        warm = fps[: max(2, len(fps) // 10)]
        counts: dict[str, int] = {}
        for workers in (1, 2):
            walls, _, res = timed_reps(partial(find_all, fps, k, workers=workers), args.reps,
                                       warmup=partial(find_all, warm, k, workers=workers))
            name = f"simstore find_all ({workers} thread{'s' if workers > 1 else ''})"
            counts[name] = len(res.i)
            rep.row(name, case, Stats.of(walls), "s", pairs=len(res.i))
        if pyb is not None:
            hashes = {int(f) for f in fps}
            small = {int(f) for f in warm}
            walls, _, res = timed_reps(
                partial(pyb.find_all, hashes, args.pybind_blocks, k), args.reps,
                warmup=partial(pyb.find_all, small, args.pybind_blocks, k),
            )
            name = f"simhash-pybind find_all ({args.pybind_blocks} blocks)"
            counts[name] = len(res)
            rep.row(name, case, Stats.of(walls), "s", pairs=len(res))
        out, cand = numpy_find_all(fps, k, args.numpy_max_candidates)
        if out is None:
            rep.note(f"numpy block-permutation not run on {case}: {cand:,} candidate pairs "
                     f"> --numpy-max-candidates {args.numpy_max_candidates:,}")
        else:
            walls, _, (out, _) = timed_reps(
                partial(numpy_find_all, fps, k, args.numpy_max_candidates), args.reps,
                warmup=partial(numpy_find_all, warm, k, args.numpy_max_candidates),
            )
            assert out is not None
            counts["numpy block-permutation"] = len(out[0])
            rep.row("numpy block-permutation", case, Stats.of(walls), "s", pairs=len(out[0]),
                    candidates=cand)
        if len(fps) <= args.brute_max:
            walls, _, found = timed_reps(partial(brute_find_all, fps, k), args.reps,
                                         warmup=partial(brute_find_all, warm, k))
            counts["numpy brute force"] = found
            rep.row("numpy brute force", case, Stats.of(walls), "s", pairs=found)
        else:
            rep.note(f"numpy brute force not run on {case}: n > --brute-max {args.brute_max:,}")
        if len(set(counts.values())) > 1:
            rep.note(f"pair counts DISAGREE on {case}: {counts}")
    return rep.to_dict()


# --------------------------------------------------------------------------- all


SECTIONS = ("fingerprint", "query", "load", "find-all")


def cmd_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every benchmark at default sizes; then the JSON, the Markdown tables and the plot."""
    parser = build_parser()
    sections: dict[str, Any] = {}
    for name in SECTIONS:
        argv = [name, "--seed", str(args.seed), "--reps", str(args.reps)]
        if args.large and name != "fingerprint":
            argv.append("--large")
        sub = parser.parse_args(argv)
        reset_peak_rss()
        result = sub.func(sub)
        result["argv"] = argv
        print(f"peak RSS of {name}: {peak_rss() / 2**20:.0f} MiB\n", flush=True)
        sections[name] = result
    payload = {
        "command": "all",
        "argv": ["tools/bench.py", *args.argv],
        "machine": args.machine,
        "sections": sections,
    }
    payload["extra"] = [json.loads(p.read_text()) for p in args.extra]
    write_json(args.out or DOCS_BENCH / "all.json", payload)
    if not args.no_docs:
        plot = write_plot(payload, DOCS_BENCH / "scaling.png")
        write_markdown(payload, args.markdown, plot)
    return payload


def _cell(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _extras(row: dict[str, Any]) -> str:
    skip = {"impl", "case", "unit", "stats", "meta"}
    parts = []
    for k, v in row.items():
        if k in skip:
            continue
        parts.append(f"{k}={_cell(v) if isinstance(v, float) else v}")
    return ", ".join(parts)


def markdown_section(title: str, result: dict[str, Any]) -> list[str]:
    """One sub-command's rows, targets and notes as Markdown."""
    load_a, load_b = result["loadavg_before"][0], result["loadavg_after"][0]
    lines = [
        f"### {title}",
        "",
        f"`python tools/bench.py {shlex.join(result['argv'])}` — {result['seconds']:.0f} s, "
        f"peak RSS {result['peak_rss_process_bytes'] / 2**20:.0f} MiB, "
        f"1-min load average {load_a:.2f} before / {load_b:.2f} after"
        + (f", commit `{(result['machine']['git_commit'] or '?')[:12]}`"
           + (" + uncommitted package changes" if result["machine"]["git_dirty_package"] else "")
           if "machine" in result else "")
        + "."
        + (" The machine was otherwise loaded during this run (1-min load average above 1.5)."
           if max(load_a, load_b) > 1.5 else ""),
        "",
        "| implementation | case | median | p90 | p99 | max | unit | more |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in result["rows"]:
        st = r.get("stats")
        cells = (["", "", "", ""] if st is None
                 else [_cell(st[c]) for c in ("median", "p90", "p99", "max")])
        lines.append(f"| {r['impl']} | {r['case']} | {' | '.join(cells)} | {r['unit']} | "
                     f"{_extras(r)} |")
    if result["targets"]:
        lines += ["", "| target | measured | verdict |", "| --- | ---: | --- |"]
        for t in result["targets"]:
            v = "not measured" if t["value"] is None else _cell(t["value"])
            verdict = "**MISSED**" if t["verdict"] == "MISSED" else t["verdict"]
            lines.append(f"| {t['target']} | {v} | {verdict} |")
    if result["notes"]:
        lines.append("")
        lines += [f"- {n}" for n in result["notes"]]
    return lines + [""]


def _median(rows: list[dict[str, Any]], impl: str, case: str) -> float | None:
    for r in rows:
        if r["impl"] == impl and r["case"] == case and "stats" in r:
            return float(r["stats"]["median"])
    return None


def find_all_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """find-all rows of the run and of any separate find-all runs rendered with it."""
    extra = [x for x in payload.get("extra", []) if x["command"] == "find-all"]
    return payload["sections"]["find-all"]["rows"] + [
        {**r, "case": f"{r['case']} (separate run)"} for x in extra for r in x["rows"]
    ]


def _ratio(slow: float, fast: float) -> str:
    """'3.0x faster' when slow/fast >= 1, else '2.0x slower'."""
    r = slow / fast
    return f"{r:.1f}x faster" if r >= 1 else f"{1 / r:.1f}x slower"


def summary_lines(payload: dict[str, Any]) -> list[str]:
    """Every target in one table, and simstore against each peer at the largest sizes."""
    lines = ["### Targets", "", "| sub-command | target | measured | verdict |",
             "| --- | --- | ---: | --- |"]
    runs = [(name, payload["sections"][name]) for name in SECTIONS]
    runs += [(f"{x['command']} (separate run)", x) for x in payload.get("extra", [])]
    measured = {t["target"] for _, x in runs for t in x["targets"] if t["value"] is not None}
    for name, result in runs:
        for t in result["targets"]:
            if t["value"] is None and t["target"] in measured:
                continue
            v = "not measured" if t["value"] is None else _cell(t["value"])
            verdict = "**MISSED**" if t["verdict"] == "MISSED" else t["verdict"]
            lines.append(f"| {name} | {t['target']} | {v} | {verdict} |")
    lines += ["", "### simstore against its peers (same run)", "",
              "| comparison | simstore | peer | simstore is |", "| --- | ---: | ---: | --- |"]
    fp = payload["sections"]["fingerprint"]
    mbs = {r["impl"]: r["mb_s"] for r in fp["rows"] if "mb_s" in r}
    own = mbs.get("simstore.fingerprints")
    for impl, v in mbs.items():
        if own and not impl.startswith("simstore.fingerprint"):
            lines.append(f"| fingerprint MB/s: {impl} | {_cell(own)} | {_cell(v)} | "
                         f"{_ratio(own, v)} |")
    q = payload["sections"]["query"]["rows"]
    cases = [r["case"] for r in q if r["impl"] == "simstore SimStore.query"
             and r["meta"].get("k") == 3]
    if cases:
        case = cases[-1]
        own = _median(q, "simstore SimStore.query", case)
        for r in q:
            if (r["impl"] != "simstore SimStore.query" and "stats" in r
                    and r["case"].startswith(case) and own):
                peer = float(r["stats"]["median"])
                lines.append(f"| query p50 µs, {r['case']}: {r['impl']} | {_cell(own)} | "
                             f"{_cell(peer)} | {_ratio(peer, own)} |")
    fa = find_all_rows(payload)
    for case in dict.fromkeys(r["case"] for r in fa):
        own = _median(fa, "simstore find_all (1 thread)", case)
        for r in fa:
            if r["case"] == case and not r["impl"].startswith("simstore") and own:
                peer = float(r["stats"]["median"])
                lines.append(f"| find_all s, {case}: {r['impl']} (vs simstore 1 thread) | "
                             f"{_cell(own)} | {_cell(peer)} | {_ratio(peer, own)} |")
    return lines + [""]


def write_markdown(payload: dict[str, Any], path: Path, plot: Path | None) -> None:
    """Replace the generated block of the benchmarks page (keeping the prose around it)."""
    m = payload["machine"]
    mem = m["mem_total_bytes"]
    fp = payload["sections"]["fingerprint"]
    started = fp["started"]
    body = [
        GEN_BEGIN,
        "",
        f"Run {started}: `python {shlex.join(payload['argv'])}` at commit "
        f"`{(m['git_commit'] or 'unknown')[:12]}`"
        + (" (package files modified in the working tree)" if m["git_dirty_package"] else "")
        + ".",
        "",
        f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs ({m['usable_cpus']} usable), "
        f"{'?' if mem is None else f'{mem / 2**30:.1f} GiB'} RAM (MemTotal), "
        f"Python {m['python']}, {m['platform']}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v) + ".",
        "",
    ]
    loads = [x for sec in payload["sections"].values()
             for x in (sec["loadavg_before"][0], sec["loadavg_after"][0])]
    cpus = m["usable_cpus"] or m["logical_cpus"] or 1
    if max(loads) > 1.5:
        body += [
            f"**The machine was otherwise loaded during this run**: the 1-minute load average "
            f"ranged {min(loads):.1f}–{max(loads):.1f} on {cpus} CPUs (this benchmark "
            f"accounts for about 1 of it). Wall-clock times, and P99/Max most, are inflated "
            f"by waiting for a CPU; the per-CPU-second throughputs are less affected.",
            "",
        ]
    if plot is not None:
        rel = os.path.relpath(plot, path.parent)
        body += [f"![query latency and find_all time against size]({rel})", ""]
        if any(x["command"] == "find-all" for x in payload.get("extra", [])):
            body += ["The find_all points beyond this run's sizes come from the separate "
                     "find-all run at the end of this page.", ""]
    body += summary_lines(payload)
    for name in SECTIONS:
        body += markdown_section(f"`{name}`", payload["sections"][name])
    for extra in payload.get("extra", []):
        started = extra["started"]
        body += markdown_section(f"`{extra['command']}`, separate run of {started}", extra)
    body.append(GEN_END)
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{GEN_BEGIN}\n{GEN_END}\n"
    if GEN_BEGIN not in text or GEN_END not in text:
        text = text.rstrip("\n") + f"\n\n{GEN_BEGIN}\n{GEN_END}\n"
    head, rest = text.split(GEN_BEGIN, 1)
    tail = rest.split(GEN_END, 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + "\n".join(body) + tail)
    print(f"wrote {path}", flush=True)


def _series(rows: list[dict[str, Any]], impl: str, pick: Callable[[dict[str, Any]], bool],
            x: str = "n") -> tuple[list[int], list[float]]:
    pts = sorted((r["meta"][x], r["stats"]["median"]) for r in rows
                 if r["impl"] == impl and "stats" in r and pick(r["meta"]))
    return [p[0] for p in pts], [p[1] for p in pts]


def write_plot(payload: dict[str, Any], path: Path) -> Path | None:
    """Query p50 and find_all median against size, log-log, one line per implementation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001 - no matplotlib means "no plot"
        warnings.warn(f"no plot: matplotlib does not import ({exc})", stacklevel=2)
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    qrows = payload["sections"]["query"]["rows"]
    for impl, label in (
        ("simstore SimStore.query", "simstore query"),
        ("simhash.SimhashIndex.get_near_dups", "simhash.SimhashIndex (x = index size)"),
        ("simstore._core.hamming_within (C scan)", "C scan (simstore._core)"),
        ("numpy brute-force scan", "numpy scan"),
    ):
        xkey = "index_size" if "SimhashIndex" in impl else "n"
        xs, ys = _series(qrows, impl, lambda m: m.get("k") == 3, xkey)
        if xs:
            ax1.plot(xs, ys, marker="o", label=label)
    ax1.set(xscale="log", yscale="log", xlabel="fingerprints", ylabel="median latency (µs)",
            title="single query, k = 3")
    ax1.legend(fontsize=8)
    frows = find_all_rows(payload)
    impls = sorted({r["impl"] for r in frows}, key=lambda i: (not i.startswith("simstore"), i))
    for impl in impls:
        xs, ys = _series(frows, impl, lambda m: bool(m.get("random")))
        if xs:
            ax2.plot(xs, ys, marker="o", label=impl)
    ax2.set(xscale="log", yscale="log", xlabel="random fingerprints",
            ylabel="median time (s)", title="find_all, k = 3")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}", flush=True)
    return path


# --------------------------------------------------------------------------- CLI


def _positive(text: str) -> int:
    v = int(text.replace("_", ""))
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a valid count, must be > 0")
    return v


def _reps(text: str) -> int:
    v = int(text)
    if v < 3:
        raise argparse.ArgumentTypeError(f"{text} is not a valid repetition count, must be >= 3")
    return v


def _sizes(text: str) -> list[int]:
    return [_positive(s) for s in text.split(",") if s]


def sized(sp: argparse.ArgumentParser, default: list[int], what: str) -> None:
    """The --sizes / --large / --workdir options shared by the size-driven sub-commands."""
    shown = ",".join(str(v) for v in default)
    sp.add_argument("--sizes", type=_sizes, default=default,
                    help=f"{what}, comma-separated (default {shown})")
    sp.add_argument("--large", action="store_true", help="also N = 10,000,000")
    sp.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help="where scratch stores go (default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one sub-parser per benchmark."""
    p = argparse.ArgumentParser(
        prog="bench.py",
        description=__doc__.split("\n\n")[0],
        epilog="Each sub-command has --help. Results: Median / P90 / P99 / Max, never the mean.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--seed", type=int, default=20240601, help="RNG seed (default %(default)s)")
        sp.add_argument("--reps", type=_reps, default=3,
                        help="timed repetitions after one warm-up, >= 3 (default %(default)s)")
        sp.add_argument("--out", type=Path, default=None, help="write the JSON result here")

    f = sub.add_parser("fingerprint", help="text -> fingerprint throughput (MB/s, one thread)",
                       description=cmd_fingerprint.__doc__)
    common(f)
    f.add_argument("--docs", type=_positive, default=3000,
                   help="5 KB documents for simstore (default %(default)s)")
    f.add_argument("--doc-bytes", type=_positive, default=5000,
                   help="document size cap in UTF-8 bytes (default %(default)s)")
    f.add_argument("--peer-docs", type=_positive, default=200,
                   help="documents given to the PyPI simhash peer (default %(default)s)")
    f.add_argument("--reference-docs", type=_positive, default=40,
                   help="documents given to the pure-Python reference (default %(default)s)")
    f.set_defaults(func=cmd_fingerprint)

    q = sub.add_parser("query", help="single-query latency (us) vs SimhashIndex and scans",
                       description=cmd_query.__doc__)
    common(q)
    sized(q, [100_000, 1_000_000], "store sizes N")
    q.add_argument("--ks", type=_sizes, default=[3, 5, 6, 8],
                   help="k values, one store planned per k (default 3,5,6,8; 5: store default)")
    q.add_argument("--lsh-max", type=int, default=100_000,
                   help="largest N given to datasketch MinHashLSH (default %(default)s)")
    q.add_argument("--queries", type=_positive, default=2000,
                   help="queries per repetition (default %(default)s)")
    q.add_argument("--scan-queries", type=_positive, default=100,
                   help="queries per repetition for the brute-force scans (default %(default)s)")
    q.add_argument("--simhash-index-max", type=int, default=1_000_000,
                   help="cap on the random fps put in simhash.SimhashIndex, 0 = skip it "
                        "(default %(default)s)")
    q.set_defaults(func=cmd_query)

    ld = sub.add_parser("load", help="bulk load seconds + peak RSS; durable adds/s",
                        description=cmd_load.__doc__)
    common(ld)
    sized(ld, [1_000_000], "bulk load sizes N")
    ld.add_argument("--k", type=_positive, default=3, help="store k (default %(default)s)")
    ld.add_argument("--add-store-size", type=_positive, default=1_000_000,
                    help="fps in the store the adds go into (default %(default)s)")
    ld.add_argument("--add-batch", type=_positive, default=1000,
                    help="adds per commit (default %(default)s)")
    ld.add_argument("--add-batches", type=_positive, default=10,
                    help="commits per repetition (default %(default)s)")
    ld.set_defaults(func=cmd_load)

    fa = sub.add_parser("find-all", help="all pairs within k: simstore vs simhash-pybind, numpy",
                        description=cmd_find_all.__doc__)
    common(fa)
    sized(fa, [100_000, 1_000_000], "random-fp sizes N")
    fa.add_argument("--k", type=_positive, default=3, help="distance (default %(default)s)")
    fa.add_argument("--planted", type=int, default=1000,
                    help="near copies planted in each random case (default %(default)s)")
    fa.add_argument("--clustered", type=int, default=40_000,
                    help="size of the clustered case, 0 = none (default %(default)s)")
    fa.add_argument("--shared-bits", type=_positive, default=40,
                    help="top bits all clustered fps share (default %(default)s)")
    fa.add_argument("--pybind-dir", type=Path, default=DEFAULT_PYBIND_DIR,
                    help="where simhash-pybind is installed aside (default %(default)s)")
    fa.add_argument("--pybind-blocks", type=_positive, default=6,
                    help="simhash-pybind number_of_blocks, > k (default %(default)s)")
    fa.add_argument("--numpy-max-candidates", type=_positive, default=200_000_000,
                    help="skip the numpy block-permutation above this many candidate pairs "
                         "(default %(default)s)")
    fa.add_argument("--brute-max", type=_positive, default=50_000,
                    help="largest n for numpy brute force (default %(default)s)")
    fa.set_defaults(func=cmd_find_all)

    al = sub.add_parser("all", help="everything at default sizes; JSON, Markdown tables, plot",
                        description=cmd_all.__doc__)
    common(al)
    al.add_argument("--large", action="store_true", help="add the 10M sizes everywhere")
    al.add_argument("--markdown", type=Path, default=DOCS_MD,
                    help="page whose generated block is rewritten (default %(default)s)")
    al.add_argument("--extra", type=Path, nargs="*", default=[],
                    help="result files of separate single sub-command runs (e.g. with --large) "
                         "to render after the tables of this run")
    al.add_argument("--no-docs", action="store_true",
                    help="write only the JSON, not the Markdown tables and the plot")
    al.set_defaults(func=cmd_all, out=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark sub-command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.machine = machine_info()  # before the run: the commit whose code gets imported
    if args.command != "all":
        reset_peak_rss()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = args.func(args)
    if args.command != "all":
        result["argv"] = argv
        result["machine"] = args.machine
        print(f"peak RSS: {peak_rss() / 2**20:.0f} MiB", flush=True)
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
