"""Where grids and searches are found: ``search_spaces/<name>.py`` or a user's own ``.py`` file.

A module defines ``GRID = Grid(...)`` (a table or figure) or ``SPACE = SearchSpace(...)`` (a
search); modules whose name starts with ``_`` are helpers. Only the module a command asks for is
imported, so one broken file (a typo, a range with low > high) breaks only the commands that use
it, and its error names the file. Wherever a grid or search comes from (``--grid NAME``,
``--grid FILE.py``, ``--list``) it goes through the same checks (``orchestrator.spec.validate``)
before anything uses it; ``--list`` imports and checks every entry and names each broken one.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.spec.grids import Grid
from orchestrator.spec.spaces import SearchSpace
from trainables.runtime.user_code import ImportExited, ImportInterrupted, at_fault, importing

PACKAGE = "search_spaces"
ALIASES = {"table3": "kdmcse_table3"}
"""short names users already type -> the grid's name (its paper in its name)"""


def names() -> list[str]:
    """Every entry module of ``search_spaces/``, sorted, without importing any."""
    pkg = importlib.import_module(PACKAGE)
    return sorted(i.name for i in pkgutil.iter_modules(pkg.__path__) if not i.name.startswith("_"))


KINDS = {"GRID": "grid file", "SPACE": "search space file"}


def _import(module: str, where: str, kind: str = "grid or search space file") -> Any:
    """Import a module of ``search_spaces/``: code like a user's own file (it may exit or be
    interrupted while it runs), so whatever it does is one line naming it."""
    try:
        with importing(where, kind):
            try:
                return importlib.import_module(module)
            except Exception as e:  # whatever a user's module raises: one line naming the file
                raise ValueError(_broken(e, where)) from None
    except (ImportExited, ImportInterrupted):
        sys.modules.pop(module, None)
        raise


def _broken(e: BaseException, where: str) -> str:
    """One line for a file that failed to import: the file at fault, its line, the error."""
    file, line = at_fault(e, where)
    same = Path(file).name == Path(where).name
    msg = " ".join(str(e).split()) or type(e).__name__
    msg = msg if isinstance(e, ValueError) else f"{type(e).__name__}: {msg}"
    at = f"line {line}: " if line else ""
    head = where if same else file
    by = "" if same else f" (imported by {where})"
    return f"{head}: {at}{msg}; fix that file{by}"


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
    obj = _typed(getattr(mod, attr), attr, f"{PACKAGE}/{name}.py")
    if obj.name != name:
        raise ValueError(f"{PACKAGE}/{name}.py defines {kind} named {obj.name!r}; name it {name!r}")
    return obj


def _typed(obj: Any, attr: str, where: str) -> Any:
    want = Grid if attr == "GRID" else SearchSpace
    if not isinstance(obj, want):
        raise ValueError(f"{where}: {attr} is a {type(obj).__name__}, not a {want.__name__}; "
                         f"declare {attr} = {want.__name__}(...) as search_spaces/ do")
    if not isinstance(obj.name, str) or not obj.name.strip():
        raise ValueError(f"{where}: {attr}.name must be a non-empty string, got {obj.name!r}")
    return obj


def _from_file(path: str, attr: str) -> Any:
    """``attr`` of a user's file. The file's folder is on the import path while it runs, so it may
    import a method defined beside it (``import my_method``), as a script would; the module stays
    in ``sys.modules``, so a method it defines itself can be found again by a Ray worker
    (``trainables.objectives.methods``)."""
    from trainables.runtime.command_line import unexpanded_home

    unexpanded_home(path, "--grid" if attr == "GRID" else "--space")
    p = Path(path).resolve()
    if p.is_dir():
        raise ValueError(f"{path} is a folder; pass a name (see --list) or the .py file inside it")
    if not p.is_file():
        raise ValueError(f"file {path} does not exist; pass a name (see --list) or an existing .py file")
    name = f"_mmemb_user_{p.stem}"
    spec = importlib.util.spec_from_file_location(name, p)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    folder = str(p.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        # It is code: sys.exit, argparse and Ctrl-C while it runs are named as it did them.
        with importing(p, KINDS[attr]):
            try:
                spec.loader.exec_module(mod)  # type: ignore[union-attr]
            except Exception as e:  # whatever a user's file raises: one line naming it
                raise ValueError(_broken(e, str(p))) from None
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added:
            sys.path.remove(folder)
    from trainables.runtime import shipping

    shipping.add(p.parent)  # the file's folder goes to every Ray worker (what it imports too)
    if not hasattr(mod, attr):
        kind = "Grid" if attr == "GRID" else "SearchSpace"
        raise ValueError(f"{p} defines no {attr}; declare {attr} = {kind}(...) as search_spaces/ do")
    return _typed(getattr(mod, attr), attr, str(p))


def _load(name: str, attr: str, kind: str, stem: str, validate: Callable[[Any], None]) -> Any:
    """``attr`` of a Python file, or the ``kind`` entry ``stem`` of ``search_spaces/``, checked
    by ``validate`` the same way either way; a failure names the file."""
    py = name.endswith(".py")
    entry = _from_file(name, attr) if py else _entry(name, kind)
    try:
        validate(entry)
    except ValueError as e:
        raise ValueError(f"{name if py else f'{PACKAGE}/{stem}.py'}: {e}; fix that file") from None
    return entry


def load_grid(name: str) -> Grid:
    """A grid of ``search_spaces/`` by name (or alias), or ``GRID`` of a Python file."""
    from orchestrator.spec.validate import validate_grid

    return _load(name, "GRID", "grid", ALIASES.get(name, name), validate_grid)


def load_space(name: str) -> SearchSpace:
    """A search of ``search_spaces/`` by name, or ``SPACE`` of a Python file."""
    from orchestrator.spec.validate import validate_space

    return _load(name, "SPACE", "search", name, validate_space)


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
                             + (" (STS and TR)" if g.transfer else "")
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
