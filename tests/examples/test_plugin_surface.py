"""The import surface of a plug-in method (issue 38): docs/methods.md's import lines run and come
from ``trainables.objectives`` alone; every name the docs import stays there; a plug-in written
against the previous docs' imports (tests/examples/frozen/, never updated) still loads, with one
deprecation line naming the new import, and dry-runs its grid."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import trainables.objectives as surface

ROOT = Path(__file__).resolve().parents[2]
METHODS_MD = ROOT / "docs" / "methods.md"
FROZEN = Path(__file__).resolve().parent / "frozen"

DOCS_NAMES = frozenset({
    "NON_NEGATIVE", "POSITIVE", "Head", "HeadDims", "Method", "Needs", "Number", "Settings",
    "StudentOutputs", "TeacherInputs", "cosine_matrix", "frozen_cosine", "need", "no_autocast",
    "register", "setting", "text_infonce",
})
"""the names docs/methods.md imports today: removing one from the surface breaks users' files"""


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _imports(code: str) -> list[ast.ImportFrom]:
    """The ``from X import ...`` statements of a block (its other lines need not parse)."""
    out = []
    for m in re.finditer(r"^from [\w.]+ import (?:\([^)]*\)|.*)$", code, re.M):
        out += [n for n in ast.parse(m.group(0)).body if isinstance(n, ast.ImportFrom)]
    return out


def test_the_docs_import_lines_run_and_import_a_method_s_names_from_the_surface_only():
    blocks = _python_blocks(METHODS_MD.read_text())
    stmts = [s for b in blocks for s in _imports(b)]
    ours = [s for s in stmts if s.module.startswith("trainables")]
    assert ours and {s.module for s in ours} == {"trainables.objectives"}, \
        sorted({s.module for s in ours})
    for s in stmts:  # each import line the page prints, as printed
        exec(compile(ast.Module([s], []), "docs/methods.md", "exec"), {})  # noqa: S102
    names = {a.name for s in ours for a in s.names}
    assert names <= set(surface.PLUGIN_API), sorted(names - set(surface.PLUGIN_API))


def test_the_examples_import_trainables_only_through_the_surface():
    for f in sorted((ROOT / "examples").glob("*.py")):
        tree = ast.parse(f.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert {m for m in mods if m.startswith("trainables")} <= {"trainables.objectives"}, f


def test_no_name_the_docs_import_disappears():
    shown = {a.name for b in _python_blocks(METHODS_MD.read_text()) for s in _imports(b)
             if s.module == "trainables.objectives" for a in s.names}
    for name in sorted(DOCS_NAMES | shown):  # printed once, a name stays
        assert name in surface.PLUGIN_API and name in surface.__all__, name
        assert getattr(surface, name) is not None


def test_plugin_api_names_exist():
    missing = [n for n in surface.PLUGIN_API if not hasattr(surface, n)]
    assert not missing


def _fresh_forward():
    """Forget the forwarding module, so that this process imports it (and warns) again."""
    sys.modules.pop("trainables.checks", None)


def test_the_frozen_plugin_loads_with_one_deprecation_warning_naming_the_new_import():
    from trainables.objectives.methods import get, load_methods

    _fresh_forward()
    sys.modules.pop("olddocs_method", None)
    with pytest.warns(DeprecationWarning) as rec:
        assert load_methods([str(FROZEN / "olddocs_method.py")]) == ["olddocs"]
    moved = [w for w in rec if "trainables.checks" in str(w.message)]
    assert len(moved) == 1
    msg = str(moved[0].message)
    assert "from trainables.objectives import setting" in msg and "next release" in msg
    assert Path(moved[0].filename).name == "olddocs_method.py"  # the plug-in's own line
    assert get("olddocs").settings().alpha == 0.3
    with warnings.catch_warnings(record=True) as again:  # once per process
        warnings.simplefilter("always")
        import trainables.checks  # noqa: F401
    assert not [w for w in again if "trainables.checks" in str(w.message)]


def test_python_s_default_filters_would_hide_it_so_the_user_gets_one_line():
    """Run as a user does, with Python's default warning filters: a DeprecationWarning raised
    from a plug-in file loaded by the project (not __main__) is ignored by them, so the
    forwarding module prints it itself, once."""
    code = ("from trainables.objectives.methods import load_methods\n"
            f"load_methods([{str(FROZEN / 'olddocs_method.py')!r}])\n"
            "import trainables.checks\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                      "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if "trainables.checks" in ln]
    assert lines == [lines[0]] and lines[0].startswith("warning: ") and \
        "olddocs_method.py line 15: trainables.checks is deprecated" in lines[0], p.stderr[-3000:]


def test_the_frozen_plugin_s_grid_dry_runs(tmp_path, tiny_bert, capsys):
    from orchestrator import ablate
    from trainables.testing import write_tiny_profile

    write_tiny_profile(tmp_path, tiny_bert, max_steps=3, eval_every=3)
    _fresh_forward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        rc = ablate.main(["--grid", str(FROZEN / "olddocs_grid.py"), "--profile",
                          str(tmp_path / "tiny.yaml"), "--seeds", "0", "1", "--dry-run",
                          "--storage", str(tmp_path / "runs"),
                          "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "methods: mcse, olddocs (olddocs from " in out and "dry run: everything checked" in out
    assert "checked: method olddocs: batched" in out
    assert not (tmp_path / "mlflow.db").exists()  # a dry run creates no store


def test_a_user_who_silenced_deprecations_sees_nothing():
    code = ("from trainables.objectives.methods import load_methods\n"
            f"load_methods([{str(FROZEN / 'olddocs_method.py')!r}])\n")
    p = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
                       capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                            "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "trainables.checks" not in p.stderr
