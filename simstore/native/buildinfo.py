"""What the installed C core was built for, and whether that suits this interpreter.

A wheel carries a core compiled elsewhere: it must report this package's version (else it
is a core left over from another release) and Unicode tables made from this Python's
``unicodedata`` (else the C tokenizer is unused and text is prepared in Python, slower).
``problems()`` says which of these fails, one line each; the test suite and
``tools/wheel_check.py`` require it to be empty. (The tables this Python needs are named by
``simstore.text.rules.tables_id()``, a layer above: callers pass them in.)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _version
from .core import ffi, lib, unicode_tables_id


@dataclass(frozen=True)
class BuildInfo:
    """The facts compiled into ``simstore.native._native`` (csrc/buildinfo.h)."""

    version: str
    """The simstore version whose pyproject.toml the build read."""
    python: str
    """The interpreter that ran the build, e.g. 'CPython 3.11.7'."""
    compiler: str
    """The C compiler's own version string."""
    unicode_tables: str
    """The name of the Unicode tables compiled in (see simstore.text.rules.tables_id)."""


def build_info() -> BuildInfo:
    """The installed core's build facts."""
    b = lib.ss_build_info()
    return BuildInfo(
        version=ffi.string(b.version).decode("ascii"),
        python=ffi.string(b.python).decode("ascii"),
        compiler=ffi.string(b.compiler).decode("ascii", "replace"),
        unicode_tables=unicode_tables_id(),
    )


def problems(tables: str, info: BuildInfo | None = None, version: str | None = None) -> list[str]:
    """What is wrong with a core for this package and this Python; [] when nothing.

    tables: the Unicode tables this Python needs (``simstore.text.rules.tables_id()``).
    By default the installed core and the installed distribution's version.
    """
    info = build_info() if info is None else info
    version = _version.__version__ if version is None else version
    found = []
    if info.version != version:
        found.append(
            f"simstore.native was built for simstore {info.version} but simstore {version} is "
            "installed: reinstall simstore (in a checkout, rebuild: pip install -e .)"
        )
    if info.unicode_tables != tables:
        found.append(
            f"simstore.native has the Unicode tables '{info.unicode_tables}' (built by "
            f"{info.python}) but this Python needs '{tables}': the C tokenizer is unused; "
            "install the wheel built for this Python version"
        )
    return found
