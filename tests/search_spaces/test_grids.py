"""Every shipped grid and search: loads, validates on the demo profile, and carries the papers' numbers.

Published numbers are checked against docs/published-tables.md, parsed here, never retyped.
"""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest

from orchestrator.grids import STS_COLUMNS, expand
from orchestrator.registry import load_grid, load_space
from orchestrator.spaces import params_to_overrides
from orchestrator.validate import validate_grid, validate_space
from tests.search_spaces.entries import list_grids, list_spaces
from trainables.profiles import build_config

PAPERS = Path(__file__).resolve().parents[2] / "docs" / "published-tables.md"
GRIDS = [n for n, _ in list_grids()]
SPACES = [n for n, _ in list_spaces()]
REQUIRED_GRIDS = {"kdmcse_table3", "kdmcse_table1", "kdmcse_fig7", "kdmcse_table5", "dalr_table3",
                  "dalr_table8", "dalr_table9", "mcse_table4"}


@pytest.fixture(scope="module")
def papers() -> str:
    return PAPERS.read_text()


def _md_table(text: str, heading: str) -> dict[str, list[float]]:
    """Rows of the Markdown table following a line starting with ``heading``: label -> numbers."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows, seen = {}, False
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if seen:
                break
            continue
        seen = True
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("model", "variant") or set(cells[0]) <= {"-"}:
            continue
        rows[cells[0]] = [float(c.split("±")[0]) for c in cells[1:]]
    return rows


def _inline(text: str, heading: str) -> dict[str, float]:
    """'label 78.64±0.9 / 86.61±0.7; label2 77.20 / 85.39; ...' after ``heading`` -> label -> STS."""
    line = next(line for line in text.splitlines() if line.startswith(heading))
    body = line.split("):", 1)[1]
    out = {}
    for part in body.split(";"):
        m = re.match(r"\s*(.+?)\s+([\d.]+)(?:±[\d.]+)?\s*/", part)
        out[m.group(1)] = float(m.group(2))
    return out


def _published(grid: str) -> dict[str, dict[str, float]]:
    return load_grid(grid).published


# --- every grid ----------------------------------------------------------------------------
def test_required_grids_and_searches_exist():
    assert set(GRIDS) >= REQUIRED_GRIDS
    assert load_grid("table3").name == "kdmcse_table3"  # the short name users type still works
    assert {"kdmcse_search", "dalr_search"} <= set(SPACES)


@pytest.mark.parametrize("name", GRIDS)
def test_grid_loads_validates_and_expands(name):
    g = load_grid(name)
    validate_grid(g)  # builds every cell's RunConfig on the demo profile
    assert g.name == name and g.title and "\n" not in g.title
    trials = expand(g)
    assert len(trials) == len(g.cells) * len(g.seeds)
    assert trials[0].cell == g.baseline
    seeds = {c.name: [t.seed for t in trials if t.cell == c.name] for c in g.cells}
    assert all(s == list(g.seeds) for s in seeds.values())
    assert len({t.key for t in trials}) == len(trials)
    assert [t.key for t in expand(load_grid(name))] == [t.key for t in trials]


@pytest.mark.parametrize("name", GRIDS)
def test_baseline_trial_configs_differ_only_by_seed(name):
    g = load_grid(name)
    cfgs = [build_config("demo", overrides=dict(t.overrides)) for t in expand(g) if t.cell == g.baseline]
    assert len({c.config_hash() for c in cfgs}) == len(g.seeds)
    assert len({c.with_overrides({"seed": 0}).config_hash() for c in cfgs}) == 1


def test_mcse_and_kdmcse_are_one_experiment_across_grids():
    def cell_hash(grid, cell):
        g = load_grid(grid)
        return build_config("demo", overrides={**g.base, **g.cell(cell).overrides}).config_hash()

    assert len({cell_hash(g, "MCSE") for g in ("table3", "kdmcse_table1", "kdmcse_fig7")}) == 1
    assert len({cell_hash(g, "KDMCSE") for g in ("table3", "kdmcse_table1", "kdmcse_table5")}) == 1
    assert cell_hash("dalr_table3", "DALR") == cell_hash("dalr_table9", "CLIP+SimCSE+DiffCSE")


# --- published numbers vs docs/published-tables.md ------------------------------------
def test_table3_published_matches_papers(papers):
    spec = _md_table(papers, "KDMCSE Table 3")
    main = _md_table(papers, "Main results, BERT-base, wiki+flickr")
    pub = _published("table3")
    assert set(pub) == set(spec) | {"MCSE"}
    for label, values in spec.items():
        assert pub[label] == dict(zip(STS_COLUMNS, values, strict=True)), label
    assert pub["MCSE"] == dict(zip(STS_COLUMNS, main["MCSE"], strict=True))


def test_table3_cells_switch_the_right_knobs():
    cfg = {c.name: build_config("demo", overrides=dict(c.overrides)).objective.resolved()
           for c in load_grid("table3").cells}
    assert cfg["KDMCSE"].threshold == 0.8 and cfg["KDMCSE"].adaptive_margin
    assert cfg["without AdapACSE"].threshold == 0.8 and not cfg["without AdapACSE"].adaptive_margin
    assert cfg["without threshold filtering"].threshold is None
    assert cfg["MCSE"].method == "mcse" and not cfg["MCSE"].clip_text_term
    assert "best" in load_grid("table3").note


def test_kdmcse_table1_matches_main_results(papers):
    main = _md_table(papers, "Main results, BERT-base, wiki+flickr")
    pub = _published("kdmcse_table1")
    for label in ("SimCSE", "MCSE", "KDMCSE"):
        assert pub[label] == dict(zip(STS_COLUMNS, main[label], strict=True))


def test_kdmcse_table5(papers):
    line = next(x for x in papers.splitlines() if x.startswith("KDMCSE Table 5"))
    m = re.search(r"wiki\+flickr MCSE_CLIPText ([\d.]+) vs KDMCSE ([\d.]+)", line)
    pub = _published("kdmcse_table5")
    assert pub == {"MCSE_CLIPText": {"avg": float(m.group(1))}, "KDMCSE": {"avg": float(m.group(2))}}
    g = load_grid("kdmcse_table5")
    clip = build_config("demo", overrides=dict(g.cell("MCSE_CLIPText").overrides)).objective.resolved()
    assert clip.method == "mcse" and clip.clip_text_term


@pytest.mark.parametrize(("grid", "heading"), [("dalr_table3", "DALR Table 3"), ("dalr_table8", "DALR Table 8")])
def test_dalr_ablations_match_papers(papers, grid, heading):
    spec = ({k: v[0] for k, v in _md_table(papers, heading).items()} if grid == "dalr_table3"
            else _inline(papers, heading))
    spec = {("w/o L_IML & L_CML" if k == "w/o both" else k): v for k, v in spec.items()}
    assert {k: v["avg"] for k, v in _published(grid).items()} == spec


def test_dalr_ablation_switches():
    g = load_grid("dalr_table3")
    switches = ("use_info", "use_consistency", "use_cma", "use_ima", "use_rank")
    on = {c.name: {s for s in switches if getattr(build_config("demo", overrides=dict(c.overrides)).objective, s)}
          for c in g.cells}
    assert on["DALR"] == set(switches)
    assert on["w/o L_CML"] == set(switches) - {"use_consistency", "use_cma"}
    assert on["w/o L_IML"] == set(switches) - {"use_rank", "use_ima"}
    assert on["w/o L_IML & L_CML"] == {"use_info"}
    assert on["w/o L_Info"] == set(switches) - {"use_info"}


def test_dalr_table9_matches_papers_and_encodes_teachers(papers):
    spec = _inline(papers, "DALR Table 9")
    g = load_grid("dalr_table9")
    assert {k: v["avg"] for k, v in g.published.items()} == spec
    resnet = g.cell("ResNet+SimCSE+RankCSE").overrides
    assert resnet["data.image_column"] == "resnet" and len(resnet["text_teachers"]) == 2
    assert "data.image_column" not in g.cell("CLIP+CLIP").overrides
    assert g.cell("CLIP+DiffCSE").overrides["objective.teacher_weights"] == [1.0]


def test_fig7_sweeps_the_margin():
    g = load_grid("kdmcse_fig7")
    xs = sorted(c.x for c in g.cells if c.x is not None)
    assert xs == pytest.approx([0.025 * k for k in range(1, 10)])
    assert g.plot == "sweep" and g.baseline == "MCSE"
    for c in g.cells:
        if c.x is not None:
            assert c.overrides["objective.grounding_margin"] == c.x and not c.published
    assert "0.125" in g.note


def test_mcse_table4_lambdas():
    g = load_grid("mcse_table4")
    assert sorted(c.x for c in g.cells) == [0.001, 0.01, 0.05, 0.1, 0.5]
    assert all(c.overrides["objective.lam"] == c.x for c in g.cells)
    assert g.base["data.text"] is None and g.cell(g.baseline).x == 0.05


# --- searches ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPACES)
def test_space_validates(name):
    s = load_space(name)
    validate_space(s, samples=8)
    assert s.name == name and s.baseline["objective.method"] == "mcse"
    assert len(set(s.confirm_seeds)) == len(s.confirm_seeds) == 5
    assert not set(s.confirm_seeds) & set(range(5))  # fresh seeds, not the search's


@pytest.mark.parametrize("name", SPACES)
def test_space_round_trip(name):
    s = load_space(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(8):
        t = study.ask()
        s.define(t)
        o = build_config("demo", overrides=params_to_overrides(s, t.params, profile="demo")).objective
        for k, v in t.params.items():
            if k.startswith("objective."):
                assert getattr(o, k.split(".")[1]) == (None if v == "off" else v)


def test_kdmcse_search_threshold_off_is_none():
    s = load_space("kdmcse_search")
    ov = params_to_overrides(s, {"objective.grounding_margin": 0.1, "objective.lam": 0.01,
                                 "threshold_filter": "off"})
    assert ov["objective.threshold"] is None and ov["objective.method"] == "kdmcse"
    ov = params_to_overrides(s, {"objective.grounding_margin": 0.1, "objective.lam": 0.01,
                                 "threshold_filter": "on", "objective.threshold": 0.85})
    assert ov["objective.threshold"] == 0.85


def test_dalr_search_teachers(monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    s = load_space("dalr_search")
    p = {"objective.lam": 0.1, "objective.mu": 0.2, "margin": 0.18, "teachers": "simcse+diffcse",
         "teacher_alpha": 0.33}
    paper = build_config("paper", overrides=params_to_overrides(s, p, profile="paper"))
    default = build_config("paper", overrides={"objective.method": "dalr"})
    assert paper.text_teachers == default.text_teachers
    assert paper.objective.teacher_weights == pytest.approx((0.33, 0.67))
    assert paper.objective.text_margin == paper.objective.grounding_margin == 0.18
    single = params_to_overrides(s, {**{k: p[k] for k in p if k != "teacher_alpha"}, "teachers": "clip"},
                                 profile="demo")
    assert single["text_teachers"] == ["minilm-l6"] and single["objective.teacher_weights"] == [1.0]
