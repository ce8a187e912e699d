"""Developer tools of simstore: benchmarks, the quality evaluation and stress runs.

Run from the repository root, e.g. ``python -m tools.bench --help``.
"""
