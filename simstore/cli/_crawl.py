"""``simstore-cli crawl PATH``: the shared crawl frontier at a glance, and its steering.

Shows what the frontier holds (queued, leased by owner with the oldest lease's age,
seen, revisits due later) and, per host, what waits and why (in flight, next allowed,
blocked until, fetched, answers 429/503). ``--pause``/``--resume`` stop and restart
every take (or one host's), ``--drop-host`` empties a host's queue: each one commit,
read by every crawler at its next take.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..crawl import Frontier
from ._common import Out, open_store, size_arg


def _when(t: float | None, now: float) -> str:
    if t is None or t <= now:
        return "now"
    return f"+{t - now:.1f}s"


def cmd_crawl(args: argparse.Namespace, out: Out) -> int:
    with open_store(args) as store:
        f = Frontier(store, args.frontier)
        if args.pause is not None:
            f.pause(args.pause or None)
        if args.resume is not None:
            f.resume(args.resume or None)
        dropped = f.drop_host(args.drop_host) if args.drop_host else None
        st = f.status(hosts=args.hosts)
    if dropped is not None:
        st["dropped"] = dropped
    out.record(st, _human(st))
    return 0


def _human(st: dict[str, Any]) -> str:
    now = st["now"]
    lines = [f"frontier {st['frontier']}: {st['queued']} queued, {st['leased']} leased, "
             f"{st['seen']} seen, {st['due']} revisits due later"
             + (" (PAUSED)" if st["paused"] else "")]
    if "dropped" in st:
        lines.append(f"dropped {st['dropped']} queued request(s)")
    for o in st["owners"]:
        lines.append(f"  leased by {o['owner']}: {o['leases']} (oldest "
                     f"{o['oldest_age']:.0f}s ago, {o['expired']} expired)")
    if st["hosts"]:
        lines.append(f"hosts ({st['host_count']}, most queued first):")
        lines.append("  host\tqueued\tin_flight\tnext\tblocked\tdelay\tfetched\t429\t503"
                     "\tno_answer")
        for h in st["hosts"]:
            blocked = _when(h["blocked_until"], now) if h["blocked_until"] else "-"
            lines.append(
                f"  {h['host'] or '-'}{' (paused)' if h['paused'] else ''}"
                f"{' (given up)' if h['down'] else ''}\t{h['queued']}\t"
                f"{h['in_flight']}\t{_when(h['next_allowed'], now)}\t{blocked}\t"
                f"{h['delay']:g}s{' (learnt)' if h['delay_learnt'] else ''}\t"
                f"{h['fetched']}\t{h['answers_429']}\t{h['answers_503']}\t"
                f"{h['failures']}")
    if st["next_wake"] and not st["paused"]:
        at = time.strftime("%H:%M:%S", time.localtime(st["next_wake"]))
        lines.append(f"next host free at {at}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """crawl's arguments."""
    p.add_argument("path")
    p.add_argument("--frontier", default="default", metavar="NAME",
                   help="the frontier's name (SIMSTORE_FRONTIER; default 'default')")
    p.add_argument("--hosts", type=size_arg, default=20, metavar="N",
                   help="show the N hosts with the most queued (default 20)")
    p.add_argument("--pause", nargs="?", const="", default=None, metavar="HOST",
                   help="take nothing more (from HOST, or at all) until --resume")
    p.add_argument("--resume", nargs="?", const="", default=None, metavar="HOST",
                   help="undo --pause (of HOST, or of the whole frontier)")
    p.add_argument("--drop-host", default=None, metavar="HOST",
                   help="drop every queued request of HOST")
