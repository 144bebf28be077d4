"""Every numeric option of every command refuses nonsense in one line, before anything starts.

The cases are generated from the commands' own argparse parsers: each ``python -m`` module of
``orchestrator/`` and ``trainables/`` exposes ``parser()``, every numeric option there declares its
check (``trainables.runtime.command_line.option``), and each check lists the values it must refuse (NaN,
infinity, zero, a negative, a word, a fraction for a count). A numeric option added without a
check, or a new command without ``parser()``, fails here.
"""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path

import pytest

from trainables.runtime.command_line import Option, Parser

ROOT = Path(__file__).resolve().parents[1]


def commands() -> list[str]:
    """Every module that runs as ``python -m``: its file has a ``__main__`` block."""
    out = []
    for pkg in ("orchestrator", "trainables"):
        for f in sorted((ROOT / pkg).glob("*.py")):
            if 'if __name__ == "__main__":' in f.read_text():
                out.append(f"{pkg}.{f.stem}")
    return out


COMMANDS = commands()


def parsers(module: str) -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(argv prefix, parser) of a command and of each of its sub-commands."""
    top = importlib.import_module(module).parser()
    out = [([], top)]
    for a in top._actions:
        if isinstance(a, argparse._SubParsersAction):
            out += [([name], sub) for name, sub in a.choices.items()]
    return out


def numeric_without_check(p: argparse.ArgumentParser) -> list[str]:
    """Options that take a number but declare no check (type int/float, or a numeric default
    read as text)."""
    bad = []
    for a in p._actions:
        if isinstance(a.type, Option) or a.nargs == 0 or isinstance(a, argparse._SubParsersAction):
            continue
        default = a.default[0] if isinstance(a.default, list) and a.default else a.default
        numeric_default = isinstance(default, int | float) and not isinstance(default, bool)
        if a.type in (int, float) or numeric_default:
            bad.append("/".join(a.option_strings) or a.dest)
    return bad


def as_text(value) -> str | None:
    if isinstance(value, bool):
        return None  # the command line has no booleans: "True" is a word, covered by "x"
    return repr(value) if isinstance(value, float) and math.isfinite(value) else str(value)


def cases() -> list[tuple[str, list[str], str, str]]:
    out = []
    for module in COMMANDS:
        for prefix, p in parsers(module):
            for a in p._actions:
                if not isinstance(a.type, Option):
                    continue
                opt = max(a.option_strings, key=len)
                for bad in a.type.check.bad_values():
                    text = as_text(bad)
                    if text is not None and text not in a.type.words:
                        out.append((module, prefix, opt, text))
    return out


CASES = cases()


def test_every_command_has_a_parser_and_no_numeric_option_goes_unchecked():
    assert {"orchestrator.ablate", "orchestrator.search", "orchestrator.calibrate",
            "orchestrator.best", "orchestrator.report", "orchestrator.sync",
            "orchestrator.ui_links", "orchestrator.ui_check", "trainables.train",
            "trainables.convert", "trainables.extract"} <= set(COMMANDS)
    for module in COMMANDS:
        for _, p in parsers(module):
            assert isinstance(p, Parser), f"{module}: its parser must be a trainables.runtime.command_line.Parser"
            assert numeric_without_check(p) == [], module
    options = {(m, o) for m, _, o, _ in CASES}
    assert ("orchestrator.ablate", "--gpus-per-trial") in options
    assert ("trainables.extract", "--num-gpus-per-actor") in options
    assert len(options) >= 30


def test_an_option_without_a_check_is_found():
    p = Parser(prog="x")
    p.add_argument("--ok", type=float, default=1.0)
    p.add_argument("--words", default=3)
    p.add_argument("--flag", action="store_true")
    assert numeric_without_check(p) == ["--ok", "--words"]


@pytest.mark.parametrize(("module", "prefix", "option", "bad"), CASES,
                         ids=[f"{m.split('.')[1]}{'-' + p[0] if p else ''}{o}={b}"
                              for m, p, o, b in CASES])
def test_each_numeric_option_refuses_its_bad_values_in_one_line(module, prefix, option, bad,
                                                                capsys, tmp_path, monkeypatch):
    import ray

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main([*prefix, f"{option}={bad}"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: argument ") and option in lines[0] \
        and bad in lines[0], err
    assert not ray.is_initialized()
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_refusal_says_what_the_option_must_be(capsys):
    from orchestrator import ablate

    with pytest.raises(SystemExit):
        ablate.main(["--grid", "table3", "--gpus-per-trial", "nan"])
    assert capsys.readouterr().err == (
        "error: argument --gpus-per-trial: nan must be a finite number >= 0 "
        "(see python -m orchestrator.ablate --help)\n")
    with pytest.raises(SystemExit):
        ablate.main(["--grid", "table3", "--array-size", "half"])
    assert "'half' is not an integer >= 1 (1 = one run per trial) or 'auto'" in \
        capsys.readouterr().err


def test_the_package_docs_name_every_command():
    """The command lists of ``orchestrator/__init__.py``, ``trainables/__init__.py`` and
    docs/architecture.md name every ``python -m`` command (``fetch`` was missing from two)."""
    import ast
    import re

    for pkg in ("orchestrator", "trainables"):
        doc = ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text())) or ""
        listed = doc[doc.index("Commands ("): doc.index("Packages")]
        missing = [m for m in COMMANDS if m.startswith(f"{pkg}.")
                   and not re.search(rf"\b{m.split('.')[1]}\b", listed)]
        assert not missing, f"{pkg}/__init__.py's command list omits {missing}"
    arch = (ROOT / "docs" / "architecture.md").read_text()
    line = arch[arch.index("config < data < arrays < the commands"):].split(")")[0]
    missing = [m for m in COMMANDS if m.startswith("trainables.") and f"`{m.split('.')[1]}`" not in line]
    assert not missing, f"docs/architecture.md's trainables commands omit {missing}"
