"""The stress command line: ``python -m tools.stress COMMAND [options]``; each has --help."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

from . import corpus_kills, damage, powerloss
from .kills import OPS, crash_round, run_worker
from .ops import run_ops


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per stress job, and the internal writer child of ``kills``."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.stress", description=sys.modules[__package__].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("kills", help="SIGKILL writers at random instants; check every reopen")
    p.add_argument("--kills", type=int, default=100, help="number of kill rounds (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {OPS}")
    p.add_argument("--max-delay", type=float, default=0.8,
                   help="kill within this many seconds of the worker starting (default 0.8)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the stores of failed rounds")
    p = sub.add_parser("ops", help="random operations in several processes, then verify()")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--ops-per-proc", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-method", choices=("spawn", "fork", "forkserver"), default="spawn")
    p.add_argument("--dir", default=None)
    p = sub.add_parser("damage", help="damage copies of sound stores; open, verify, query each")
    p.add_argument("--cases", type=int, default=500, help="number of damage cases (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--docs", type=int, default=3000,
                   help="docs of the Hamming store (the similarity store gets half)")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    p.add_argument("--json", default=None, help="write the figures and every case here")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true",
                   help="keep the damaged copies of failed and silently changed cases")
    p = sub.add_parser("corpus-kills",
                       help="kill dedup-corpus --store / index runs; the rerun must finish")
    p.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    p.add_argument("--kinds", default=",".join(corpus_kills.KINDS),
                   help=f"comma-separated subset of {corpus_kills.KINDS}")
    p.add_argument("--docs", type=int, default=6000, help="documents per corpus (default 6000)")
    p.add_argument("--max-kills", type=int, default=3, help="kills per round, 1 to this")
    p.add_argument("--max-delay", type=float, default=1.5,
                   help="kill within this many seconds of a run starting (default 1.5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p = sub.add_parser("powerloss", help="replay OS crashes from a trace of the store's writes",
                       description=powerloss.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--states", type=int, default=300, help="crash states a mode (default 300)")
    p.add_argument("--modes", default="full,normal",
                   help=f"comma-separated subset of {tuple(powerloss.MODES)} (default full,normal)")
    p.add_argument("--control", action="store_true",
                   help="also run durable='unsafe', which must show a corrupt or lost state")
    p.add_argument("--ops", type=int, default=300, help="calls of the workload (default 300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="copy each failing state (data.mdb and why.txt) under DIR")
    p = sub.add_parser("powerloss-worker", help="internal: the traced child of powerloss")
    for name in ("store", "io", "log", "mode"):
        p.add_argument(name)
    p.add_argument("seed", type=int)
    p.add_argument("ops", type=int)
    sub.add_parser("powerloss-check", help="internal: the state checker of powerloss")
    p = sub.add_parser("worker", help="internal: the writer child that kills starts")
    p.add_argument("store")
    p.add_argument("op", choices=OPS)
    p.add_argument("ack")
    p.add_argument("seed", type=int)
    return parser


def _cmd_kills(args: argparse.Namespace) -> int:
    ops = args.ops.split(",")
    bad_ops = set(ops) - set(OPS)
    if bad_ops:
        print(f"tools.stress kills: unknown op(s) {sorted(bad_ops)}; choose from {OPS}",
              file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="simstore-kills-")
    failures = 0
    t0 = time.monotonic()
    for i in range(args.kills):
        op = ops[i % len(ops)]
        seed = args.seed * 1_000_003 + i
        problems = crash_round(root, op, seed, args.max_delay)
        base = os.path.join(root, f"r{seed}-{op}")
        if problems:
            failures += 1
            print(f"round {i} ({op}, seed {seed}): FAILED", *problems, sep="\n  ", flush=True)
        if not problems or not args.keep:
            shutil.rmtree(base, ignore_errors=True)
            for name in os.listdir(root):
                if name.startswith(f"r{seed}-"):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        if (i + 1) % 50 == 0:
            print(f"{i + 1} kills, {failures} failed, {time.monotonic() - t0:.0f} s", flush=True)
    print(f"{args.kills} kills, {failures} failed rounds")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


def _cmd_ops(args: argparse.Namespace) -> int:
    root = args.dir or tempfile.mkdtemp(prefix="simstore-ops-")
    failures = 0
    for r in range(args.rounds):
        path = os.path.join(root, f"ops{r}")
        problems = run_ops(path, args.procs, args.ops_per_proc, args.seed + r, args.start_method)
        print(f"round {r}: {'ok' if not problems else 'FAILED'}", *problems[:20], sep="\n  ")
        failures += bool(problems)
        shutil.rmtree(path, ignore_errors=True)
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


def _cmd_damage(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    root = args.dir or tempfile.mkdtemp(prefix="simstore-damage-")
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    cases = damage.run(args.cases, args.seed, root, docs=args.docs, jobs=args.jobs,
                        keep=args.keep, progress=True)
    words = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python -m tools.stress", *words])
    figures = damage.report(cases, args.json, command)
    print(f"{len(cases)} cases in {time.monotonic() - t0:.0f} s, "
          f"{figures['failures']} failures (open or verify died, hung or raised a "
          f"non-simstore error); queries: {figures['queries']}")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if figures["failures"] else 0


def _cmd_corpus_kills(args: argparse.Namespace) -> int:
    kinds = tuple(args.kinds.split(","))
    if set(kinds) - set(corpus_kills.KINDS):
        print(f"tools.stress corpus-kills: choose kinds from {corpus_kills.KINDS}",
              file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="simstore-corpus-kills-")
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    failed, kills = corpus_kills.run(args.rounds, args.seed, root, args.docs, args.max_kills,
                                      args.max_delay, kinds)
    print(f"{args.rounds} rounds, {kills} kills mid-run, {failed} failed rounds, "
          f"{time.monotonic() - t0:.0f} s")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stress tool; returns the exit code (0: every check passed)."""
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        run_worker(args.store, args.op, args.ack, args.seed)
        return 0
    if args.command == "kills":
        return _cmd_kills(args)
    if args.command == "damage":
        return _cmd_damage(args, argv)
    if args.command == "corpus-kills":
        return _cmd_corpus_kills(args)
    if args.command == "powerloss":
        modes = args.modes.split(",")
        if set(modes) - set(powerloss.MODES):
            print(f"tools.stress powerloss: choose modes from {tuple(powerloss.MODES)}",
                  file=sys.stderr)
            return 2
        return powerloss.run(modes, args.states, args.seed, args.ops, args.keep, args.control)
    if args.command == "powerloss-worker":
        powerloss.worker(args.store, args.io, args.log, args.mode, args.seed, args.ops)
        return 0
    if args.command == "powerloss-check":
        powerloss.checker()
        return 0
    return _cmd_ops(args)


if __name__ == "__main__":
    sys.exit(main())

