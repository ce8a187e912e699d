"""Developer tools of simstore, each a package run with ``python -m`` from the repository root.

``tools.bench`` (benchmarks against peers), ``tools.stress`` (kill, multi-process and
damage runs), ``tools.quality`` (how well the estimates find true Jaccard), ``tools.crawl``
(a local test site and its spider). Private helpers shared by them: ``_corpus`` (the one
reader of real text), ``_util``; ``spark_cluster`` starts a local Spark standalone cluster
for the cluster tests and benchmark. Every command has ``--help``.
"""
