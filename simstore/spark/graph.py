"""The near-duplicate graph on Spark: identical rows, pairs, components, representatives.

A search (``_spark_hamming`` in its "groups" mode, ``_spark_similar``) gives a
:class:`Graph`: pairs between representatives (the smallest id of each set of identical
rows) and a link from every other row of such a set to its representative. From it:

- :func:`expand`: every pair of rows, as in-memory ``find_similar`` gives (``find_all``
  expands copies inside its tasks instead);
- :func:`components`: connected components by alternating large-star / small-star
  (Kiveris et al., "Connected Components in MapReduce and Beyond", SoCC 2014), the edge
  set cut from its lineage (checkpointed) after every round;
- :func:`representatives`: the non-chaining mode, the same answer as adding rows in id
  order to a store with ``add_if_new`` (kept unless near an earlier KEPT row).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..exceptions import SimstoreError
from ..native import core as _core
from .common import RA, RB, REP, DataFrame, F, cut_lineage, pa, session_of

ID = "_id"  # a member's id in the members table
DRIVER_EDGES = 1_000_000  # edge sets this small are finished on the driver


class Graph(NamedTuple):
    """A search's result over distinct values, before copies are expanded."""

    pairs: DataFrame  # RA, RB (representatives, any order), score column
    members: DataFrame  # REP, ID: each row that is a copy of its (smaller) representative
    score: str  # "distance" or "jaccard"
    self_score: Any  # the score of two identical rows, or None if they are not a pair


def copy_groups(df: DataFrame, id_col: str, keys: list[str]) -> tuple[DataFrame, DataFrame]:
    """Distinct values of the key columns with their representative (smallest id), and
    the copies (REP, ID) of the values held by more than one row."""
    groups = df.groupBy(*keys).agg(
        F.min(id_col).alias(REP), F.count(F.lit(1)).alias("_copies")
    )
    multi = groups.where(F.col("_copies") > 1).select(*keys, REP)
    members = (
        df.select(F.col(id_col).alias(ID), *keys).join(multi, keys)
        .where(F.col(ID) != F.col(REP)).select(REP, ID)
    )
    return groups.select(REP, *keys), members


def expand(g: Graph) -> DataFrame:
    """Every pair of rows (id_a < id_b, score): the rows of one pair's two values times
    each other, and (when identical rows are a pair) every two rows of one value."""
    lists = g.members.groupBy(REP).agg(F.collect_list(ID).alias("_m"))
    la = lists.select(F.col(REP).alias(RA), F.col("_m").alias("_ma"))
    lb = lists.select(F.col(REP).alias(RB), F.col("_m").alias("_mb"))
    x = g.pairs.join(la, RA, "left").join(lb, RB, "left")

    def rows(rep: str, more: str) -> Any:
        return F.when(F.col(more).isNull(), F.array(rep)).otherwise(
            F.concat(F.array(rep), F.col(more)))

    x = x.select(F.explode(rows(RA, "_ma")).alias("_x"), RB, "_mb", g.score)
    x = x.select("_x", F.explode(rows(RB, "_mb")).alias("_y"), g.score)
    out = x.select(
        F.least("_x", "_y").alias("id_a"), F.greatest("_x", "_y").alias("id_b"), g.score
    )
    if g.self_score is None:
        return out
    dtype = dict(g.pairs.dtypes)[g.score]
    every = g.members.select(REP, ID).unionByName(
        g.members.select(REP, F.col(REP).alias(ID)).distinct())
    m1 = every.select(REP, F.col(ID).alias("id_a"))
    m2 = every.select(REP, F.col(ID).alias("id_b"))
    within = m1.join(m2, REP).where(F.col("id_a") < F.col("id_b")).select(
        "id_a", "id_b", F.lit(g.self_score).cast(dtype).alias(g.score)
    )
    return out.unionByName(within)


def star_edges(g: Graph) -> DataFrame:
    """The edges whose components are the clusters: pairs of representatives, and each
    copy to its representative (n - 1 edges per value, not n * (n - 1) / 2)."""
    pairs = g.pairs.select(F.col(RA).alias("_a"), F.col(RB).alias("_b"))
    if g.self_score is None:
        return pairs
    return pairs.unionByName(g.members.select(F.col(ID).alias("_a"), F.col(REP).alias("_b")))


# --------------------------------------------------------------------------- components


def _large_star(e: DataFrame) -> DataFrame:
    """Each node's larger neighbours linked to the smallest of its closed neighbourhood."""
    nb = e.select(F.col("_u").alias("_n"), F.col("_v").alias("_m")).unionByName(
        e.select(F.col("_v").alias("_n"), F.col("_u").alias("_m"))
    )
    low = nb.groupBy("_n").agg(F.min("_m").alias("_l"))
    return (
        nb.where(F.col("_m") > F.col("_n"))
        .join(low, "_n")
        .select(F.col("_m").alias("_u"), F.least("_n", "_l").alias("_v"))
        .distinct()
    )


def _small_star(e: DataFrame) -> DataFrame:
    """Each node and its smaller neighbours linked to the smallest of them."""
    low = e.groupBy("_u").agg(F.min("_v").alias("_l"))
    spokes = (
        e.join(low, "_u")
        .select(F.col("_v").alias("_u"), F.col("_l").alias("_v"))
        .where(F.col("_u") != F.col("_v"))
    )
    return spokes.unionByName(low.select("_u", F.col("_l").alias("_v"))).distinct()


def _is_stars(e: DataFrame) -> bool:
    """True when every edge (u > v) leads to a root: each u has one edge, no v has any."""
    ends = e.select(F.col("_u").alias("_n"), F.lit(1).alias("_o"), F.lit(0).alias("_i"))
    ends = ends.unionByName(
        e.select(F.col("_v").alias("_n"), F.lit(0).alias("_o"), F.lit(1).alias("_i"))
    )
    bad = ends.groupBy("_n").agg(F.sum("_o").alias("_o"), F.sum("_i").alias("_i")).where(
        (F.col("_o") > 1) | ((F.col("_o") > 0) & (F.col("_i") > 0))
    )
    return bad.isEmpty()


def components(edges: DataFrame, max_rounds: int = 64, driver_edges: int = DRIVER_EDGES
               ) -> DataFrame:
    """(_node, _label) for every node of the edges (_a, _b): the smallest node of its
    connected component. Alternating large-star / small-star; each round's edges are
    checkpointed so the lineage stays one round long. Once at most driver_edges edges
    are left, the driver finishes in C (``_core.components``), the same answer."""
    e = edges.select(F.greatest("_a", "_b").alias("_u"), F.least("_a", "_b").alias("_v"))
    e = cut_lineage(e.where(F.col("_u") != F.col("_v")).distinct())
    rounds = 0
    while e.count() > driver_edges and not _is_stars(e):
        if rounds == max_rounds:
            raise SimstoreError(
                f"connected components did not converge in {max_rounds} rounds "
                "(large-star/small-star needs O(log^2 n)); raise max_rounds"
            )
        e = cut_lineage(_small_star(_large_star(e)))
        rounds += 1
    if e.count() <= driver_edges:
        return _components_on_driver(e)
    roots = e.select(F.col("_v").alias("_node"), F.col("_v").alias("_label")).distinct()
    return e.select(F.col("_u").alias("_node"), F.col("_v").alias("_label")).unionByName(roots)


def _components_on_driver(e: DataFrame) -> DataFrame:
    """components() of a small edge set, in C on the driver."""
    t = e.toArrow()
    both = pa.concat_arrays([t.column("_u").combine_chunks(), t.column("_v").combine_chunks()])
    nodes = both.to_numpy(zero_copy_only=False)
    uniq, inv = np.unique(nodes, return_inverse=True)  # ascending: index order = id order
    m = len(t)
    inv = inv.astype(np.int64)
    label = _core.components(len(uniq), inv[:m].copy(), inv[m:].copy())
    schema = e.select(F.col("_u").alias("_node"), F.col("_u").alias("_label")).schema
    typ = both.type
    table = pa.table({"_node": pa.array(uniq, typ), "_label": pa.array(uniq[label], typ)})
    return session_of(e).createDataFrame(table, schema)


# --------------------------------------------------------------------------- representatives


def representatives(g: Graph, max_rounds: int = 20, driver_edges: int = DRIVER_EDGES
                    ) -> DataFrame:
    """(ID, _kept, score) of every REMOVED row: rows in id order, each kept unless it pairs
    with an earlier kept row; a removed row joins the nearest earlier kept row it pairs
    with (smallest distance, or largest Jaccard; ties: the earliest), the rule of
    ``simstore.corpus.representative_clusters`` and of ``add_if_new`` in id order.

    The kept set is decided on representatives (identical rows share their neighbours),
    in rounds over the edges still open (both ends undecided): a node that is the
    smaller end of some open edge and the larger end of none has no undecided smaller
    neighbour left, so it is kept; the larger ends of its edges are removed; edges
    touching a removed node close. Every round decides the smallest undecided node, so
    the rounds end. Once at most driver_edges edges are open, or after max_rounds
    (long chains of drifting versions), the driver finishes the same greedy
    sequentially. Nodes never removed are kept.
    """
    o = g.pairs.select(
        F.greatest(RA, RB).alias("_hi"), F.least(RA, RB).alias("_lo"), g.score
    )
    gone = _removed_nodes(o.select("_hi", "_lo"), max_rounds, driver_edges)
    if gone is None:
        out = o.select(F.col("_hi").alias(ID), F.col("_lo").alias("_kept"), g.score).limit(0)
    else:
        out = _attach(o, g, gone)
    if g.self_score is None:
        return out
    # copies of kept representatives join them, at distance 0
    dtype = dict(g.pairs.dtypes)[g.score]
    kept_heads = g.members if gone is None else g.members.join(
        gone.select(F.col("_n").alias(REP)), REP, "left_anti")
    return out.unionByName(kept_heads.select(
        ID, F.col(REP).alias("_kept"), F.lit(g.self_score).cast(dtype).alias(g.score)))


def _removed_nodes(rest: DataFrame, max_rounds: int, driver_edges: int) -> DataFrame | None:
    """The removed representatives (_n) of the greedy over edges (_hi > _lo)."""
    rest = cut_lineage(rest)
    removed: list[DataFrame] = []
    for _ in range(max_rounds):
        open_edges = rest.count()
        if open_edges == 0:
            break
        if open_edges <= driver_edges:
            removed.append(_finish_on_driver(rest))
            break
        kept = rest.select(F.col("_lo").alias("_n")).distinct().join(
            rest.select(F.col("_hi").alias("_n")), "_n", "left_anti")
        x = cut_lineage(
            rest.join(kept.select(F.col("_n").alias("_lo")), "_lo", "left_semi")
            .select(F.col("_hi").alias("_n")).distinct()
        )
        removed.append(x)
        rest = cut_lineage(
            rest.join(x.select(F.col("_n").alias("_hi")), "_hi", "left_anti")
            .join(x.select(F.col("_n").alias("_lo")), "_lo", "left_anti")
            .select("_hi", "_lo")
        )
    else:
        if not rest.isEmpty():
            removed.append(_finish_on_driver(rest))
    if not removed:
        return None
    gone = removed[0]
    for x in removed[1:]:
        gone = gone.unionByName(x)
    return cut_lineage(gone)


def _attach(o: DataFrame, g: Graph, gone: DataFrame) -> DataFrame:
    """Each removed row's nearest earlier kept neighbour (its head's, among those before
    it: a copy may come after kept rows its head came before)."""
    nearer = F.col(g.score) if g.score == "distance" else -F.col(g.score)
    both = o.select(F.col("_hi").alias("_h"), F.col("_lo").alias("_x"), g.score).unionByName(
        o.select(F.col("_lo").alias("_h"), F.col("_hi").alias("_x"), g.score))
    # edges from a removed node to a kept one
    ke = both.join(gone.select(F.col("_n").alias("_h")), "_h", "left_semi").join(
        gone.select(F.col("_n").alias("_x")), "_x", "left_anti"
    ).withColumn("_key", nearer)
    rows = gone.select(F.col("_n").alias("_h"), F.col("_n").alias(ID))
    if g.self_score is not None:
        rows = rows.unionByName(g.members.join(gone.select(F.col("_n").alias(REP)), REP,
                                               "left_semi").select(F.col(REP).alias("_h"), ID))
    best = (
        rows.join(ke, "_h").where(F.col("_x") < F.col(ID))
        .groupBy(ID).agg(F.min(F.struct("_key", "_x", g.score)).alias("_b"))
    )
    return best.select(ID, F.col("_b._x").alias("_kept"), F.col(f"_b.{g.score}").alias(g.score))


def _finish_on_driver(rest: DataFrame) -> DataFrame:
    """The removed nodes of what the rounds left open: the same greedy, sequentially."""
    lower: dict[Any, list[Any]] = {}
    for row in rest.collect():
        lower.setdefault(row["_hi"], []).append(row["_lo"])
        lower.setdefault(row["_lo"], [])
    kept: set[Any] = set()
    gone = []
    for n in sorted(lower):
        if any(lo in kept for lo in lower[n]):
            gone.append((n,))
        else:
            kept.add(n)
    schema = rest.select(F.col("_hi").alias("_n")).schema
    return session_of(rest).createDataFrame(gone, schema)
