"""orchestrator.ui_links: the addresses a table prints, and the saved view they open."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from mlflow.entities import Run, RunData, RunInfo, RunTag

from orchestrator import ui_links
from orchestrator.results import views
from orchestrator.results.views import TEST_METRICS, column, links, view_state, view_tag
from orchestrator.tracking.client import Tracker

PARENT = "p" * 32
# The names MLflow 3.17's UI gives its runs-table state: the search facets it keeps in the URL
# (EXPERIMENT_PAGE_QUERY_PARAM_KEYS) and the UI state a saved view restores
# (EXPERIMENT_PAGE_UI_STATE_FIELDS); a key outside them would be silently ignored.
UI_KEYS = {
    "searchFilter", "orderByKey", "orderByAsc", "startTime", "lifecycleFilter",
    "modelVersionFilter", "datasetsFilter",
    "selectedColumns", "columnOrder", "columnWidths", "runsExpanded", "runsPinned", "runsHidden",
    "runsVisibilityMap", "runsHiddenMode", "compareRunCharts", "compareRunSections",
    "viewMaximized", "runListHidden", "isAccordionReordered", "groupBy", "groupsExpanded",
    "autoRefreshEnabled", "useGroupedValuesInCharts", "hideEmptyCharts", "globalLineChartConfig",
    "chartsSearchFilter",
}


def _run(run_id: str, cell: str, seed: int, experiment_id: str = "7",
         params: dict[str, str] | None = None) -> Run:
    from mlflow.entities import Param

    info = RunInfo(run_id=run_id, experiment_id=experiment_id, user_id="", status="FINISHED",
                   start_time=0, end_time=0, lifecycle_stage="active")
    tags = [RunTag("mlflow.parentRunId", PARENT), RunTag("mmemb.cell", cell),
            RunTag("mmemb.seed", str(seed))]
    return Run(info, RunData(tags=tags, params=[Param(k, v) for k, v in (params or {}).items()]))


def _fragment_query(url: str) -> dict[str, str]:
    """The query of the UI's hash route, decoded as the browser's URLSearchParams would."""
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).fragment.split("?", 1)[1]))


def test_view_state_shows_cell_seed_and_the_test_scores_in_paper_order() -> None:
    st = view_state(PARENT)
    assert set(st) <= UI_KEYS
    assert st["searchFilter"] == f"tags.mlflow.parentRunId = '{PARENT}'"
    wanted = ["tags.`mmemb.cell`", "tags.`mmemb.seed`",
              *(f"metrics.`test/{t}`" for t in ("STS12", "STS13", "STS14", "STS15", "STS16",
                                                 "STSBenchmark", "SICKRelatedness", "avg"))]
    assert st["selectedColumns"] == wanted
    assert [column("metrics", m) for m in TEST_METRICS] == wanted[2:]
    assert st["columnOrder"][: len(wanted) + 1] == ["attributes.`Run Name`", *wanted]
    assert set(wanted) <= set(st["columnWidths"])
    # grouped by the cell's label: its row number first, so cut-short names stay apart
    assert st["groupBy"] == {"aggregateFunction": "average",
                             "groupByKeys": [{"mode": "tag", "groupByData": "mmemb.cell_label"}]}
    assert (st["orderByKey"], st["orderByAsc"]) == ("tags.`mlflow.runName`", True)
    other = view_state(PARENT, ["test/alignment", "test/uniformity"])["selectedColumns"]
    assert other[2:] == [column("metrics", "test/alignment"), column("metrics", "test/uniformity")]


def test_view_tag_is_the_ui_saved_view_envelope() -> None:
    key, value = view_tag(PARENT, "kdmcse_table3 (demo) pppppppp", now_ms=1234)
    assert key == f"mlflow.sharedViewState.mmemb-{PARENT}"
    env = json.loads(value)
    assert env["name"] == "kdmcse_table3 (demo) pppppppp"
    assert env["createdAt"] == env["updatedAt"] == 1234
    assert json.loads(env["state"]) == view_state(PARENT)
    assert len(value) < 5000  # far under MLflow's experiment tag limit


def test_links_open_the_saved_view_the_compare_view_and_the_parent() -> None:
    children = [_run("c", "MCSE", 10), _run("a", "KDMCSE", 1), _run("b", "MCSE", 2),
                _run("d", "KDMCSE", 0)]
    urls = links(PARENT, children, "http://host:5001/")
    assert set(urls) == {"runs", "charts", "filter", "compare", "parent"}
    assert urls["runs"] == (f"http://host:5001/#/experiments/7/runs?"
                            f"viewStateShareKey=mmemb-{PARENT}")
    assert urls["charts"] == urls["runs"] + "&compareRunsMode=CHART"
    assert urls["parent"] == f"http://host:5001/#/experiments/7/runs/{PARENT}"
    cmp = _fragment_query(urls["compare"])
    assert urls["compare"].startswith("http://host:5001/#/compare-runs?")
    # cells in the order they first come, then seeds numerically (10 after 2)
    assert json.loads(cmp["runs"]) == ["b", "c", "d", "a"]
    assert json.loads(cmp["experiments"]) == ["7"]
    flt = _fragment_query(urls["filter"])
    assert flt["searchFilter"] == f"tags.mlflow.parentRunId = '{PARENT}'"
    assert flt["orderByKey"] == "tags.`mlflow.runName`"
    assert " " not in "".join(urls.values())  # one clickable token in a terminal


def test_links_without_children_need_the_experiment() -> None:
    with pytest.raises(ValueError):
        links(PARENT, [])
    urls = links(PARENT, [], experiment_id="3")
    assert "compare" not in urls
    assert urls["runs"].startswith("http://127.0.0.1:5000/#/experiments/3/runs?")


def test_share_saves_a_view_whose_filter_finds_exactly_the_children(tmp_path, capsys) -> None:
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = tr.start_parent("table3 (links)", "table", "plan", {})
    other = tr.start_parent("table3 (other)", "table", "plan2", {})
    ids = {}
    for p, cell, seed in [(parent, "KDMCSE", 0), (parent, "MCSE", 0), (other, "MCSE", 0)]:
        ids[(p, cell)] = tr.start_child(p, {"run_name": f"{cell} | seed {seed}",
                                            "key": f"{cell}/{seed}", "grid": "table3",
                                            "cell": cell, "seed": seed, "config_hash": "h",
                                            "run": {}})
    urls = views.share(tr, parent)
    tag = tr.client.get_experiment(tr.experiment_id).tags[f"mlflow.sharedViewState.mmemb-{parent}"]
    env = json.loads(tag)
    assert env["name"] == f"table3 (links) {parent[:8]}"
    found = tr.client.search_runs([tr.experiment_id], json.loads(env["state"])["searchFilter"])
    assert {r.info.run_id for r in found} == {ids[(parent, "KDMCSE")], ids[(parent, "MCSE")]}
    compared = json.loads(_fragment_query(urls["compare"])["runs"])
    assert set(compared) == {ids[(parent, "KDMCSE")], ids[(parent, "MCSE")]}
    assert views.share(tr, parent) == urls  # publishing again keeps one view per table
    saved = [k for k in tr.client.get_experiment(tr.experiment_id).tags
             if k.startswith("mlflow.sharedViewState.")]
    assert saved == [f"mlflow.sharedViewState.mmemb-{parent}"]

    assert ui_links.main(["--run", parent, "--tracking-uri", tr.uri]) == 0
    out = capsys.readouterr().out
    assert urls["runs"] in out and urls["compare"] in out


# A table as the issue met it: MCSE against a plug-in's two cells that differ in its own setting
# beta (names long enough that the UI cuts them short), each run's params what its method reads.
MCSE_P = {"objective.method": "mcse", "objective.lam": "1.0", "objective.adaptive_margin": "False",
          "lr": "0.0005"}
HARD_P = {"objective.method": "hardground", "objective.lam": "1.0", "objective.hardness": "0.5",
          "lr": "0.0005"}
TABLE = [_run(f"m{s}", "MCSE", s, params={**MCSE_P, "seed": str(s)}) for s in (0, 1)] + \
    [_run(f"a{s}", "HardGround beta=0.1", s, params={**HARD_P, "objective.beta": "0.1",
                                                     "seed": str(s)}) for s in (0, 1)] + \
    [_run(f"b{s}", "HardGround beta=0.5", s, params={**HARD_P, "objective.beta": "0.5",
                                                     "seed": str(s)}) for s in (0, 1)]


def test_the_cells_differing_settings_are_the_method_and_what_a_cell_sweeps():
    # beta tells the plug-in's cells apart; hardness and adaptive_margin, at one value each,
    # tell nothing apart; seed differs inside a cell; lam and lr are the same everywhere
    assert views.differing_params(TABLE) == ["objective.method", "objective.beta"]
    # the parallel-coordinates chart leaves out runs lacking a param: beta, held by the same cells
    assert views.chart_params(TABLE, ["objective.method", "objective.beta"]) == ["objective.beta"]
    only_methods = [r for r in TABLE if r.data.tags["mmemb.cell"] != "HardGround beta=0.5"]
    assert views.differing_params(only_methods) == ["objective.method"]
    assert views.chart_params(only_methods, ["objective.method"]) == ["objective.method"]


def test_the_view_shows_the_settings_and_opens_its_charts_on_them_against_the_test_average():
    st = view_state(PARENT, settings=["objective.method", "objective.beta"],
                    charted=["objective.beta"])
    assert st["selectedColumns"][2:4] == ["params.`objective.method`", "params.`objective.beta`"]
    assert st["selectedColumns"][-1] == "metrics.`test/avg`"
    parallel, bars = st["compareRunCharts"]
    assert (parallel["type"], parallel["selectedParams"], parallel["selectedMetrics"]) == (
        "PARALLEL", ["objective.beta"], ["test/avg"])
    assert (bars["type"], bars["metricKey"]) == ("BAR", "test/avg")
    assert {c["metricSectionId"] for c in st["compareRunCharts"]} == {
        s["uuid"] for s in st["compareRunSections"]}
    # MLflow keeps params as strings and its parallel chart refuses a group's aggregated strings
    assert st["useGroupedValuesInCharts"] is False
    assert len(view_tag(PARENT, "t", settings=["objective.method", "objective.beta"])[1]) < 8000


def test_a_long_setting_is_looked_for_as_the_chart_draws_its_axis():
    # MLflow cuts a long axis label to its first and last six characters: looking for the whole
    # name failed a chart that shows every setting (table3's three, seen in headless Chromium).
    from orchestrator.results.browser_check import axis_label

    assert axis_label("objective.adaptive_margin") == "object...margin"
    assert axis_label("objective.clip_text_term") == "object...t_term"
    assert axis_label("beta") == "beta"
