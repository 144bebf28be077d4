"""Links into the MLflow UI (3.x) that open a table's child runs ready to compare.

Two views of MLflow's own UI, no custom page:

- **runs**: the experiment's runs table as a *saved view* (the UI's "Views" menu, the same thing
  its "Save & share view" button writes). The UI keeps the columns, the grouping and the filter of
  its runs table in the browser, not in the URL; a saved view is an experiment tag
  ``mlflow.sharedViewState.<id>`` holding that state, and
  ``#/experiments/<exp>/runs?viewStateShareKey=<id>`` opens it. Ours shows the table's children
  (``tags.mlflow.parentRunId = '<parent>'``) grouped by cell (each group row is the mean over seeds),
  with the cell and seed tags and the seven test scores and their average as columns.
  :func:`publish` writes the tag; :func:`links` only builds addresses.
  The runs' params are the settings their method reads (``tracking/events.resolved_run``), and
  the view shows as columns those on which the cells differ (:func:`differing_params`). The group
  rows carry each cell's short label (``mmemb.cell_label``: its row number and name), so two cells
  whose long names the UI cuts short stay apart.
- **charts**: the same saved view in the UI's chart mode (``compareRunsMode=CHART``), which opens
  on a parallel-coordinates chart of the cells' differing settings against the test average and
  a bar chart of the test average per cell (the view's ``compareRunCharts``): a comparison that
  means something from the first click, not MLflow's default of the first three params against
  whichever metric it lists first.
- **compare**: ``#/compare-runs?runs=[...]&experiments=[...]``, MLflow's side-by-side view of the
  children (params, tags and every metric of each run).

``filter`` is the runs table with only the filter and sort in the URL (search facets such as
``searchFilter`` and ``orderByKey`` are URL parameters): it works without the saved view, with the
UI's default columns. ``parent`` is the parent run's page (report.md/csv/png among its artifacts).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator.analysis.tables import DEFAULT_COLUMNS

DEFAULT_BASE = "http://127.0.0.1:5000"
TEST_METRICS = tuple(f"test/{c}" for c in DEFAULT_COLUMNS)  # test/STS12 ... test/avg
CELL_TAG, SEED_TAG, LABEL_TAG = "mmemb.cell", "mmemb.seed", "mmemb.cell_label"
AVG = "test/avg"
SHARE_TAG_PREFIX = "mlflow.sharedViewState."  # experiment tags the UI reads saved views from
SHARE_PARAM = "viewStateShareKey"
RUN_NAME_KEY = "tags.`mlflow.runName`"  # the UI's sort key for "Run name"
RUN_NAME_COLUMN = "attributes.`Run Name`"  # the runs table's column ids
CREATED_COLUMN, DURATION_COLUMN = "runDateAndNestInfo", "duration"


class _Info(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def experiment_id(self) -> str: ...


class _Data(Protocol):
    @property
    def tags(self) -> Mapping[str, str]: ...


class ChildRun(Protocol):
    """What :func:`links` reads of a child run (an ``mlflow.entities.Run`` has it)."""

    @property
    def info(self) -> _Info: ...
    @property
    def data(self) -> _Data: ...


def column(kind: str, key: str) -> str:
    """The runs table's column id: ``column('metrics', 'test/avg') == 'metrics.`test/avg`'``."""
    return f"{kind}.`{key}`"


def children_filter(parent_id: str) -> str:
    return f"tags.mlflow.parentRunId = '{parent_id}'"


def view_id(parent_id: str) -> str:
    """The saved view's id (in the tag key and the URL): one per table, stable across resumes."""
    return f"mmemb-{parent_id}"


def differing_params(children: Sequence[ChildRun]) -> list[str]:
    """The settings that tell a table's cells apart: ``objective.method`` when the cells train
    different methods, then each param that takes two or more values among the cells that
    have it (a method's own setting a table sweeps, such as ``objective.beta``), those held by
    the most cells first. A param that differs inside a cell (the seed) is no setting of the
    cell; one that a method has and the others lack, at one value, tells nothing apart."""
    by_cell: dict[str, Mapping[str, str]] = {}
    within: set[str] = set()
    for r in children:
        params = getattr(r.data, "params", {}) or {}
        cell = r.data.tags.get(CELL_TAG, "")
        first = by_cell.setdefault(cell, params)
        within |= {k for k in {*first, *params} if first.get(k) != params.get(k)}
    keys = sorted({k for p in by_cell.values() for k in p} - within)

    def values(k: str) -> list[str]:
        return [p[k] for p in by_cell.values() if k in p]

    method = ["objective.method"] if len(set(values("objective.method"))) > 1 else []
    swept = [k for k in keys if k != "objective.method" and len(set(values(k))) > 1]
    return method + sorted(swept, key=lambda k: (-len(values(k)), k))


def chart_params(children: Sequence[ChildRun], settings: Sequence[str]) -> list[str]:
    """The settings a parallel-coordinates chart can draw for these cells: the chart leaves out
    a run that lacks any of its params, so the swept settings held by the same cells as the
    first one (the method alone when nothing else is swept)."""
    swept = [k for k in settings if k != "objective.method"]
    if not swept:
        return list(settings)
    holders = {k: frozenset(r.data.tags.get(CELL_TAG, "") for r in children
                            if k in (getattr(r.data, "params", {}) or {})) for k in swept}
    return [k for k in swept if holders[k] == holders[swept[0]]]


def charts(settings: Sequence[str], metric: str = AVG) -> tuple[list[dict], list[dict]]:
    """The chart mode's first charts (``compareRunCharts``, ``compareRunSections`` as the UI
    stores them, ``RunsChartsCardConfig``): the cells' differing settings against ``metric`` in
    parallel coordinates, then ``metric`` per cell in bars. The UI adds a chart per other
    metric below them."""
    section = "mmemb-table"
    base = {"runsCountToCompare": 100, "metricSectionId": section, "deleted": False,
            "isGenerated": False}
    cards = [{**base, "uuid": "mmemb-parallel", "type": "PARALLEL",
              "displayName": f"{', '.join(settings) or 'settings'} vs {metric}",
              "selectedParams": list(settings), "selectedMetrics": [metric], "showAllRuns": False},
             {**base, "uuid": "mmemb-bars", "type": "BAR", "displayName": f"{metric} per cell",
              "metricKey": metric}]
    sections = [{"uuid": section, "name": "The table: settings against the test average",
                 "display": True, "isReordered": False, "deleted": False, "isGenerated": False}]
    return cards, sections


def view_state(parent_id: str, metrics: Sequence[str] = TEST_METRICS,
               settings: Sequence[str] = (), group_tag: str = LABEL_TAG,
               charted: Sequence[str] | None = None) -> dict[str, Any]:
    """The runs table state of the saved view: search facets and UI state, as the UI stores them
    (groups start expanded). ``settings``: the params shown as columns (the cells' differing
    settings); ``charted``: those the parallel-coordinates chart draws (default: ``settings``);
    ``group_tag``: the tag whose value labels each cell's group row."""
    cell_group = {"mode": "tag", "groupByData": group_tag}
    tags = [column("tags", CELL_TAG), column("tags", SEED_TAG)]
    params = [column("params", k) for k in settings]
    scores = [column("metrics", m) for m in metrics]
    cards, sections = charts(settings if charted is None else charted)
    return {
        # search facets (ExperimentPageSearchFacetsState)
        "searchFilter": children_filter(parent_id),
        "orderByKey": RUN_NAME_KEY, "orderByAsc": True,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        # UI state (ExperimentPageUIState)
        "selectedColumns": [*tags, *params, *scores],
        # The UI would put metrics alphabetically and tags after them; this is the papers' order
        # after the cell's settings, the scores narrow enough that they fit a 1600-pixel window.
        "columnOrder": [RUN_NAME_COLUMN, *tags, *params, *scores, CREATED_COLUMN,
                        DURATION_COLUMN],
        "columnWidths": {RUN_NAME_COLUMN: 250, CREATED_COLUMN: 100, tags[0]: 110, tags[1]: 60}
                        | {c: 105 for c in params} | {c: 75 for c in scores},
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [cell_group]},
        "runsHiddenMode": "SHOW_ALL", "viewMaximized": False, "runListHidden": False,
        # each run its own line: the parallel-coordinates chart cannot draw a group's params
        # (MLflow keeps params as strings and refuses aggregated string values)
        "useGroupedValuesInCharts": False, "hideEmptyCharts": True,
        "compareRunCharts": cards, "compareRunSections": sections, "isAccordionReordered": True,
    }


def view_tag(parent_id: str, name: str, metrics: Sequence[str] = TEST_METRICS,
             now_ms: int | None = None, settings: Sequence[str] = (),
             group_tag: str = LABEL_TAG, charted: Sequence[str] | None = None) -> tuple[str, str]:
    """(experiment tag key, value) of the saved view: the UI's envelope ``{name, createdAt,
    updatedAt, state}`` with ``state`` as plain JSON (the UI reads plain or deflated)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    state = json.dumps(view_state(parent_id, metrics, settings, group_tag, charted),
                       separators=(",", ":"))
    value = json.dumps({"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": state})
    return SHARE_TAG_PREFIX + view_id(parent_id), value


def _q(params: Mapping[str, str]) -> str:
    return urllib.parse.urlencode(params, safe=",'", quote_via=urllib.parse.quote)


def runs_url(base: str, experiment_id: str, parent_id: str, mode: str | None = None) -> str:
    """The saved view; ``mode`` 'CHART' opens it in the UI's chart mode."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?" + _q(
        {SHARE_PARAM: view_id(parent_id), **({"compareRunsMode": mode} if mode else {})})


def filter_url(base: str, experiment_id: str, parent_id: str) -> str:
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?" + _q(
        {"searchFilter": children_filter(parent_id), "orderByKey": RUN_NAME_KEY,
         "orderByAsc": "true", "startTime": "ALL", "lifecycleFilter": "Active"})


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def compare_url(base: str, experiment_ids: Sequence[str], run_ids: Sequence[str]) -> str:
    return f"{base.rstrip('/')}/#/compare-runs?" + _q(
        {"runs": json.dumps(list(run_ids), separators=(",", ":")),
         "experiments": json.dumps(list(experiment_ids), separators=(",", ":"))})


def order_children(children: Sequence[ChildRun]) -> list[ChildRun]:
    """By cell, in the order cells first appear, then by seed."""
    first: dict[str, int] = {}
    for r in children:
        first.setdefault(r.data.tags.get(CELL_TAG, ""), len(first))

    def key(r: ChildRun) -> tuple[int, int, str]:
        seed = r.data.tags.get(SEED_TAG, "")
        return (first[r.data.tags.get(CELL_TAG, "")],
                int(seed) if seed.lstrip("-").isdigit() else 0, r.info.run_id)

    return sorted(children, key=key)


def links(parent_id: str, children: Sequence[ChildRun], base: str = DEFAULT_BASE, *,
          experiment_id: str | None = None) -> dict[str, str]:
    """Addresses of a table in the MLflow UI at ``base``: ``runs`` (the saved view, once
    :func:`publish` wrote it), ``filter``, ``compare`` (absent without children) and ``parent``.

    ``children`` are the parent's child runs (``Tracker.children(parent_id)``); the experiment is
    theirs unless ``experiment_id`` is given."""
    if experiment_id is None:
        if not children:
            raise ValueError("no children: pass experiment_id")
        experiment_id = children[0].info.experiment_id
    out = {"runs": runs_url(base, experiment_id, parent_id),
           "charts": runs_url(base, experiment_id, parent_id, "CHART"),
           "filter": filter_url(base, experiment_id, parent_id)}
    if children:
        ordered = order_children(children)
        exps = sorted({r.info.experiment_id for r in ordered})
        out["compare"] = compare_url(base, exps, [r.info.run_id for r in ordered])
    out["parent"] = run_url(base, experiment_id, parent_id)
    return out


def view_name(parent_name: str, parent_id: str) -> str:
    """The view's name in the UI's "Views" menu: the table's run name and its id's first 8."""
    return f"{parent_name} {parent_id[:8]}"


def publish(client: Any, experiment_id: str, parent_id: str, name: str,
            metrics: Sequence[str] = TEST_METRICS,
            children: Sequence[ChildRun] | None = None) -> str:
    """Write (or refresh) the table's saved view on the experiment; -> its view id.
    ``children``: the table's child runs, whose differing settings become columns and charts.

    ``client`` is an ``MlflowClient`` (``Tracker.client``)."""
    kids = list(children or ())
    labelled = bool(kids) and all(LABEL_TAG in r.data.tags for r in kids)
    settings = differing_params(kids)
    key, value = view_tag(parent_id, name, metrics, settings=settings,
                          group_tag=LABEL_TAG if labelled else CELL_TAG,
                          charted=chart_params(kids, settings))
    client.set_experiment_tag(experiment_id, key, value)
    return view_id(parent_id)


def share(tracker: Any, parent_id: str, base: str = DEFAULT_BASE,
          metrics: Sequence[str] = TEST_METRICS) -> dict[str, str]:
    """Publish the table's saved view and return its :func:`links`: what a table prints at its end.

    ``tracker`` is an ``orchestrator.tracking.client.Tracker``."""
    children = tracker.children(parent_id)
    name = tracker.client.get_run(parent_id).info.run_name or parent_id
    publish(tracker.client, tracker.experiment_id, parent_id, view_name(name, parent_id), metrics,
            children)
    return links(parent_id, children, base, experiment_id=tracker.experiment_id)


def print_links(urls: Mapping[str, str], file: Any = None) -> None:
    """The lines a table prints at its end."""
    what = {"runs": "the table's runs, by cell, with their settings and test scores",
            "charts": "the cells compared: their settings against the test average",
            "compare": "its runs side by side", "filter": "its runs, default columns",
            "parent": "the table's run (report.md/csv/png)"}
    print("in the MLflow UI (`mlflow ui --backend-store-uri ...`):", file=file)
    for k in ("runs", "charts", "compare", "filter", "parent"):
        if k in urls:
            print(f"  {what[k]}:\n    {urls[k]}", file=file)
