"""Checks of a store's files: LMDB's file layout, a structural page check, ``verify()``.

They read data.mdb as plain bytes (``lmdbfile``, ``pages``) or in a child process
(``verify``), so a damaged file is reported, never a crash of the caller.
"""
