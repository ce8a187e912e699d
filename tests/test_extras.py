"""pyproject.toml's extras install what their integration's documented example needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _extra(name: str) -> set[str]:
    """The distribution names an extra of pyproject.toml lists (versions dropped)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower()
            for req in project["optional-dependencies"][name]}


def test_the_datatrove_extra_installs_orjson():
    """pip install 'simstore[datatrove]' brings orjson, which datatrove's JsonlReader and
    JsonlWriter (the documented example's stages) ask for at run time."""
    assert {"datatrove", "orjson"} <= _extra("datatrove")
