"""Durability modes: what a commit has on disk when it returns, and LMDB's flags for each.

- ``full`` (``durable=True``): the data pages, then the meta page, flushed before a
  commit returns: an OS crash or a power loss keeps every returned commit.
- ``normal`` (``durable=False``): the data pages flushed at commit, the meta page written
  after them and flushed by the next commit (LMDB's ``MDB_NOMETASYNC``): an OS crash may
  undo the last commit, never corrupts the store.
- ``unsafe``: nothing flushed (``MDB_NOSYNC``): an OS crash may corrupt the store (the
  meta page can reach the disk before the pages it names). For throwaway stores only.

A process crash (``kill -9``) loses nothing in any mode: the OS holds every write.
``python -m tools.stress powerloss`` replays OS crashes from a recorded trace of writes
(docs/durability.md).

One LMDB environment serves every handle of a process (:mod:`.shared`), opened with the
first handle's flags. A later handle that wants more adds the missing flush after its
commits (:func:`flush_after`); none can make an unsafe environment's commits safe (the
meta page may already be on disk before the data), so :func:`refusal` turns it away.
"""

from __future__ import annotations

FULL, NORMAL, UNSAFE = "full", "normal", "unsafe"
_RANK = {UNSAFE: 0, NORMAL: 1, FULL: 2}


def lmdb_flags(mode: str) -> dict[str, bool]:
    """The ``lmdb.open`` keywords of a mode."""
    return {"sync": mode != UNSAFE, "metasync": mode == FULL}


def flush_after(mode: str, env_mode: str) -> bool:
    """Whether a commit of a handle of ``mode`` through an environment opened with
    ``env_mode`` must flush the meta page itself (a full handle on a normal env)."""
    return _RANK[mode] > _RANK[env_mode]


def refusal(mode: str, env_mode: str) -> str | None:
    """Why a handle of ``mode`` cannot share an environment opened with ``env_mode``, or
    None when it can."""
    if env_mode == UNSAFE and mode != UNSAFE:
        return ("is open in this process with durable='unsafe' (commits that an OS crash "
                "can corrupt); close those handles first, or open this one with "
                "durable='unsafe' too")
    return None
