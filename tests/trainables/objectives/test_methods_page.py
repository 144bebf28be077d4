"""docs/methods.md keeps its word (issue 49): the built-in methods' loss terms it names are the
terms their losses return, and its example for a float setting that varies across members runs
on a float, on a 0-d tensor and under vmap."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from tests.trainables.objectives.references import batch
from trainables.objectives.composition import compute_objective
from trainables.objectives.methods import get

PAGE = Path(__file__).resolve().parents[3] / "docs" / "methods.md"


def section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n### ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_the_page_names_the_terms_the_built_in_losses_return():
    rows = {}
    for line in section("The built-in methods' loss terms").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in ("simcse", "mcse", "kdmcse", "dalr"):
            rows[cells[0]] = set(re.findall(r"`(\w+)`", cells[2]))
    st, te = batch(seed=3)
    on = {"use_consistency": True, "use_cma": True, "use_info": True, "use_ima": True,
          "use_rank": True, "use_g2l": True}
    for method, values in (("simcse", {}), ("mcse", {"clip_text_term": True}), ("kdmcse", {}),
                           ("dalr", on)):
        s = get(method).settings(**values)
        caption = set(compute_objective(s, st, te, generator=torch.Generator().manual_seed(0)))
        named = rows[method] - {"lam", "mu", "clip_text_term"}
        assert caption <= named | {"text", "total"}, (method, caption - named)
        if method != "simcse":
            assert named <= caption, (method, named - caption)
        assert set(compute_objective(s, st, None)) == {"text", "total"}


def test_the_varying_float_example_runs_on_a_float_a_tensor_and_under_vmap():
    code = re.search(r"```python\n(.*?)```", section("A float setting that varies across members"),
                     re.S).group(1)
    space: dict = {}
    exec(code, space)  # noqa: S102 - the page's own example
    sharpness = space["sharpness"]
    want = math.exp(-1 / 0.05)
    assert math.isclose(float(sharpness(0.05)), want, rel_tol=1e-6)
    assert math.isclose(float(sharpness(torch.tensor(0.05, dtype=torch.float64))), want,
                        rel_tol=1e-12)
    temps = torch.tensor([0.05, 0.1, 1.0], dtype=torch.float64)
    x = torch.ones(3, 4, dtype=torch.float64)
    got = torch.func.vmap(lambda t, row: sharpness(t) * row)(temps, x)
    assert torch.allclose(got[:, 0], torch.exp(-1 / temps))


def test_the_page_says_numbers_bounds_as_the_check_does():
    from trainables.runtime.checks import NON_NEGATIVE, POSITIVE, Number

    text = section("`Number`'s bounds")
    assert "`Number(0, 1)` takes 0 and 1" in text
    assert Number(0, 1).problem(0) is None and Number(0, 1).problem(1) is None
    assert POSITIVE.problem(0) is not None and NON_NEGATIVE.problem(0) is None
    assert Number(0, 1, hi_open=True).problem(1) is not None
