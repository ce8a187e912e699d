"""The cffi bindings of the C core in ``csrc/`` (compiled at install as ``_native``).

``core`` is the numpy-facing binding of the hot loops (simhash, signatures, batch
search, popcount verification), ``single`` its one-document calls, ``probe`` that of
the probe engine of the run tables (``runsets`` the run sets it reads),
``jaccard`` that of shingle-hash sets (exact Jaccard, set codes), ``buildinfo`` what the
installed core was built for (version, Python, Unicode tables; see docs/install.md).
Internal: the public API is in :mod:`simstore`.
"""
