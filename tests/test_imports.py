"""No import cycles between project modules, and every project module imports on its own.

The graph is read from the source with ``ast``: every ``import`` / ``from ... import`` anywhere in a
module (top level, functions, ``TYPE_CHECKING`` blocks) is an edge to the project module it names.
``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg`` itself, so a
submodule that imports a sibling directly does not pass through the package ``__init__``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainables", "orchestrator", "search_spaces")


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the project packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest project module that ``name`` (a dotted path) is or lies in."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in modules:
            return candidate
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                dep = _resolve(target, modules)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                scc = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    scc.add(m)
                    if m == node:
                        break
                if len(scc) > 1:
                    found.append(frozenset(scc))
    return found


def _describe(scc: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in scc for b in graph[a] if b in scc)
    return "{" + ", ".join(sorted(scc)) + "}: " + "; ".join(edges)


def test_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from p.a import x\n")
    (pkg / "a.py").write_text("x = 1\ndef f():\n    from . import b\n")
    (pkg / "b.py").write_text("from p import a\n")
    mods = {"p": pkg / "__init__.py", "p.a": pkg / "a.py", "p.b": pkg / "b.py"}
    graph = import_graph(mods)
    assert graph == {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p.a"}}
    assert cycles(graph) == [frozenset({"p.a", "p.b"})]


def test_no_import_cycles():
    graph = import_graph(module_files())
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph) for c in found)


_IMPORT_EACH = """
import importlib, json, sys, traceback
names, prefixes = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2]))
failed = {}
for name in names:
    # a fresh copy of every project module, so each one is imported as the first entry point
    for m in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def test_every_module_imports_as_first_entry_point():
    names = sorted(module_files())
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, json.dumps(names), json.dumps(PACKAGES)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{k}:\n{v}" for k, v in failed.items())
