"""The allowed import directions between the project's packages (orchestrator/__init__.py,
trainables/__init__.py).

Each orchestrator package may import only the packages below it:
analysis < spec < tracking < results < run < the command lines. Each trainables package likewise:
runtime < evaluation < objectives < models < config < data < arrays < the top-level modules (the
commands ``train``, ``convert``, ``extract`` and the ``testing`` helpers). ``analysis`` imports no
torch, Ray, MLflow or Optuna (its statistics must run anywhere); ``trainables`` never imports
``orchestrator``; ``search_spaces`` reads only the grid language and the profiles. The graph is the
one ``test_imports`` reads from the source (function-level imports included); with the layers
ordered, no two packages can import each other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.test_imports import ROOT, import_graph, module_files

LAYERS = ("analysis", "spec", "tracking", "results", "run")
"""orchestrator's packages, lowest first: each may import those before it and itself"""
TRAINABLES = ("runtime", "evaluation", "objectives", "models", "config", "data", "arrays")
"""trainables' packages, lowest first: each may import those before it and itself"""
COMMAND_PACKAGES = ("fetch",)
"""commands grown into a package of their own: above every layer, like ``train.py``"""
MAX_TOP_LEVEL = 6
"""trainables' top-level modules (``__init__`` included): the commands and the test helpers"""
FORWARDS = ("checks.py",)
"""forwarding names of moved modules (``trainables.runtime.moved``), kept one release: not counted"""
HEAVY = ("torch", "ray", "mlflow", "optuna")


def _layer(module: str) -> str:
    """'orchestrator.run.campaign' -> 'run'; a command ('orchestrator.ablate') -> 'commands';
    'trainables.data.store' -> 'trainables.data.batches'; 'trainables.train' -> 'trainables.commands'."""
    parts = module.split(".")
    if parts[0] == "trainables" and len(parts) > 1:
        return f"trainables.{parts[1] if parts[1] in TRAINABLES else 'commands'}"
    if parts[0] != "orchestrator":
        return parts[0]
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "commands" if len(parts) > 1 else "orchestrator"


def allowed(src: str, dst: str) -> bool:
    """May a module of layer ``src`` import a module of layer ``dst``?"""
    if src == dst:
        return True
    if src.startswith("trainables"):
        if not dst.startswith("trainables"):
            return False  # the training side never depends on the orchestration
        if src == "trainables.commands" or dst == "trainables":
            return True
        below = [f"trainables.{t}" for t in TRAINABLES]
        return src in below and dst in below and below.index(dst) < below.index(src)
    if dst.startswith("trainables"):
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


def test_trainables_rule_itself():
    def ok(a: str, b: str) -> bool:
        return allowed(_layer(a), _layer(b))

    assert ok("trainables.arrays.trainer", "trainables.data.batches")
    assert ok("trainables.data.batches", "trainables.config.run_config")
    assert ok("trainables.models.heads", "trainables.objectives.methods")
    assert ok("trainables.objectives.core", "trainables.runtime.checks")
    assert ok("trainables.train", "trainables.arrays.trainer") and ok("trainables.data.store", "trainables.data.corpus")
    assert not ok("trainables.models.teachers", "trainables.data.store")
    assert not ok("trainables.runtime.checks", "trainables.objectives.core")
    assert not ok("trainables.config.profiles", "trainables.data.demo_corpus")
    assert not ok("trainables.data.batches", "trainables.train")
    assert not ok("trainables.arrays.trainer", "orchestrator.run.trial")
    assert ok("orchestrator.run.preflight", "trainables.data.batches")


def test_trainables_is_packages_under_a_few_modules():
    root = ROOT / "trainables"
    top = sorted(p.name for p in root.glob("*.py") if p.name not in FORWARDS)
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert len(top) <= MAX_TOP_LEVEL, f"trainables/ has {len(top)} top-level modules: {top}"
    assert set(packages) == {*TRAINABLES, *COMMAND_PACKAGES}, (
        f"trainables' packages {packages} differ from the layers {TRAINABLES}: name a new one there")
    for pkg in packages:
        doc = ast.get_docstring(ast.parse((root / pkg / "__init__.py").read_text()))
        assert doc, f"trainables/{pkg}/__init__.py must say what the package holds"


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


def readme_layout() -> dict[str, tuple[set[str], set[str]]]:
    """The README's layout block: top-level entry -> (the packages it lists, the .py files it names)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    out: dict[str, tuple[set[str], set[str]]] = {}
    top = ""
    for line in block.splitlines():
        if line and not line[0].isspace():
            top = line.split()[0].rstrip("/")
            out[top] = (set(), set())
        if not top:
            continue
        package = re.match(r"\s+(\w+)/\s", line)
        if package and line[0].isspace():
            out[top][0].add(package[1])
        out[top][1].update(re.findall(r"\b(\w+)\.py\b", line))
    return out


def test_readme_layout_block_matches_the_tree():
    layout = readme_layout()
    for top in layout:
        if "*" not in top:
            assert (ROOT / top).exists(), f"README's layout names {top}/, which does not exist"
    for tree in ("trainables", "orchestrator"):
        listed, files = layout[tree]
        packages = {p.name for p in (ROOT / tree).iterdir() if (p / "__init__.py").is_file()}
        assert listed == packages, (
            f"README's layout lists {sorted(listed)} under {tree}/, the tree has {sorted(packages)}")
        missing = {f for f in files if not (ROOT / tree / f"{f}.py").is_file()}
        assert not missing, f"README's layout names {tree}/{sorted(missing)}.py, which do not exist"
    modules = {p.stem for p in (ROOT / "trainables").glob("*.py")} - {"__init__"}
    assert modules <= layout["trainables"][1], (
        f"README's layout does not name trainables/{sorted(modules - layout['trainables'][1])}.py")
