"""The argparse parser of simstore-cli: every command, its options, defaults and examples."""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
from typing import Any

from .. import __version__
from ..corpus.parquet import ROW_GROUP_BYTES
from ..corpus.sources import CHUNK_DOCS, MAX_RECORD_BYTES
from ..native.core import MAX_K
from ..text.fingerprinting import SIGNATURE_CONFIG
from . import _crawl, _spark
from ._admin import (
    cmd_compact,
    cmd_expire,
    cmd_init,
    cmd_merge_levels,
    cmd_plan,
    cmd_rebuild,
    cmd_stats,
    cmd_upgrade,
    cmd_verify,
)
from ._common import (
    PROG,
    bytes_arg,
    k_arg,
    seconds_arg,
    size_arg,
    sketch_bits_arg,
    threshold_arg,
    unusable_store_path,
)
from ._load import cmd_add, cmd_dedup_corpus, cmd_index
from ._search import cmd_dedup, cmd_export, cmd_fingerprint, cmd_query

DESCRIPTION = "Build, query, deduplicate, check and rebuild simstore stores from the shell."

def _fill(text: str) -> str:
    """Help prose wrapped at 79 columns: paragraphs apart at blank lines, and in a
    paragraph of "- " items each item on lines of its own."""
    out = []
    for par in text.split("\n\n"):
        if par.startswith("- "):
            items = ("- " + item for item in par[2:].split("\n- "))
            out.append("\n".join(textwrap.fill(i, 79, subsequent_indent="  ") for i in items))
        else:
            out.append(textwrap.fill(par, 79))
    return "\n\n".join(out)


STATS_FIELDS = """\
Fields (stats --json has the same keys):

- count: documents stored. k: the largest Hamming distance the tables answer by index
lookups. tables, blocks, header_bits: the table layout (docs/architecture.md): the 64
bits are cut into blocks, each table sorts the fingerprints by a permutation whose
first header_bits[t] bits (some blocks) form its header.
- radius: how many bits of its header a query at the store's k may flip in each table:
every header within that Hamming distance of the query's is probed (a query with a
smaller k probes fewer).
- levels: the documents each sorted level of the tables spans, oldest first (by internal
id, removed ones included); a query probes every level, then scans the recent documents
past the last one. Writes add levels and merge them in tiers; merge-levels makes one.
- query_cost_us: the planner's model of one query at the store's k on this layout, for
count documents, in microseconds (a model to compare layouts, not a measurement).
- replanned_cost_us: the same model on the layout a rebuild would plan for count
documents; rebuild_advised is true when query_cost_us is at least twice that in a store
of 100,000 documents or more (it has outgrown the expected_size it was planned for:
'rebuild' re-plans it).
- map_size, used_bytes, bytes_per_doc: LMDB's map (it grows on demand) and the bytes of
pages in use. format_version, table_engine: the on-disk format (docs/format.md).
fingerprint: the recorded scheme; similarity, sketch_bytes, band_key_bytes: a similarity
store's signature sizes; exact: whether the store keeps shingle sets."""

K_PARAGRAPH = """\
store k and query k: a store's k (init --k, default 5; rebuild --k to change it)
is the largest Hamming distance its tables answer by index lookups; it fixes the
table layout and is recorded in the store. A query's k (query, dedup, index
--dedup) may be anything from 0 to 64 and defaults to the store's k: up to the
store's k the tables answer fast; above it the answer is still exact but comes
from a scan of every stored fingerprint, slow on a big store. k = 5 suits
"Jaccard >= 0.9", k = 3 "Jaccard >= 0.95" (docs/quality.md); similarity stores
(init --similarity) answer "estimated Jaccard >= T" directly with --threshold T."""

EPILOG = f"""\
{K_PARAGRAPH}

progress: long commands show a progress bar (tqdm) when stderr is a terminal,
and otherwise a one-line report every --progress-every seconds; --quiet shows
neither. Exit codes: 0 ok, 1 failure (bad input, damaged store), 2 usage error,
130 interrupted.

examples:
  {PROG} init pages.simstore --k 5
  {PROG} index pages.simstore /usr/share/common-licenses --dedup 5
  {PROG} query pages.simstore --text /usr/share/common-licenses/GPL-3
  {PROG} dedup-corpus crawl.jsonl.gz -o kept.jsonl.gz --removed removed.jsonl
  {PROG} COMMAND --help"""


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown beside every option that has one; epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in text:
            return text
        if isinstance(action.default, (list, tuple)) and not action.default:
            return text
        return super()._get_help_string(action) or text


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {PROG} {line}" for line in lines)


def _common(p: argparse.ArgumentParser) -> None:
    """--json, --quiet, --progress-every: accepted before or after the command."""
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print JSON lines (fingerprints as \"0x%%016x\" strings)")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress and no notes on stderr")
    p.add_argument("--progress-every", type=seconds_arg, default=argparse.SUPPRESS,
                   metavar="SECONDS",
                   help="when stderr is not a terminal, a progress line every SECONDS "
                   "(0: none; default 30)")


def _output(p: argparse.ArgumentParser, fps: bool = True) -> None:
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write the records to FILE (complete or not at all) instead of stdout")
    if fps:
        p.add_argument("--int-fps", action="store_true",
                       help="JSON fingerprints as integers instead of \"0x%%016x\" strings")


def _similarity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--similarity", action="store_true",
                   help=f"keep similarity signatures ({SIGNATURE_CONFIG.scheme}) for "
                   "Jaccard-threshold queries")
    p.add_argument("--sketch-bits", type=sketch_bits_arg, default=None, metavar="B",
                   help="sketch size of a similarity store (implies --similarity; default "
                   f"{SIGNATURE_CONFIG.sketch_bits})")


def _inputs(p: argparse.ArgumentParser, chunk: bool = True) -> None:
    g = p.add_argument_group("input")
    g.add_argument("--jsonl", action="store_true",
                   help="read every input as JSON lines, whatever its name")
    g.add_argument("--id-field", default="id", metavar="NAME",
                   help="JSON field / Parquet column of the document id")
    g.add_argument("--text-field", default="text", metavar="NAME",
                   help="JSON field / Parquet column of the text")
    g.add_argument("--follow-symlinks", action="store_true",
                   help="read symbolic links met in directories (skipped by default)")
    g.add_argument("--exclude", action="append", metavar="GLOB",
                   help="leave out files and directories whose name or path matches GLOB "
                   "(repeatable)")
    g.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict",
                   help="undecodable UTF-8: a bad record (strict) or U+FFFD (replace)")
    if chunk:
        g.add_argument("--chunk", type=size_arg, default=None, metavar="N",
                       help="documents per chunk: read, fingerprinted and committed together in "
                       "one transaction (at most ~16 MB of text); larger chunks hold more "
                       f"memory (the transaction's dirty pages) (default {CHUNK_DOCS}; 250 for "
                       "dedup-corpus without --store, whose private store need not commit "
                       "durably)")
    g.add_argument("--max-record-bytes", type=bytes_arg, default=MAX_RECORD_BYTES,
                   metavar="BYTES",
                   help="a larger record (a JSON line, a text file, a Parquet row's text) is a "
                   "bad record, found without holding it whole (default 64M; units k, M, G "
                   "of 1024)")
    g.add_argument("--skip-bad", action="store_true",
                   help="skip bad records (reported on stderr) instead of stopping with "
                   "nothing written")


INPUT_HELP = ("text files, directories (walked; binary files, symlinks left out), .jsonl / "
              ".ndjson (.gz .bz2 .xz), .parquet, or - for JSON lines on stdin")


class CliParser(argparse.ArgumentParser):
    """The top-level parser; knows each command's parser, to refuse unknown options there."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but an unknown option is reported by its command's parser (its
        usage, not the top-level one) with the closest option it has; a store path that
        cannot be opened (not valid UTF-8) is one error line, exit 1."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(ns, "command", None)
            (self.commands.get(command) or self).error(unknown_options(
                self.commands.get(command) or self, extra))
        bad = unusable_store_path(ns)
        if bad is not None:
            self.exit(1, f"{PROG} {ns.command}: error: {bad}\n")
        return ns

    def explain(self, command: str, exc: BaseException) -> str:
        """The error line's text: the library names an argument by its Python name
        (``'older_than' must be …``); on the command line it is the flag the user typed."""
        return name_the_flags(self.commands.get(command) or self, str(exc))


# A validator's message starts its subject as a quoted Python name: 'older_than' must be ...
_PY_NAME = re.compile(r"'([A-Za-z_]\w*)'(?= must )")


def name_the_flags(parser: argparse.ArgumentParser, message: str) -> str:
    """``message`` with each quoted argument name of ``parser`` (its dest) replaced by the
    option the user types (the longest of its option strings) or a positional's metavar."""
    shown: dict[str, str] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions there
        if action.option_strings:
            shown[action.dest] = max(action.option_strings, key=len)
        elif action.dest != argparse.SUPPRESS:
            meta = action.metavar if isinstance(action.metavar, str) else None
            shown[action.dest] = meta or action.dest.upper()
    return _PY_NAME.sub(lambda m: shown.get(m.group(1), m.group(0)), message)


def unknown_options(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """'unrecognized arguments: …', with 'did you mean --x?' for the first mistyped option."""
    text = f"unrecognized arguments: {' '.join(extra)}"
    flags = [o for a in parser._actions for o in a.option_strings]  # noqa: SLF001
    for word in extra:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
            if close:
                return f"{text} (did you mean {close[0]}?)"
    return text


def build_parser() -> CliParser:
    """The argparse parser of simstore-cli."""
    parser = CliParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=Formatter)
    parser.commands = {}
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s (simstore) {__version__}")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress and no notes on stderr")
    parser.add_argument("--progress-every", type=seconds_arg, default=30.0, metavar="SECONDS",
                        help="when stderr is not a terminal, a progress line every SECONDS "
                        "(0: none)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Any, help_: str, epilog: str, more: str = "") -> Any:
        text = help_ + ("\n\n" + _fill(more) if more else "")
        p = sub.add_parser(name, help=help_, description=text,
                           epilog=epilog, formatter_class=Formatter)
        parser.commands[name] = p
        _common(p)
        p.set_defaults(func=func)
        return p

    p = add("init", cmd_init, "create an empty store",
            _examples("init pages.simstore --k 5", "init sims.simstore --similarity"),
            K_PARAGRAPH)
    p.add_argument("path")
    p.add_argument("--k", type=k_arg, default=None,
                   help=f"largest k the tables serve, at most {MAX_K} (default 5)")
    p.add_argument("--expected-size", type=size_arg, default=None, metavar="N",
                   help="documents expected; tunes the tables (default 1,000,000)")
    _similarity(p)

    p = add("plan", cmd_plan, "print the table layout for k and an expected size",
            _examples("plan --k 3 --expected-size 10000000"))
    p.add_argument("--k", type=k_arg, required=True)
    p.add_argument("--expected-size", type=size_arg, required=True, metavar="N")
    _similarity(p)

    p = add("add", cmd_add, "add doc ids with fingerprints (TSV id<TAB>fp, or JSON lines)",
            _examples("add pages.simstore fps.tsv", "export old.simstore | simstore-cli add "
                      "new.simstore -"),
            "TSV ids: int ids are written i:42, str ids as text with \\\\ \\t \\n \\r escaped "
            "(s: in front of ids that start with i: s: # { or a space); export writes them so, "
            "so export | add copies a store. Fingerprints: decimal or 0x-hex.")
    p.add_argument("path")
    p.add_argument("file", nargs="?", default="-",
                   help="input file (.gz .bz2 .xz read as such), or - for stdin")
    p.add_argument("--int-ids", action="store_true",
                   help="plain-integer TSV ids are int ids (i:42 always is)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip bad lines instead of failing with nothing added")

    p = add("index", cmd_index, "fingerprint texts (files, directories, JSONL, Parquet) and "
            "add them, chunk by chunk",
            _examples("index pages.simstore /usr/share/doc --exclude '*.html'",
                      "index pages.simstore crawl.jsonl.gz --dedup 5 --id-field url",
                      "index sims.simstore part-*.parquet --threshold 0.9"),
            "Each chunk is one write transaction: durable at its commit; other processes see "
            "all of it or none, and with --dedup/--threshold no other writer runs between a "
            "document's check and its insertion. Ids already stored are skipped without "
            "fingerprinting, so after Ctrl-C the same command goes on where it stopped. The "
            "whole input is checked before the first write unless --skip-bad.")
    p.add_argument("path", help="the store (created if missing; a similarity store with "
                   "--threshold)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUT_HELP)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dedup", type=k_arg, default=None, metavar="K",
                   help="add only documents with no stored near-duplicate within K "
                   "(add_if_new)")
    g.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                   help="add only documents with no stored document at estimated Jaccard >= T "
                   "(a similarity store)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each skipped near-duplicate")
    _inputs(p)

    p = add("query", cmd_query, "print the stored near-duplicates of fingerprints or a text",
            _examples("query pages.simstore 0xd93d35968e1855ee --k 3",
                      "query pages.simstore --text page.txt",
                      "query sims.simstore --text page.txt --threshold 0.9"),
            K_PARAGRAPH + " A --text with no near-duplicate prints nothing on stdout and a "
            "note on stderr (not with --quiet); the exit code is 0 either way: a query that "
            "found nothing did not fail.")
    p.add_argument("path")
    p.add_argument("fps", nargs="*", help="fingerprints (decimal or 0x-hex), or - for stdin")
    p.add_argument("--text", metavar="FILE", help="fingerprint this file's text (- = stdin)")
    p.add_argument("--k", type=k_arg, default=None,
                   help="Hamming radius, 0..64 (default: the store's k)")
    p.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                   help="stored documents at estimated Jaccard >= T with --text's text "
                   "(a similarity store)")
    _output(p)

    p = add("dedup", cmd_dedup, "print all near-duplicate pairs, or clusters, of a store",
            _examples("dedup pages.simstore", "dedup pages.simstore --clusters --hide-exact",
                      "dedup pages.simstore --clusters --components --k 3",
                      "dedup sims.simstore --clusters --threshold 0.9"),
            "--clusters: by default each cluster is a representative and its members, every "
            "member near the representative itself (what add_if_new would have kept, in "
            "insertion order: the first document of a group represents it); printed as "
            "representative<TAB>member<TAB>distance (or Jaccard). --components gives "
            "connected components instead, which chain: a~b~c puts a and c together however "
            "far apart they are.")
    p.add_argument("path")
    p.add_argument("--k", type=k_arg, default=None,
                   help=f"Hamming radius, 0..{MAX_K} (default: the store's k)")
    p.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                   help="pairs at estimated Jaccard >= T instead of within k (a similarity "
                   "store)")
    p.add_argument("--clusters", action="store_true",
                   help="clusters instead of pairs (representative mode)")
    p.add_argument("--components", action="store_true",
                   help="with --clusters: connected components (the old behaviour; they chain)")
    p.add_argument("--hide-exact", action="store_true",
                   help="with --clusters: leave out members with the representative's exact "
                   "fingerprint")
    _output(p)

    p = add("dedup-corpus", cmd_dedup_corpus,
            "write a corpus without its near-duplicates, and a report of what was removed",
            _examples("dedup-corpus crawl.jsonl.gz -o kept.jsonl.gz --removed removed.jsonl",
                      "dedup-corpus part-*.parquet -o kept.parquet --keep longest",
                      "dedup-corpus day2.jsonl -o day2-kept.jsonl --store seen.simstore",
                      "dedup-corpus docs/ -o kept.jsonl --k 3 --keep score"),
            "Kept documents go out in their input's format: JSON lines as read (every field), "
            "Parquet rows (a .parquet output, or all inputs Parquet), text files as "
            "{id, text} lines. The removed report has one JSON line per removed document: "
            "id, source (file:line), kept (the representative), jaccard or distance. With "
            "--store the run is incremental: documents whose id the store already holds are "
            "kept (written again, not decided again), new near-duplicates of stored ones are "
            "removed, new kept ones are added. So the same command run again after an "
            "interruption (Ctrl-C, kill) finishes the job: its output is the whole kept "
            "corpus.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUT_HELP)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="kept documents (.jsonl, .jsonl.gz/.bz2/.xz or .parquet)")
    p.add_argument("--removed", metavar="FILE", default=None,
                   help="JSON lines naming each removed document, its kept representative "
                   "and their similarity")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                   help="near-duplicates: estimated Jaccard >= T (default 0.9)")
    g.add_argument("--k", type=k_arg, default=None, metavar="K",
                   help="near-duplicates: fingerprints within Hamming distance K instead")
    p.add_argument("--store", metavar="PATH", default=None,
                   help="a store remembering kept documents across runs (created if missing)")
    p.add_argument("--keep", default="first", metavar="first|longest|FIELD",
                   help="which document of a group stays: the first read (one pass), the "
                   "longest text (in characters, not bytes), or the largest value of a numeric "
                   "FIELD (records without it rank last and are counted; a FIELD no record "
                   "has is an error) (two passes, ~2 KB of memory per document at the peak)")
    p.add_argument("--exact", action="store_true",
                   help="decide by exact Jaccard >= T of the texts' shingle sets, not the "
                   "estimate (without --store: two passes, the sets go to a temporary file "
                   "beside -o, "
                   "8 bytes per distinct shingle; with --store, keep first only: the store "
                   "must keep shingle sets, a new one is created so)")
    p.add_argument("--row-group-bytes", type=bytes_arg, default=ROW_GROUP_BYTES,
                   metavar="BYTES",
                   help="Parquet output: a row group holds the input's rows per group, or "
                   "fewer to stay under BYTES of uncompressed data (each group is built in "
                   "memory) (default 4M; units k, M, G of 1024)")
    _inputs(p)

    p = add("spark-dedup", _spark.cmd_spark_dedup, _spark.HELP,
            _examples("spark-dedup docs.parquet kept.parquet --threshold 0.9",
                      "spark-dedup docs.parquet kept.parquet --k 3 --removed removed.parquet"),
            _spark.MORE)
    _spark.add_arguments(p)

    p = add("fingerprint", cmd_fingerprint, "print the fingerprint of texts (no store needed)",
            _examples("fingerprint /usr/share/common-licenses/GPL-3",
                      "echo 'some text' | simstore-cli fingerprint",
                      "fingerprint docs.jsonl --similarity --json",
                      "fingerprint page.txt --store pages.simstore"))
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="text files, directories, JSONL, Parquet; - or nothing: stdin (one "
                   "text, or JSON lines when it starts with '{')")
    p.add_argument("--store", metavar="PATH", default=None,
                   help="use the fingerprint scheme recorded in this store")
    _similarity(p)
    _inputs(p, chunk=False)
    _output(p)

    p = add("rebuild", cmd_rebuild, "re-lay every table from the docs table (crash-safe); "
            "prints what changed", _examples("rebuild pages.simstore --k 3"), K_PARAGRAPH)
    p.add_argument("path")
    p.add_argument("--k", type=k_arg, default=None, help="new largest k (default: keep it)")
    p.add_argument("--expected-size", type=size_arg, default=None, metavar="N",
                   help="documents expected (default: as many as the store holds)")

    p = add("upgrade", cmd_upgrade, "rewrite a store written by a development version of "
            "simstore in the current format (crash-safe; needs the store alone)",
            _examples("upgrade pages.simstore"))
    p.add_argument("path")

    p = add("expire", cmd_expire, "remove documents stored longer ago than a duration, in "
            "short commits while others read and write",
            _examples("expire pages.simstore --older-than 30d",
                      "expire pages.simstore --before 1767225600"))
    p.add_argument("path")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--older-than", metavar="AGE", default=None,
                      help="an age: seconds, or a number with a unit s, m, h, d, w (30d)")
    when.add_argument("--before", type=float, metavar="TIME", default=None,
                      help="a time: seconds since the Unix epoch")

    p = add("crawl", _crawl.cmd_crawl, "show the shared crawl frontier: queued, leased by whom, "
            "hosts and their waits; pause, resume, drop a host",
            _examples("crawl pages.simstore", "crawl pages.simstore --json --hosts 100",
                      "crawl pages.simstore --pause example.com"))
    _crawl.add_arguments(p)

    p = add("verify", cmd_verify, "check every invariant; exit 1 with a report if any fails",
            _examples("verify pages.simstore", "verify big.simstore --timeout 3600"))
    p.add_argument("path")
    p.add_argument("--timeout", type=seconds_arg, default=None, metavar="SECONDS",
                   help="stop the check after this much CPU time (default: 120 s + 1 s per "
                   "4 MB of the store's file)")

    p = add("stats", cmd_stats, "counts, layout and sizes", _examples("stats pages.simstore"),
            STATS_FIELDS)
    p.add_argument("path")

    p = add("export", cmd_export, "write every (id, fingerprint) as TSV, JSONL or Parquet",
            _examples("export pages.simstore > fps.tsv",
                      "export pages.simstore --format parquet -o fps.parquet"),
            "TSV ids are escaped so that export | add round-trips (see add --help).")
    p.add_argument("path")
    p.add_argument("--format", choices=("tsv", "jsonl", "parquet"), default="tsv")
    _output(p)

    p = add("merge-levels", cmd_merge_levels,
            "merge the tables' levels into one now, so queries probe one (a store grown by "
            "writes keeps a few); others may read and write meanwhile",
            _examples("merge-levels pages.simstore"))
    p.add_argument("path")

    p = add("compact", cmd_compact, "write a compacted copy of the store to DEST",
            _examples("compact pages.simstore pages-compact.simstore"))
    p.add_argument("path")
    p.add_argument("dest")
    return parser
