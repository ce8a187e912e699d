"""A store's databases and metadata: create them, read them back, bind their handles.

Every (re)open of the environment binds a fresh :class:`Handles`: the named
databases, the layout and config recorded in ``meta``, the record codec and
the permutation and band tables they imply, and in an exact store (``meta``
``exact``) the ``shingles`` database of :mod:`simstore.store.shingles`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exceptions import (
    ConfigMismatchError,
    CorruptStoreError,
    FormatVersionError,
    LayoutMismatchError,
    NotAStoreError,
)
from ..search.layout import Layout
from ..text.fingerprinting import FingerprintConfig
from . import format as F
from .engine import BandIndex, TableEngine
from .idindex import IdIndex, RunIds, TreeIds
from .legacy.bands import Bands
from .legacy.tables import Tables
from .runbands import RunBands
from .runs import RunTables


@dataclass(frozen=True)
class Handles:
    """What a store's operations work on, for one open environment."""

    path: str
    layout: Layout
    config: FingerprintConfig
    codec: F.RecordCodec
    meta: Any
    docs: Any
    ids: Any  # the ids B-tree (formats 1-12); None in a run-ids store: use idx
    tables: TableEngine
    bands: BandIndex | None
    format_version: int
    idx: IdIndex  # where a doc id's internal id is found: TreeIds (ids) or RunIds
    # an exact store's shingles database (simstore.store.shingles); None in other stores
    shingles: Any = None

    # whether int ids key by value (F.ordered_id_key; stores created or rebuilt from format 11)
    ordered_ids: bool = False

    def id_key(self, enc: bytes) -> bytes:
        """The ``ids`` key of an encoded id in this store."""
        return F.ordered_id_key(enc) if self.ordered_ids else F.id_key(enc)


    @property
    def exact(self) -> bool:
        """Whether the store keeps each doc's shingle set (decides by exact Jaccard)."""
        return self.shingles is not None


SHINGLES_DB = b"shingles"
IDKEYS_KEY = b"idkeys"  # meta: {"ints": "by value"}: int ids key by value (F.ordered_id_key)
_BY_VALUE = {"ints": "by value"}
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


def bind(
    env: Any, txn: Any, path: str, layout: Layout, config: FingerprintConfig, *, create: bool,
    fmt: dict[str, Any], map_epoch: Callable[[], int] | None = None, exact: bool = False,
    ordered_ids: bool = False,
) -> Handles:
    """Open (or create, inside txn) the named databases of a layout, config and format.

    The format picks the table engine: run tables from format 3 (with run
    directories from 4), else the dupsort tables of formats 1 and 2; and where the ids
    live: a run database of the run tables from format 13, else the ``ids`` B-tree.
    map_epoch: the environment's remap counter; run tables read in place only with it.
    exact: the store keeps shingle sets (its ``shingles`` database is bound too).
    ordered_ids: its int ids key by value (meta ``idkeys``: a store created or rebuilt
    from format 11).
    """
    sig = config.has_signature
    codec = F.RecordCodec(config.sketch_bits // 64, config.bands) if sig else F.RecordCodec()
    meta = env.open_db(b"meta", txn=txn, create=create)
    docs = env.open_db(b"docs", txn=txn, create=create)
    tables: TableEngine
    bands: BandIndex | None = None
    run_ids = F.has_run_ids(fmt)
    if F.has_runs(fmt):
        tables = RunTables(env, txn, layout, docs, codec, create=create,
                           nbands=config.bands if sig else 0, map_epoch=map_epoch,
                           dirs=F.has_run_dirs(fmt),
                           indexed=functools.partial(_indexed, meta=meta),
                           upgrade=None if F.has_paged_records(fmt) else
                           functools.partial(_upgrade_format, meta=meta, exact=exact),
                           run_ids=run_ids, gone_blocks=F.has_gone_blocks(fmt),
                           late_gone=F.has_late_gone(fmt))
        if sig:
            bands = RunBands(tables)
    else:
        legacy_bands = Bands(env, txn, config.bands, create=create) if sig else None
        tables = Tables(env, txn, layout, docs, create=create, bands=legacy_bands)
        bands = legacy_bands
    ids = None if run_ids else env.open_db(b"ids", txn=txn, create=create)
    idx: IdIndex
    if ids is None:
        assert isinstance(tables, RunTables)
        idx = RunIds(docs, codec, tables)
    else:
        idx = TreeIds(docs, codec, ids, ordered_ids, path)
    return Handles(
        path=path,
        layout=layout,
        config=config,
        codec=codec,
        meta=meta,
        docs=docs,
        ids=ids,
        tables=tables,
        bands=bands,
        format_version=int(fmt["version"]),
        shingles=env.open_db(SHINGLES_DB, txn=txn, create=create) if exact else None,
        ordered_ids=ordered_ids,
        idx=idx,
    )


def _recorded(txn: Any, meta: Any) -> dict[str, Any]:
    """The ``format`` metadata as txn sees it."""
    return F.from_json(txn.get(b"format", db=meta), "format")


def _indexed(txn: Any, meta: Any) -> bool:
    """Whether txn sees a store whose levels all have index records (format 7 on)."""
    return F.has_run_index(_recorded(txn, meta))


def _upgrade_format(txn: Any, meta: Any, exact: bool) -> bool:
    """Record the current format in a store of an older one (formats 3-10: run tables),
    unless this transaction's view already has it; whether it did (the caller then
    writes what the new format adds)."""
    if F.has_paged_records(_recorded(txn, meta)):
        return False
    txn.put(b"format", F.to_json(F.format_meta(exact, run_ids=False)), db=meta)
    return True


def write_meta(txn: Any, meta: Any, layout: Layout, config: FingerprintConfig | None = None,
               *, exact: bool = False) -> None:
    """Record the format this simstore writes, the layout and (given) the config in meta."""
    txn.put(b"format", F.to_json(F.format_meta(exact)), db=meta)
    txn.put(IDKEYS_KEY, F.to_json(_BY_VALUE), db=meta)  # a new or rebuilt store: new ids
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
        fmt = F.format_meta(exact)
        write_meta(txn, meta, layout, config, exact=exact)
        if exact:
            txn.put(EXACT_KEY, _exact_meta(), db=meta)
        handles = bind(env, txn, path, layout, config, create=True, fmt=fmt,
                       map_epoch=map_epoch, exact=exact, ordered_ids=True)
        handles.tables.init(txn)
        txn.commit()
        txn = None
        return handles
    finally:
        if txn is not None:
            txn.abort()


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
            raise FormatVersionError(
                f"store {path!r} has format {fmt!r}; this simstore reads simstore format "
                f"versions {', '.join(map(str, F.FORMAT_VERSIONS))} (upgrade simstore or rebuild)"
            )
        layout = Layout.from_dict(F.from_json(txn.get(b"layout", db=meta), "layout"))
        config = FingerprintConfig.from_dict(
            F.from_json(txn.get(b"fingerprint", db=meta), "fingerprint")
        )
        exact = _exact_recorded(txn, meta, path)
        raw = txn.get(IDKEYS_KEY, db=meta)
        ordered = raw is not None and F.from_json(raw, "idkeys") == _BY_VALUE
    finally:
        txn.abort()
    if not F.has_runs(fmt) and (fmt["version"] == 2) != config.has_signature:
        raise CorruptStoreError(
            f"store {path!r}: format version {fmt['version']} does not go with its config "
            f"{config.scheme}"
        )
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
                exact=exact, ordered_ids=ordered)
