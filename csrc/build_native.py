"""cffi build script for ``simstore.native._native`` (out-of-line API mode).

setuptools runs this at install time through ``cffi_modules`` in setup.py;
nothing is compiled at import time. The declarations come from the one
header, between its CDEF markers.
"""

from __future__ import annotations

import importlib.util
import pathlib
import platform
import re
import sys

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = [
    "murmur3.c", "hamming.c", "simhash.c", "signature.c", "permute.c", "batch.c", "query.c",
    "probe.c", "unicode.c", "jaccard.c", "lmdbmap.c", "buildinfo.c", "single.c",
    "keytable.c", "textscratch.c", "status.c",
]
# Headers whose CDEF parts are the binding's declarations.
HEADERS = ["simstore.h", "buildinfo.h"]


def _cdef() -> str:
    bodies = []
    for header in HEADERS:
        text = (HERE / header).read_text(encoding="utf-8")
        bodies.append(text.split("/* CDEF-BEGIN */", 1)[1].split("/* CDEF-END */", 1)[0])
    return "\n".join(bodies)


def _version() -> str:
    """The version in pyproject.toml's [project] table (no tomllib on Python 3.10)."""
    text = (HERE.parent / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M)
    assert found is not None, "pyproject.toml: no version in [project]"
    return found.group(1)


def _build_macros() -> list[tuple[str, str]]:
    """What csrc/buildinfo.c reports: the release and the Python that made the tables."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return [("SS_BUILD_VERSION", f'"{_version()}"'), ("SS_BUILD_PYTHON", f'"{python}"')]


def _compile_args() -> list[str]:
    if sys.platform == "win32":
        return ["/O2"]
    return ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing"]


# The Unicode tables come from the Python running this build, never from a file
# of another build: that Python's unicodedata is the one the reference uses. So a
# built core suits one Python minor version (3.10 has Unicode 13.0, 3.13 has 15.1):
# wheels are tagged per version (cp310..cp313), never one abi3 wheel for all.
_spec = importlib.util.spec_from_file_location("gen_unicode", HERE / "gen_unicode.py")
assert _spec is not None and _spec.loader is not None
_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gen)
_gen.write(HERE / "unicode_tables.h")

ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "simstore.native._native",
    "".join(f'#include "{h}"\n' for h in HEADERS),
    sources=[str((HERE / s).relative_to(HERE.parent)) for s in SOURCES],
    include_dirs=[str(HERE.relative_to(HERE.parent))],
    extra_compile_args=_compile_args(),
    define_macros=_build_macros(),
    # a new version in pyproject.toml rebuilds the core, so it never reports an old one
    depends=[str((HERE / h).relative_to(HERE.parent)) for h in HEADERS] + ["pyproject.toml"],
    libraries=[] if sys.platform == "win32" else ["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
