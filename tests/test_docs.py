"""The documentation names only paths that exist: every repository path in README.md and
docs/*.md (a whole inline-code span such as `simstore/store/format.py`, or a link target)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("simstore/", "csrc/", "tests/", "tools/", "docs/", ".ci/")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A placeholder stands for many names (`bucket_BBB/RRRRR.sig`, `run-$i.json`, `*.py`).
PLACEHOLDER = re.compile(r"[A-Z]{3,}|[$*{<…]")
# Scrapy stats keys share the prefix (`simstore/new`, `simstore/skipped/`): under simstore/
# a span counts when it names a file.
STATS_KEY = re.compile(r"^simstore/[^.]*$")
# A bare file name (`format.py`) names the repository's file of that name, wherever it is.
BARE = re.compile(r"^[\w.-]+\.(?:py|pyi|c|h|sh)$")
NAMES = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
USER_FILES = {"settings.py"}  # a Scrapy project's file, not this repository's


def named_paths(page: Path) -> list[str]:
    """The repository paths a page names, as written (relative to the repository root or,
    for link targets, to the page)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found = [p.split("::", 1)[0] for p in CODE.findall(text)
             if (p.startswith(TOP) and not STATS_KEY.match(p)) or BARE.match(p)]
    for target in LINK.findall(text):
        target = target.split("#", 1)[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            found.append(target)
    return [p for p in found if not PLACEHOLDER.search(p)]


def exists(path: str, page: Path) -> bool:
    """A file or folder from the root or beside the page; a module named the Python way
    (`tools/_corpus`, `tools/_corpus.english_documents`) counts as its .py file."""
    if BARE.match(path):
        return path in NAMES or path in USER_FILES
    module = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    return any((base / p).exists() for base in (ROOT, page.parent)
               for p in (path, path + ".py", module + ".py"))


def missing(page: Path) -> list[str]:
    """The paths a page names that do not exist."""
    return [p for p in named_paths(page) if not exists(p, page)]


def test_the_check_reads_code_spans_and_links(tmp_path):
    """Code spans and link targets count; commands, placeholders, stats keys and fenced
    blocks do not."""
    page = tmp_path / "p.md"
    page.write_text("`simstore/gone.py`, `runfile.py`, `schema.py`, [x](docs/format.md#versioning), [w](https://a.b/c), "
                    "`python -m tools.bench --out docs/x.json`, `docs/RRRRR.count`, "
                    "`simstore/skipped/`\n```\nsimstore/in_a_block.py\n```\n")
    assert named_paths(page) == ["simstore/gone.py", "runfile.py", "schema.py", "docs/format.md"]
    assert missing(page) == ["simstore/gone.py", "runfile.py"]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_path_the_docs_name_exists(page):
    """Each repository path README.md or a docs page names is a file or folder here."""
    assert named_paths(page) or page.name != "README.md"
    assert missing(page) == []
