"""simstore-cli: build, query, deduplicate, check and rebuild stores from the shell.

Every command is ``main([...])``-callable (the tests call it in-process).
Exit codes: 0 success, 1 failure (bad data, damaged store, ...), 2 usage error.
Errors are one line on stderr saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

import numpy as np

from . import layout as _layout
from ._core import components
from .exceptions import SimstoreError
from .fingerprinting import SIGNATURE_CONFIG, FingerprintConfig
from .similar import check_threshold
from .store import SimStore

PROG = "simstore-cli"


class CliError(Exception):
    """A failure to report as one line on stderr with exit code 1."""


# --------------------------------------------------------------------------- output


class _Progress:
    """A one-line progress counter on stderr, shown only on a terminal."""

    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.label, self.total, self.done = label, total, 0
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._last > 0.2:
            self._last = now
            of = f"/{self.total}" if self.total else ""
            self.stream.write(f"\r{self.label}: {self.done}{of}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write(f"\r{self.label}: {self.done} done\n")
            self.stream.flush()


@contextmanager
def _working(label: str, stream: TextIO | None = None) -> Iterator[None]:
    """Say on a terminal's stderr that a long step runs, then how long it took."""
    err = stream or sys.stderr
    tty = bool(getattr(err, "isatty", lambda: False)())
    start = time.monotonic()
    if tty:
        err.write(f"{label} ...")
        err.flush()
    yield
    if tty:
        err.write(f"\r{label}: done in {time.monotonic() - start:.1f} s\n")
        err.flush()


@dataclass
class _Out:
    """Human-readable lines, or one JSON object per line with --json."""

    as_json: bool
    stream: TextIO = field(default_factory=lambda: sys.stdout)

    def record(self, obj: dict[str, Any], human: str) -> None:
        self.stream.write((json.dumps(obj, ensure_ascii=False) if self.as_json else human) + "\n")


def _fp_hex(fp: int) -> str:
    return f"0x{fp:016x}"


# --------------------------------------------------------------------------- parsing


def _parse_fp(text: str) -> int:
    """A fingerprint written in decimal or 0x-hex."""
    t = text.strip()
    try:
        v = int(t, 16) if t.lower().startswith("0x") else int(t, 10)
    except ValueError:
        raise ValueError(f"fingerprint {t!r} is not a decimal or 0x-hex integer") from None
    if not 0 <= v < 1 << 64:
        raise ValueError(f"fingerprint {t!r} is outside 0..2**64-1")
    return v


def _parse_record(line: str, int_ids: bool) -> tuple[Any, int]:
    """One `id<TAB>fp` TSV line or `{"id": .., "fp": ..}` JSON line."""
    if line.lstrip().startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or "id" not in obj or "fp" not in obj:
            raise ValueError('a JSON line needs "id" and "fp" fields')
        fp = obj["fp"]
        if isinstance(fp, str):
            fp = _parse_fp(fp)
        elif isinstance(fp, bool) or not isinstance(fp, int):
            raise ValueError(f'"fp" must be an integer or a decimal/0x-hex string (got {fp!r})')
        elif not 0 <= fp < 1 << 64:
            raise ValueError(f'"fp" {fp} is outside 0..2**64-1')
        return obj["id"], fp
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != 2:
        raise ValueError(f"expected 'id<TAB>fp' (got {len(parts)} tab-separated fields)")
    doc_id: Any = parts[0]
    if int_ids:
        try:
            doc_id = int(parts[0])
        except ValueError:
            raise ValueError(f"id {parts[0]!r} is not an integer (--int-ids)") from None
    return doc_id, _parse_fp(parts[1])


def _open_text(path: str) -> TextIO:
    if path == "-":
        return sys.stdin
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _read_records(path: str, int_ids: bool, skip_bad: bool) -> tuple[list[Any], list[int], int]:
    """All records of a TSV/JSONL file; a bad line is an error unless skip_bad."""
    ids: list[Any] = []
    fps: list[int] = []
    bad = 0
    name = "<stdin>" if path == "-" else path
    fh = _open_text(path)
    try:
        for lineno, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                doc_id, fp = _parse_record(line, int_ids)
            except ValueError as exc:
                _bad_input(f"{name}:{lineno}", str(exc), skip_bad)
                bad += 1
                continue
            ids.append(doc_id)
            fps.append(fp)
    finally:
        if fh is not sys.stdin:
            fh.close()
    return ids, fps, bad


def _bad_input(where: str, msg: str, skip_bad: bool) -> None:
    """Fail the whole command on bad input, or report and skip it with --skip-bad."""
    if not skip_bad:
        raise CliError(f"{where}: {msg}; nothing was added (fix it or use --skip-bad)")
    print(f"{PROG}: skipped {where}: {msg}", file=sys.stderr)


def _iter_files(inputs: Sequence[str]) -> Iterator[str]:
    for path in inputs:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    yield os.path.join(root, name)
        elif os.path.exists(path) or path == "-":
            yield path
        else:
            raise CliError(f"input {path!r} does not exist")


def _is_jsonl(path: str, force: bool) -> bool:
    return force or path.endswith((".jsonl", ".jsonl.gz", ".ndjson"))


def _iter_documents(
    inputs: Sequence[str], id_field: str, text_field: str, force_jsonl: bool, skip_bad: bool
) -> Iterator[tuple[Any, str]]:
    """(doc id, text) from files (one document each, id = path) or JSONL lines."""
    for path in _iter_files(inputs):
        if _is_jsonl(path, force_jsonl):
            name = "<stdin>" if path == "-" else path
            fh = _open_text(path)
            try:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                        if not isinstance(obj, dict):
                            raise ValueError("a line must be a JSON object")
                        if id_field not in obj or text_field not in obj:
                            raise ValueError(f"missing {id_field!r} or {text_field!r} field")
                        if not isinstance(obj[text_field], str):
                            raise ValueError(f"field {text_field!r} must be a string")
                    except ValueError as exc:
                        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                        _bad_input(f"{name}:{lineno}", msg, skip_bad)
                        continue
                    yield obj[id_field], obj[text_field]
            finally:
                if fh is not sys.stdin:
                    fh.close()
        else:
            try:
                fh = _open_text(path)
                with fh:
                    text = fh.read()
            except (OSError, EOFError) as exc:
                _bad_input(path, f"cannot read it: {exc}", skip_bad)
                continue
            yield path, text


# --------------------------------------------------------------------------- commands


def _open(args: argparse.Namespace, readonly: bool = False, create: bool = False) -> SimStore:
    if not create and not os.path.exists(args.path):
        raise CliError(f"no store at {args.path!r}; create one with '{PROG} init {args.path}'")
    return SimStore(args.path, readonly=readonly)


def cmd_init(args: argparse.Namespace, out: _Out) -> int:
    if os.path.exists(args.path) and not (os.path.isdir(args.path) and not os.listdir(args.path)):
        raise CliError(f"{args.path!r} already exists; 'init' needs a new or empty directory")
    config = _signature_config(args) if args.similarity else None
    with SimStore(args.path, k=args.k, expected_size=args.expected_size, config=config) as store:
        info = store.stats()
    kind = (
        f", similarity: {info['sketch_bytes']} B sketch + {info['band_key_bytes']} B band keys"
        if info["similarity"] else ""
    )
    out.record(info, f"created {args.path} (max k={info['k']}, {info['tables']} tables{kind})")
    return 0


def cmd_plan(args: argparse.Namespace, out: _Out) -> int:
    p = _layout.plan(args.k, args.expected_size)
    info = p.as_dict()
    if args.similarity:
        cfg = _signature_config(args)
        info["sketch_bytes_per_document"] = cfg.sketch_bits // 8
        info["band_key_bytes_per_document"] = 4 * cfg.bands
        info["band_table_entries_per_document"] = cfg.bands
    lines = "\n".join(f"{key}: {val}" for key, val in info.items())
    out.record(info, lines)
    return 0


def cmd_add(args: argparse.Namespace, out: _Out) -> int:
    ids, fps, bad = _read_records(args.file, args.int_ids, args.skip_bad)
    with _open(args, create=True) as store:
        store.add_many(ids, np.array(fps, dtype=np.uint64))
        total = len(store)
    out.record(
        {"added": len(ids), "skipped": bad, "total": total},
        f"added {len(ids)} documents ({bad} bad lines skipped); store holds {total}",
    )
    return 0


def cmd_index(args: argparse.Namespace, out: _Out) -> int:
    # Read (and validate) every input before the first write: a bad line
    # must leave the store untouched unless --skip-bad.
    docs = list(
        _iter_documents(args.inputs, args.id_field, args.text_field, args.jsonl, args.skip_bad)
    )
    progress = _Progress("indexing", total=len(docs))
    added = dup = 0
    dedup = args.dedup is not None or args.threshold is not None
    with _open(args, create=True) as store:
        if args.threshold is not None:
            _need_similarity(store)
        sim = store.config.has_signature
        if dedup:
            for doc_id, text in docs:
                item = store.signature(text) if sim else store.fingerprint(text)
                if args.threshold is not None:
                    found = store.add_if_new(doc_id, item, threshold=args.threshold)
                else:
                    found = store.add_if_new(doc_id, item, args.dedup)
                if found:
                    dup += 1
                    if args.verbose:
                        _report_skip(out, doc_id, found[0])
                else:
                    added += 1
                progress.update()
        else:
            if docs:
                with _working(f"fingerprinting and storing {len(docs)} documents"):
                    texts = [t for _, t in docs]
                    items = store.signatures(texts) if sim else store.fingerprint_texts(texts)
                    store.add_many([d for d, _ in docs], items)
            progress.update(len(docs))
            added = len(docs)
        total = len(store)
    progress.close()
    out.record(
        {"added": added, "near_duplicates_skipped": dup, "total": total},
        f"indexed {added} documents"
        + (f", skipped {dup} near-duplicates" if dedup else "")
        + f"; store holds {total}",
    )
    return 0


def cmd_query(args: argparse.Namespace, out: _Out) -> int:
    queries: list[tuple[str, int]] = []
    text = None
    if args.text is not None:
        fh = _open_text(args.text)
        try:
            text = fh.read()
        finally:
            if fh is not sys.stdin:
                fh.close()
    for item in args.fps:
        if item == "-":
            for line in sys.stdin:
                if line.strip():
                    queries.append((line.strip(), _parse_fp_arg(line)))
        else:
            queries.append((item, _parse_fp_arg(item)))
    if not queries and text is None:
        raise _UsageError("give a fingerprint, '-' (fingerprints on stdin) or --text FILE")
    if args.threshold is not None:
        if text is None or queries:
            raise _UsageError("--threshold looks up a text: give --text FILE (and no fingerprints)")
        with _open(args, readonly=True) as store:
            _need_similarity(store)
            for s in store.similar(text, args.threshold):
                out.record(
                    {"query": args.text, "id": s.doc_id, "fp": s.fingerprint,
                     "distance": s.distance, "jaccard": round(s.jaccard, 4)},
                    f"{s.doc_id}\t{s.jaccard:.3f}\t{s.distance}\t{_fp_hex(s.fingerprint)}",
                )
        return 0
    with _open(args, readonly=True) as store:
        if text is not None:  # fingerprinted with the store's own recorded config
            queries.insert(0, (args.text, store.fingerprint(text)))
        for label, fp in queries:
            for m in store.query(fp, args.k):
                out.record(
                    {"query": label, "id": m.doc_id, "fp": m.fingerprint, "distance": m.distance},
                    f"{m.doc_id}\t{m.distance}\t{_fp_hex(m.fingerprint)}",
                )
    return 0


def _parse_fp_arg(text: str) -> int:
    try:
        return _parse_fp(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def cmd_dedup(args: argparse.Namespace, out: _Out) -> int:
    with _open(args, readonly=True) as store:
        if args.threshold is not None:
            _need_similarity(store)
            return _similar_dedup(store, args, out)
        if args.clusters:
            with _working("finding clusters"):
                groups = store.clusters(args.k)
            for members in groups:
                out.record(
                    {"cluster": members, "size": len(members)}, "\t".join(map(str, members))
                )
            if not out.as_json:
                print(f"{len(groups)} clusters", file=sys.stderr)
            return 0
        with _working("finding pairs"):
            found = list(store.pairs(args.k))
        for a, b, d in found:
            out.record({"a": a, "b": b, "distance": d}, f"{a}\t{b}\t{d}")
    return 0


def _similar_dedup(store: SimStore, args: argparse.Namespace, out: _Out) -> int:
    """dedup --threshold: pairs (or connected clusters) by estimated Jaccard."""
    with _working("finding similar pairs"):
        found = list(store.similar_pairs(args.threshold))
    if args.clusters:
        ids = store.doc_ids()
        index = {d: i for i, d in enumerate(ids)}
        a = np.array([index[x] for x, _, _ in found], dtype=np.int64)
        b = np.array([index[y] for _, y, _ in found], dtype=np.int64)
        groups: dict[int, list[Any]] = {}
        for i, label in enumerate(components(len(ids), a, b).tolist()):
            groups.setdefault(label, []).append(ids[i])
        clusters = [g for g in groups.values() if len(g) > 1]
        for members in clusters:
            out.record({"cluster": members, "size": len(members)}, "\t".join(map(str, members)))
        if not out.as_json:
            print(f"{len(clusters)} clusters", file=sys.stderr)
        return 0
    for x, y, j in found:
        out.record({"a": x, "b": y, "jaccard": round(j, 4)}, f"{x}\t{y}\t{j:.3f}")
    return 0


def _need_similarity(store: SimStore) -> None:
    if not store.config.has_signature:
        raise CliError(
            f"{store.path!r} keeps fingerprints only; --threshold needs a similarity store "
            f"('{PROG} init PATH --similarity', then index the documents into it)"
        )


def _report_skip(out: _Out, doc_id: Any, near: Any) -> None:
    how = (f"Jaccard {near.jaccard:.3f}" if hasattr(near, "jaccard")
           else f"distance {near.distance}")
    out.record(
        {"id": doc_id, "duplicate_of": near.doc_id, "distance": near.distance,
         **({"jaccard": round(near.jaccard, 4)} if hasattr(near, "jaccard") else {})},
        f"skipped {doc_id} (near-duplicate of {near.doc_id}, {how})",
    )


def _signature_config(args: argparse.Namespace) -> FingerprintConfig:
    return replace(SIGNATURE_CONFIG, sketch_bits=args.sketch_bits or SIGNATURE_CONFIG.sketch_bits)


def cmd_rebuild(args: argparse.Namespace, out: _Out) -> int:
    with _open(args) as store, _working(f"rebuilding {args.path}"):
        info = store.rebuild(k=args.k, expected_size=args.expected_size)
    out.record(info, f"rebuilt {args.path}: max k={info['k']}, {info['tables']} tables")
    return 0


def cmd_verify(args: argparse.Namespace, out: _Out) -> int:
    with _open(args, readonly=True) as store, _working(f"verifying {args.path}"):
        problems = store.verify()
        n = len(store)
    if problems:
        for p in problems:
            out.record({"problem": p}, f"PROBLEM: {p}")
        print(
            f"{PROG}: {args.path} has {len(problems)} problem(s); "
            f"'{PROG} rebuild {args.path}' re-lays the tables from the docs table",
            file=sys.stderr,
        )
        return 1
    out.record({"ok": True, "documents": n}, f"ok: {n} documents, every invariant holds")
    return 0


def cmd_stats(args: argparse.Namespace, out: _Out) -> int:
    with _open(args, readonly=True) as store:
        info = store.stats()
    out.record(info, "\n".join(f"{key}: {val}" for key, val in info.items()))
    return 0


def cmd_export(args: argparse.Namespace, out: _Out) -> int:
    with _open(args, readonly=True) as store:
        for doc_id, fp in store.items():
            if args.format == "jsonl" or out.as_json:
                out.stream.write(json.dumps({"id": doc_id, "fp": fp}, ensure_ascii=False) + "\n")
            else:
                out.stream.write(f"{doc_id}\t{_fp_hex(fp)}\n")
    return 0


def cmd_compact(args: argparse.Namespace, out: _Out) -> int:
    if os.path.exists(args.dest):
        raise CliError(f"destination {args.dest!r} exists; give a new path")
    with _open(args, readonly=True) as store, _working(f"compacting to {args.dest}"):
        store.compact(args.dest)
    out.record({"dest": args.dest}, f"compacted copy written to {args.dest}")
    return 0


# --------------------------------------------------------------------------- parser


class _UsageError(Exception):
    """A usage error detected after parsing (exit code 2)."""


def _k_arg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer in 0..64 (got {text!r})") from None
    if not 0 <= v <= 64:
        raise argparse.ArgumentTypeError(f"k must be an integer in 0..64 (got {v})")
    return v


def _size_arg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text!r})") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {v})")
    return v


def _threshold_arg(text: str) -> float:
    try:
        return check_threshold(float(text))
    except (ValueError, SimstoreError):
        raise argparse.ArgumentTypeError(
            f"the threshold must be a number in (0, 1] (got {text!r})"
        ) from None


def _sketch_bits_arg(text: str) -> int:
    try:
        v = int(text)
        replace(SIGNATURE_CONFIG, sketch_bits=v)
    except (ValueError, SimstoreError):
        raise argparse.ArgumentTypeError(
            f"sketch bits must be a multiple of 64 in 64..4096 (got {text!r})"
        ) from None
    return v


def _similarity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--similarity", action="store_true",
                   help=f"keep similarity signatures ({SIGNATURE_CONFIG.scheme}) for "
                   "Jaccard-threshold queries")
    p.add_argument("--sketch-bits", type=_sketch_bits_arg, default=None, metavar="B",
                   help="sketch size of a similarity store (implies --similarity)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of simstore-cli."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Any, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print JSON lines")
        p.set_defaults(func=func)
        return p

    p = add("init", cmd_init, "create an empty store")
    p.add_argument("path")
    p.add_argument("--k", type=_k_arg, default=None, help="largest k the tables serve")
    p.add_argument("--expected-size", type=_size_arg, default=None)
    _similarity_options(p)

    p = add("plan", cmd_plan, "print the table layout for k and an expected size")
    p.add_argument("--k", type=_k_arg, required=True)
    p.add_argument("--expected-size", type=_size_arg, required=True)
    _similarity_options(p)

    p = add("add", cmd_add, "add doc ids with fingerprints (TSV id<TAB>fp or JSONL)")
    p.add_argument("path")
    p.add_argument("file", nargs="?", default="-", help="input file, or - for stdin")
    p.add_argument("--int-ids", action="store_true", help="TSV ids are integers")
    p.add_argument("--skip-bad", action="store_true", help="skip bad lines instead of failing")

    p = add("index", cmd_index, "fingerprint text (files, directories, JSONL) and add it")
    p.add_argument("path")
    p.add_argument("inputs", nargs="+", help="files, directories, .jsonl files or -")
    p.add_argument("--jsonl", action="store_true", help="treat every input as JSONL")
    p.add_argument("--id-field", default="id")
    p.add_argument("--text-field", default="text")
    p.add_argument("--dedup", type=_k_arg, default=None, metavar="K",
                   help="only add documents with no stored near-duplicate within K")
    p.add_argument("--threshold", type=_threshold_arg, default=None, metavar="T",
                   help="only add documents with no stored document at estimated Jaccard >= T "
                   "(a similarity store)")
    p.add_argument("--skip-bad", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="report skipped near-duplicates")

    p = add("query", cmd_query, "print the stored near-duplicates of fingerprints or a text")
    p.add_argument("path")
    p.add_argument("fps", nargs="*", help="fingerprints (decimal or 0x-hex), or - for stdin")
    p.add_argument("--text", metavar="FILE", help="fingerprint this file's text (- = stdin)")
    p.add_argument("--k", type=_k_arg, default=None)
    p.add_argument("--threshold", type=_threshold_arg, default=None, metavar="T",
                   help="print stored documents at estimated Jaccard >= T with --text's text "
                   "(a similarity store)")

    p = add("dedup", cmd_dedup, "print all near-duplicate pairs (or clusters) of a store")
    p.add_argument("path")
    p.add_argument("--k", type=_k_arg, default=None)
    p.add_argument("--clusters", action="store_true")
    p.add_argument("--threshold", type=_threshold_arg, default=None, metavar="T",
                   help="pairs at estimated Jaccard >= T instead of within k (a similarity store)")

    p = add("rebuild", cmd_rebuild, "re-lay every table from the docs table (crash-safe)")
    p.add_argument("path")
    p.add_argument("--k", type=_k_arg, default=None)
    p.add_argument("--expected-size", type=_size_arg, default=None)

    p = add("verify", cmd_verify, "check every invariant; exit 1 with a report if any fails")
    p.add_argument("path")

    p = add("stats", cmd_stats, "counts, layout and sizes")
    p.add_argument("path")

    p = add("export", cmd_export, "write every (id, fingerprint) as TSV or JSONL")
    p.add_argument("path")
    p.add_argument("--format", choices=("tsv", "jsonl"), default="tsv")

    p = add("compact", cmd_compact, "write a compacted copy of the store to DEST")
    p.add_argument("path")
    p.add_argument("dest")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run simstore-cli; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "sketch_bits", None):
        args.similarity = True
    out = _Out(as_json=bool(getattr(args, "json", False)))
    try:
        return int(args.func(args, out))
    except _UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
    except (CliError, SimstoreError, OSError) as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
