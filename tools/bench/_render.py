"""The generated part of docs/benchmarks.md (tables) and docs/bench/scaling.png (plot)."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._harness import REPO

DOCS_MD = REPO / "docs" / "benchmarks.md"
DOCS_BENCH = REPO / "docs" / "bench"
GEN_BEGIN = "<!-- bench.py all: generated tables begin -->"
GEN_END = "<!-- bench.py all: generated tables end -->"
SECTIONS = ("fingerprint", "query", "load", "find-all")
COMMAND = "python -m tools.bench"


def command_line(argv: list[str]) -> str:
    """The shell command of a run from its recorded sub-command argv.

    Result files written before the package existed record ``all`` runs as
    ``["tools/bench.py", "all", ...]``: they are shown as the command that now
    does the same.
    """
    for prefix in (["tools/bench.py"], ["-m", "tools.bench"]):
        if argv[: len(prefix)] == prefix:
            argv = argv[len(prefix) :]
    return f"{COMMAND} {shlex.join(argv)}"


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
        f"`{command_line(result['argv'])}` — {result['seconds']:.0f} s, "
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
        f"Run {started}: `{command_line(payload['argv'])}` at commit "
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
    """Query p50 (k = 3, 5, 8; simstore and faiss) and find_all median against size, log-log."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001 - no matplotlib means "no plot"
        warnings.warn(f"no plot: matplotlib does not import ({exc})", stacklevel=2)
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    qrows = list(payload["sections"]["query"]["rows"])
    for extra in payload.get("extra", []):
        if extra.get("command") == "query":
            qrows += extra["rows"]
    for impl, label, style in (
        ("simstore SimStore.query", "simstore", "-"),
        ("faiss IndexBinaryMultiHash (in memory)", "faiss MultiHash", "--"),
    ):
        for k, colour in ((3, "C0"), (5, "C1"), (8, "C2")):
            xs, ys = _series(qrows, impl, lambda m, k=k: m.get("k") == k)
            if xs:
                ax1.plot(xs, ys, style, color=colour, marker="o", label=f"{label}, k = {k}")
    xs, ys = _series(qrows, "simstore._core.hamming_within (C scan)", lambda m: m.get("k") == 3)
    if xs:
        ax1.plot(xs, ys, ":", color="grey", marker=".", label="C scan")
    ax1.set(xscale="log", yscale="log", xlabel="fingerprints", ylabel="median latency (µs)",
            title="single query: p50 against N")
    ax1.legend(fontsize=7)
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
