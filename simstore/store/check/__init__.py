"""Checks of a store's files as plain bytes: LMDB's file layout (``lmdbfile``) and a
structural page check (``pages``, ``nodes``), so a damaged file is reported, never a crash
of the caller. Nothing here imports the rest of the store; ``verify`` builds on it.
"""
