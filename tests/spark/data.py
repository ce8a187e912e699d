"""What the Spark tests share: synthetic data, the oracles their answers meet, their JVMs'
options and the one session on the cluster."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

U64 = np.uint64
# The JVMs the tests start for a short while (the cluster's executors and daemons, the
# driver of a spark-dedup process) compile with the quick compiler only: their jobs are
# many and small, so a new JVM spent most of its time compiling (a new application's
# spark-dedup of 400 rows on the cluster: ~40 s -> ~25 s). It changes no answer. The
# test process's own driver JVM keeps the default: the local session's jobs are larger.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
_SHARED: dict[str, Any] = {}  # the session on the cluster, while one is up


def shared_session(cluster: Any) -> Any:
    """The session on the cluster (its executors import the driver's simstore files), one
    for the run: each new application gets new executor JVMs, slow at their first jobs.
    Started anew where a test that needed a session of its own stopped it."""
    s = _SHARED.get("session")
    if s is None or s.sparkContext._jsc is None:  # none yet, or stopped
        from simstore import spark as ss

        s = ss.cluster_session(cluster.url, app_name="simstore-cluster-tests",
                               conf=cluster.conf())
        s.sparkContext.setLogLevel("ERROR")
        _SHARED["session"] = s
    return s


def stop_shared_session() -> None:
    """Stop the shared session, if up: before a session of another master or settings is
    started (pyspark keeps one at a time: asked for another, it hands back that one)."""
    s = _SHARED.pop("session", None)
    if s is not None:
        s.stop()


def flip(rng: np.random.Generator, fps: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """fps with lo..hi random bits of each flipped (planted neighbours)."""
    out = fps.copy()
    for i, d in enumerate(rng.integers(lo, hi + 1, size=len(fps)).tolist()):
        for b in rng.choice(64, size=d, replace=False).tolist():
            out[i] ^= U64(1 << b)
    return out


def pairs(df, a="id_a", b="id_b", v="distance"):
    """A pairs DataFrame (or its Arrow table) as numpy (i, j, score) in (i, j) order."""
    t = df if isinstance(df, pa.Table) else df.toArrow()
    i, j, d = (t.column(c).to_numpy() for c in (a, b, v))
    o = np.lexsort((j, i))
    return i[o], j[o], d[o]


def greedy(n: int, i: np.ndarray, j: np.ndarray, s: np.ndarray, nearer: int = 1
           ) -> dict[int, tuple[int, float]]:
    """Oracle of the representative mode over ALL pairs (copies included): ids in order,
    each kept unless it pairs with an earlier kept id; a removed id -> (the nearest such
    kept id, ties the earliest; the pair's score). nearer=1: small scores are near."""
    nbrs: dict[int, list[tuple[float, int, float]]] = {}
    for a, b, v in zip(i.tolist(), j.tolist(), s.tolist(), strict=True):
        nbrs.setdefault(a, []).append((nearer * v, b, v))
        nbrs.setdefault(b, []).append((nearer * v, a, v))
    kept: set[int] = set()
    removed = {}
    for x in range(n):
        hits = sorted(p for p in nbrs.get(x, []) if p[1] < x and p[1] in kept)
        if hits:
            removed[x] = (hits[0][1], hits[0][2])
        else:
            kept.add(x)
    return removed


def report(removed_df, score):
    """A dedup report as {removed id: (kept id, score)}."""
    t = removed_df.toArrow()
    ids = t.column("id").to_numpy()
    kept, sc = t.column("kept_id").to_numpy(), t.column(score).to_numpy()
    return {int(a): (int(b), float(c)) for a, b, c in zip(ids, kept, sc, strict=True)}


def synthetic_texts(n: int = 1500, seed: int = 7) -> list[str]:
    """n random documents, near copies (1-5 words changed) of the first 30%, and 50
    copies of one."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    base = [" ".join(rng.choice(vocab, size=int(rng.integers(60, 200))).tolist())
            for _ in range(n)]
    out = list(base)
    for t in base[: n * 3 // 10]:
        words = t.split()
        for _ in range(int(rng.integers(1, 6))):
            words[int(rng.integers(len(words)))] = str(rng.choice(vocab))
        out.append(" ".join(words))
    out += [base[3]] * 50
    return out


def assert_pairs(df, want, score: str = "distance") -> None:
    """A pairs DataFrame holds exactly the in-memory Pairs / SimilarPairs want."""
    i, j, s = pairs(df, v=score)
    assert np.array_equal(i, want.i) and np.array_equal(j, want.j)
    assert np.array_equal(s, getattr(want, score))
