"""Writing commands: add (fingerprints), index (texts), dedup-corpus (texts to files)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..corpus import (
    DECOMPRESS_ERRORS,
    CorpusSummary,
    IndexSummary,
    Interrupted,
    dedup_corpus,
    drop_if_new_and_empty,
    index_corpus,
)
from ..corpus.records import BadRecord, check_doc_id
from ..corpus.sources import (
    CHUNK_DOCS,
    MAX_RECORD_BYTES,
    BadInputError,
    ReadOptions,
    open_binary,
    spool,
)
from ..store import DEFAULT_K
from ..text.fingerprinting import SIGNATURE_CONFIG
from ._common import (
    PROG,
    CliError,
    Out,
    UsageError,
    need_similarity,
    open_store,
    progress_of,
    say,
)
from ._tsv import parse_record

_ADD_CHUNK = 100_000


def read_options(args: argparse.Namespace) -> ReadOptions:
    """The ReadOptions of a command's input options."""
    return ReadOptions(
        id_field=getattr(args, "id_field", "id"),
        text_field=getattr(args, "text_field", "text"),
        force_jsonl=bool(getattr(args, "jsonl", False)),
        follow_symlinks=bool(getattr(args, "follow_symlinks", False)),
        exclude=tuple(getattr(args, "exclude", None) or ()),
        encoding_errors=getattr(args, "encoding_errors", "strict"),
        chunk_docs=getattr(args, "chunk", None) or CHUNK_DOCS,
        max_record_bytes=getattr(args, "max_record_bytes", None) or MAX_RECORD_BYTES,
    )


def _read_kw(args: argparse.Namespace) -> dict[str, Any]:
    o = read_options(args)
    return {"id_field": o.id_field, "text_field": o.text_field, "force_jsonl": o.force_jsonl,
            "follow_symlinks": o.follow_symlinks, "exclude": o.exclude,
            "encoding_errors": o.encoding_errors, "chunk_docs": getattr(args, "chunk", None),
            "max_record_bytes": o.max_record_bytes}


def _skip_printer(args: argparse.Namespace) -> Any:
    def report(where: str, reason: str) -> None:
        print(f"{PROG}: skipped {where}: {reason}", file=sys.stderr)
    return report


def _note_skipped(args: argparse.Namespace, skipped: Any) -> None:
    if skipped.total():
        say(args, f"left out {skipped.describe()}")


# --------------------------------------------------------------------------- add


def _records(path: str, name: str, int_ids: bool, on_bad: Any) -> Iterator[tuple[Any, int]]:
    """(id, fp) of each TSV/JSONL line; bad lines go to on_bad(file:line, reason)."""
    lineno = 0
    with open_binary(path) as fh:
        lines = iter(fh)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except DECOMPRESS_ERRORS as exc:
                on_bad(f"{name}:{lineno + 1}", f"the compressed data is truncated or corrupt "
                                               f"({exc})")
                return
            lineno += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                on_bad(f"{name}:{lineno}", f"not valid UTF-8 at byte {exc.start + 1}")
                continue
            if not line.strip() or line.startswith("#"):
                continue
            try:
                doc_id, fp = parse_record(line, int_ids)
                check_doc_id(doc_id, "id")
            except (ValueError, BadRecord) as exc:
                on_bad(f"{name}:{lineno}", str(exc))
                continue
            yield doc_id, fp


def cmd_add(args: argparse.Namespace, out: Out) -> int:
    bad = [0]

    def strict(where: str, reason: str) -> None:
        raise BadInputError(where, f"{reason}; nothing was added (fix it or use --skip-bad)")

    def skip(where: str, reason: str) -> None:
        bad[0] += 1
        _skip_printer(args)(where, reason)

    added = 0
    spooled = None
    if args.file == "-":
        spooled = spool(sys.stdin.buffer)
        path, name = spooled.tmp, "<stdin>"
    elif os.path.isfile(args.file):
        path = name = args.file
    else:
        raise CliError(f"input {args.file!r} is not a file")
    try:
        size = os.path.getsize(path)
        if not args.skip_bad:  # nothing is added unless every line is good
            for _ in _records(path, name, args.int_ids, strict):
                pass
        with open_store(args, create=True) as store:
            ids: list[Any] = []
            fps: list[int] = []
            with progress_of(args).bar("adding", size) as bar:
                for doc_id, fp in _records(path, name, args.int_ids,
                                           skip if args.skip_bad else strict):
                    ids.append(doc_id)
                    fps.append(fp)
                    if len(ids) >= _ADD_CHUNK:
                        store.add_many(ids, np.array(fps, dtype=np.uint64))
                        added += len(ids)
                        bar.update(0, docs=added)
                        ids, fps = [], []
                if ids:
                    store.add_many(ids, np.array(fps, dtype=np.uint64))
                    added += len(ids)
            total = len(store)
    finally:
        if spooled is not None:
            spooled.discard()
    out.record(
        {"added": added, "skipped": bad[0], "total": total},
        f"added {added} documents ({bad[0]} bad lines skipped); store holds {total}",
    )
    return 0


# --------------------------------------------------------------------------- index


def cmd_index(args: argparse.Namespace, out: Out) -> int:
    _refuse_swapped(args.path, args.inputs)
    new_store = not os.path.exists(args.path)
    try:
        return _index(args, out, new_store)
    except BaseException:
        if new_store:  # a failed index leaves no empty store behind
            drop_if_new_and_empty(args.path)
        raise


def _refuse_swapped(store: str, inputs: list[str]) -> None:
    """UsageError when the store argument is an input file and the last input looks like
    the store (a store's directory, or a path that does not exist yet): swapped."""
    if not os.path.isfile(store):
        return
    last = inputs[-1]
    if os.path.isfile(os.path.join(last, "data.mdb")) or not os.path.exists(last):
        raise UsageError(
            f"{store!r} is a file and {last!r} looks like the store: the arguments look "
            "swapped; the store comes first: "
            + shlex.join([PROG, "index", last, store, *inputs[:-1]])
        )


def _index(args: argparse.Namespace, out: Out, new_store: bool) -> int:
    config = SIGNATURE_CONFIG if args.threshold is not None else None
    k = args.dedup if args.dedup is not None and args.dedup > DEFAULT_K else None
    with open_store(args, create=True, config=config, k=k) as store:
        if args.threshold is not None:
            need_similarity(store)
        if args.dedup is not None and args.dedup > store.k:
            say(args, f"--dedup {args.dedup} is above the store's k={store.k}: every document "
                      "is checked by a scan of all stored fingerprints (slow); "
                      f"'{PROG} rebuild {args.path} --k {args.dedup}' makes it an index lookup")

        def near(doc_id: Any, where: str, m: Any) -> None:
            how = (f"Jaccard {m.jaccard:.3f}" if hasattr(m, "jaccard")
                   else f"distance {m.distance}")
            out.record({"id": doc_id, "source": where, "duplicate_of": m.doc_id,
                        "distance": m.distance,
                        **({"jaccard": round(m.jaccard, 4)} if hasattr(m, "jaccard") else {})},
                       f"skipped {doc_id} ({where}): near-duplicate of {m.doc_id}, {how}")

        try:
            s = index_corpus(
                store, args.inputs, k=args.dedup, threshold=args.threshold,
                skip_bad=args.skip_bad, on_bad=_skip_printer(args),
                on_near=near if args.verbose else None, progress=progress_of(args),
                **_read_kw(args),
            )
        except Interrupted as exc:
            done = exc.summary
            assert isinstance(done, IndexSummary)
            print(f"{PROG}: interrupted; {done.documents} documents committed"
                  + (f" (through {done.last})" if done.last else "")
                  + f": {done.new} new, {done.already_stored} already stored, "
                  f"{done.near_duplicates} near-duplicates skipped. Run the same command again "
                  "to go on: stored ids are skipped without fingerprinting.", file=sys.stderr)
            return 130
        except BadInputError as exc:
            raise BadInputError(exc.where, exc.reason + "; nothing was added"
                                + (" (the new store was removed)" if new_store else "")
                                + " (fix it or use --skip-bad)") from None
        total = len(store)
    _note_skipped(args, s.skipped)
    dedup = args.dedup is not None or args.threshold is not None
    out.record(
        {**s.as_dict(), "added": s.new, "total": total},
        f"indexed {s.new} new documents, {s.already_stored} already stored"
        + (f", {s.near_duplicates} near-duplicates skipped" if dedup else "")
        + (f", {s.bad} bad records skipped" if s.bad else "")
        + f"; store holds {total}",
    )
    return 0


# --------------------------------------------------------------------------- dedup-corpus


def cmd_dedup_corpus(args: argparse.Namespace, out: Out) -> int:
    try:
        s = dedup_corpus(
            args.inputs, args.output, args.removed, threshold=args.threshold, k=args.k,
            store=args.store, keep=args.keep, skip_bad=args.skip_bad, exact=args.exact,
            row_group_bytes=args.row_group_bytes,
            on_bad=_skip_printer(args), progress=progress_of(args), **_read_kw(args),
        )
    except Interrupted as exc:
        done = exc.summary
        assert isinstance(done, CorpusSummary)
        if args.store:
            print(f"{PROG}: interrupted; {done.documents:,} documents committed to {args.store}"
                  + (f" (through {done.last})" if done.last else "")
                  + f"; nothing was written to {args.output}. Run the same command again to "
                  "finish: documents the store already holds are written to the kept output "
                  "again, none is lost.", file=sys.stderr)
        else:
            print(f"{PROG}: interrupted; nothing was written", file=sys.stderr)
        return 130
    except BadInputError as exc:
        raise BadInputError(exc.where, exc.reason + "; nothing was written"
                            + (" or stored" if args.store else "")
                            + " (fix it or use --skip-bad)") from None
    _note_skipped(args, s.skipped)
    how = f"Hamming distance <= {args.k}" if args.k is not None else (
        f"{'exact' if args.exact else 'estimated'} Jaccard >= "
        f"{args.threshold if args.threshold is not None else 0.9}")
    out.record(
        s.as_dict(),
        f"kept {s.kept} of {s.documents} documents -> {s.output}"
        + (f" ({s.already_stored:,} already in the store from an earlier run, "
           f"{s.kept - s.already_stored:,} new)" if args.store else "")
        + f"; removed {s.removed - s.repeated} near-duplicates ({how})"
        + (f" and {s.repeated} repeated ids" if s.repeated else "")
        + (f", {s.bad} bad records skipped" if s.bad else "")
        + (f"; {s.keep_missing} documents have no {args.keep!r} value (ranked last)"
           if s.keep_missing else "")
        + (f"; report: {s.removed_report}" if s.removed_report else ""),
    )
    return 0
