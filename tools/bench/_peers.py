"""Optional peer libraries: each loader returns the module, or None with a warning.

Peers come from the ``[bench]`` extra and are never runtime dependencies of
simstore. A peer that does not import is skipped, and no number is written for it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType

from ._harness import REPO

DEFAULT_PYBIND_DIR = REPO / ".bench" / "peers" / "simhash-pybind"


def _skip(peer: str, why: str, stacklevel: int = 3) -> None:
    """Warn at the caller of the load_* function (stacklevel counts from here)."""
    warnings.warn(f"peer {peer!r} skipped: {why}", stacklevel=stacklevel)


def _import(peer: str, name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip this peer"
        _skip(peer, f"it does not import ({exc})", stacklevel=4)
        return None


def load_simhash() -> ModuleType | None:
    """The PyPI ``simhash`` package (Simhash, SimhashIndex), or None with a warning."""
    mod = _import("simhash", "simhash")
    if mod is None:
        return None
    if not hasattr(mod, "Simhash") or not hasattr(mod, "SimhashIndex"):
        _skip("simhash", "the module named simhash is not the PyPI simhash "
                         "package (simhash-pybind installs over it; reinstall simhash and put "
                         "simhash-pybind in --pybind-dir)")
        return None
    return mod


def load_simhash_pybind(pybind_dir: Path) -> ModuleType | None:
    """simhash-pybind's module (``find_all``), loaded from pybind_dir, or None with a warning."""
    with contextlib.suppress(Exception):
        mod = importlib.import_module("simhash")
        if hasattr(mod, "c_find_all"):
            return mod
    init = pybind_dir / "simhash" / "__init__.py"
    if not init.is_file():
        _skip("simhash-pybind", f"not found in {pybind_dir} (install it with "
                                f"'pip install --target {pybind_dir} simhash-pybind')")
        return None
    name = "_bench_simhash_pybind"
    if name in sys.modules:
        return sys.modules[name]
    try:
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip this peer"
        sys.modules.pop(name, None)
        _skip("simhash-pybind", f"it does not import ({exc})")
        return None
    return mod


def load_datasketch() -> ModuleType | None:
    """``datasketch`` (MinHash, LeanMinHash, MinHashLSH), or None with a warning."""
    return _import("datasketch", "datasketch")


def load_faiss() -> ModuleType | None:
    """``faiss`` (the faiss-cpu wheel: IndexBinaryMultiHash), or None with a warning."""
    return _import("faiss", "faiss")


def load_rensa() -> ModuleType | None:
    """``rensa`` (Rust MinHash: RMinHash, CMinHash), or None with a warning."""
    return _import("rensa", "rensa")
