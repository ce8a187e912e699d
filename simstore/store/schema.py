"""A store's databases and metadata: create them, read them back, bind their handles.

Every (re)open of the environment binds a fresh :class:`Handles`: the named
databases, the layout and config recorded in ``meta``, the record codec and
the permutation and band tables they imply, and in an exact store (``meta``
``exact``) the ``shingles`` database of :mod:`simstore.store.shingles`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exceptions import (
    ConfigMismatchError,
    FormatVersionError,
    LayoutMismatchError,
    NotAStoreError,
)
from ..search.layout import Layout
from ..text.fingerprinting import FingerprintConfig
from . import format as F
from .check.ranges import TreeGuard
from .docsmap import DocsMap
from .engine import BandIndex, TableEngine
from .runs import RunBands, RunIds, RunTables


@dataclass(frozen=True)
class Handles:
    """What a store's operations work on, for one open environment."""

    path: str
    layout: Layout
    config: FingerprintConfig
    codec: F.RecordCodec
    meta: Any
    docs: Any
    tables: TableEngine
    bands: BandIndex | None
    format_version: int
    idx: RunIds  # where a doc id's internal id is found
    # checks the docs pages a cursor will step on (simstore.store.check.ranges)
    docs_guard: TreeGuard
    # an exact store's shingles database (simstore.store.shingles) and the guard of its
    # pages; None in other stores
    shingles: Any = None
    shingles_guard: TreeGuard | None = None
    # the docs records where LMDB maps them (simstore.store.docsmap); None: read through
    # LMDB only (a store bound without a map epoch)
    docmap: DocsMap | None = None

    @property
    def exact(self) -> bool:
        """Whether the store keeps each doc's shingle set (decides by exact Jaccard)."""
        return self.shingles is not None


SHINGLES_DB = b"shingles"
EXACT_KEY = b"exact"
SHINGLE_CODEC = 1  # the version byte of every set code (csrc/jaccard.c SET_CODEC_VERSION)


def _exact_meta() -> bytes:
    """What ``meta`` holds under ``exact`` in a store that keeps shingle sets."""
    return F.to_json({"shingles": "rice-gaps-u64", "codec": SHINGLE_CODEC})


def _exact_recorded(txn: Any, meta: Any, path: str) -> bool:
    """Whether meta says the store keeps shingle sets (in a codec this simstore reads)."""
    raw = txn.get(EXACT_KEY, db=meta)
    if raw is None:
        return False
    got = F.from_json(raw, "exact")
    if got.get("codec") != SHINGLE_CODEC:
        raise FormatVersionError(
            f"store {path!r} keeps shingle sets in codec {got.get('codec')!r}; this simstore "
            f"reads codec {SHINGLE_CODEC} (upgrade simstore)"
        )
    return True


def record_codec(config: FingerprintConfig) -> F.RecordCodec:
    """The docs records' codec of a config (with sketch and bands in a similarity store)."""
    if config.has_signature:
        return F.RecordCodec(config.sketch_bits // 64, config.bands)
    return F.RecordCodec()


def table_engine(env: Any, txn: Any, layout: Layout, docs: Any, codec: F.RecordCodec,
                 config: FingerprintConfig, *, create: bool,
                 map_epoch: Callable[[], int] | None = None) -> RunTables:
    """The store's table engine over ``docs``, built here only (open, rebuild, upgrade):
    the run tables of ``layout``, with band keys for a similarity config."""
    return RunTables(env, txn, layout, docs, codec, create=create,
                     nbands=config.bands if config.has_signature else 0, map_epoch=map_epoch)


def bind(
    env: Any, txn: Any, path: str, layout: Layout, config: FingerprintConfig, *, create: bool,
    fmt: dict[str, Any], map_epoch: Callable[[], int] | None = None, exact: bool = False,
) -> Handles:
    """Open (or create, inside txn) the named databases of a layout, config and format:
    the run tables (with the band keys of a similarity store, and the ids).

    map_epoch: the environment's remap counter; run tables read in place only with it.
    exact: the store keeps shingle sets (its ``shingles`` database is bound too).
    """
    sig = config.has_signature
    codec = record_codec(config)
    meta = env.open_db(b"meta", txn=txn, create=create)
    docs = env.open_db(b"docs", txn=txn, create=create)
    tables = table_engine(env, txn, layout, docs, codec, config, create=create,
                          map_epoch=map_epoch)
    docs_guard = TreeGuard(env, b"docs")
    return Handles(
        path=path,
        layout=layout,
        config=config,
        codec=codec,
        meta=meta,
        docs=docs,
        tables=tables,
        bands=RunBands(tables) if sig else None,
        format_version=int(fmt["version"]),
        shingles=env.open_db(SHINGLES_DB, txn=txn, create=create) if exact else None,
        shingles_guard=TreeGuard(env, SHINGLES_DB) if exact else None,
        idx=RunIds(docs, codec, tables),
        docs_guard=docs_guard,
        docmap=DocsMap(env, docs, b"docs", docs_guard, map_epoch)
        if map_epoch is not None and sig else None,
    )


def write_meta(txn: Any, meta: Any, layout: Layout,
               config: FingerprintConfig | None = None) -> None:
    """Record the format this simstore writes, the layout and (given) the config in meta
    (the ``exact`` record is the creator's: a rebuild keeps it)."""
    txn.put(b"format", F.to_json(F.format_meta()), db=meta)
    txn.put(b"layout", F.to_json(layout.to_dict()), db=meta)
    if config is not None:
        txn.put(b"fingerprint", F.to_json(config.to_dict()), db=meta)


Begin = Callable[[bool], Any]  # a transaction (write: bool) of the store's environment


def _plain(env: Any) -> Begin:
    """env's own begin (its caller handles a map another process grew)."""
    return lambda write: env.begin(write=write)


def create(env: Any, path: str, layout: Layout, config: FingerprintConfig,
           map_epoch: Callable[[], int] | None = None, exact: bool = False,
           begin: Begin | None = None) -> Handles | None:
    """Write a new store's metadata and databases; None if another process won the race.

    exact: keep each doc's shingle set (a similarity config only: the caller checks).
    begin: how to start the transaction (a store's handle adopts a map another process
    grew since the open); env.begin by default."""
    txn = (begin or _plain(env))(True)
    try:
        if txn.get(b"meta") is not None:
            return None
        meta = env.open_db(b"meta", txn=txn)
        fmt = F.format_meta()
        write_meta(txn, meta, layout, config)
        if exact:
            txn.put(EXACT_KEY, _exact_meta(), db=meta)
        handles = bind(env, txn, path, layout, config, create=True, fmt=fmt,
                       map_epoch=map_epoch, exact=exact)
        handles.tables.init(txn)
        txn.commit()
        txn = None
        return handles
    finally:
        if txn is not None:
            txn.abort()


def _unknown_format(path: str, fmt: dict[str, Any]) -> str:
    """Why this simstore does not open a store of that ``format``, and what to do."""
    version = fmt.get("version")
    if fmt.get("format") == F.FORMAT and version in F.DEV_VERSIONS:
        return (f"store {path!r} was written by a development version of simstore (format "
                f"{version}); rewrite it with 'simstore-cli upgrade {path}' (nothing on disk "
                "was changed)")
    if fmt.get("format") == F.FORMAT and isinstance(version, int) and \
            version > F.FORMAT_VERSION:
        return (f"store {path!r} has format {version}, newer than this simstore reads "
                f"({F.FORMAT_VERSION}): upgrade simstore")
    return f"store {path!r} has format {fmt!r}, which is not a simstore format"


def load(
    env: Any, path: str, want_k: int | None, want_config: FingerprintConfig | None,
    map_epoch: Callable[[], int] | None = None, want_exact: bool | None = None,
    begin: Begin | None = None,
) -> Handles:
    """Read the recorded layout, config and exact option, check them against the caller's,
    bind (begin: as for :func:`create`)."""
    txn = (begin or _plain(env))(False)
    try:
        if txn.get(b"meta") is None:
            raise NotAStoreError(
                f"{path!r} holds an LMDB environment that is not a simstore store "
                "(no 'meta' database)"
            )
        meta = env.open_db(b"meta", txn=txn, create=False)
        fmt = F.from_json(txn.get(b"format", db=meta), "format")
        if not F.is_known_format(fmt):
            raise FormatVersionError(_unknown_format(path, fmt))
        layout = Layout.from_dict(F.from_json(txn.get(b"layout", db=meta), "layout"))
        config = FingerprintConfig.from_dict(
            F.from_json(txn.get(b"fingerprint", db=meta), "fingerprint")
        )
        exact = _exact_recorded(txn, meta, path)
    finally:
        txn.abort()
    if want_k is not None and want_k != layout.max_k:
        raise LayoutMismatchError(
            f"store {path!r} was built for k <= {layout.max_k}, not k={want_k}; "
            f"open it without k (or with k={layout.max_k}), or build a new store for the other k"
        )
    if want_config is not None and want_config != config:
        raise ConfigMismatchError(
            f"store {path!r} holds fingerprints of {config.scheme}, not "
            f"{want_config.scheme}; open it without config or with the same one"
        )
    if want_exact is not None and want_exact != exact:
        raise ConfigMismatchError(
            f"store {path!r} " + ("keeps" if exact else "keeps no") + " shingle sets (it was "
            f"created with exact={exact}), not exact={want_exact}; open it without 'exact', "
            "or build a new store for the other choice"
        )
    # Handles opened inside a read transaction die with it: open them on their own.
    return bind(env, None, path, layout, config, create=False, fmt=fmt, map_epoch=map_epoch,
                exact=exact)
