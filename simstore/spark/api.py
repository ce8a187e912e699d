"""simstore on Apache Spark: fingerprints, all pairs, similar pairs, clusters and dedup of
DataFrames too big for one machine (``pip install 'simstore[spark]'``).

Columns: a fingerprint is a **LongType** column holding the 64 bits as two's complement
(``to_long`` / ``from_long`` for numpy, ``fp_from_hex`` / ``fp_from_unsigned`` and back
for columns); signatures are ``fp`` (long), ``sketch`` (binary) and ``bands``
(array<long>) as :func:`with_signatures` makes them. Ids: an integer or string column,
unique and non-null.

Answers equal the in-memory functions' (``simstore.find_all``, ``find_similar``,
``clusters``): every pair once, nothing else; ``docs/scaling.md`` gives the argument and
how the jobs grow. ``find_all`` and ``find_similar`` run the input check and the
crowded-header sample when called and return a lazy DataFrame; ``clusters`` and ``dedup``
also run the search and their rounds (checkpointed) when called.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._validate import check_int, check_k
from ..exceptions import (
    InvalidConfigError,
    InvalidFingerprintError,
    InvalidSignatureError,
    SimstoreValueError,
)
from ..native.core import MAX_K
from ..search.similar import check_threshold
from .columns import (
    check_config,
    fp_from_hex,
    fp_from_unsigned,
    fp_to_hex,
    fp_to_unsigned,
    from_long,
    to_long,
    with_fingerprints,
    with_signatures,
)
from .common import (
    RA,
    RB,
    REP,
    DataFrame,
    F,
    check_df,
    check_fp_column,
    check_id_column,
    check_partitions,
    check_rows,
    check_signature_columns,
    cluster_session,
    cut_lineage,
    local_session,
)
from .environment import ExecutorEnvironmentError, check_executors, pack_environment
from .graph import DRIVER_EDGES, ID, Graph, components, expand, representatives, star_edges
from .hamming import crowded, header_masks, plan, search
from .similar import similar_graph
from .store import export_store, import_store

__all__ = [
    "Dedup",
    "ExecutorEnvironmentError",
    "check_executors",
    "cluster_session",
    "clusters",
    "dedup",
    "duplicate_groups",
    "export_store",
    "find_all",
    "find_similar",
    "fp_from_hex",
    "fp_from_unsigned",
    "fp_to_hex",
    "fp_to_unsigned",
    "from_long",
    "import_store",
    "local_session",
    "pack_environment",
    "to_long",
    "with_fingerprints",
    "with_signatures",
]

DEFAULT_MAX_GROUP = 1 << 22
DEFAULT_SAMPLE_ROWS = 1_000_000
MODES = ("representative", "clusters")


class Dedup(NamedTuple):
    """What :func:`dedup` gives: the kept rows, and one report row per removed row."""

    kept: DataFrame  # the input's rows (all its columns) that stay
    removed: DataFrame  # (id, kept_<id>, distance | jaccard)


def _hamming_search(
    df: Any, k: Any, id_col: str, fp_col: str, *, groups: bool, check: bool,
    partitions: Any = None, max_group: Any = DEFAULT_MAX_GROUP,
    sample_rows: Any = DEFAULT_SAMPLE_ROWS, seed: int = 0,
) -> DataFrame:
    df = check_df(df)
    id_type = check_id_column(df, id_col)
    check_fp_column(df, fp_col)
    k = check_k(k, maximum=MAX_K)
    max_group = check_int(max_group, "max_group", 2)
    sample_rows = check_int(sample_rows, "sample_rows", 1)
    if check:
        rows = check_rows(df, id_col, {fp_col: InvalidFingerprintError})["rows"]
    else:
        rows = df.count()
    nblocks, combos = plan(rows, k, max_group // 2)
    heavy = []
    if rows > max_group:  # else no key can be crowded
        heavy = crowded(df, fp_col, header_masks(nblocks, combos), rows, max_group,
                        sample_rows, seed)
    parts = check_partitions(partitions, df, rows * len(combos))
    return search(df, id_col, fp_col, id_type, k, nblocks, combos, heavy, parts, groups)


def _hamming_graph(df: Any, k: Any, id_col: str, fp_col: str, *, check: bool,
                   **opts: Any) -> Graph:
    found = _hamming_search(df, k, id_col, fp_col, groups=True, check=check, **opts)
    found = cut_lineage(found.select(RA, RB, F.col("distance").cast("int").alias("distance")))
    links = found.where(F.col("distance") == 0)
    return Graph(found.where(F.col("distance") > 0), links.select(
        F.col(RB).alias(REP), F.col(RA).alias(ID)), "distance", 0)


def _similar_graph(
    df: Any, threshold: Any, id_col: str, sketch_col: str, bands_col: str, config: Any,
    *, check: bool,
) -> Graph:
    df = check_df(df)
    id_type = check_id_column(df, id_col)
    check_signature_columns(df, sketch_col, bands_col)
    cfg = check_config(config, signature=True)
    t = check_threshold(threshold)
    # the search reads its input several times: signatures are computed once
    df = cut_lineage(df.select(id_col, sketch_col, bands_col))
    if check:
        sk, bd = F.col(sketch_col), F.col(bands_col)
        got = check_rows(
            df, id_col, {sketch_col: InvalidSignatureError, bands_col: InvalidSignatureError},
            {"min_len": F.min(F.length(sk)), "max_len": F.max(F.length(sk)),
             "min_bands": F.min(F.size(bd)), "max_bands": F.max(F.size(bd)),
             "null_keys": F.sum(F.when(F.exists(bd, lambda v: v.isNull()), 1).otherwise(0))},
        )
        want = cfg.sketch_bits // 8
        if got["rows"] and not got["min_len"] == got["max_len"] == want:
            raise InvalidSignatureError(
                f"sketches must be {want} bytes ({cfg.sketch_bits} bits, config "
                f"{cfg.scheme}); column {sketch_col!r} holds {got['min_len']}..{got['max_len']}"
            )
        if got["rows"] and not got["min_bands"] == got["max_bands"] == cfg.bands:
            raise InvalidSignatureError(
                f"every row needs {cfg.bands} band keys (config {cfg.scheme}); column "
                f"{bands_col!r} holds {got['min_bands']}..{got['max_bands']}"
            )
        if got["null_keys"]:
            raise InvalidSignatureError(f"column {bands_col!r} holds null band keys")
    return similar_graph(df, t, id_col, sketch_col, bands_col, cfg.sketch_bits, id_type)


def find_all(
    df: DataFrame, k: int, *, id_col: str = "id", fp_col: str = "fp",
    identical: str = "pairs", check: bool = True, partitions: int | None = None,
    max_group: int = DEFAULT_MAX_GROUP, sample_rows: int = DEFAULT_SAMPLE_ROWS, seed: int = 0,
) -> DataFrame:
    """Every pair of rows within Hamming distance k (0..16): (id_a, id_b, distance),
    id_a < id_b, each pair once; the pairs ``simstore.find_all`` gives in memory.

    identical="groups": only pairs between representatives (the smallest id of each set
    of identical fingerprints); :func:`duplicate_groups` gives the copies.
    check: refuse null ids or fingerprints and duplicate ids first (one job).
    partitions: of the search's shuffle (default: max(cores, rows x passes / 2**21)).
    max_group: a (pass, header) key holding more rows than this (by a sample of
    sample_rows rows) is split over salted tasks.
    """
    if identical not in ("pairs", "groups"):
        raise InvalidConfigError(f"'identical' must be one of pairs, groups (got {identical!r})")
    groups = identical == "groups"
    found = _hamming_search(df, k, id_col, fp_col, groups=groups, check=check,
                            partitions=partitions, max_group=max_group,
                            sample_rows=sample_rows, seed=seed)
    if groups:
        found = found.where(F.col("distance") > 0)
    return found.select(F.least(RA, RB).alias("id_a"), F.greatest(RA, RB).alias("id_b"),
                        F.col("distance").cast("int").alias("distance"))


def find_similar(
    df: DataFrame, threshold: float = 0.9, *, id_col: str = "id", sketch_col: str = "sketch",
    bands_col: str = "bands", config: Any = None, check: bool = True,
) -> DataFrame:
    """Every pair of rows sharing a band key with estimated Jaccard >= threshold:
    (id_a, id_b, jaccard), id_a < id_b, as ``simstore.find_similar`` gives in memory.

    config: the signatures' FingerprintConfig (default ``simstore.SIGNATURE_CONFIG``).
    """
    return expand(_similar_graph(df, threshold, id_col, sketch_col, bands_col, config,
                                 check=check))


def duplicate_groups(df: DataFrame, *, id_col: str = "id", fp_col: str = "fp") -> DataFrame:
    """(id, group): for each row, the smallest id holding the same fingerprint."""
    df = check_df(df)
    check_id_column(df, id_col)
    check_fp_column(df, fp_col)
    w = df.groupBy(fp_col).agg(F.min(id_col).alias("group"))
    return df.select(id_col, fp_col).join(w, fp_col).select(id_col, "group")


def _graph(df: Any, k: Any, threshold: Any, cols: dict[str, Any], check: bool,
           opts: dict[str, Any]) -> Graph:
    if (k is None) == (threshold is None):
        raise SimstoreValueError("give exactly one of k (Hamming) or threshold (Jaccard)")
    if k is not None:
        return _hamming_graph(df, k, cols["id_col"], cols["fp_col"], check=check, **opts)
    return _similar_graph(df, threshold, cols["id_col"], cols["sketch_col"],
                          cols["bands_col"], cols["config"], check=check)


def clusters(
    df: DataFrame, *, k: int | None = None, threshold: float | None = None, id_col: str = "id",
    fp_col: str = "fp", sketch_col: str = "sketch", bands_col: str = "bands",
    config: Any = None, check: bool = True, max_rounds: int = 64,
    driver_edges: int = DRIVER_EDGES, **search: Any,
) -> DataFrame:
    """(id, cluster) for every row: the smallest id of its connected component of the
    "within k" (or "estimated Jaccard >= threshold") graph, as ``simstore.clusters``.

    Large-star / small-star rounds, each checkpointed (a reliable checkpoint when the
    SparkContext has a checkpoint directory, else a local one); an edge set of at most
    driver_edges edges is finished on the driver in C (the same answer).
    search: partitions, max_group, sample_rows, seed as :func:`find_all` (k only).
    """
    cols = {"id_col": id_col, "fp_col": fp_col, "sketch_col": sketch_col,
            "bands_col": bands_col, "config": config}
    g = _graph(df, k, threshold, cols, check, search)
    lab = components(star_edges(g), check_int(max_rounds, "max_rounds", 1),
                     check_int(driver_edges, "driver_edges", 0))
    lab = lab.select(F.col("_node").alias(id_col), "_label")
    return df.select(id_col).join(lab, id_col, "left").select(
        id_col, F.coalesce("_label", F.col(id_col)).alias("cluster")
    )


def dedup(
    df: DataFrame, *, k: int | None = None, threshold: float | None = None,
    mode: str = "representative", text_col: str | None = None, id_col: str = "id",
    fp_col: str = "fp", sketch_col: str = "sketch", bands_col: str = "bands",
    config: Any = None, check: bool = True, max_rounds: int = 20,
    driver_edges: int = DRIVER_EDGES, **search: Any,
) -> Dedup:
    """Near-duplicate removal: the kept rows and a report of the removed ones.

    mode="representative" (no chaining): rows in id order, each kept unless within k
    (or Jaccard >= threshold) of an earlier KEPT row, exactly as adding them in id order
    with ``store.add_if_new``; a removed row names the nearest earlier kept row it pairs
    with (ties: the earliest), as ``simstore.corpus.representative_clusters``.
    mode="clusters": one row (the smallest id) kept per connected component; a removed
    row names it, with the score when the two are a direct pair (null when chained).
    text_col: compute fingerprints (k) or signatures (threshold) from this text column
    first; otherwise fp_col (or sketch_col and bands_col) must be there.
    max_rounds, driver_edges: the distributed greedy runs at most max_rounds rounds and
    stops once at most driver_edges pairs are undecided; the driver finishes the rest.
    """
    df = check_df(df)
    if mode not in MODES:
        raise InvalidConfigError(f"'mode' must be one of {', '.join(MODES)} (got {mode!r})")
    src = df
    cols = {"id_col": id_col, "fp_col": fp_col, "sketch_col": sketch_col,
            "bands_col": bands_col, "config": config}
    if text_col is not None:
        if k is not None:  # fingerprints computed once (the search reads them 3 times)
            cols["fp_col"] = "_simstore_fp"
            src = with_fingerprints(df, text_col, "_simstore_fp", config=config)
            src = cut_lineage(src.select(id_col, "_simstore_fp"))
        else:
            cols.update(sketch_col="_simstore_sketch", bands_col="_simstore_bands")
            src = with_signatures(df, text_col, fp_col="_simstore_sfp",
                                  sketch_col="_simstore_sketch",
                                  bands_col="_simstore_bands", config=config)
    g = _graph(src, k, threshold, cols, check, search)
    rounds = check_int(max_rounds, "max_rounds", 1)
    edges = check_int(driver_edges, "driver_edges", 0)
    removed = representatives(g, rounds, edges) if mode == "representative" else (
        _removed_clusters(g, edges))
    kept_col = f"kept_{id_col}"
    removed = removed.select(F.col(ID).alias(id_col), F.col("_kept").alias(kept_col), g.score)
    kept = df.join(removed.select(id_col), id_col, "left_anti")
    return Dedup(kept, removed)


def _removed_clusters(g: Graph, driver_edges: int) -> DataFrame:
    lab = components(star_edges(g), driver_edges=driver_edges)
    rem = lab.where(F.col("_node") != F.col("_label"))
    rep_of = g.members.select(F.col(ID).alias("_node"), REP)
    rem = rem.join(rep_of, "_node", "left").withColumn("_rn", F.coalesce(REP, "_node"))
    direct = g.pairs.select(F.least("_ra", "_rb").alias("_p"), F.greatest("_ra", "_rb").alias("_q"),
                            F.col(g.score).alias("_s"))
    rem = rem.join(direct, (F.least("_rn", "_label") == F.col("_p"))
                   & (F.greatest("_rn", "_label") == F.col("_q")), "left")
    dtype = dict(g.pairs.dtypes)[g.score]
    same = F.lit(g.self_score).cast(dtype) if g.self_score is not None else F.lit(None).cast(dtype)
    score = F.when(F.col("_rn") == F.col("_label"), same).otherwise(F.col("_s"))
    return rem.select(F.col("_node").alias(ID), F.col("_label").alias("_kept"),
                      score.alias(g.score))
