"""``damage``: a seeded fuzzer of damage to copies of a sound store's data.mdb.

Two sound stores are built once per run (a Hamming store with long ids,
shared fingerprints and removed docs; a similarity store). Each case copies
one, damages its data.mdb in one of :data:`KINDS`, and runs a fresh process
(``python -m tools.stress.damage probe``) that opens the store, calls ``verify()``,
then runs queries, printing a marker line after each phase, so a process
killed by a signal or stopped at the timeout is charged to the phase it was
in. A case is classified as

* ``refused at open``: the open raised a simstore exception;
* ``verify: problems`` (or ``verify: raised``, a simstore exception);
* ``undetected``: verify() said [] (split by what the queries saw: same
  content and answers, changed answers, a query error or a query crash);
* ``FAILURE``: the open or verify() killed the process (signal), hung past
  the timeout, or let a non-simstore exception out.

Queries may still crash on damage verify() reports (LMDB walks pages there,
in the caller's process); they are counted apart, the target of 0 is for
open() and verify().
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import simstore
from simstore.exceptions import SimstoreError
from simstore.store import SimStore
from simstore.store.check import lmdbfile as L
from simstore.store.check.lmdbfile import read_metas
from simstore.store.check.pages import FileCheck

from .._util import checkout_env

# name -> (weight, what it does)
KINDS: dict[str, tuple[int, str]] = {
    "page": (25, "one page past the metas overwritten with 4 KiB of random bytes"),
    "page-in-use": (15, "a page the store uses overwritten with random bytes"),
    "zero-page": (5, "a page the store uses zero-filled"),
    "header": (5, "random bytes over the 16-byte header of a page in use"),
    "partial": (15, "1..4096 random bytes at a random offset past the metas"),
    "byte": (15, "one byte anywhere XORed with a random nonzero value"),
    "meta": (12, "random bytes over the fields of meta page 0 or 1"),
    "truncate": (8, "the file cut at a random length"),
}
CHILD_TIMEOUT = 300.0  # verify()'s own timeout is 120 s and more
PSIZE = 4096
SAMPLES = 20


@dataclass
class Pristine:
    """A sound store to damage copies of."""

    name: str
    path: str
    size: int
    in_use: bytearray  # 1 per page the store's newest snapshot uses (metas included)
    expect: str  # JSON file: samples and content digest for the probe
    big: dict[int, int] = field(default_factory=dict)  # overflow page -> bytes used in it


@dataclass
class Case:
    """One damage case and what came of it."""

    i: int
    store: str
    kind: str
    offset: int
    length: int
    live: bool  # the damage touches a byte in use (or cuts off a page in use)
    open: str = ""
    verify: str = ""
    first_problem: str = ""  # verify's first problem, or what open/verify raised
    queries: str = ""
    cls: str = ""
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- stores


def _digest(s: SimStore) -> str:
    ids, fps = s.snapshot()
    h = hashlib.sha256(json.dumps([str(d) for d in ids]).encode())
    h.update(np.ascontiguousarray(fps).tobytes())
    return h.hexdigest()


def build_hamming(path: str, seed: int, n: int) -> dict[str, Any]:
    """Long ids (overflow pages, digest keys), int ids, shared fingerprints, removed docs."""
    rng = np.random.default_rng([seed, 1])
    fps = rng.integers(0, 2**63, n, dtype=np.uint64) * 2 + 1
    big, few = n // 30, n // 6
    fps[big:big + n // 10] = fps[big]  # one key with n/10 duplicates: a tree of its own
    fps[few:few + 3] = fps[few]  # a few duplicates: a sub-page
    ids: list[Any] = [f"doc-{i}" for i in range(n)]
    ids[7], ids[8] = "L" * 6000, "M" * 700
    ids[9:20] = range(10**12, 10**12 + 11)
    with SimStore(path, k=3, expected_size=n) as s:
        s.add_many(ids, fps)
        s.remove_many(ids[n // 2:n // 2 + n // 10])
        keep = [i for i in range(n) if not n // 2 <= i < n // 2 + n // 10]
        pick = [7, 8, 9, big, big + 1, few] + random.Random(seed).sample(keep, SAMPLES - 6)
        return {
            "similarity": False,
            "samples": [[ids[i], int(fps[i]), None] for i in pick],
            "digest": _digest(s),
        }


def build_similarity(path: str, seed: int, n: int) -> dict[str, Any]:
    """A similarity store: signatures of seeded texts, a few near-duplicates, removed docs."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    texts = [" ".join(rng.choices(vocab, k=rng.randint(30, 80))) for _ in range(n)]
    for i in range(0, n, 50):
        texts[i + 1] = texts[i] + " tail"
    ids = [f"text-{i}" for i in range(n)]
    with SimStore(path, config=simstore.SIGNATURE_CONFIG, expected_size=n) as s:
        s.add_many(ids, s.signatures(texts))
        s.remove_many(ids[n // 2:n // 2 + n // 10])
        keep = [i for i in range(n) if not n // 2 <= i < n // 2 + n // 10]
        pick = rng.sample(keep, SAMPLES)
        return {
            "similarity": True,
            "samples": [[ids[i], None, texts[i]] for i in pick],
            "digest": _digest(s),
        }


def build(root: str, seed: int, docs: int) -> list[Pristine]:
    """The two sound stores of a run, with the pages each uses."""
    os.makedirs(root, exist_ok=True)
    out = []
    for name, make in (("hamming", build_hamming), ("similarity", build_similarity)):
        path = os.path.join(root, f"pristine-{name}")
        expect = make(path, seed, docs if name == "hamming" else max(docs // 2, 60))
        data = os.path.join(path, "data.mdb")
        meta = max((m for m in read_metas(data, PSIZE) if m), key=lambda m: m.txnid)
        check = FileCheck(data, PSIZE)
        if check.run(meta.txnid) != []:
            raise SystemExit(f"the sound {name} store fails the structural check")
        in_use = bytearray(check.seen)
        in_use[0] = in_use[1] = 1
        epath = os.path.join(root, f"expect-{name}.json")
        with open(epath, "w", encoding="utf-8") as fh:
            json.dump(expect, fh)
        out.append(Pristine(name, path, os.path.getsize(data), in_use, epath,
                            _overflow_bytes(data, in_use)))
    return out


def _overflow_bytes(data: str, in_use: bytearray) -> dict[int, int]:
    """For every page of a used overflow run: how many of its bytes the value fills.

    A big value is a header then its bytes over contiguous pages; the last
    page's tail past the value is unused. Sizes come from the leaf nodes that
    point to the runs.
    """
    sizes: dict[int, int] = {}  # first page of a run -> value size
    runs: dict[int, int] = {}  # first page -> pages
    with open(data, "rb") as fh:
        pg = 2
        while pg < len(in_use):
            if not in_use[pg]:
                pg += 1
                continue
            fh.seek(pg * PSIZE)
            page = fh.read(PSIZE)
            _, _, flags, lower, _ = L.HEADER.unpack_from(page)
            if flags & L.P_OVERFLOW:
                runs[pg] = max(1, L.OVERFLOW.unpack_from(page)[3])
                pg += runs[pg]
                continue
            if flags & L.P_LEAF and not flags & L.P_LEAF2:
                for i in range((lower - L.PAGE_HEADER) // 2):
                    ptr = int.from_bytes(page[16 + 2 * i:18 + 2 * i], "little")
                    lo, hi, nflags, ksize = L.NODE.unpack_from(page, ptr)
                    if nflags & L.F_BIGDATA:
                        at = ptr + L.NODE_HEADER + ksize
                        sizes[int.from_bytes(page[at:at + 8], "little")] = lo | hi << 16
            pg += 1
    out: dict[int, int] = {}
    for first, pages in runs.items():
        left = L.PAGE_HEADER + sizes.get(first, pages * PSIZE)
        for j in range(pages):
            out[first + j] = max(0, min(PSIZE, left - j * PSIZE))
    return out


# --------------------------------------------------------------------------- damage


def _pick_kind(rng: random.Random) -> str:
    names = sorted(KINDS)
    return rng.choices(names, weights=[KINDS[k][0] for k in names])[0]


def damage(data: str, p: Pristine, kind: str, rng: random.Random) -> tuple[int, int, bool]:
    """Damage the copy's data.mdb; (offset, length, whether a page in use is hit)."""
    npages = p.size // PSIZE
    used = [pg for pg in range(2, npages) if pg < len(p.in_use) and p.in_use[pg]]
    if kind == "truncate":
        cut = rng.randrange(p.size)
        with open(data, "r+b") as fh:
            fh.truncate(cut)
        return cut, p.size - cut, any(p.in_use[cut // PSIZE:])
    if kind == "page":
        offset, payload = rng.randrange(2, npages) * PSIZE, rng.randbytes(PSIZE)
    elif kind in ("page-in-use", "zero-page"):
        offset = rng.choice(used) * PSIZE
        payload = rng.randbytes(PSIZE) if kind == "page-in-use" else bytes(PSIZE)
    elif kind == "header":
        start = rng.randrange(16)
        offset = rng.choice(used) * PSIZE + start
        payload = rng.randbytes(rng.randint(1, 16 - start))
    elif kind == "partial":
        offset = rng.randrange(2 * PSIZE, p.size - 1)
        payload = rng.randbytes(min(rng.randint(1, PSIZE), p.size - offset))
    elif kind == "byte":
        offset = rng.randrange(p.size)
        with open(data, "rb") as fh:
            fh.seek(offset)
            payload = bytes([fh.read(1)[0] ^ rng.randint(1, 255)])
    else:  # meta: the fields after the page header (magic .. txnid: bytes 16..152)
        start = rng.randrange(16, 152)
        offset = rng.randrange(2) * PSIZE + start
        payload = rng.randbytes(rng.randint(1, 152 - start))
    with open(data, "r+b") as fh:
        fh.seek(offset)
        fh.write(payload)
    return offset, len(payload), _hits_bytes_in_use(p, offset, len(payload))


def _hits_bytes_in_use(p: Pristine, offset: int, length: int) -> bool:
    """Whether a damaged range covers a byte the sound store uses.

    Unused: free pages, the gap between a page's node offsets and its nodes,
    a node's padding byte, the pad field of a page header, the bytes of a
    meta page after its fields, the tail of a big value's last page.
    """
    with open(os.path.join(p.path, "data.mdb"), "rb") as fh:
        for pg in range(offset // PSIZE, (offset + length - 1) // PSIZE + 1):
            if pg >= len(p.in_use) or not p.in_use[pg]:
                continue
            lo, hi = max(offset - pg * PSIZE, 0), min(offset + length - pg * PSIZE, PSIZE)
            if pg in p.big:  # a page of a big value: in use up to the value's end
                if lo < p.big[pg]:
                    return True
                continue
            fh.seek(pg * PSIZE)
            used = _used_bytes(fh.read(PSIZE), pg)
            if any(used[lo:hi]):
                return True
    return False


def _used_bytes(page: bytes, pg: int) -> bytearray:
    """1 for each byte of a sound page in use that LMDB reads, else 0."""
    used = bytearray(PSIZE)
    if pg < 2:
        used[:152] = b"\1" * 152
        return used
    _, pad, flags, lower, upper = L.HEADER.unpack_from(page)
    if flags & L.P_OVERFLOW:
        return bytearray(b"\1" * PSIZE)
    used[0:8] = b"\1" * 8
    used[10:lower] = b"\1" * (lower - 10)
    n = (lower - L.PAGE_HEADER) // 2
    if flags & L.P_LEAF2:
        used[8:10] = b"\1\1"
        used[16:16 + n * pad] = b"\1" * (n * pad)
        return used
    for i in range(n):
        ptr = int.from_bytes(page[16 + 2 * i:18 + 2 * i], "little")
        lo, hi, nflags, ksize = L.NODE.unpack_from(page, ptr)
        if flags & L.P_BRANCH:
            size = 8 + ksize
        elif nflags & L.F_BIGDATA:
            size = 16 + ksize
        else:
            size = 8 + ksize + (lo | hi << 16)
        used[ptr:ptr + size] = b"\1" * size
        if nflags == L.F_DUPDATA:  # a sub-page: its own gap is unused too
            sub = ptr + 8 + ksize
            s_lower, s_upper = L.HEADER.unpack_from(page, sub)[3:]
            used[sub + s_lower:sub + s_upper] = bytes(s_upper - s_lower)
    return used


# --------------------------------------------------------------------------- the probe


def _say(*parts: Any) -> None:
    sys.stdout.write(" ".join(json.dumps(x) if not isinstance(x, str) else x for x in parts))
    sys.stdout.write("\n")
    sys.stdout.flush()


def _exc(tag: str, exc: BaseException) -> None:
    kind = "raised" if isinstance(exc, SimstoreError) else "error"
    _say(f"{tag}-{kind}", type(exc).__name__, str(exc)[:300].replace("\n", " "))


def probe(path: str, expect_path: str) -> None:
    """The case's process: open, verify(), queries; a marker line after each phase."""
    with open(expect_path, encoding="utf-8") as fh:
        expect = json.load(fh)
    _say("start")
    try:
        s = SimStore(path)
    except Exception as exc:  # noqa: BLE001 - what escapes is the finding
        _exc("open", exc)
        return
    _say("opened")
    try:
        _say("verify", s.verify())
    except Exception as exc:  # noqa: BLE001 - as above
        _exc("verify", exc)
    try:
        wrong = 0
        for doc_id, fp, text in expect["samples"]:
            if expect["similarity"]:
                found = {m.doc_id for m in s.similar(text, 0.9)}
            else:
                found = {m.doc_id for m in s.query(fp, 3)}
                wrong += s.get(doc_id) != fp
            wrong += doc_id not in found
        same = _digest(s) == expect["digest"]
        _say("queries", {"wrong": wrong, "same": same})
    except Exception as exc:  # noqa: BLE001 - as above
        _exc("queries", exc)
    try:
        s.close()
    except Exception as exc:  # noqa: BLE001 - as above
        _exc("close", exc)
    _say("done")


# --------------------------------------------------------------------------- classifying


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def classify(case: Case, lines: list[str], code: int | None) -> None:
    """Fill the case's open/verify/queries outcomes and its class from the probe's output."""
    phase = "open"
    for line in lines:
        tag, _, rest = line.partition(" ")
        if tag == "opened":
            case.open, phase = "ok", "verify"
        elif tag.startswith("open-"):
            case.open, phase = f"{tag[5:]}:{rest.split(' ')[0]}", "done"
            case.first_problem = rest[:300]
        elif tag == "verify":
            problems = json.loads(rest)
            case.verify = "problems" if problems else "clean"
            case.first_problem = problems[0][:300] if problems else ""
            phase = "queries"
        elif tag.startswith("verify-"):
            case.verify, phase = f"{tag[7:]}:{rest.split(' ')[0]}", "queries"
            case.first_problem = rest[:300]
        elif tag == "queries":
            got = json.loads(rest)
            case.queries = "ok" if got["same"] and not got["wrong"] else "changed"
            phase = "done"
        elif tag.startswith("queries-"):
            case.queries, phase = f"{tag[8:]}:{rest.split(' ')[0]}", "done"
    if code is None or code < 0 or (code and phase != "done"):
        what = "hung" if code is None else (
            f"aborted:{_signal_name(code)}" if code < 0 else f"exit:{code}"
        )
        setattr(case, phase if phase != "done" else "queries", what)
    case.cls = _class_of(case)


def _class_of(c: Case) -> str:
    bad = ("hung", "aborted", "error", "exit")
    if c.open.startswith(bad) or c.verify.startswith(bad):
        return "FAILURE"
    if c.open.startswith("raised"):
        return "refused at open"
    if c.verify.startswith("raised"):
        return "verify: raised"
    if c.verify == "problems":
        if c.first_problem.startswith("the store's file is damaged: LMDB"):
            return "verify: problems (LMDB died in verify's child)"
        if c.first_problem.startswith("verify did not finish"):
            return "verify: problems (verify's child timed out)"
        return "verify: problems"
    if c.queries == "ok":
        return "undetected: content and answers intact"
    if c.queries == "changed":
        return "undetected: content or answers changed"
    return f"undetected: queries {c.queries.split(':')[0]}"


def run_case(i: int, seed: int, stores: list[Pristine], root: str, keep: bool) -> Case:
    """Damage one copy and probe it in a fresh process."""
    rng = random.Random(f"damage:{seed}:{i}")
    p = stores[rng.randrange(len(stores))]
    kind = _pick_kind(rng)
    path = os.path.join(root, f"case{i}")
    os.makedirs(path)
    for name in ("data.mdb", "simstore.lock"):
        if os.path.exists(os.path.join(p.path, name)):
            shutil.copyfile(os.path.join(p.path, name), os.path.join(path, name))
    offset, length, live = damage(os.path.join(path, "data.mdb"), p, kind, rng)
    case = Case(i, p.name, kind, offset, length, live)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.stress.damage", "probe", path, p.expect],
        env=checkout_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        code = None
    case.seconds = round(time.monotonic() - t0, 2)
    classify(case, out.decode("utf-8", "replace").splitlines(), code)
    tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
    if case.cls == "FAILURE" or case.queries.startswith(("aborted", "hung")):
        case.log = tail
    interesting = case.cls == "FAILURE" or case.cls.endswith("changed")
    if not (keep and interesting):
        shutil.rmtree(path, ignore_errors=True)
    return case


def run(cases: int, seed: int, root: str, *, docs: int = 3000, jobs: int = 1,
        keep: bool = False, progress: bool = False) -> list[Case]:
    """Build the sound stores under root and run the seeded cases; every case classified."""
    stores = build(root, seed, docs)
    out: list[Case] = []
    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        for case in pool.map(lambda i: run_case(i, seed, stores, root, keep), range(cases)):
            out.append(case)
            if progress and (case.cls == "FAILURE" or case.queries.startswith("aborted")):
                print(f"case {case.i} ({case.store}, {case.kind} at {case.offset}): "
                      f"open {case.open}, verify {case.verify}, queries {case.queries} "
                      f"{case.log[-1:] or ''}", flush=True)
            if progress and len(out) % 50 == 0:
                print(f"{len(out)} cases, {sum(c.cls == 'FAILURE' for c in out)} failures",
                      flush=True)
    return out


def summary(cases: list[Case]) -> dict[str, Any]:
    """The figures of a run: classes, open/verify/query outcomes, by kind."""
    def outcome(text: str) -> str:
        return text.split(":")[0] if text else "not reached"

    return {
        "cases": len(cases),
        "failures": sum(c.cls == "FAILURE" for c in cases),
        "classes": dict(Counter(c.cls for c in cases).most_common()),
        "open": dict(Counter(outcome(c.open) for c in cases).most_common()),
        "verify": dict(Counter(outcome(c.verify) for c in cases).most_common()),
        "queries": dict(Counter(outcome(c.queries) for c in cases).most_common()),
        "undetected_live": sum(c.cls.startswith("undetected") and c.live for c in cases),
        "by_kind": {
            k: dict(Counter(c.cls for c in cases if c.kind == k).most_common())
            for k in sorted({c.kind for c in cases})
        },
    }


def report(cases: list[Case], path: str | None, command: str) -> dict[str, Any]:
    """Print the figures; write them and every case to path as JSON when given."""
    s = summary(cases)
    print(json.dumps({k: v for k, v in s.items() if k != "by_kind"}, indent=1))
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"command": command, "summary": s,
                       "cases": [asdict(c) for c in cases]}, fh, indent=1)
            fh.write("\n")
    return s


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "probe":
        raise SystemExit("usage: python -m tools.stress.damage probe STORE EXPECT_JSON "
                         "(started by python -m tools.stress damage)")
    probe(sys.argv[2], sys.argv[3])
