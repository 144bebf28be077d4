"""A user's plug-in in a folder of its own: a method file that imports a helper module beside it
(``from hardground import ...``) and a grid that imports the method. Built from the worked
example (examples/softground.py): the loss in ``hardground.py``, the method ``hgitem`` in
``hg_item.py``, the grid ``hg_grid.py`` (MCSE and the method)."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "softground.py"

GRID = '''import hg_item  # noqa: F401  (registers "hgitem"; it imports hardground, beside it)

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(
    name="hg",
    title="A plug-in whose method imports a module beside it",
    cells=(Cell("MCSE", {"objective.method": "mcse"}),
           Cell("HG", {"objective.method": "hgitem"})),
    baseline="MCSE",
)
'''


def write_plugin(folder: Path) -> Path:
    """The three files in ``folder``; -> the grid file."""
    src = EXAMPLE.read_text()
    body = src[src.index("from __future__"):]
    helpers_end = body.index("@dataclass(frozen=True)")
    (folder / "hardground.py").write_text(
        '"""The plug-in\'s loss, a module of its own beside the method file."""\n\n'
        + body[:helpers_end].rstrip() + "\n")
    method = body[helpers_end:].replace('name = "softground"', 'name = "hgitem"')
    method = method.replace("SoftGroundSettings", "HgItemSettings").replace(
        "class SoftGround(", "class HgItem(")
    imports = body[:body.index("def soft_targets")]
    (folder / "hg_item.py").write_text(
        '"""A method file that imports its loss from the module beside it."""\n\n'
        + imports.rstrip() + "\n\nfrom hardground import soft_grounding_loss\n\n\n" + method)
    (folder / "hg_grid.py").write_text(GRID)
    return folder / "hg_grid.py"
