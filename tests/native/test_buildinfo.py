"""The installed C core was built for this package and this Python (wheels included)."""

from __future__ import annotations

import platform
import unicodedata

from simstore import __version__
from simstore.native import core
from simstore.native.buildinfo import BuildInfo, build_info, problems
from simstore.text import fingerprinting
from simstore.text.rules import tables_id

SAMPLE = "Ｆｕｌｌｗｉｄｔｈ ΣΊΣΥΦΟΣ ﬁle Straße 東京タワー ①"


def test_the_core_reports_this_version_and_this_pythons_unicode_tables():
    """problems() is empty: same version as the package, tables of this Python."""
    found = problems(tables_id())
    assert not found, "\n".join(found)
    info = build_info()
    assert info.version == __version__
    assert info.unicode_tables == tables_id()
    assert unicodedata.unidata_version in info.unicode_tables


def test_the_core_was_built_by_this_python_minor_version():
    """A core made by another Python (an abi3 wheel, a copied .so) shows in its build facts."""
    major, minor, _ = platform.python_version_tuple()
    assert build_info().python.startswith(f"{platform.python_implementation()} {major}.{minor}.")
    assert build_info().compiler not in ("", "unknown")


def test_the_tables_are_compiled_in_and_used():
    """The C tokenizer normalizes as unicodedata does, and fingerprinting takes it."""
    assert fingerprinting.UNICODE_IN_C
    data = SAMPLE.encode("utf-8")
    assert core.unicode_nfkc(data).decode("utf-8") == unicodedata.normalize("NFKC", SAMPLE)
    assert core.unicode_tokens(data).decode("utf-8").split() == [
        "fullwidth",
        "σίσυφος",
        "file",
        "straße",
        "東",
        "京",
        "タ",
        "ワ",
        "ー",
        "1",
    ]


def test_problems_name_a_stale_core_and_foreign_tables():
    """Another version and another Python's tables each give one line saying what to do."""
    info = BuildInfo(
        version="0.9.0",
        python="CPython 3.10.13",
        compiler="gcc 12.2.0",
        unicode_tables=tables_id("13.0.0"),
    )
    found = problems(tables_id("15.1.0"), info=info, version="1.0.0")
    assert len(found) == 2
    assert "built for simstore 0.9.0 but simstore 1.0.0 is installed" in found[0]
    assert "unicode 13.0.0" in found[1] and "CPython 3.10.13" in found[1]
    assert "unicode 15.1.0" in found[1]
    same = BuildInfo("1.0.0", "CPython 3.13.0", "clang", tables_id("15.1.0"))
    assert problems(tables_id("15.1.0"), info=same, version="1.0.0") == []
