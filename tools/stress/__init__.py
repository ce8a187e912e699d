"""simstore stress runs: kill -9 crash rounds, multi-process random operations, damage.

Run ``python -m tools.stress --help``; every sub-command has its own ``--help``.
Everything is seeded: the same ``--seed`` replays the same operations (the
kill instants depend on the machine's speed, not only on the seed).

* ``kills``: start a writer process doing one kind of operation (single adds,
  ``add_many``, removes, ``rebuild``, ``compact``, ``expire``, ``merge``, or ``churn``:
  add_many and remove_many in turn with the run tables' constants shrunk, so that kills
  land inside new levels and merges spread over writes; ``sigchurn``: the same on a
  similarity store, whose band levels merge and fold too) in a loop, SIGKILL it at a
  random instant, reopen the store and check that ``verify()`` passes, every call
  acknowledged before the kill is there, the call in flight happened
  completely or not at all, and no reader slot of the dead process is left.
* ``ops``: several processes run seeded random operations (add, add_many,
  remove, remove_many, add_if_new, query, batch) on one store, each on its own
  id namespace plus a shared one; afterwards each namespace must equal the
  process's own model and ``verify()`` must pass, with warnings as errors.
* ``damage``: a seeded fuzzer of damaged files: copies of a sound Hamming
  store and a sound similarity store get random pages, partial pages, single
  bytes, meta pages overwritten or the file truncated; a fresh process per
  case opens the copy, runs ``verify()``, then queries. The figure: no case
  where open() or verify() killed the process, hung or let a non-simstore
  exception out (queries crashing on damage are counted apart). See docs/errors.md.
* ``corpus-kills``: ``dedup-corpus --store`` (keep first, longest) and ``index
  --threshold`` killed with SIGKILL at random instants, run again until one run
  finishes: its kept output must equal an uninterrupted run's, line for line
  (the store's ids for ``index``).

* ``powerloss``: OS crashes and power cuts replayed from a recorded trace of a store's
  writes and flushes (an ``LD_PRELOAD`` recorder, ``writes_shim.c``, built with cc at run
  time): crash states with lost, reordered and torn writes after the last flush, each
  opened, verified and compared with the calls acknowledged (``--control``: the unsafe
  mode must fail). docs/durability.md.

Modules: one per job (``kills``, ``ops``, ``damage``, ``corpus_kills``, ``powerloss`` with
``crash_states``), ``constants``
(the simstore constants a worker shrinks), ``__main__`` (the CLI). The suite runs short,
bounded versions (tests/store/test_crash.py, test_concurrency.py); ``--kills 1000`` is
the long run.
"""
