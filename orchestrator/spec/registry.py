"""Where grids and searches are found: ``search_spaces/<name>.py`` or a user's own ``.py`` file.

A module defines ``GRID = Grid(...)`` (a table or figure) or ``SPACE = SearchSpace(...)`` (a
search); modules whose name starts with ``_`` are helpers. Only the module a command asks for is
imported, so one broken file (a typo, a range with low > high) breaks only the commands that use
it, and its error names the file. ``--list`` imports and checks every entry and names each broken
one.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.spec.grids import Grid
from orchestrator.spec.spaces import SearchSpace

PACKAGE = "search_spaces"
ALIASES = {"table3": "kdmcse_table3"}
"""short names users already type -> the grid's name (its paper in its name)"""


def names() -> list[str]:
    """Every entry module of ``search_spaces/``, sorted, without importing any."""
    pkg = importlib.import_module(PACKAGE)
    return sorted(i.name for i in pkgutil.iter_modules(pkg.__path__) if not i.name.startswith("_"))


def _import(module: str, where: str) -> Any:
    try:
        return importlib.import_module(module)
    except (ValueError, TypeError, ImportError, SyntaxError, NameError, AttributeError) as e:
        raise ValueError(f"{where}: {e}; fix that file") from None


def _entry(name: str, kind: str) -> Any:
    attr = "GRID" if kind == "grid" else "SPACE"
    name = ALIASES.get(name, name)
    known = names()
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(known)} (or a path to a .py file)")
    mod = _import(f"{PACKAGE}.{name}", f"{PACKAGE}/{name}.py")
    if not hasattr(mod, attr):
        other = "a search (use orchestrator.search --space)" if kind == "grid" else \
            "a grid (use orchestrator.ablate --grid)"
        raise ValueError(f"{name!r} is {other if hasattr(mod, 'GRID') or hasattr(mod, 'SPACE') else 'not an entry'}")
    obj = getattr(mod, attr)
    if obj.name != name:
        raise ValueError(f"{PACKAGE}/{name}.py defines {kind} named {obj.name!r}; name it {name!r}")
    return obj


def _from_file(path: str, attr: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"file {p} does not exist; pass a name (see --list) or an existing .py file")
    spec = importlib.util.spec_from_file_location(f"_mmemb_user_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    except (ValueError, TypeError, ImportError, SyntaxError, NameError, AttributeError) as e:
        raise ValueError(f"{p}: {e}; fix that file") from None
    if not hasattr(mod, attr):
        kind = "Grid" if attr == "GRID" else "SearchSpace"
        raise ValueError(f"{p} defines no {attr}; declare {attr} = {kind}(...) as search_spaces/ do")
    return getattr(mod, attr)


def load_grid(name: str) -> Grid:
    """A grid of ``search_spaces/`` by name (or alias), or ``GRID`` of a Python file."""
    return _from_file(name, "GRID") if name.endswith(".py") else _entry(name, "grid")


def load_space(name: str) -> SearchSpace:
    """A search of ``search_spaces/`` by name, or ``SPACE`` of a Python file."""
    return _from_file(name, "SPACE") if name.endswith(".py") else _entry(name, "search")


def list_text(grids: bool = True, spaces: bool = True,
              check: Callable[[Any], None] | None = None) -> str:
    """The ``--list`` text: one checked line per entry; a broken entry's line says what is wrong
    and the whole listing then raises, so the command exits non-zero."""
    from orchestrator.spec.validate import validate_grid, validate_space

    lines, broken = [], []
    for name in names():
        try:
            mod = _import(f"{PACKAGE}.{name}", f"{PACKAGE}/{name}.py")
            if hasattr(mod, "GRID") and grids:
                g = _entry(name, "grid")
                (check or validate_grid)(g)
                alias = [a for a, n in ALIASES.items() if n == name]
                size = f"{len(g.cells)} cells x {len(g.seeds)} seeds"
                lines.append(f"grid    {name:<27} {size:<23} {g.title}"
                             + (f" (alias: {', '.join(alias)})" if alias else ""))
            elif hasattr(mod, "SPACE") and spaces:
                s = _entry(name, "search")
                (check or validate_space)(s)
                size = f"{s.num_samples} samples + {len(s.confirm_seeds)} seeds"
                lines.append(f"search  {name:<27} {size:<23} {s.title}")
        except ValueError as e:
            broken.append(name)
            lines.append(f"BROKEN  {name:<27} {e}")
    text = "\n".join(lines)
    if broken:
        raise ValueError(f"{text}\n{len(broken)} broken entr{'y' if len(broken) == 1 else 'ies'}: "
                         f"{', '.join(broken)}")
    return text
