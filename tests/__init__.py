"""The simstore test suite: each subpackage guards one layer of the package (cli, corpus,
native, scrapy, search, spark, store, text); the modules at this level guard what crosses
layers (bad input, layering, outputs, hardening, CI). Shared: strategies, oracles, kat_*."""
