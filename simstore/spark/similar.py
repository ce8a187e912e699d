"""Similar pairs on Spark: ``simstore.find_similar``'s rule over signature columns.

The rule: two documents are a pair when they share the low 32 bits of their key in at
least one band, and the Jaccard estimate of their sketches is >= the threshold. Here:
identical (sketch, bands) rows grouped first (``_spark_graph.copy_groups``); each
distinct row's 16 band keys exploded to (band, key32); rows joined on equal
(band, key32), candidates kept once (distinct on the pair of representatives); each
candidate's two sketches joined on and checked in C by the Python workers
(``sketch_distance_pairwise`` + ``jaccard_from_distance``, the in-memory code).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..native import core as _core
from ..text.minhash import jaccard_from_distance
from .common import RA, RB, REP, DataFrame, F, T, fixed_rows, pa
from .graph import Graph, copy_groups

_LOW32 = 0xFFFFFFFF


def similar_graph(
    df: DataFrame, threshold: float, id_col: str, sketch_col: str, bands_col: str,
    sketch_bits: int, id_type: T.DataType,
) -> Graph:
    """Pairs of distinct signatures by the rule, and the members of identical rows."""
    groups, members = copy_groups(df, id_col, [sketch_col, bands_col])
    keys = groups.select(REP, F.posexplode(bands_col).alias("_band", "_key")).select(
        REP, "_band", F.col("_key").bitwiseAND(F.lit(_LOW32)).alias("_k")
    )
    left = keys.select(F.col(REP).alias(RA), "_band", "_k")
    right = keys.select(F.col(REP).alias(RB), "_band", "_k")
    cand = (
        left.join(right, ["_band", "_k"]).where(F.col(RA) < F.col(RB)).select(RA, RB).distinct()
    )
    sk = groups.select(REP, sketch_col)
    cand = cand.join(sk.select(F.col(REP).alias(RA), F.col(sketch_col).alias("_sa")), RA)
    cand = cand.join(sk.select(F.col(REP).alias(RB), F.col(sketch_col).alias("_sb")), RB)
    schema = T.StructType([
        T.StructField(RA, id_type, False),
        T.StructField(RB, id_type, False),
        T.StructField("jaccard", T.DoubleType(), False),
    ])
    pairs = cand.select(RA, RB, "_sa", "_sb").mapInArrow(
        partial(verify_partition, sketch_bits, threshold), schema
    )
    self_score = float(jaccard_from_distance(0, sketch_bits))
    return Graph(pairs, members, "jaccard", self_score if self_score >= threshold else None)


def verify_partition(sketch_bits: int, threshold: float, batches: Any) -> Any:
    """The Python worker's side: candidate pairs whose sketch estimate is >= threshold."""
    nbytes = sketch_bits // 8
    for batch in batches:
        if batch.num_rows == 0:
            continue
        sa = np.ascontiguousarray(fixed_rows(batch.column(2), nbytes))
        sb = np.ascontiguousarray(fixed_rows(batch.column(3), nbytes))
        est = jaccard_from_distance(_core.sketch_distance_pairwise(sa, sb), sketch_bits)
        keep = pa.array(np.flatnonzero(est >= threshold))
        if len(keep):
            yield pa.RecordBatch.from_arrays(
                [batch.column(0).take(keep), batch.column(1).take(keep),
                 pa.array(np.asarray(est, dtype=np.float64)).take(keep)],
                names=[RA, RB, "jaccard"],
            )
