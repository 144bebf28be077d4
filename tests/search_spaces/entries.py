"""The shipped grids and searches as (name, object) pairs, for tests that walk them all."""

from __future__ import annotations

import importlib

from orchestrator.registry import PACKAGE, names


def _entries(attr: str) -> list[tuple[str, object]]:
    out = []
    for name in names():
        mod = importlib.import_module(f"{PACKAGE}.{name}")
        if hasattr(mod, attr):
            out.append((name, getattr(mod, attr)))
    return out


def list_grids() -> list[tuple[str, object]]:
    return _entries("GRID")


def list_spaces() -> list[tuple[str, object]]:
    return _entries("SPACE")
