"""``ops``: seeded random operations in several processes on one store, then every model.

Each process works on its own id namespace (``p<n>.*``, checked against its own model)
plus a shared one where processes race to ``add_if_new`` near copies; afterwards each
namespace must equal its process's model and ``verify()`` must pass, with warnings as
errors. tests/store/test_concurrency.py runs small rounds through :func:`run_ops`.
"""

from __future__ import annotations

import multiprocessing
import random
import warnings
from dataclasses import dataclass, field

from simstore.store import SimStore

from .constants import EVERY_WORKER, set_constants


@dataclass
class _Model:
    """A process's own view of its namespace: id -> fp."""

    docs: dict[str, int] = field(default_factory=dict)


def _near(rng: random.Random, fp: int, d: int) -> int:
    for b in rng.sample(range(64), d):
        fp ^= 1 << b
    return fp


def random_ops(path: str, proc_no: int, n_ops: int, seed: int) -> dict[str, int]:
    """Seeded random operations on ids 'p<proc_no>.*' (plus shared add_if_new ids).

    Returns this process's model of its own namespace; raises AssertionError on
    a wrong answer about it (only this process writes there).
    """
    rng = random.Random(seed * 1000 + proc_no)
    model = _Model()
    set_constants(EVERY_WORKER)
    with SimStore(path) as s:
        for _ in range(n_ops):
            r = rng.random()
            ns = f"p{proc_no}."
            if r < 0.3:
                i, fp = f"{ns}{rng.randrange(200)}", rng.getrandbits(64)
                s.add(i, fp)
                model.docs[i] = fp
            elif r < 0.4:
                ids = [f"{ns}{rng.randrange(200)}" for _ in range(rng.randint(1, 50))]
                fps = [rng.getrandbits(64) for _ in ids]
                s.add_many(ids, fps)
                model.docs.update(zip(ids, fps, strict=False))
            elif r < 0.55:
                i = f"{ns}{rng.randrange(200)}"
                assert s.remove(i) == (i in model.docs), f"remove({i!r}) disagrees"
                model.docs.pop(i, None)
            elif r < 0.6:
                ids = [f"{ns}{rng.randrange(200)}" for _ in range(rng.randint(1, 20))]
                s.remove_many(ids)
                for i in ids:
                    model.docs.pop(i, None)
            elif r < 0.7:
                # shared: several processes race to store near-duplicates of one base
                base = random.Random(rng.randrange(20)).getrandbits(64)
                s.add_if_new(f"shared.{proc_no}.{rng.randrange(10**6)}", _near(rng, base, 1))
            elif r < 0.9 and model.docs:
                i = rng.choice(sorted(model.docs))
                got = {m.doc_id for m in s.query(model.docs[i], 0)}
                assert i in got, f"query misses {i!r}"
                assert s.get(i) == model.docs[i], f"get({i!r}) disagrees"
            else:
                with s.batch():
                    for _ in range(rng.randint(1, 10)):
                        i, fp = f"{ns}{rng.randrange(200)}", rng.getrandbits(64)
                        s.add(i, fp)
                        model.docs[i] = fp
    return model.docs


def _ops_child(args: tuple[str, int, int, int]) -> dict[str, int]:
    return random_ops(*args)


def run_ops(path: str, procs: int, n_ops: int, seed: int, method: str = "spawn") -> list[str]:
    """`procs` processes of random_ops on one store; then every namespace and verify()."""
    SimStore(path, k=3, expected_size=10_000).close()
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(procs) as pool:
        models = pool.map(_ops_child, [(path, p, n_ops, seed) for p in range(procs)])
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with SimStore(path) as s:
            problems += s.verify()
            for p, model in enumerate(models):
                stored = {d: fp for d, fp in s.items() if str(d).startswith(f"p{p}.")}
                if stored != model:
                    problems.append(f"process {p}: store and model disagree on its ids")
            shared = [fp for d, fp in s.items() if str(d).startswith("shared.")]
            for i, a in enumerate(shared):
                if any((a ^ b).bit_count() <= s.k for b in shared[:i]):
                    problems.append(f"add_if_new stored two near-duplicates (fp {a:#x})")
    return problems
