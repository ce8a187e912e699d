"""Run tables: the permutation tables as sorted runs, probed in C from process memory.

Every table is derived from the docs table, so the docs split by internal id
into three *levels*: **base** (iid < ``base_end``) and **L1** (< ``l1_end``),
each per table a sorted array of (permuted fingerprint, iid) stored as runs
(:mod:`simstore.store.runfile`), and **recent** (the rest), read straight from the
docs table and checked by a popcount scan: an add writes only the docs and
ids records and the state record, not a B-tree entry per table. In a
similarity store the band keys are levels too (database ``rbands``).

A write that leaves more than ``RECENT_MAX`` recent docs merges them into L1;
when L1 outgrows ``live / L1_SHARE`` (or removed docs leave too many stale
entries) the levels are rebuilt from the docs table into one base. A merge
is part of the write transaction that triggers it: atomic and crash-safe
like any LMDB commit, and readers never wait on it (MVCC).

Removing a doc leaves its level entries *stale*: queries drop hits whose docs
record is gone (iids are never reused) and the state counts them. A process
keeps each level it has read in memory (keyed by the random generation
written with it) and the recent docs (checked against the XOR hash the
writers keep in the state), so a query is one state read and one C call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import CorruptStoreError
from ..native import core as _core, probe as _probe
from ..search.layout import Layout
from .format import iid_bytes
from .legacy.tables import tables_beyond
from .runfile import (
    BANDS_DB,
    BASE,
    EMPTY,
    L1,
    STATE_DB,
    STATE_KEY,
    State,
    band_keys,
    band_rows,
    drop_level,
    merged,
    mix,
    mix_xor,
    new_gen,
    read_level,
    table_name,
    write_level,
)

__all__ = ["RunBands", "RunTables", "State"]

RUN_ENTRIES = 1 << 15  # keys per run: 256 KB of keys, read in one get
RECENT_MAX = 4096  # recent docs scanned by popcount before a merge into L1
L1_MIN = 1 << 16  # L1 may hold this many docs, or live / L1_SHARE if more
L1_SHARE = 16
STALE_SHARE = 8  # rebuild the levels when stale entries exceed live / STALE_SHARE


# --- the process cache ------------------------------------------------------------------


@dataclass
class _Level:
    gen: int
    keys: list[np.ndarray]  # per table, then the band entries (a similarity store)
    vals: list[np.ndarray]
    segments: dict[int, tuple[int, np.ndarray, np.ndarray, Any, int]] = field(
        default_factory=dict
    )  # per table: the prober's segment (with its directory), built on first use


@dataclass
class _Recent:
    l1_end: int
    upto: int
    xor: int
    iids: np.ndarray
    fps: np.ndarray
    bands: dict[int, list[int]] = field(default_factory=dict)  # band key -> iids

    def add_bands(self, iids: np.ndarray, keys32: np.ndarray | None) -> None:
        """Index recent docs' band keys (band << 32 | key32) for exact lookups."""
        if keys32 is None or not len(iids):
            return
        get = self.bands.setdefault
        for iid, row in zip(iids.tolist(), band_keys(keys32).tolist(), strict=True):
            for key in row:
                get(key, []).append(iid)


class _Walked(NamedTuple):
    iids: np.ndarray
    fps: np.ndarray
    bands: np.ndarray | None  # (n, nbands) uint32 band keys of a similarity store


class RunTables:
    """Handles, cache and query plan of one layout's run tables in one environment."""

    runs = True

    def __init__(self, env: Any, txn: Any, layout: Layout, docs: Any, codec: Any, *,
                 create: bool, nbands: int = 0) -> None:
        self.layout = layout
        n = len(layout.tables)
        self.nbands = nbands
        self.dbs = [env.open_db(table_name(t), txn=txn, create=create) for t in range(n)]
        # every run database: the tables, then the band entries of a similarity store
        self._all = self.dbs + ([env.open_db(BANDS_DB, txn=txn, create=create)] if nbands else [])
        self._meta = env.open_db(STATE_DB, txn=txn, create=create)
        self._docs = docs
        self._codec = codec
        self._specs = [layout.shifts(t) for t in range(n)]
        self._hbits = [layout.header_bits(t) for t in range(n)]
        self._radius = {k: layout.radius_for(k) for k in range(layout.max_k + 1)}
        self._prober = _probe.Prober(self._specs, self._hbits)
        # Band entries are looked up exactly (ss_lookup). In memory their keys are
        # shifted left past the always-zero top bits, so a directory on the top bits
        # spreads them (the order stays the same).
        self._bskip = 32 - max(nbands - 1, 0).bit_length()
        self._bprober = _probe.Prober([(b"\0", b"\x40", b"\0")], [64]) if nbands else None
        self._levels: dict[int, _Level] = {}
        self._recent: _Recent | None = None
        self._wired: tuple[int, ...] | None = None  # what the prober holds
        self._wired_raw: bytes | None = None  # the state record it was wired for

    # --- state ---------------------------------------------------------------------------

    def state(self, txn: Any) -> State:
        """The run tables' state as this transaction sees it."""
        return State.unpack(txn.get(STATE_KEY, db=self._meta))

    def _put_state(self, txn: Any, st: State) -> None:
        txn.put(STATE_KEY, st.pack(), db=self._meta)

    def init(self, txn: Any, next_iid: int = 0) -> None:
        """Write the state of tables without levels (at creation, or a rebuild's start).

        next_iid: the next internal id to hand out (a rebuild keeps the old one).
        """
        self._put_state(txn, State(next=next_iid))

    def next_iid(self, txn: Any, docs: Any = None) -> int:
        """The next internal id (never a removed doc's)."""
        return self.state(txn).next

    # --- single writes -----------------------------------------------------------------

    def index(self, txn: Any, iid: bytes, fp: int) -> None:
        """Note a doc just written to the docs table at iid (>= next); merge if due."""
        st = self.state(txn)
        i = int.from_bytes(iid, "big")
        st = replace(st, next=max(st.next, i + 1), recent_xor=st.recent_xor ^ mix(i, fp))
        self._put_state(txn, self._maybe_merge(txn, st))

    def unindex(self, txn: Any, iid: bytes, fp: int) -> None:
        """Note a doc about to leave the docs table: a stale entry, or out of recent."""
        st = self.state(txn)
        i = int.from_bytes(iid, "big")
        if i < st.l1_end:
            st = replace(st, stale=st.stale + 1)
        else:
            st = replace(st, recent_xor=st.recent_xor ^ mix(i, fp))
        self._put_state(txn, st)

    # --- bulk fill -----------------------------------------------------------------------

    def fill(self, txn: Any, fps: np.ndarray, iids: np.ndarray, before: Any = None,
             bands: np.ndarray | None = None) -> None:
        """Note many docs written (by ``before()``, if given) at new iids; merge if due.

        bands: their (n, nbands) 32-bit band keys in a similarity store.
        """
        if before is not None:
            before()
        if not len(iids):
            return
        st = self.state(txn)
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        iids = np.ascontiguousarray(iids, dtype=np.uint64)
        top = int(iids.max()) + 1
        empty = st.l1_end == 0  # no level written yet
        if empty and int(txn.stat(self._docs)["entries"]) == len(iids) and (
            bands is not None or not self.nbands
        ):
            # An empty store filled at once: the arrays are the whole base.
            self._write_base(txn, _Walked(iids, fps, bands))
            gen = new_gen()
            top = max(top, st.next)
            self._put_state(txn, State(next=top, base_end=top, l1_end=top, base_gen=gen,
                                       l1_gen=gen ^ 2))
            return
        st = replace(st, next=max(st.next, top),
                     recent_xor=st.recent_xor ^ mix_xor(iids, fps))
        self._put_state(txn, self._maybe_merge(txn, st))

    # --- merges --------------------------------------------------------------------------

    def _walk(self, txn: Any, start: int) -> _Walked:
        """(iids, fps, band keys) of the docs with iid >= start, in iid order."""
        cur = txn.cursor(self._docs)
        sig = bool(self.nbands)
        if not cur.set_range(iid_bytes(start)):
            return _Walked(EMPTY, EMPTY,
                           np.empty((0, self.nbands), dtype=np.uint32) if sig else None)
        cols = self._codec.walk(cur.iternext(), with_ids=False, with_bands=sig)
        return _Walked(cols.iids, cols.fps, cols.bands if sig else None)

    def _rows(self, w: _Walked) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sorted (keys, vals) of docs in every run database."""
        out = [_core.sort_table(w.fps, w.iids, *spec) for spec in self._specs]
        if self.nbands:
            assert w.bands is not None
            out.append(band_rows(w.iids, w.bands))
        return out

    def _write(self, txn: Any, i: int, level: int, keys: np.ndarray, vals: np.ndarray) -> None:
        """Write run database i's level (the band entries as low halves, per band)."""
        write_level(txn, self._all[i], level, keys, vals, run_entries=RUN_ENTRIES,
                    halves=i == len(self.dbs))

    def _write_base(self, txn: Any, w: _Walked) -> None:
        for i, (keys, vals) in enumerate(self._rows(w)):
            self._write(txn, i, BASE, keys, vals)
            drop_level(txn, self._all[i], L1)

    def _maybe_merge(self, txn: Any, st: State) -> State:
        """Merge recent docs into L1, or rebuild the levels, when due; the new state."""
        pending = st.next - st.l1_end
        if pending <= RECENT_MAX and not st.stale:
            return st
        live = int(txn.stat(self._docs)["entries"])
        l1_docs = st.l1_end - st.base_end
        if st.stale * STALE_SHARE > live or l1_docs + pending > max(L1_MIN, live // L1_SHARE):
            return self.rebuild_levels(txn, st)
        if pending <= RECENT_MAX:
            return st
        new = self._rows(self._walk(txn, st.l1_end))
        old = self._level(txn, L1, st.l1_gen)
        for i in range(len(self._all)):
            keys = old.keys[i] if i < len(self.dbs) else old.keys[i] >> np.uint64(self._bskip)
            self._write(txn, i, L1, *merged((keys, old.vals[i]), new[i]))
        return replace(st, l1_end=st.next, l1_gen=new_gen(), recent_xor=0)

    def rebuild_levels(self, txn: Any, st: State) -> State:
        """Every live doc into one base level (no stale entries); the new state."""
        self._write_base(txn, self._walk(txn, 0))
        gen = new_gen()
        return replace(st, base_end=st.next, l1_end=st.next, base_gen=gen, l1_gen=gen ^ 2,
                       stale=0, recent_xor=0)

    # --- the cache -----------------------------------------------------------------------

    def _level(self, txn: Any, level: int, gen: int) -> _Level:
        """A level's arrays, from the cache when its generation matches."""
        got = self._levels.get(level)
        if got is not None and got.gen == gen:
            return got
        keys, vals = [], []
        for db in self._all:
            k, v = read_level(txn, db, level)
            keys.append(k)
            vals.append(v)
        if self.nbands:
            keys[-1] = keys[-1] << np.uint64(self._bskip)
        got = self._levels[level] = _Level(gen, keys, vals)
        return got

    def _recent_docs(self, txn: Any, st: State) -> _Recent:
        """The recent docs (iid >= l1_end), extended or re-read as the state says."""
        rec = self._recent
        if rec is not None and rec.l1_end == st.l1_end and rec.upto == st.next \
                and rec.xor == st.recent_xor:
            return rec
        if rec is not None and rec.l1_end == st.l1_end and rec.upto < st.next:
            w = self._walk(txn, rec.upto)
            xor = rec.xor ^ mix_xor(w.iids, w.fps)
            if xor == st.recent_xor:
                rec.add_bands(w.iids, w.bands)  # the old record is dropped just below
                rec = _Recent(st.l1_end, st.next, xor, np.concatenate((rec.iids, w.iids)),
                              np.concatenate((rec.fps, w.fps)), rec.bands)
                self._recent = rec
                return rec
        w = self._walk(txn, st.l1_end)
        rec = _Recent(st.l1_end, st.next, st.recent_xor, w.iids, w.fps)
        rec.add_bands(w.iids, w.bands)
        self._recent = rec
        return rec

    def _wire(self, txn: Any, st: State) -> None:
        """Point the prober at the levels and recent docs this state names."""
        tag = (st.base_gen, st.l1_gen, st.l1_end, st.next, st.recent_xor)
        if self._wired == tag:
            return
        base = self._level(txn, BASE, st.base_gen)
        l1 = self._level(txn, L1, st.l1_gen)
        rec = self._recent_docs(txn, st)
        segs: list[tuple[int, np.ndarray, np.ndarray, Any, int]] = []
        for lev in (base, l1):
            for t in range(len(self.dbs)):
                if len(lev.keys[t]):
                    segs.append(self._segment(lev, t))
        if len(rec.iids):
            segs.append((-1, rec.fps, rec.iids, None, 0))
        self._prober.set_segments(segs)
        if self._bprober is not None:
            b = len(self.dbs)
            self._bprober.set_segments(
                [self._segment(lev, b, 0) for lev in (base, l1) if len(lev.keys[b])])
        self._wired = tag

    def _segment(self, lev: _Level, i: int, table: int | None = None
                 ) -> tuple[int, np.ndarray, np.ndarray, Any, int]:
        """Run database i's keys of a level as a prober segment (its table by default)."""
        got = lev.segments.get(i)
        if got is None:
            keys = lev.keys[i]
            dbits = _probe.choose_dbits(len(keys), self._hbits[i] if table is None else 64)
            got = lev.segments[i] = (i if table is None else table, keys, lev.vals[i],
                                     _probe.build_dir(keys, dbits), dbits)
        return got

    # --- search --------------------------------------------------------------------------

    def _sync(self, txn: Any) -> None:
        """Bring the cache and prober to the state this transaction sees."""
        raw = txn.get(STATE_KEY, db=self._meta)
        if raw is None or raw != self._wired_raw:
            self._wire(txn, State.unpack(raw))
            self._wired_raw = bytes(raw)

    def band_candidates(self, txn: Any, keys: np.ndarray) -> list[int]:
        """Internal ids of docs sharing a band key (band << 32 | key32, uint64) with keys.

        Each once, in no particular order; stale ones (removed docs) included.
        """
        self._sync(txn)
        assert self._bprober is not None
        q = np.ascontiguousarray(keys, dtype=np.uint64)
        out = self._bprober.lookup(q << np.uint64(self._bskip))
        rec = self._recent
        if rec is not None and rec.bands:
            get = rec.bands.get
            for key in q.tolist():
                found = get(key)
                if found:
                    out.extend(found)
        return list(dict.fromkeys(out))

    def search(self, txn: Any, q: int, k: int) -> list[tuple[int, bytes, bytes]]:
        """(distance, internal id, docs record) of every live doc within k <= the layout's k.

        The state record is compared as bytes: equal bytes, same levels and
        recent docs, so the prober's runs stand.
        """
        self._sync(txn)
        hits = self._prober.hits(q, k, self._radius[k])
        if not hits:
            return []
        get, docs = txn.get, self._docs
        rows = []
        for v, d in hits:
            iid = iid_bytes(v)
            rec = get(iid, db=docs)
            if rec is not None:  # else a removed doc's stale entry
                rows.append((d, iid, rec))
        return rows

    # --- maintenance ---------------------------------------------------------------------

    def drop(self, txn: Any) -> None:
        """Delete every run table of this layout (for a rebuild)."""
        for db in self._all:
            txn.drop(db, delete=True)
        txn.delete(STATE_KEY, db=self._meta)

    def check(self, txn: Any, iids: np.ndarray, fps: np.ndarray) -> list[str]:
        """Problems of the run tables against the live docs (iids, fps in iid order)."""
        try:
            st = self.state(txn)
        except CorruptStoreError as exc:
            return [str(exc)]
        problems = []
        if len(iids) and int(iids[-1]) >= st.next:
            problems.append(f"run state: next internal id {st.next} is not past the last doc")
        if not st.base_end <= st.l1_end <= st.next:
            problems.append(f"run state: level bounds {st.base_end}, {st.l1_end} out of order")
        recent = iids >= np.uint64(st.l1_end)
        if mix_xor(iids[recent], fps[recent]) != st.recent_xor:
            problems.append("run state: the recent docs' hash does not match the docs table")
        for t, db in enumerate(self.dbs):
            problems.extend(self._check_table(txn, t, db, st, iids[~recent], fps[~recent]))
        extra = self.extra(txn)
        if extra:
            problems.append(f"tables left over from another layout: {', '.join(extra)}")
        return problems

    def _check_table(self, txn: Any, t: int, db: Any, st: State,
                     iids: np.ndarray, fps: np.ndarray) -> list[str]:
        want = _core.permute_blocks(fps, *self._specs[t])
        return self._check_level_rows(txn, table_name(t).decode(), db, st, want, iids, 1)

    def check_bands(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band entries against the live docs (iids and band keys, iid order)."""
        try:
            st = self.state(txn)
        except CorruptStoreError as exc:
            return [str(exc)]
        old = iids < np.uint64(st.l1_end)
        want, vals = band_rows(iids[old], keys32[old])
        return self._check_level_rows(txn, "of band keys", self._all[-1], st, want, vals,
                                      self.nbands)

    def _check_level_rows(self, txn: Any, name: str, db: Any, st: State, want: np.ndarray,
                          want_vals: np.ndarray, per_doc: int) -> list[str]:
        """A run database's levels hold exactly the wanted (key, iid) rows, plus
        per_doc stale rows per removed doc."""
        try:
            levels = [read_level(txn, db, lev) for lev in (BASE, L1)]
        except CorruptStoreError as exc:
            return [f"table {name}: {exc}"]
        problems = []
        bounds = ((0, st.base_end), (st.base_end, st.l1_end))
        for lev, ((_, vals), (lo, hi)) in enumerate(zip(levels, bounds, strict=True)):
            if len(vals) and (int(vals.min()) < lo or int(vals.max()) >= hi):
                problems.append(f"table {name} level {lev}: an internal id outside its level")
        keys = np.concatenate([lv[0] for lv in levels])
        vals = np.concatenate([lv[1].astype(np.uint64) for lv in levels])
        live = np.isin(vals, want_vals)
        stale = int((~live).sum())
        got = sorted(zip(keys[live].tolist(), vals[live].tolist(), strict=True))
        need = sorted(zip(want.tolist(), want_vals.tolist(), strict=True))
        if got != need:
            gs, ns = set(got), set(need)
            problems.append(
                f"table {name}: {len(ns - gs)} {'docs' if per_doc == 1 else 'band entries'} "
                "missing, "
                f"{len(gs - ns) + len(got) - len(gs)} wrong entries"
            )
        if stale != st.stale * per_doc:
            problems.append(
                f"table {name}: {stale} stale entries, the state says {st.stale * per_doc}"
            )
        return problems

    def extra(self, txn: Any) -> list[str]:
        """Names of run tables beyond this layout's."""
        return tables_beyond(txn, b"r", len(self.dbs))


class RunBands:
    """The band entries of a format-3 similarity store, kept by its :class:`RunTables`.

    The band keys are levels of the run tables too (database ``rbands``: keys
    band << 32 | key32), derived from the docs records with them: the writes
    here are no-ops, the reads look them up in the levels and recent docs.
    """

    runs = True

    def __init__(self, tables: RunTables) -> None:
        self.tables = tables
        self.nbands = tables.nbands

    def index(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Nothing: a recent doc's band keys are read from its docs record."""

    def unindex(self, txn: Any, iid: bytes, keys: list[bytes]) -> None:
        """Nothing: RunTables.unindex counts the stale entries."""

    def fill(self, txn: Any, keys32: np.ndarray, iids: np.ndarray) -> None:
        """Nothing: RunTables.fill takes the band keys."""

    def drop(self, txn: Any) -> None:
        """Nothing: RunTables.drop drops the band runs."""

    def candidates(self, txn: Any, keys: list[bytes]) -> list[bytes]:
        """Internal ids (8-byte keys) sharing at least one band key (4-byte, band by band)."""
        k32 = np.frombuffer(b"".join(keys), dtype=">u4")
        return [iid_bytes(i) for i in self.tables.band_candidates(txn, band_keys(k32))]

    def candidates_many(self, txn: Any, keys32: np.ndarray) -> list[list[int]]:
        """For each row of (n, nbands) 32-bit band keys: the internal ids sharing one."""
        return [self.tables.band_candidates(txn, row) for row in band_keys(keys32)]

    def check(self, txn: Any, iids: np.ndarray, keys32: np.ndarray) -> list[str]:
        """Problems of the band entries against the live docs."""
        return self.tables.check_bands(txn, iids, keys32)
