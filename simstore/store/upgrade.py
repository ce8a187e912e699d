"""Rewrite a store written by a development version of simstore in the frozen format.

Development versions wrote formats 1-18 (docs/format.md, "Versioning"). What every one
of them shares is enough to rebuild a store: the ``meta`` layout and fingerprint
config, the ``docs`` records (tag 1 or 2: the record of today without its time of
storage) and, in an exact store, the ``shingles`` sets keyed by internal id. The
upgrade rewrites each docs record with a time of storage (the upgrade's: the old
formats kept none), drops every other database (the old table engines) and derives
the run tables from the records, all in ONE write transaction: a kill leaves the old
store or the new one, complete. It needs the store alone (no other handle open).
"""

from __future__ import annotations

import os
from typing import Any

import lmdb

from .._validate import check_path
from ..exceptions import CorruptStoreError, FormatVersionError, NotAStoreError
from ..search.layout import Layout
from ..text.fingerprinting import FingerprintConfig
from . import format as F
from .check.pages import check_alone
from .env import MAX_DBS, StoreLock, translate
from .schema import SHINGLES_DB, record_codec, table_engine, write_meta

_KEPT = (b"meta", b"docs", SHINGLES_DB)
_CHUNK = 50_000  # records rewritten per cursor pass
_OLD_TAGS = {False: 1, True: 2}  # docs record tags of the development formats


def upgrade(path: str | bytes | os.PathLike[str]) -> dict[str, Any]:
    """Rewrite the store at path in the current format; what was done, as
    ``{"path", "from", "to", "documents"}`` (``from == to``: already current)."""
    spath = check_path(path, "path")
    if not os.path.isfile(os.path.join(spath, "data.mdb")):
        raise NotAStoreError(f"no simstore store at {spath!r} (no data.mdb)")
    lock = StoreLock(spath, readonly=False)
    lock.take_shared(lock)
    try:
        with lock.exclusive("upgrade"):
            return _upgrade_alone(spath)
    finally:
        lock.release()


def _upgrade_alone(path: str) -> dict[str, Any]:
    damage = check_alone(path)  # before LMDB maps a page: a damaged one must not kill us
    if damage:
        raise CorruptStoreError(
            f"store {path!r} looks damaged: {damage[0]}; restore data.mdb from a copy "
            "before upgrading it (nothing was changed)")
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    map_size = 2 * size + (64 << 20)
    for _ in range(8):
        try:
            env = lmdb.open(path, map_size=map_size, subdir=True, create=False,
                            max_dbs=MAX_DBS, lock=True)
        except lmdb.Error as exc:
            raise translate(exc, path) from exc
        try:
            return _rewrite(env, path)
        except lmdb.MapFullError:
            map_size *= 2
        except lmdb.Error as exc:
            raise translate(exc, path) from exc
        finally:
            env.close()
    raise CorruptStoreError(f"store {path!r}: the upgrade kept running out of map space")


def _rewrite(env: Any, path: str) -> dict[str, Any]:
    txn = env.begin(write=True)
    try:
        if txn.get(b"meta") is None:
            raise NotAStoreError(f"{path!r} holds an LMDB environment that is not a simstore "
                                 "store (no 'meta' database)")
        meta = env.open_db(b"meta", txn=txn, create=False)
        fmt = F.from_json(txn.get(b"format", db=meta), "format")
        version = fmt.get("version")
        if F.is_known_format(fmt):
            return {"path": path, "from": version, "to": version, "documents": None}
        if fmt.get("format") != F.FORMAT or version not in F.DEV_VERSIONS:
            raise FormatVersionError(
                f"store {path!r} has format {fmt!r}, which no simstore wrote; nothing to "
                "upgrade from")
        layout = Layout.from_dict(F.from_json(txn.get(b"layout", db=meta), "layout"))
        config = FingerprintConfig.from_dict(
            F.from_json(txn.get(b"fingerprint", db=meta), "fingerprint"))
        sig = config.has_signature
        codec = record_codec(config)
        docs = env.open_db(b"docs", txn=txn, create=False)
        count = _restamp(txn, docs, codec, _OLD_TAGS[sig], F.now_ms())
        _drop_tables(env, txn)
        write_meta(txn, meta, layout, config)
        tables = table_engine(env, txn, layout, docs, codec, config, create=True)
        cur = txn.cursor(docs)
        tables.init(txn, int.from_bytes(cur.key(), "big") + 1 if cur.last() else 0)
        cols = codec.walk(txn.cursor(docs).iternext(), with_bands=sig)
        assert cols.encs is not None
        tables.fill(txn, cols.fps, cols.iids, bands=cols.bands if sig else None,
                    idh=F.id_hashes(cols.encs))
        txn.commit()
        txn = None
        return {"path": path, "from": version, "to": F.FORMAT_VERSION, "documents": count}
    finally:
        if txn is not None:
            txn.abort()


def _restamp(txn: Any, docs: Any, codec: F.RecordCodec, old_tag: int, at: int) -> int:
    """Give every docs record of the old layout the new one (tag, time of storage)."""
    cut, tag, when = codec.at_start, codec.tag, at.to_bytes(8, "big")
    count, start = 0, b""
    while True:
        cur = txn.cursor(docs)
        if not (cur.set_range(start) if start else cur.first()):
            return count
        chunk = []
        for key, rec in cur:
            if rec[0] != old_tag or len(rec) <= cut:
                raise CorruptStoreError(
                    f"docs record {bytes(key)!r} has tag {rec[0]} and {len(rec)} bytes: "
                    f"not a development-format record of this store (tag {old_tag})")
            chunk.append((bytes(key), tag + bytes(rec[1:cut]) + when + bytes(rec[cut:])))
            if len(chunk) == _CHUNK:
                break
        for key, rec in chunk:
            txn.put(key, rec, db=docs)
        count += len(chunk)
        if len(chunk) < _CHUNK:
            return count
        start = (int.from_bytes(chunk[-1][0], "big") + 1).to_bytes(8, "big")


def _drop_tables(env: Any, txn: Any) -> None:
    """Delete every database but meta, docs, shingles and the crawl frontier's."""
    names = [bytes(name) for name, _ in txn.cursor()]
    for name in names:
        if name in _KEPT or name.startswith(b"crawl."):
            continue
        try:
            db = env.open_db(name, txn=txn, create=False)
        except lmdb.IncompatibleError:  # the dupsort tables of formats 1 and 2
            db = env.open_db(name, txn=txn, create=False, dupsort=True)
        txn.drop(db, delete=True)
