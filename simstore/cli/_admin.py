"""Store-wide commands: init, plan, stats, verify, rebuild, merge-levels, compact, upgrade,
expire."""

from __future__ import annotations

import argparse
import os
import sys

from ..search import layout as _layout
from ..store import SimStore, upgrade
from ..store.verify import needs_restore
from ._common import PROG, CliError, Out, open_store, progress_of, signature_config


def cmd_init(args: argparse.Namespace, out: Out) -> int:
    if os.path.exists(args.path) and not (os.path.isdir(args.path) and not os.listdir(args.path)):
        raise CliError(f"{args.path!r} already exists; 'init' needs a new or empty directory")
    config = signature_config(args) if args.similarity else None
    with SimStore(args.path, k=args.k, expected_size=args.expected_size, config=config) as store:
        info = store.stats()
    kind = (
        f", similarity: {info['sketch_bytes']} B sketch + {info['band_key_bytes']} B band keys"
        if info["similarity"] else ""
    )
    out.record(info, f"created {args.path} (max k={info['k']}, {info['tables']} tables{kind})")
    return 0


def cmd_plan(args: argparse.Namespace, out: Out) -> int:
    p = _layout.plan(args.k, args.expected_size)
    info = p.as_dict()
    if args.similarity:
        cfg = signature_config(args)
        info["sketch_bytes_per_document"] = cfg.sketch_bits // 8
        info["band_key_bytes_per_document"] = 4 * cfg.bands
        info["band_table_entries_per_document"] = cfg.bands
    out.record(info, "\n".join(f"{key}: {val}" for key, val in info.items()))
    return 0


def cmd_stats(args: argparse.Namespace, out: Out) -> int:
    with open_store(args, readonly=True) as store:
        info = store.stats()
    out.record(info, "\n".join(f"{key}: {val}" for key, val in info.items()))
    if info["rebuild_advised"]:
        ratio = info["query_cost_us"] / info["replanned_cost_us"]
        print(f"{PROG}: {args.path} holds {info['count']:,} documents, more than its layout "
              f"was planned for: queries cost ~{ratio:.0f}x what they would on a layout "
              f"planned for its size; '{PROG} rebuild {args.path}' re-plans it",
              file=sys.stderr)
    return 0


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    with open_store(args, readonly=True) as store, \
            progress_of(args).step(f"verifying {args.path}"):
        problems = store.verify(timeout=args.timeout)
        n = len(store)
    if problems:
        for p in problems:
            out.record({"problem": p}, f"PROBLEM: {p}")
        fix = (
            "its file is damaged: restore data.mdb from a copy (a rebuild stops, changing "
            "nothing, at a damaged page it must read)" if needs_restore(problems)
            else f"'{PROG} rebuild {args.path}' re-lays the tables from the docs table"
        )
        print(f"{PROG}: {args.path} has {len(problems)} problem(s); {fix}", file=sys.stderr)
        return 1
    out.record({"ok": True, "documents": n}, f"ok: {n} documents, every invariant holds")
    return 0


_SHOWN = ("k", "tables", "header_bits", "radius")


def cmd_rebuild(args: argparse.Namespace, out: Out) -> int:
    with open_store(args) as store:
        before = store.stats()
        with progress_of(args).step(f"rebuilding {args.path}"):
            after = store.rebuild(k=args.k, expected_size=args.expected_size)
    changed = {key: [before[key], after[key]] for key in _SHOWN if before[key] != after[key]}
    what = "; ".join(
        f"{'max k' if key == 'k' else key.replace('_', ' ')} {a} -> {b}"
        for key, (a, b) in changed.items()
    ) or "layout unchanged (tables re-derived from the docs table)"
    out.record({**after, "before": {key: before[key] for key in _SHOWN}, "changed": changed},
               f"rebuilt {args.path} ({after['count']} documents): {what}")
    return 0


def cmd_merge_levels(args: argparse.Namespace, out: Out) -> int:
    with open_store(args) as store, progress_of(args).step(f"merging {args.path}'s levels"):
        before = store.stats()["levels"]
        commits = store.merge_levels()
        after = store.stats()["levels"]
    out.record({"commits": commits, "levels_before": before, "levels": after},
               f"{args.path}: {len(before)} level(s) -> {len(after)} in {commits} commit(s)")
    return 0


def cmd_compact(args: argparse.Namespace, out: Out) -> int:
    if os.path.exists(args.dest):
        raise CliError(f"destination {args.dest!r} exists; give a new path")
    with open_store(args, readonly=True) as store, \
            progress_of(args).step(f"compacting to {args.dest}"):
        store.compact(args.dest)
    out.record({"dest": args.dest}, f"compacted copy written to {args.dest}")
    return 0


def cmd_upgrade(args: argparse.Namespace, out: Out) -> int:
    with progress_of(args).step(f"upgrading {args.path}"):
        info = upgrade(args.path)
    if info["from"] == info["to"]:
        text = f"{args.path} is already in format {info['to']}; nothing to do"
    else:
        text = (f"upgraded {args.path} from format {info['from']} to {info['to']} "
                f"({info['documents']} documents)")
    out.record(info, text)
    return 0


def cmd_expire(args: argparse.Namespace, out: Out) -> int:
    with open_store(args) as store, progress_of(args).step(f"expiring {args.path}"):
        removed = store.expire(args.older_than, before=args.before)
        left = len(store)
    out.record({"removed": removed, "documents": left},
               f"{args.path}: removed {removed} document(s), {left} left")
    return 0
