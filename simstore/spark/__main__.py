"""``python -m simstore.spark ENV.tar.gz``: pack the executors' environment
(:func:`simstore.spark.environment.main`)."""

from __future__ import annotations

import sys

from .environment import main

sys.exit(main())
