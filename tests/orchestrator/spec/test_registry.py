"""The registry: entries found by name without importing the others, a broken file named by its
path and breaking only itself, ``--list`` marking it BROKEN, grids and searches from user files."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.spec import registry
from orchestrator.spec.grids import Grid
from orchestrator.spec.spaces import SearchSpace

TINY = Path(__file__).parents[1] / "grid_tiny.py"

GOOD = """
from orchestrator.spec.grids import Cell, Grid
GRID = Grid(name="good", title="a good grid", cells=(Cell("MCSE", {"objective.method": "mcse"}),),
            baseline="MCSE", seeds=(0, 1))
"""
BROKEN = """
from orchestrator.spec.spaces import FloatRange
LAM = FloatRange("objective.lam", 0.5, 0.1)
"""
SEARCH = """
from orchestrator.spec.spaces import SearchSpace
SPACE = SearchSpace("look", "a search", {"objective.method": "kdmcse"},
                    lambda t: {"objective.lam": t.suggest_float("objective.lam", 0.001, 0.1, log=True)},
                    {"objective.method": "mcse"}, num_samples=3)
"""


@pytest.fixture()
def package(tmp_path, monkeypatch):
    """A package of entries standing in for search_spaces/: good, broken, a search, a helper."""
    name = f"mmemb_entries_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for stem, body in (("good", GOOD), ("broken", BROKEN), ("look", SEARCH),
                       ("_helper", "raise RuntimeError('a helper is never imported')\n")):
        (pkg / f"{stem}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "PACKAGE", name)
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


# --- a broken entry ------------------------------------------------------------------------
def test_a_broken_module_names_its_file_and_breaks_nothing_else(package):
    assert registry.names() == ["broken", "good", "look"]  # helpers are not entries
    g = registry.load_grid("good")
    assert isinstance(g, Grid) and g.name == "good"
    assert registry.load_space("look").num_samples == 3
    with pytest.raises(ValueError, match=rf"^{package}/broken.py: range objective.lam: low=0.5 > "
                                         r"high=0.1; swap the bounds; fix that file$"):
        registry.load_grid("broken")
    assert registry.load_grid("good") is g  # still loads after the failure


def test_only_the_asked_module_is_imported(package):
    registry.load_grid("good")
    assert f"{package}.good" in sys.modules
    assert f"{package}.broken" not in sys.modules and f"{package}.look" not in sys.modules
    assert f"{package}._helper" not in sys.modules


def test_list_text_marks_the_broken_entry_and_raises(package):
    with pytest.raises(ValueError) as e:
        registry.list_text()
    lines = str(e.value).splitlines()
    assert lines[0].split()[:2] == ["BROKEN", "broken"] and f"{package}/broken.py" in lines[0]
    assert lines[1].split()[:2] == ["grid", "good"] and "1 cells x 2 seeds" in lines[1]
    assert lines[2].split()[:2] == ["search", "look"] and "3 samples + 5 seeds" in lines[2]
    assert lines[3] == "1 broken entry: broken"


def test_list_text_checks_each_entry_with_the_given_check(package, tmp_path):
    (tmp_path / package / "broken.py").write_text(textwrap.dedent(GOOD).replace('"good"', '"broken"'))
    checked = []

    def check(entry):
        checked.append(entry.name)
        if entry.name == "good":
            raise ValueError("grid 'good': baseline 'X' is not a cell")

    with pytest.raises(ValueError, match=r"1 broken entry: good$") as e:
        registry.list_text(check=check)
    assert checked == ["broken", "good", "look"]
    assert "BROKEN  good" in str(e.value) and "baseline 'X' is not a cell" in str(e.value)
    only_grids = registry.list_text(grids=True, spaces=False, check=lambda _: None).splitlines()
    assert [line.split()[:2] for line in only_grids] == [["grid", "broken"], ["grid", "good"]]
    only_searches = registry.list_text(grids=False, spaces=True, check=lambda _: None).splitlines()
    assert [line.split()[:2] for line in only_searches] == [["search", "look"]]


def test_entry_named_unlike_its_file_and_a_module_that_is_no_entry(package, tmp_path):
    (tmp_path / package / "wrong.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / package / "plain.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match=rf"{package}/wrong.py defines grid named 'good'; name it 'wrong'"):
        registry.load_grid("wrong")
    with pytest.raises(ValueError, match="'plain' is not an entry"):
        registry.load_grid("plain")
    with pytest.raises(ValueError, match="'look' is a search"):
        registry.load_grid("look")
    with pytest.raises(ValueError, match="'good' is a grid"):
        registry.load_space("good")


# --- the shipped entries -------------------------------------------------------------------
def test_unknown_grid_lists_the_known_ones():
    names = registry.names()
    with pytest.raises(ValueError) as e:
        registry.load_grid("table99")
    assert "unknown grid 'table99'" in str(e.value)
    assert all(n in str(e.value) for n in names)
    with pytest.raises(ValueError, match="is a search"):
        registry.load_grid("kdmcse_search")
    with pytest.raises(ValueError, match="unknown search 'nope'"):
        registry.load_space("nope")


def test_alias_table3_is_kdmcse_table3():
    assert registry.ALIASES["table3"] == "kdmcse_table3"
    assert registry.load_grid("table3") is registry.load_grid("kdmcse_table3")
    assert registry.load_grid("table3").name == "kdmcse_table3"
    assert "table3" not in registry.names()


def test_list_text_one_line_per_entry():
    lines = registry.list_text(check=lambda _: None).splitlines()
    names = registry.names()
    assert len(lines) == len(names)
    kinds = {line.split()[1]: line.split()[0] for line in lines}
    assert kinds == {n: ("search" if n.endswith("_search") else "grid") for n in names}
    (alias,) = [line for line in lines if "alias" in line]
    assert alias.split()[1] == "kdmcse_table3" and alias.endswith("(alias: table3)")


def test_helper_modules_are_not_entries():
    pkg = Path(__file__).resolve().parents[3] / "search_spaces"
    helpers = {p.stem for p in pkg.glob("_*.py")}
    assert helpers and not helpers & set(registry.names())


# --- user files ----------------------------------------------------------------------------
def test_grid_from_a_python_file():
    g = registry.load_grid(str(TINY))
    assert g.name == "tiny" and g.baseline == "MCSE" and g.seeds == (0, 1)


def test_space_from_a_python_file(tmp_path):
    f = tmp_path / "my_search.py"
    f.write_text(textwrap.dedent(SEARCH))
    s = registry.load_space(str(f))
    assert isinstance(s, SearchSpace) and s.name == "look" and s.num_samples == 3
    with pytest.raises(ValueError, match=rf"{f} defines no GRID; declare GRID = Grid\(...\)"):
        registry.load_grid(str(f))
    with pytest.raises(ValueError, match=r"defines no SPACE; declare SPACE = SearchSpace\(...\)"):
        registry.load_space(str(TINY))


def test_a_broken_or_missing_user_file_is_named(tmp_path):
    bad = tmp_path / "bad_search.py"
    bad.write_text(textwrap.dedent(BROKEN))
    with pytest.raises(ValueError, match=rf"^{bad}: range objective.lam: low=0.5 > high=0.1.*fix that file$"):
        registry.load_space(str(bad))
    syntax = tmp_path / "syntax.py"
    syntax.write_text("GRID = (\n")
    with pytest.raises(ValueError, match=rf"^{syntax}: .*fix that file$"):
        registry.load_grid(str(syntax))
    with pytest.raises(ValueError, match="does not exist"):
        registry.load_space(str(tmp_path / "nope.py"))
