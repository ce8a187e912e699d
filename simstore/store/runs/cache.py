"""The run tables' process cache: the levels a process has opened, read in place.

:class:`LevelCache`, owned by :class:`~simstore.store.runs.tables.RunTables`,
keeps, per level, its runs' pointers into LMDB's map (fetched when a probe first
lands in them), the recent docs, and the probers pointed at both; it brings them
to the state a transaction sees before every query, and looks keys up exactly in
the band keys' and the ids' run databases. The invariant that keeps
those pointers valid is stated in :mod:`simstore.store.runs.tables`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import lmdb
import numpy as np

from ...exceptions import CorruptStoreError
from ...native import lmdbmap as _lmdbmap, probe as _probe
from ...native.keytable import KeyTable
from ..check.ranges import TreeGuard
from .format import STATE_KEY, State, lineage, mix, mix_xor, place_run
from .index import read_index
from .rows import band_keys

# A level holding at most 1 / SMALL_LEVEL of its table's keys spans its probes as if it
# held SMALL_LEVEL_KEYS times as many (its ranges then hold a few keys, not native.probe's
# SPAN_KEYS): fewer probes of its mostly empty header values, which helps grown stores at
# k = 8 and costs nothing at k = 3 and 5 (docs/bench/journal.md, "Small levels probe wider").
SMALL_LEVEL = 8
SMALL_LEVEL_KEYS = 4
WHOLE_AT = 8  # a process that has fetched 1 / WHOLE_AT of a level's runs fetches the rest
# (unless it reads sparsely: LevelCache._sparse)


@dataclass
class OpenLevel:
    """A level as this process has opened it."""

    gen: int
    epoch: int  # the map epoch its pointers were taken in
    sets: list[_probe.RunSet]  # per run database: the prober's view of its runs


class RecentDocs:
    """The recent docs (iid >= flushed, up to upto) as this process read them.

    Their iids and fps grow in place, in arrays of spare capacity: a view handed out
    (``iids``, ``fps``) covers only the docs it saw, and a doc is only ever appended
    past every view (a record that must lose docs is replaced, never cut).
    """

    def __init__(self, flushed: int, upto: int, xor: int, iids: np.ndarray, fps: np.ndarray,
                 has_ids: bool = False) -> None:
        self.flushed, self.upto, self.xor = flushed, upto, xor
        self._n = len(iids)
        self._iids = np.ascontiguousarray(iids, dtype=np.uint64)
        self._fps = np.ascontiguousarray(fps, dtype=np.uint64)
        self.bands = KeyTable()  # band entry key (band << 32 | key32) -> iids
        self.ids: dict[int, list[int]] = {}  # id hash -> iids
        self.has_ids = has_ids  # ids holds every recent doc's (read once a lookup wants it)

    @property
    def iids(self) -> np.ndarray:
        return self._iids[: self._n]

    @property
    def fps(self) -> np.ndarray:
        return self._fps[: self._n]

    def _room(self, more: int) -> None:
        """Capacity for more docs past the last (the arrays copied to twice the size)."""
        need = self._n + more
        if need <= len(self._iids):
            return
        cap = max(need, 2 * len(self._iids), 64)
        for name in ("_iids", "_fps"):
            grown = np.empty(cap, dtype=np.uint64)
            grown[: self._n] = getattr(self, name)[: self._n]
            setattr(self, name, grown)

    def extend(self, w: Any, ids: bool) -> None:
        """Append docs read by a walk or offered by a bulk write (iid order, past upto)."""
        n = len(w.iids)
        self._room(n)
        self._iids[self._n : self._n + n] = w.iids
        self._fps[self._n : self._n + n] = w.fps
        self._n += n
        self.add_bands(w.iids, w.bands)
        if ids:
            self.add_ids(w.iids, w.idh)

    def append(self, one: OneDoc, ids: bool) -> None:
        """Append one doc a single write offered."""
        self._room(1)
        self._iids[self._n] = one.iid
        self._fps[self._n] = one.fp
        self._n += 1
        self.bands.add_bands(one.bands, one.iid)
        if ids:
            self.ids.setdefault(one.idh, []).append(one.iid)

    def add_bands(self, iids: np.ndarray, keys32: np.ndarray | None) -> None:
        """Index recent docs' band keys (band << 32 | key32) for exact lookups."""
        if keys32 is None or not len(iids):
            return
        self.bands.add(band_keys(keys32), iids, per=keys32.shape[1])

    def add_ids(self, iids: np.ndarray, idh: np.ndarray | None) -> None:
        """Index recent docs' id hashes for exact lookups."""
        if idh is None:
            return
        get = self.ids.setdefault
        for iid, key in zip(iids.tolist(), idh.tolist(), strict=True):
            get(key, []).append(iid)


class OneDoc(NamedTuple):
    """A doc a single write added: its iid, fp, band keys (4 bytes big-endian each, band
    by band, as its docs record holds them) and id hash."""

    iid: int
    fp: int
    bands: bytes
    idh: int


@dataclass
class Offer:
    """Docs this process's writes added past the recent docs (iids start..stop, in map
    epoch ``epoch``), in order: walks' worth of a bulk write, or single docs; xor: the
    XOR of their mix."""

    start: int
    stop: int
    epoch: int
    xor: int
    parts: list[Any] = field(default_factory=list)


class Walk(Protocol):
    """How the cache reads the docs with iid >= start from the docs table, in iid order:
    their iids, fps, band keys and (unless not ids) id hashes (RunTables' walk)."""

    def __call__(self, txn: Any, start: int, ids: bool = True) -> Any: ...


class LevelCache:
    """The process cache of one :class:`~simstore.store.runs.tables.RunTables`: its levels
    opened in place, its recent docs, and the probers pointed at both (the tables' prober,
    the band entries' and the ids' exact ones)."""

    def __init__(self, env: Any, meta: Any, dbs: list[Any], run_dbs: list[Any],
                 guards: list[TreeGuard], *,
                 bands_at: int | None, ids_at: int, prober: _probe.Prober,
                 bprober: _probe.Prober | None, iprober: _probe.Prober, walk: Walk,
                 map_epoch: Callable[[], int] | None) -> None:
        """guards: of the pages a cursor of each run database steps on; map_epoch: the
        environment's epoch (changes whenever this process remaps); without it levels are
        read as private copies, never in place."""
        self._env = env
        self._meta = meta
        self._psize = int(env.stat()["psize"])  # a shorter run record is copied (parse_run)
        self.dbs = dbs
        self.run_dbs = run_dbs
        self._guards = guards
        self.bands_at = bands_at
        self.ids_at = ids_at
        self._prober = prober
        self._bprober = bprober
        self._iprober = iprober
        self._walk = walk
        self._map_epoch = map_epoch
        self._txn: Any = None  # the transaction of the query under way (for _fetch)
        self._levels: dict[int, OpenLevel] = {}
        self._recent: RecentDocs | None = None
        # ((state's levels, map epoch), their OpenLevels, ids each spans): what the exact
        # probers hold
        self._wired_levels: tuple[tuple[Any, int], list[OpenLevel], list[int]] | None = None
        # what the tables' prober lacks: levels, recent docs, keys a table, ids each level spans
        self._unwired: tuple[list[OpenLevel], RecentDocs, int, list[int]] | None = None
        # the docs this process's writes added past the recent docs, not yet taken in
        self._offer: Offer | None = None
        self._want_ids = False  # this process looks ids up: its recent docs carry their id hashes
        self._wired_raw: bytes | None = None  # the state record it was wired for
        self._wired_epoch = -2  # and the map epoch
        self._map_at: tuple[int, int] | None = None  # (map epoch, the map's address then)

    def epoch(self) -> int:
        """The map epoch levels are read in (-1: never in place)."""
        return -1 if self._map_epoch is None else self._map_epoch()

    def offer(self, start: int, stop: int, docs: Any, xor: int) -> None:
        """Docs a bulk write just added (iids start..stop, a walk's worth; xor: their
        mix_xor): the recent docs' next extension, taken only in this map epoch and only
        if they bring the recent docs' XOR hash to the state's (never the docs of a write
        that did not commit)."""
        self._offered(start, stop, xor, docs)

    def offer_one(self, one: OneDoc) -> None:
        """A doc a single write just added (iid next): as :meth:`offer`, without the
        walk that would read it back."""
        self._offered(one.iid, one.iid + 1, mix(one.iid, one.fp), one)

    def _offered(self, start: int, stop: int, xor: int, part: Any) -> None:
        """Append to the offer under way when it ends where this starts (writes not
        synced in between), else begin one."""
        epoch = self.epoch()
        got = self._offer
        if got is not None and got.stop == start and got.epoch == epoch:
            got.stop, got.xor = stop, got.xor ^ xor
            got.parts.append(part)
        else:
            self._offer = Offer(start, stop, epoch, xor, [part])

    def _level(self, txn: Any, level: int, gen: int) -> OpenLevel:
        """A level's runs, from the cache when its generation and the map epoch match.

        A level is opened by its index alone: its runs are fetched (:meth:`_fetch`)
        when a probe first lands in them.
        """
        epoch = self.epoch()
        got = self._levels.get(level)
        if got is not None and got.gen == gen and got.epoch == epoch:
            return got
        # A merge's slice moved this level on within its lineage: the runs this process
        # holds that the new index still names are the same records (see next_gen)
        kept = got.sets if got is not None and got.epoch == epoch \
            and lineage(got.gen) == lineage(gen) else None
        nt = len(self.dbs)
        index: list[np.ndarray] = []
        with self._reading(txn, level, gen) as src:
            for db, guard in zip(self.run_dbs, self._guards, strict=True):
                firsts = read_index(src, db, guard, level)
                if firsts is None:
                    raise CorruptStoreError(f"table level {level} has no index record: the "
                                            "store is damaged (verify() says more)")
                index.append(firsts)
        # a store read sparsely never fetches a level whole: that reads every run
        whole_at = 0 if self._sparse() else WHOLE_AT
        sets = [_probe.RunSet(i if i < nt else 0, [None] * len(firsts), firsts,
                              kw=4 if i == self.bands_at else 8,
                              fetch=functools.partial(self._fetch, level, gen, i, firsts),
                              whole_at=whole_at)
                for i, firsts in enumerate(index)]
        for rs, old in zip(sets, kept or [], strict=bool(kept)):
            rs.adopt(old)  # the runs both name: the same records
        for rs in sets:  # a set this small would be fetched whole by its first probe
            if rs.loaded < rs.nruns <= WHOLE_AT:
                rs.load(range(rs.nruns))
        got = self._levels[level] = OpenLevel(gen, epoch, sets)
        return got

    @contextlib.contextmanager
    def _reading(self, txn: Any, level: int, gen: int, lineage_ok: bool = False
                 ) -> Iterator[Any]:
        """The transaction to read a level's records in: in place, a read transaction of
        its own begun with ``buffers=True`` when that one sees the same generation (see
        the module's docstring), or with lineage_ok a later one of the same lineage (a
        run record both name is the same record: the caller reads one it no longer has
        from txn), else txn itself, as private bytes (txn's own write made the level,
        or a commit came between the two transactions)."""
        inplace = None
        if self._map_epoch is not None:
            try:
                inplace = self._env.begin(buffers=True)
            except lmdb.Error:  # e.g. another process grew the map: read a copy instead
                inplace = None
        try:
            if inplace is not None:
                raw = inplace.get(STATE_KEY, db=self._meta)
                now = None if raw is None else State.unpack(raw).gens().get(level)
                if now == gen or (lineage_ok and now is not None
                                  and lineage(now) == lineage(gen)):
                    yield inplace
                    return
            yield txn
        finally:
            if inplace is not None:
                inplace.abort()

    def _fetch(self, level: int, gen: int, i: int, firsts: np.ndarray,
               idxs: Sequence[int]) -> list[_probe.Placed | _probe.Run]:
        """Runs idxs of a level (first keys firsts) of run database i as the query under
        way sees them."""
        db, lead = self.run_dbs[i], bytes((level,))
        with self._reading(self._txn, level, gen, lineage_ok=True) as src:
            out = []
            in_place = src is not self._txn
            guard = self._guards[i]
            cur = src.cursor(db=db) if in_place and self._sparse() else None
            pages = self._map_pages() if cur is not None else 0
            for at in idxs:
                key = lead + int(firsts[at]).to_bytes(8, "big")
                guard.check(src, key, stop=key + b"\0")  # its leaf and overflow pages
                in_map = in_place
                val = self._in_map(cur, key, pages) if cur is not None else src.get(key, db=db)
                if val is None and in_map:  # merged away since: a copy
                    val, in_map = self._txn.get(key, db=db), False
                if val is None:
                    raise CorruptStoreError(
                        f"table level {level} names a run its index has and the table not")
                out.append(place_run(key, val, level, self._psize, in_map))
        return out

    def _sparse(self) -> bool:
        """Whether runs are read sparsely: without readahead (a store larger than memory)
        a fetch reads a run's first page, placing it from its leaf node, and a probe
        the pages it needs; with it a fetch reads the run whole, as py-lmdb returns it,
        mapping its pages at once for the probes that follow."""
        return self._map_epoch is not None and not self._env.flags()["readahead"]

    def _map_pages(self) -> int:
        """Pages no record of a snapshot this process reads lies beyond: the last
        commit's, within this process's map."""
        return _lmdbmap.snapshot_pages(self._env.info(), self._psize)

    def _in_map(self, cur: Any, key: bytes, pages: int) -> Any:
        """The value of a run record in place, or None when there is none: from its leaf
        node when the map's address is known for this epoch (only the record's first
        page read), else as py-lmdb returns it (every page read), which tells the
        address. cur: a cursor of a read transaction begun with ``buffers=True``."""
        if not cur.set_key(key):
            return None
        epoch = self.epoch()
        if self._map_at is not None and self._map_at[0] == epoch:
            val = _lmdbmap.map_value(self._map_at[1], pages, self._psize, cur.key())
            return val if val is not None else cur.value()  # (a record held inline)
        val = cur.value()
        base = _lmdbmap.map_base(cur.key(), val, self._psize)
        if base is not None:
            self._map_at = (epoch, base)
        return val

    def _recent_docs(self, txn: Any, st: State, epoch: int) -> RecentDocs:
        """The recent docs (iid >= flushed), extended (by the docs offered in this map
        epoch, or a walk) or re-read as the state says; with their id hashes only once
        this process has looked an id up (a pure reader never decodes and hashes the ids
        of the docs each commit adds)."""
        rec = self._recent
        ids = self._want_ids
        if rec is not None and rec.has_ids != ids:
            rec = None  # (the first lookup by id: read them again with their ids)
        if rec is not None and rec.flushed == st.flushed and rec.upto == st.next \
                and rec.xor == st.recent_xor:
            return rec
        offer, self._offer = self._offer, None
        if rec is not None and rec.flushed == st.flushed and rec.upto < st.next:
            # the docs this process wrote past them, if it offered those, else a walk; both
            # must bring the XOR hash to the state's (else a whole walk below)
            if offer is not None and (offer.start, offer.stop, offer.epoch) == (
                    rec.upto, st.next, epoch):
                if rec.xor ^ offer.xor == st.recent_xor:
                    for part in offer.parts:
                        if isinstance(part, OneDoc):
                            rec.append(part, ids)
                        else:
                            rec.extend(part, ids)
                    rec.upto, rec.xor = st.next, st.recent_xor
                    return rec
            else:
                w = self._walk(txn, rec.upto, ids)
                if rec.xor ^ mix_xor(w.iids, w.fps) == st.recent_xor:
                    rec.extend(w, ids)
                    rec.upto, rec.xor = st.next, st.recent_xor
                    return rec
        w = self._walk(txn, st.flushed, ids)
        rec = RecentDocs(st.flushed, st.next, st.recent_xor, w.iids, w.fps, has_ids=ids)
        rec.add_bands(w.iids, w.bands)
        if ids:
            rec.add_ids(w.iids, w.idh)
        self._recent = rec
        return rec

    def _wire(self, txn: Any, st: State, epoch: int) -> None:
        """Point the probers at the levels and recent docs this state names in this map
        epoch (the levels looked at again only when they or the epoch changed: a single
        write's state moves on, its levels seldom)."""
        at = (st.levels, epoch)
        if self._wired_levels is not None and self._wired_levels[0] == at:
            levels, sizes = self._wired_levels[1:]
        else:
            gens = st.gens()
            for lid in [lid for lid in self._levels if lid not in gens]:
                del self._levels[lid]  # a level merged away: forget its pointers
            levels = [self._level(txn, lv.id, lv.gen) for lv in st.levels]
            for prober, db in ((self._bprober, self.bands_at), (self._iprober, self.ids_at)):
                if prober is not None and db is not None:
                    prober.set_sets([lev.sets[db] for lev in levels if lev.sets[db].nruns])
            # about how many keys each level holds, which sets how far its probes span
            sizes = [hi - lo for _, lo, hi in st.bounds()]
            self._wired_levels = (at, levels, sizes)
        rec = self._recent_docs(txn, st, epoch)
        # the tables' prober: wired by the next search (with about how many keys a table
        # holds)
        self._unwired = (levels, rec, st.next - st.stale, sizes)

    def wire_tables(self) -> None:
        """Point the tables' prober at the levels and recent docs _wire saw (a write that
        only looks ids up never needs it)."""
        if self._unwired is None:
            return
        levels, rec, keys, sizes = self._unwired
        nt = len(self.dbs)
        sets: list[_probe.RunSet] = []
        counts: list[int | None] = []
        for lev, size in zip(levels, sizes, strict=True):
            for t in range(nt):
                if lev.sets[t].nruns:
                    sets.append(lev.sets[t])
                    small = size * SMALL_LEVEL <= keys  # (see SMALL_LEVEL)
                    counts.append(size * SMALL_LEVEL_KEYS if small else None)
        if len(rec.iids):
            sets.append(_probe.RunSet(-1, [_probe.Run(rec.fps, rec.iids)]))
            counts.append(None)
        self._prober.set_sets(sets, counts)
        self._prober.set_size(keys)
        self._unwired = None

    def sync(self, txn: Any) -> None:
        """Bring the cache and probers to the state this transaction sees (and the map);
        a run a probe then needs is fetched through this transaction's view."""
        self._txn = txn
        raw = txn.get(STATE_KEY, None, self._meta)
        epoch = self.epoch()
        if raw is None or raw != self._wired_raw or self._wired_epoch != epoch:
            self._wire(txn, State.unpack(raw), epoch)
            self._wired_raw = bytes(raw)
            self._wired_epoch = epoch

    # --- exact lookups (band keys, id hashes) ---------------------------------------

    def band_candidates(self, txn: Any, keys: np.ndarray) -> list[int]:
        """Internal ids of docs sharing a band key (band << 32 | key32, uint64) with keys.

        Each once, in no particular order; stale ones (removed docs) included.
        """
        return self._exact(txn, self._bprober, keys, "bands")

    def band_parts(self, txn: Any, bands: np.ndarray) -> tuple[_probe.Prober, KeyTable | None]:
        """The prober of the levels' band entries and the recent docs' band entries (None:
        there are none), brought to txn's state: a caller's one C call looks both up
        itself (:func:`simstore.native.single.similar_one`)."""
        self.sync(txn)
        assert self._bprober is not None
        rec = self._recent
        return self._bprober, rec.bands if rec is not None and len(rec.bands) else None

    def id_candidates(self, txn: Any, hashes: Any) -> list[int]:
        """Internal ids of docs whose id hashes to one of hashes (uint64s, or one int): each
        once, in no particular order, stale ones (removed docs) and other ids of the same
        hash included (:class:`~simstore.store.runs.ids.RunIds` checks their docs records)."""
        if not self._want_ids:  # the first lookup by id: the recent docs' ids from now on
            self._want_ids = True
            self._wired_raw = None
        return self._exact(txn, self._iprober, hashes, "ids")

    def _exact(self, txn: Any, prober: _probe.Prober | None, keys: Any, recent: str
               ) -> list[int]:
        """Values of the keys in a run database's levels (prober) and in the recent docs'
        map of that name, each once."""
        self.sync(txn)
        assert prober is not None
        rec = self._recent
        if isinstance(keys, int):  # a single write's id hash: no array made
            out, keys_list = prober.lookup_one(keys), [keys]
        else:
            q = np.ascontiguousarray(keys, dtype=np.uint64)
            out, keys_list = prober.lookup(q), q.tolist()
        if rec is not None and recent == "bands":
            if len(rec.bands):
                out.extend(rec.bands.find(np.asarray(keys_list, dtype=np.uint64)))
        elif rec is not None and rec.ids:
            get = rec.ids.get
            for key in keys_list:
                found = get(key)
                if found:
                    out.extend(found)
        return out if len(out) < 2 else list(dict.fromkeys(out))
