"""cffi build script for ``simstore.native._native`` (out-of-line API mode).

setuptools runs this at install time through ``cffi_modules`` in setup.py;
nothing is compiled at import time. The declarations come from the one
header, between its CDEF markers.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = [
    "murmur3.c", "hamming.c", "simhash.c", "signature.c", "permute.c", "batch.c", "query.c",
    "probe.c", "unicode.c", "jaccard.c", "lmdbmap.c",
]


def _cdef() -> str:
    text = (HERE / "simstore.h").read_text(encoding="utf-8")
    body = text.split("/* CDEF-BEGIN */", 1)[1].split("/* CDEF-END */", 1)[0]
    return body


def _compile_args() -> list[str]:
    if sys.platform == "win32":
        return ["/O2"]
    return ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing"]


# The Unicode tables come from the Python running this build, never from a file
# of another build: that Python's unicodedata is the one the reference uses.
_spec = importlib.util.spec_from_file_location("gen_unicode", HERE / "gen_unicode.py")
assert _spec is not None and _spec.loader is not None
_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gen)
_gen.write(HERE / "unicode_tables.h")

ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "simstore.native._native",
    '#include "simstore.h"',
    sources=[str((HERE / s).relative_to(HERE.parent)) for s in SOURCES],
    include_dirs=[str(HERE.relative_to(HERE.parent))],
    extra_compile_args=_compile_args(),
    libraries=[] if sys.platform == "win32" else ["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
