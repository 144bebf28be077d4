"""Where grids and searches are found: ``search_spaces/<name>.py`` or a user's own ``.py`` file.

A module defines ``GRID = Grid(...)`` (a table or figure) or ``SPACE = SearchSpace(...)`` (a
search); modules whose name starts with ``_`` are helpers. A module that fails to import (a typo,
a range with low > high) is named in the error, and breaks only the commands that ask for it.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from orchestrator.grids import Grid
from orchestrator.spaces import SearchSpace

PACKAGE = "search_spaces"

def _entries() -> tuple[dict[str, Any], dict[str, Any]]:
    pkg = importlib.import_module(PACKAGE)
    grids: dict[str, Any] = {}
    spaces: dict[str, Any] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{PACKAGE}.{info.name}")
        if hasattr(mod, "GRID"):
            grids[info.name] = mod
        elif hasattr(mod, "SPACE"):
            spaces[info.name] = mod
    return grids, spaces


def _get(name: str, kind: str) -> Any:
    grids, spaces = _entries()
    mine, other = (grids, spaces) if kind == "grid" else (spaces, grids)
    if name not in mine:
        hint = f" ({name!r} is a {'search' if kind == 'grid' else 'grid'})" if name in other else ""
        raise ValueError(f"unknown {kind} {name!r}{hint}; known {'searches' if kind == 'search' else 'grids'}: {', '.join(mine) or 'none'}")
    obj = mine[name].GRID if kind == "grid" else mine[name].SPACE
    if obj.name != name:
        raise ValueError(f"{PACKAGE}/{name}.py defines {kind} named {obj.name!r}; name it {name!r}")
    return obj


def load_grid(name: str) -> Grid:
    """A grid of ``search_spaces/`` by name, or ``GRID`` of a Python file (your own table)."""
    if name.endswith(".py"):
        return _from_file(name, "GRID")
    return _get(name, "grid")


def _from_file(path: str, attr: str) -> Any:
    import importlib.util

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"grid file {p} does not exist; pass a grid name (see --list) or a .py file")
    spec = importlib.util.spec_from_file_location(f"_mmemb_user_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    if not hasattr(mod, attr):
        raise ValueError(f"{p} defines no {attr}; declare {attr} = Grid(...) as search_spaces/ do")
    return getattr(mod, attr)


def load_space(name: str) -> SearchSpace:
    return _get(name, "search")


def list_grids() -> list[tuple[str, str]]:
    """(name, one-line description) per grid, sorted by name."""
    return [(n, m.GRID.title) for n, m in _entries()[0].items()]


def list_spaces() -> list[tuple[str, str]]:
    return [(n, m.SPACE.title) for n, m in _entries()[1].items()]


def list_text() -> str:
    """The ``--list`` text: one line per grid, then one per search."""
    lines = []
    for name, _ in list_grids():
        g = load_grid(name)
        size = f"{len(g.cells)} cells x {len(g.seeds)} seeds"
        lines.append(f"grid    {name:<16} {size:<24} {g.title}")
    for name, _ in list_spaces():
        s = load_space(name)
        size = f"{s.num_samples} samples + {len(s.confirm_seeds)} seeds"
        lines.append(f"search  {name:<16} {size:<24} {s.title}")
    return "\n".join(lines)
