"""The allowed import directions between the project's packages (orchestrator/__init__.py).

Each orchestrator package may import only the packages below it:
analysis < spec < tracking < results < run < the command lines. ``analysis`` imports no torch,
Ray, MLflow or Optuna (its statistics must run anywhere); ``trainables`` never imports
``orchestrator``; ``search_spaces`` reads only the grid language. The graph is the one
``test_imports`` reads from the source (function-level imports included).
"""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.test_imports import ROOT, import_graph, module_files

LAYERS = ("analysis", "spec", "tracking", "results", "run")
"""orchestrator's packages, lowest first: each may import those before it and itself"""
HEAVY = ("torch", "ray", "mlflow", "optuna")


def _layer(module: str) -> str:
    """'orchestrator.run.campaign' -> 'run'; a command ('orchestrator.ablate') -> 'commands'."""
    parts = module.split(".")
    if parts[0] != "orchestrator":
        return parts[0]
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "commands" if len(parts) > 1 else "orchestrator"


def allowed(src: str, dst: str) -> bool:
    """May a module of layer ``src`` import a module of layer ``dst``?"""
    if src == dst:
        return True
    if src == "trainables":
        return False  # the training side never depends on the orchestration
    if dst == "trainables":
        return True
    if src == "search_spaces":
        return dst == "spec"
    if src in LAYERS and dst in LAYERS:
        return LAYERS.index(dst) < LAYERS.index(src)
    return src == "commands" and dst in (*LAYERS, "orchestrator")


def violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if not allowed(_layer(a), _layer(b)))


def test_rule_itself():
    assert allowed("run", "results") and allowed("results", "tracking") and allowed("spec", "trainables")
    assert not allowed("analysis", "spec") and not allowed("spec", "run")
    assert not allowed("trainables", "run") and not allowed("trainables", "commands")
    assert not allowed("results", "run") and not allowed("tracking", "results")
    assert allowed("commands", "run") and not allowed("run", "commands")
    assert allowed("search_spaces", "spec") and not allowed("search_spaces", "run")
    assert violations({"orchestrator.analysis.tables": {"orchestrator.spec.grids"}}) == [
        "orchestrator.analysis.tables -> orchestrator.spec.grids"]


def test_packages_import_only_downwards():
    found = violations(import_graph(module_files()))
    assert not found, "imports against the layers (orchestrator/__init__.py):\n" + "\n".join(found)


def _external(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_analysis_imports_no_heavy_library():
    files = {m: p for m, p in module_files().items() if _layer(m) == "analysis"}
    assert files, "orchestrator/analysis has no modules"
    found = {m: sorted(_external(p) & set(HEAVY)) for m, p in files.items()}
    assert not any(found.values()), found
    # and at run time: importing every analysis module loads none of them
    code = ("import importlib, sys, json\n"
            f"for m in {sorted(files)!r}: importlib.import_module(m)\n"
            f"print(json.dumps(sorted(h for h in {HEAVY!r} if h in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_results_do_not_start_ray():
    found = {m: "ray" for m, p in module_files().items()
             if _layer(m) in ("results", "analysis") and "ray" in _external(p)}
    assert not found, found
