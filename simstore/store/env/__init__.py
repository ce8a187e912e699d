"""The LMDB environment of a store: paths, the lock file, fork safety, transactions, the
one grow-and-retry loop, read-ahead, creation all or nothing, and LMDB errors translated
by class. This face hands on what the rest of the store uses, and nothing else.
"""

from __future__ import annotations

from .create import MAX_DBS
from .environment import Env
from .errors import translate
from .forks import current_pid
from .lockfile import StoreLock
from .named import NamedDatabases

__all__ = ["MAX_DBS", "Env", "NamedDatabases", "StoreLock", "current_pid", "translate"]
