"""Reading commands: query, dedup (pairs and clusters), export, fingerprint."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ..corpus.readers import iter_chunks, raise_bad
from ..corpus.sources import Inputs
from ..search.greedy import representative_clusters, representatives_from_pairs
from ..search.hamming import clusters
from ..store import SimStore
from ..text.fingerprinting import DEFAULT_CONFIG, fingerprints
from ..text.minhash import signatures
from ._common import (
    CliError,
    Out,
    UsageError,
    fp_hex,
    need_similarity,
    open_store,
    progress_of,
    say,
    signature_config,
    tsv_id,
)
from ._load import read_options
from ._tsv import parse_fp


def _fp_arg(text: str) -> int:
    try:
        return parse_fp(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", "replace")
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError as exc:
        raise CliError(f"--text {path!r}: {exc.strerror or exc}") from None


def cmd_query(args: argparse.Namespace, out: Out) -> int:
    queries: list[tuple[str, int]] = []
    text = None if args.text is None else _read_text(args.text)
    for item in args.fps:
        if item == "-":
            queries += [(line.strip(), _fp_arg(line)) for line in sys.stdin if line.strip()]
        else:
            queries.append((item, _fp_arg(item)))
    if not queries and text is None:
        raise UsageError("give a fingerprint, '-' (fingerprints on stdin) or --text FILE")
    if args.threshold is not None:
        if text is None or queries:
            raise UsageError("--threshold looks up a text: give --text FILE (and no fingerprints)")
        with open_store(args, readonly=True) as store:
            need_similarity(store)
            found = store.similar(text, args.threshold)
            for s in found:
                out.record(
                    {"query": args.text, "id": s.doc_id, "fp": out.fp(s.fingerprint),
                     "distance": s.distance, "jaccard": round(s.jaccard, 4)},
                    f"{tsv_id(s.doc_id)}\t{s.jaccard:.3f}\t{s.distance}\t{fp_hex(s.fingerprint)}",
                )
        if not found:
            say(args, f"no near-duplicate of --text {args.text!r} (estimated Jaccard >= "
                      f"{args.threshold:g})")
        return 0
    with open_store(args, readonly=True) as store:
        if text is not None:  # fingerprinted with the store's own recorded config
            queries.insert(0, (args.text, store.fingerprint(text)))
        if args.k is not None and args.k > store.k:
            say(args, f"k={args.k} is above the store's k={store.k}: answered exactly by a "
                      "scan of every stored fingerprint")
        for i, (label, fp) in enumerate(queries):
            matches = store.query(fp, args.k)
            for m in matches:
                out.record(
                    {"query": label, "id": m.doc_id, "fp": out.fp(m.fingerprint),
                     "distance": m.distance},
                    f"{tsv_id(m.doc_id)}\t{m.distance}\t{fp_hex(m.fingerprint)}",
                )
            if not matches and i == 0 and text is not None:
                say(args, f"no near-duplicate of --text {args.text!r} (Hamming distance <= "
                          f"{store.k if args.k is None else args.k})")
    return 0


# --------------------------------------------------------------------------- dedup


def cmd_dedup(args: argparse.Namespace, out: Out) -> int:
    progress = progress_of(args)
    with open_store(args, readonly=True) as store:
        if args.threshold is not None:
            need_similarity(store)
        k = store.k if args.k is None else args.k
        if not args.clusters:
            if args.threshold is not None:
                with progress.step("finding similar pairs"):
                    sims = list(store.similar_pairs(args.threshold))
                for x, y, j in sims:
                    out.record({"a": x, "b": y, "jaccard": round(j, 4)},
                               f"{tsv_id(x)}\t{tsv_id(y)}\t{j:.3f}")
                return 0
            with progress.step("finding pairs"):
                found = list(store.pairs(k))
            for a, b, d in found:
                out.record({"a": a, "b": b, "distance": d}, f"{tsv_id(a)}\t{tsv_id(b)}\t{d}")
            return 0
        with progress.step("finding clusters"):
            ids, fps = store.snapshot()
            if args.components:
                groups = _components(store, ids, fps, k, args.threshold)
            else:
                reps = _representatives(store, ids, fps, k, args.threshold)
    if args.components:
        for members in groups:
            out.record({"cluster": members, "size": len(members)},
                       "\t".join(tsv_id(m) for m in members))
        if not out.as_json:
            say(args, f"{len(groups)} clusters (connected components)")
        return 0
    _print_representatives(args, out, ids, reps)
    return 0


def _similar_pairs_by_index(store: SimStore, ids: list[Any], t: float
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    index = {d: i for i, d in enumerate(ids)}
    rows = [(index[x], index[y], j) for x, y, j in store.similar_pairs(t)
            if x in index and y in index]  # documents added after the snapshot are left out
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    a, b, j = (np.array(col) for col in zip(*rows, strict=True))
    return a.astype(np.int64), b.astype(np.int64), j.astype(np.float64)


def _components(store: SimStore, ids: list[Any], fps: np.ndarray, k: int,
                t: float | None) -> list[list[Any]]:
    if t is None:
        labels = clusters(fps, k)
    else:
        from ..native.core import components

        a, b, _ = _similar_pairs_by_index(store, ids, t)
        labels = components(len(ids), a, b)
    groups: dict[int, list[Any]] = {}
    for i, label in enumerate(labels.tolist()):
        groups.setdefault(label, []).append(ids[i])
    return [g for g in groups.values() if len(g) > 1]


def _representatives(store: SimStore, ids: list[Any], fps: np.ndarray, k: int,
                     t: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(representative, fingerprint distance, Jaccard or None) of each stored document."""
    if t is None:
        r = representative_clusters(fps, k=k)
        return r.rep, r.distance, None
    a, b, j = _similar_pairs_by_index(store, ids, t)
    rep, via = representatives_from_pairs(len(ids), a, b, -j)
    jac = np.ones(len(ids))
    jac[via >= 0] = j[via[via >= 0]]
    dist = np.array([(int(x) ^ int(y)).bit_count() for x, y in zip(fps, fps[rep], strict=True)],
                    dtype=np.int64)
    return rep, dist, jac


def _print_representatives(args: argparse.Namespace, out: Out, ids: list[Any],
                           reps: tuple[np.ndarray, np.ndarray, np.ndarray | None]) -> None:
    rep, dist, jac = reps
    members: dict[int, list[int]] = {}
    for m in np.flatnonzero(rep != np.arange(len(rep))).tolist():
        members.setdefault(int(rep[m]), []).append(m)
    shown = hidden = hidden_clusters = 0
    for r in sorted(members):
        group = members[r]
        if args.hide_exact:
            kept = [m for m in group if dist[m] != 0]
            hidden += len(group) - len(kept)
            group = kept
            if not group:
                hidden_clusters += 1
                continue
        shown += 1
        rows = []
        for m in group:
            row: dict[str, Any] = {"id": ids[m], "distance": int(dist[m])}
            if jac is not None:
                row["jaccard"] = round(float(jac[m]), 4)
            rows.append(row)
        human = "\n".join(
            f"{tsv_id(ids[r])}\t{tsv_id(row['id'])}\t"
            + (f"{row['jaccard']:.3f}" if jac is not None else str(row["distance"]))
            for row in rows
        )
        out.record({"representative": ids[r], "members": rows,
                    "cluster": [ids[r]] + [row["id"] for row in rows],
                    "size": len(rows) + 1}, human)
    if not out.as_json:
        note = (f"; {hidden} exact copies hidden ({hidden_clusters} clusters of only exact "
                "copies)" if args.hide_exact else "")
        say(args, f"{shown} clusters (representative mode: each member is near its "
                  f"representative, the first column){note}")


# --------------------------------------------------------------------------- export


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    fmt = args.format
    if fmt == "parquet":
        if out.path is None:
            raise UsageError("--format parquet writes a file: give -o FILE")
        from ..corpus.parquet import write_items

        target = out.open()
        assert target is not None
        with open_store(args, readonly=True) as store:
            with progress_of(args).bar("exporting", len(store), unit="docs") as bar:
                write_items(store.items(), target.file, bar.update)  # type: ignore[arg-type]
        return 0
    with open_store(args, readonly=True) as store:
        n = len(store)
        with progress_of(args).bar("exporting", n, unit="docs") as bar:
            done = 0
            as_json = fmt == "jsonl" or out.as_json
            stream = out.stream
            for doc_id, fp in store.items():
                if as_json:
                    stream.write(json.dumps({"id": doc_id, "fp": out.fp(fp)},
                                            ensure_ascii=False) + "\n")
                else:
                    stream.write(f"{tsv_id(doc_id)}\t{fp_hex(fp)}\n")
                done += 1
                if done % 10_000 == 0:
                    bar.update(10_000)
    return 0


# --------------------------------------------------------------------------- fingerprint


def cmd_fingerprint(args: argparse.Namespace, out: Out) -> int:
    if args.store is not None:
        with SimStore(args.store, readonly=True) as store:
            config = store.config
    elif args.similarity:
        config = signature_config(args)
    else:
        config = DEFAULT_CONFIG
    opts = read_options(args)
    with Inputs(args.inputs or ["-"], opts, stdin_text=True) as inp, \
            progress_of(args).bar("fingerprinting", inp.total_bytes) as bar:
        done = 0
        for chunk in iter_chunks(inp.sources, opts, raise_bad):
            done += len(chunk)
            bar.update(chunk.nbytes, docs=done)
            if len(chunk):
                _print_fingerprints(out, chunk, config)
    return 0


def _print_fingerprints(out: Out, chunk: Any, config: Any) -> None:
    if config.has_signature:
        sigs = signatures(chunk.texts, config)
        for i, doc_id in enumerate(chunk.ids):
            fp = int(sigs.fingerprints[i])
            sketch = sigs.sketches[i].astype(">u8").tobytes().hex()
            bands = [f"0x{int(b):016x}" for b in sigs.bands[i]]
            out.record(
                {"id": doc_id, "fp": out.fp(fp), "sketch": sketch, "bands": bands,
                 "scheme": config.scheme},
                f"{tsv_id(doc_id)}\t{fp_hex(fp)}\tsketch {sketch[:16]}... "
                f"({config.sketch_bits} bits)\t{len(bands)} band keys",
            )
        return
    fps = fingerprints(chunk.texts, config)
    for doc_id, fp in zip(chunk.ids, fps.tolist(), strict=True):
        out.record({"id": doc_id, "fp": out.fp(fp)}, f"{tsv_id(doc_id)}\t{fp_hex(fp)}")
