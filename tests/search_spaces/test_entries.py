"""Every shipped grid and search: loads, validates on the demo profile, carries the papers' numbers
and sets the papers' settings (encoder, data, teachers) for its rows.

Published numbers are checked against docs/published-tables.md, parsed here, never retyped.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import optuna
import pytest

from orchestrator.analysis.tables import metric_key
from orchestrator.run.preflight import check_demo_fit
from orchestrator.spec.grids import STS_COLUMNS, expand
from orchestrator.spec.registry import load_grid, load_space, names
from orchestrator.spec.spaces import define_on, params_to_overrides
from orchestrator.spec.validate import validate_grid, validate_space
from trainables.config.profiles import (
    DEFAULT_ALPHA,
    MCSE_STORE,
    PAPER_STORE,
    TEACHER_DIRS,
    build_config,
)
from trainables.models.pretrained import MINILM

PAPERS = Path(__file__).resolve().parents[2] / "docs" / "published-tables.md"
ENTRIES = {n: importlib.import_module(f"search_spaces.{n}") for n in names()}
GRIDS = sorted(n for n, m in ENTRIES.items() if hasattr(m, "GRID"))
SPACES = sorted(n for n, m in ENTRIES.items() if hasattr(m, "SPACE"))
REQUIRED_GRIDS = {"kdmcse_table1", "kdmcse_table1_roberta", "kdmcse_table1_coco",
                  "kdmcse_table1_roberta_coco", "kdmcse_table2", "kdmcse_table2_roberta",
                  "kdmcse_table3", "kdmcse_table5", "kdmcse_table5_coco", "kdmcse_fig7",
                  "dalr_table3", "dalr_table8", "dalr_table9", "mcse_table4"}
ROBERTA_GRIDS = {"kdmcse_table1_roberta", "kdmcse_table1_roberta_coco", "kdmcse_table2_roberta",
                 "dalr_table2_roberta"}
COCO_GRIDS = {"kdmcse_table1_coco", "kdmcse_table1_roberta_coco", "kdmcse_table5_coco", "dalr_table8"}
COCO_STORE = "coco_clip_vitl14.parquet"


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


def _avg_only(text: str, heading: str) -> dict[str, float]:
    """'<heading>: SimCSE 76.5±0.4, MCSE 78.3±0.1, ...' -> label -> Avg."""
    line = next(line for line in text.splitlines() if line.startswith(heading))
    body = line[len(heading):].strip(" :.")
    out = {}
    for part in body.split(","):
        m = re.fullmatch(r"\s*(\S+)\s+([\d.]+)(?:±[\d.]+)?\s*", part)
        out[m.group(1)] = float(m.group(2))
    return out


def _paragraph(text: str, heading: str) -> str:
    """The lines from the one starting with ``heading`` to the next blank line, joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return " ".join(lines[start:end])


def _align_uniform(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """KDMCSE Table 2: (model, encoder) -> {alignment, uniformity}."""
    para = _paragraph(text, "KDMCSE Table 2")
    found = re.findall(r"(\w+)-(BERT|RoBERTa) (-?\d+\.\d+) / (-?\d+\.\d+)", para)
    return {(m, e): {"alignment": float(a), "uniformity": float(u)} for m, e, a, u in found}


def _published(grid: str) -> dict[str, dict[str, float]]:
    return load_grid(grid).published


def _cfg(grid: str, cell: str, profile: str = "demo"):
    g = load_grid(grid)
    return build_config(profile, overrides={**g.base, **g.cell(cell).overrides})


# --- every grid ----------------------------------------------------------------------------
def test_required_grids_and_searches_exist():
    assert set(GRIDS) >= REQUIRED_GRIDS
    assert {"kdmcse_search", "dalr_search"} <= set(SPACES)
    assert not set(GRIDS) & set(SPACES)


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
    assert all(metric_key(c) == c for c in g.columns)  # every column is a metric the tables know


@pytest.mark.parametrize("name", GRIDS)
def test_baseline_trial_configs_differ_only_by_seed(name):
    g = load_grid(name)
    cfgs = [build_config("demo", overrides=dict(t.overrides)) for t in expand(g) if t.cell == g.baseline]
    assert len({c.config_hash() for c in cfgs}) == len(g.seeds)
    assert len({c.with_overrides({"seed": 0}).config_hash() for c in cfgs}) == 1


def test_one_method_is_one_experiment_across_grids():
    def cell_hash(grid, cell):
        return _cfg(grid, cell).config_hash()

    assert len({cell_hash(g, "MCSE") for g in ("table3", "kdmcse_table1", "kdmcse_fig7", "kdmcse_table2")}) == 1
    assert len({cell_hash(g, "KDMCSE") for g in ("table3", "kdmcse_table1", "kdmcse_table5", "kdmcse_table2")}) == 1
    assert cell_hash("kdmcse_table1_coco", "KDMCSE") == cell_hash("kdmcse_table5_coco", "KDMCSE")
    for cell in ("MCSE", "KDMCSE"):
        assert cell_hash("kdmcse_table1_roberta", cell) == cell_hash("kdmcse_table2_roberta", cell)
    assert cell_hash("dalr_table3", "DALR") == cell_hash("dalr_table9", "CLIP+SimCSE+DiffCSE")
    # ... and the settings make different experiments
    assert len({cell_hash(g, "MCSE") for g in ("kdmcse_table1", "kdmcse_table1_coco",
                                               "kdmcse_table1_roberta", "kdmcse_table1_roberta_coco")}) == 4


# --- the papers' settings ------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(REQUIRED_GRIDS))
def test_roberta_and_coco_rows_set_encoder_and_pairs(name, monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    g = load_grid(name)
    for c in g.cells:
        ov = {**g.base, **c.overrides}
        if name in ROBERTA_GRIDS:  # the papers' RoBERTa recipe: lr 1e-5, batch 128
            assert (ov["encoder"], ov["lr"], ov["batch_size"]) == ("roberta-base", 1e-5, 128), c.name
        else:
            assert "encoder" not in ov, c.name
        if name in COCO_GRIDS:
            assert Path(ov["data.pairs"]).name == COCO_STORE, c.name
        else:
            assert "data.pairs" not in ov, c.name
        paper = build_config("paper", overrides=ov)  # the profile's recipe never overrides the row
        assert paper.encoder == ("roberta-base" if name in ROBERTA_GRIDS else "bert-base-uncased")
        # each method family on the store its official code read (MCSE: its released file, but
        # MCSE given the CLIP text features, which that file has not, stays on the CLIP store)
        mcse = paper.objective.method == "mcse" and not paper.needs.clip_text
        own = MCSE_STORE if mcse else PAPER_STORE
        assert Path(paper.data.pairs).name == (COCO_STORE if name in COCO_GRIDS else own)
        if name in ROBERTA_GRIDS:
            assert (paper.lr, paper.batch_size) == (1e-5, 128)


@pytest.mark.parametrize("name", GRIDS)
def test_the_demo_refuses_exactly_the_grids_that_need_their_own_data_or_encoder(name):
    g = load_grid(name)
    if name in ROBERTA_GRIDS | COCO_GRIDS:
        with pytest.raises(ValueError, match=rf"grid '{name}': every cell needs its own "
                                             r".*--profile paper") as refused:
            check_demo_fit(g, None)
        assert "--cells" not in str(refused.value)  # every cell is refused: no dead end
    else:
        check_demo_fit(g, None)


# --- published numbers vs docs/published-tables.md ------------------------------------
def test_kdmcse_table3_published_matches_papers(papers):
    spec = _md_table(papers, "KDMCSE Table 3")
    main = _md_table(papers, "Main results, BERT-base, wiki+flickr")
    pub = _published("kdmcse_table3")
    assert pub == _published("table3")
    assert set(pub) == set(spec) | {"MCSE"}
    for label, values in spec.items():
        assert pub[label] == dict(zip(STS_COLUMNS, values, strict=True)), label
    assert pub["MCSE"] == dict(zip(STS_COLUMNS, main["MCSE"], strict=True))


def test_kdmcse_table3_cells_switch_the_right_knobs():
    cfg = {c.name: build_config("demo", overrides=dict(c.overrides)).objective.resolved()
           for c in load_grid("kdmcse_table3").cells}
    assert cfg["KDMCSE"].threshold == 0.8 and cfg["KDMCSE"].adaptive_margin
    assert cfg["without AdapACSE"].threshold == 0.8 and not cfg["without AdapACSE"].adaptive_margin
    assert cfg["without threshold filtering"].threshold is None
    assert cfg["MCSE"].method == "mcse" and not cfg["MCSE"].clip_text_term
    assert "best" in load_grid("kdmcse_table3").note


def test_kdmcse_table1_matches_main_results(papers):
    main = _md_table(papers, "Main results, BERT-base, wiki+flickr")
    pub = _published("kdmcse_table1")
    assert set(pub) == {"SimCSE", "MCSE", "KDMCSE"}
    for label in pub:
        assert pub[label] == dict(zip(STS_COLUMNS, main[label], strict=True))


@pytest.mark.parametrize(("grid", "heading"), [
    ("kdmcse_table1_roberta", "Avg only: RoBERTa-base, wiki+flickr"),
    ("kdmcse_table1_coco", "BERT-base, wiki+coco"),
    ("kdmcse_table1_roberta_coco", "RoBERTa-base, wiki+coco"),
])
def test_kdmcse_table1_other_settings_match_papers(papers, grid, heading):
    spec = _avg_only(papers, heading)
    assert set(spec) == {"SimCSE", "MCSE", "KDMCSE", "DALR"}  # the parse found the whole line
    pub = _published(grid)
    assert pub == {label: {"avg": spec[label]} for label in ("SimCSE", "MCSE", "KDMCSE")}
    methods = {c.name: _cfg(grid, c.name).objective for c in load_grid(grid).cells}
    assert {k: o.method for k, o in methods.items()} == {"SimCSE": "simcse", "MCSE": "mcse", "KDMCSE": "kdmcse"}
    assert methods["KDMCSE"].threshold == 0.8


@pytest.mark.parametrize(("grid", "encoder"), [("kdmcse_table2", "BERT"), ("kdmcse_table2_roberta", "RoBERTa")])
def test_kdmcse_table2_alignment_and_uniformity(papers, grid, encoder):
    spec = _align_uniform(papers)
    assert len(spec) == 6  # MCSE, KDMCSE, DALR x BERT, RoBERTa
    g = load_grid(grid)
    assert g.columns == ("alignment", "uniformity", "avg")
    assert g.published == {m: spec[(m, encoder)] for m in ("MCSE", "KDMCSE")}
    assert g.baseline == "MCSE" and "Lower is better" in g.note


def test_kdmcse_table5(papers):
    line = next(x for x in papers.splitlines() if x.startswith("KDMCSE Table 5"))
    num = r"(\d+\.\d+)"
    m = re.search(rf"wiki\+flickr MCSE_CLIPText {num} vs KDMCSE {num}; wiki\+coco {num} vs {num}", line)
    assert _published("kdmcse_table5") == {"MCSE_CLIPText": {"avg": float(m.group(1))},
                                           "KDMCSE": {"avg": float(m.group(2))}}
    assert _published("kdmcse_table5_coco") == {"MCSE_CLIPText": {"avg": float(m.group(3))},
                                                "KDMCSE": {"avg": float(m.group(4))}}
    for grid in ("kdmcse_table5", "kdmcse_table5_coco"):
        clip = _cfg(grid, "MCSE_CLIPText").objective.resolved()
        assert clip.method == "mcse" and clip.clip_text_term, grid


@pytest.mark.parametrize(("grid", "heading"), [("dalr_table3", "DALR Table 3"), ("dalr_table8", "DALR Table 8")])
def test_dalr_ablations_match_papers(papers, grid, heading):
    spec = ({k: v[0] for k, v in _md_table(papers, heading).items()} if grid == "dalr_table3"
            else _inline(papers, heading))
    spec = {("w/o L_IML & L_CML" if k == "w/o both" else k): v for k, v in spec.items()}
    assert {k: v["avg"] for k, v in _published(grid).items()} == spec


@pytest.mark.parametrize("grid", ["dalr_table3", "dalr_table8"])
def test_dalr_ablation_switches(grid):
    g = load_grid(grid)
    switches = ("use_info", "use_consistency", "use_cma", "use_ima", "use_rank")
    on = {c.name: {s for s in switches if getattr(_cfg(grid, c.name).objective, s)} for c in g.cells}
    assert on["DALR"] == set(switches)
    assert on["w/o L_CML"] == set(switches) - {"use_consistency", "use_cma"}
    assert on["w/o L_IML"] == set(switches) - {"use_rank", "use_ima"}
    assert on["w/o L_IML & L_CML"] == {"use_info"}
    assert on["w/o L_Info"] == set(switches) - {"use_info"}


def test_dalr_table8_uses_the_wiki_coco_script():
    g = load_grid("dalr_table8")
    assert (g.base["lr"], g.base["epochs"]) == (1e-5, 3)
    cfg = _cfg("dalr_table8", "DALR", profile="paper")
    assert (cfg.lr, cfg.epochs, cfg.batch_size) == (1e-5, 3, 128)  # batch from the DALR recipe


def test_dalr_table9_matches_papers_and_names_teachers_symbolically(papers, monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    spec = _inline(papers, "DALR Table 9")
    g = load_grid("dalr_table9")
    assert {k: v["avg"] for k, v in g.published.items()} == spec
    combos = {"SimCSE": "simcse", "DiffCSE": "diffcse", "CLIP": "clip", "SimCSE+RankCSE": "simcse+rankcse"}
    root = tmp_path / "teachers"
    for c in g.cells:
        image, text = c.name.split("+", 1)
        assert c.overrides.get("data.image_column", "image") == ("resnet" if image == "ResNet" else "image")
        assert "text_teachers" not in c.overrides  # the profile says where teachers live
        assert c.overrides.get("teachers") == combos.get(text)  # SimCSE+DiffCSE: the profile's pair
        names_ = combos.get(text, "simcse+diffcse").split("+")
        demo, paper = _cfg("dalr_table9", c.name), _cfg("dalr_table9", c.name, profile="paper")
        assert paper.text_teachers == tuple(str(root / TEACHER_DIRS[n]) for n in names_)
        weights = (1.0,) if len(names_) == 1 else (DEFAULT_ALPHA, 1 - DEFAULT_ALPHA)
        assert paper.objective.teacher_weights == pytest.approx(weights)
        if "teachers" in c.overrides:  # the demo keeps the combination's structure, one model
            assert demo.text_teachers == (MINILM,) * len(names_)
            assert demo.objective.teacher_weights == pytest.approx(weights)
        else:  # the baseline inherits each profile's default: the demo ships one teacher
            assert (demo.text_teachers, demo.objective.teacher_weights) == ((MINILM,), (1.0,))


def test_fig7_sweeps_the_margin():
    g = load_grid("kdmcse_fig7")
    xs = sorted(c.x for c in g.cells if c.x is not None)
    assert xs == pytest.approx([0.025 * k for k in range(1, 10)])
    assert g.plot == "sweep" and g.baseline == "MCSE"
    for c in g.cells:
        if c.x is not None:
            assert c.overrides["objective.grounding_margin"] == c.x and not c.published
    assert "0.125" in g.note


def test_mcse_table4_lambdas_caption_only():
    g = load_grid("mcse_table4")
    assert sorted(c.x for c in g.cells) == [0.001, 0.01, 0.05, 0.1, 0.5]
    assert all(c.overrides["objective.lam"] == c.x for c in g.cells)
    assert g.cell(g.baseline).x == 0.05 and not g.published
    # Flickr30k only, as run_flickr.sh: caption-only training, 6 epochs, on every profile
    assert g.base == {"data.caption_only": True, "epochs": 6}
    for profile in ("demo", "paper"):
        cfg = _cfg("mcse_table4", g.baseline, profile=profile)
        assert cfg.data.caption_only and cfg.epochs == 6 and cfg.objective.lam == 0.05


# --- searches ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPACES)
def test_space_validates_every_option(name):
    s = load_space(name)
    validate_space(s, samples=8, exhaustive=True)
    assert s.name == name and s.baseline["objective.method"] == "mcse"
    assert len(set(s.confirm_seeds)) == len(s.confirm_seeds) == 5
    assert not set(s.confirm_seeds) & set(range(5))  # fresh seeds, not the search's


@pytest.mark.parametrize("name", SPACES)
def test_space_round_trip(name):
    s = load_space(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(8):
        t = study.ask()
        define_on(s, t, "demo")
        o = build_config("demo", overrides=params_to_overrides(s, t.params, profile="demo")).objective
        for k, v in t.params.items():
            if k.startswith("objective."):
                assert getattr(o, k.split(".")[1]) == (None if v == "off" else v)


def test_kdmcse_search_threshold_off_is_none():
    s = load_space("kdmcse_search")
    ov = params_to_overrides(s, {"objective.grounding_margin": 0.1, "objective.lam": 0.01,
                                 "threshold_filter": "off"}, profile="paper")
    assert ov["objective.threshold"] is None and ov["objective.method"] == "kdmcse"
    ov = params_to_overrides(s, {"objective.grounding_margin": 0.1, "objective.lam": 0.01,
                                 "threshold_filter": "on", "objective.threshold": 0.85},
                             profile="paper")
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


@pytest.mark.parametrize("name", SPACES)
@pytest.mark.parametrize("profile", ["demo", "paper"])
def test_a_search_holds_and_starts_from_the_profiles_own_configuration(name, profile, monkeypatch,
                                                                       tmp_path):
    """Issue 18: a lambda range in the papers' region excluded the demo's recipe (lambda 1.0), so
    the demo search could not find what its baseline trains with."""
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    s = load_space(name)
    own = build_config(profile, overrides=dict(s.base))
    start = s.start(own)
    assert start["objective.lam"] == own.objective.lam  # 1.0 on the demo, the code's on paper
    # the start lies in the space (replayed with its ranges on this profile) and is the recipe
    tried = build_config(profile, overrides=params_to_overrides(s, start, profile=profile))
    assert tried.config_hash() == own.config_hash()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    lams = []
    for _ in range(30):
        t = study.ask()
        define_on(s, t, profile)
        lams.append(t.params["objective.lam"])
    assert min(lams) < own.objective.lam < max(lams)  # searched on both sides of the recipe
    assert own.objective.lam / 10 <= min(lams) and max(lams) <= own.objective.lam * 10


def test_relative_bounds_keep_the_papers_range_on_the_paper_profile():
    from orchestrator.spec.spaces import ProfileTrial

    lam = load_space("kdmcse_search").define.__globals__["LAM"]
    assert lam.bounds(ProfileTrial(None, {"objective.lam": 0.01})) == pytest.approx((1e-3, 1e-1))
    assert lam.bounds(ProfileTrial(None, {"objective.lam": 1.0})) == pytest.approx((0.1, 10.0))
    with pytest.raises(ValueError, match="relative to the profile's value: call the space's "
                                         "define through orchestrator.spec.spaces.define_on"):
        lam.bounds(object())
    with pytest.raises(ValueError, match="which is None; give the space absolute bounds"):
        lam.bounds(ProfileTrial(None, {"objective.lam": None}))


def test_a_demo_refusal_of_some_cells_advises_the_cells_that_pass():
    from orchestrator.spec.grids import Cell, Grid

    g = Grid("mixed", "t", (Cell("MCSE", {"objective.method": "mcse"}),
                            Cell("KDMCSE", {"objective.method": "kdmcse"}),
                            Cell("RoBERTa", {"objective.method": "mcse", "encoder": "roberta-base"})),
             baseline="MCSE")
    with pytest.raises(ValueError, match=r"cell\(s\) \['RoBERTa'\] need their own encoder") as e:
        check_demo_fit(g, None)
    assert str(e.value).endswith("or leave them out: --cells KDMCSE")
    check_demo_fit(g, ["KDMCSE"])  # the advice passes
    based = Grid("b", "t", g.cells, baseline="RoBERTa")
    with pytest.raises(ValueError) as e:
        check_demo_fit(based, ["KDMCSE"])  # the baseline cannot be left out
    assert "--cells" not in str(e.value)
