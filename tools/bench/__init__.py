"""simstore benchmarks against peer libraries, measured in one process run.

Run ``python -m tools.bench --help`` from the repository root; every sub-command
has its own ``--help``. Each sub-command builds seeded data, warms up, times at
least three repetitions and prints Median / P90 / P99 / Max (never the mean) with
the peak RSS, then writes a JSON result file (``--out``). Peer libraries run in
the same process when they import; a peer that does not import is skipped with a
warning and no number is written for it. ``all`` runs everything at default
sizes, writes ``docs/bench/all.json`` and regenerates the tables of
``docs/benchmarks.md`` and the plot ``docs/bench/scaling.png``. ``ab`` compares
two revisions of simstore in one run (a "no slowdown" check); ``abq`` compares
their query latency with both revisions serving at once, in short alternating
blocks of the same queries, each pair of blocks compared like with like;
``probe-ab`` builds other revisions' C core as modules of their own and calls
each one's probe on one store's run sets in one process, in alternating blocks.

Modules: ``_harness`` (statistics, timers, RSS, Report, machine, JSON),
``_peers`` (optional peer libraries), ``_data`` (seeded inputs), ``_cli`` (the option
parsers the commands share), ``_render`` (Markdown tables and plot of ``all``), one module
per benchmark, and ``__main__`` (the CLI). A benchmark module has a docstring, whose first
paragraph is its help line, ``add_arguments(parser)`` and ``run(args) -> dict``; one line
of ``COMMANDS`` in ``__main__`` registers it.

Peers (the ``[bench]`` extra; never runtime dependencies of simstore):

* ``simhash`` (PyPI, leonsim): ``Simhash`` fingerprints, ``SimhashIndex``.
* ``datasketch``: ``MinHash`` and ``MinHashLSH``, a different (approximate) method.
* ``faiss-cpu``: ``IndexBinaryMultiHash``, exact multi-index hashing in memory.
* ``simhash-pybind``: a C++ ``find_all``. It installs its own ``simhash``
  package over the PyPI one, so the two cannot share a site-packages; install
  it aside with ``pip install --target .bench/peers/simhash-pybind
  simhash-pybind`` and this tool loads it from there (``--pybind-dir``).
"""
