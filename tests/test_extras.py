"""pyproject.toml's extras install what their integration's documented example needs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _extra(name: str) -> set[str]:
    """The distribution names an extra of pyproject.toml lists on its one line (versions
    dropped; read as text: tomllib is not in Python 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(rf"^{name} = \[(.*)\]$", text, re.MULTILINE)
    assert found is not None, f"no one-line extra {name!r} in pyproject.toml"
    reqs = re.findall(r'"([^"]+)"', found.group(1))
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in reqs}


def test_the_datatrove_extra_installs_orjson():
    """pip install 'simstore[datatrove]' brings orjson, which datatrove's JsonlReader and
    JsonlWriter (the documented example's stages) ask for at run time."""
    assert {"datatrove", "orjson"} <= _extra("datatrove")
