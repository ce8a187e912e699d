"""The package's layers: no module imports a layer above its own, and no import cycles.

Layers, lowest first: the base (``exceptions``, ``_validate``, ``_files``, ``_distinct``,
``_mapped``), ``native``,
``text``, ``search``, ``store``, then ``corpus``, ``spark``, ``crawl`` (on the base alone:
it is handed a store) and ``scrapy`` (on ``crawl``), then ``hf`` and ``datatrove`` (on
``corpus``), then ``cli``. Nothing imports
``scrapy`` (a crawler loads it by name).
Imports at any depth count, function-level ones included. No module imports a private
name (a module or attribute starting with ``_``) of another subpackage: each subpackage's
face is its public names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "simstore"

# What each layer may import from the package (besides itself).
BASE = {"simstore.exceptions", "simstore._validate", "simstore._files", "simstore._version",
        "simstore._distinct", "simstore._mapped"}
ALLOWED = {
    "base": set(),
    "native": {"base"},
    "text": {"base", "native"},
    "search": {"base", "native", "text"},
    "store": {"base", "native", "text", "search"},
    "corpus": {"base", "native", "text", "search", "store"},
    "spark": {"base", "native", "text", "search", "store"},
    # The crawl frontier is framework-free: it is handed an open store and asks its door.
    "crawl": {"base"},
    "scrapy": {"base", "native", "text", "search", "store", "crawl"},
    # The Hugging Face and datatrove integrations run the corpus workflow's engines.
    "hf": {"base", "native", "text", "search", "store", "corpus"},
    "datatrove": {"base", "native", "text", "search", "store", "corpus"},
    "cli": {"base", "native", "text", "search", "store", "corpus", "spark", "crawl", "face"},
    # The package face re-exports the lower layers.
    "face": {"base", "text", "search", "store"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _layer(mod: str) -> str:
    if mod in BASE:
        return "base"
    if mod == "simstore.__main__":
        return "cli"
    parts = mod.split(".")
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED):
        return parts[1]
    return "face"  # simstore


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base[: len(base) - node.level + 1]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in mods else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in mods and m != mod}


MODS = _modules()
GRAPH = {m: _imports(m, p, MODS) for m, p in MODS.items()}


def test_the_walk_sees_the_package():
    """The import graph is read from every module (guards the test itself)."""
    assert {"simstore.store.store", "simstore.text.minhash", "simstore.cli._spark"} <= set(MODS)
    assert "simstore.store.env" in GRAPH["simstore.store.store"]


@pytest.mark.parametrize("mod", sorted(MODS))
def test_no_import_from_a_higher_layer(mod):
    """Each module imports only its own layer and the layers below it."""
    layer = _layer(mod)
    bad = [
        dep for dep in sorted(GRAPH[mod])
        if _layer(dep) != layer and _layer(dep) not in ALLOWED[layer]
    ]
    assert bad == [], f"{mod} ({layer}) imports {bad}"


def test_nothing_imports_the_scrapy_integration():
    """No module outside simstore.scrapy imports it: ``import simstore`` never needs Scrapy."""
    assert "simstore.scrapy" in MODS
    users = sorted(m for m, deps in GRAPH.items() if _layer(m) != "scrapy"
                   and any(_layer(d) == "scrapy" for d in deps))
    assert users == []


def test_no_import_cycles():
    """No module reaches itself through imports (package faces count as modules)."""
    state: dict[str, int] = {}
    cycles = []

    def walk(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(GRAPH[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                walk(d, stack + [d])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            walk(m, [m])
    assert cycles == []


def _subpackage(mod: str) -> str | None:
    """The subpackage a module belongs to (``simstore.corpus.api`` -> ``corpus``); None for
    the package's own top-level modules."""
    parts = mod.split(".")
    if len(parts) > 2 or (len(parts) == 2 and MODS[mod].name == "__init__.py"):
        return parts[1]
    return None


def _private_reaches(mod: str, path: Path) -> list[str]:
    """The private names of other subpackages ``mod`` imports, or reads as an attribute
    of a module it imported (``api._open_store``)."""
    is_pkg = path.name == "__init__.py"
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    named, as_module = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([target] if target else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                named.append(full)
                if full in MODS:
                    as_module[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            named.extend(a.name for a in node.names)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in as_module):
            named.append(f"{as_module[node.value.id]}.{node.attr}")
    own = _subpackage(mod)
    return sorted(
        full for full in set(named)
        if full.startswith("simstore.") and len(full.split(".")) > 2
        and full.split(".")[1] != own
        and any(p.startswith("_") and not p.startswith("__") for p in full.split(".")[2:])
    )


def test_the_private_name_check_sees_a_reach(tmp_path):
    """A module importing another subpackage's private name, or reading one off a module, is
    caught; its own subpackage's private names are not (guards the test itself)."""
    p = tmp_path / "m.py"
    p.write_text("from ..corpus.api import _x, public\nfrom ..corpus import exact\n"
                 "from . import _own\nexact._decide()\n")
    assert _private_reaches("simstore.hf._m", p) == [
        "simstore.corpus.api._x", "simstore.corpus.exact._decide"]


@pytest.mark.parametrize("mod", sorted(m for m in MODS if _subpackage(m) is not None))
def test_no_private_name_imported_across_subpackages(mod):
    """No module imports (or reads off an imported module) a name starting with ``_`` from
    another subpackage; a compiled module such as simstore.native._native is used only
    inside its own package."""
    assert _private_reaches(mod, MODS[mod]) == []



def test_no_module_reaches_into_another_objects_environment():
    """``x._env`` is read only as ``self._env``: other rooms use the store's doors
    (``SimStore.databases``, ``closed``), never its environment."""
    reaches = []
    for mod, path in MODS.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "_env"
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                reaches.append(f"{mod}:{node.lineno}")
    assert reaches == []
