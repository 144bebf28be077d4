"""Open a table in the real MLflow UI, in headless Chromium, and check that it can be compared.

    python -m orchestrator.ui_check --tracking-uri sqlite:///$PWD/mlflow.db --out mlflow-ui.png

Starts ``mlflow server`` on a free loopback port, reads the table's parent and child runs through
its REST API, publishes the table's saved view if it is not there yet (``orchestrator.results.views``),
and drives Chromium (Debian's ``chromium`` package, by its path) through Playwright to render, as
a user would after ``mlflow ui``:

(a) the runs view at the table's one-click link: a header for the cell tag, the seed tag and each
    of the seven test scores and their average, a row for every child with its cell and the
    numbers MLflow holds for it;
(b) a child run's page: its test scores, test/avg among them;
(c) the compare view of the children: a row per test score with one number per compared run;
(d) the same saved view in chart mode: a group row per cell with its own label (the labels tell
    the cells apart), the cells' differing settings as columns of (a), and the charts it opens
    on, the settings against test/avg in parallel coordinates and test/avg per run.

It prints what it saw as JSON, saves a screenshot of (a) and of (d) (``<out>-charts.png``) and
exits 1 when something is missing.
Each page is polled until what it should show is there (bounded by ``--timeout``); no fixed waits.
The UI opens its assistant side panel by itself on a browser's first visit from localhost (once:
closing it is remembered); the check's fresh browser profile records that visit as done, as a
returning user's browser has, so the panel does not cover the table.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.results import views
from orchestrator.results.views import AVG, CELL_TAG, SEED_TAG, TEST_METRICS, column

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]
WINDOW = (1600, 1000)
RUNS_PAGE = 100  # runs the runs table loads before its "Load more" button
# localStorage entry (key + "_v" + version, as the UI's useLocalStorage writes it) that the UI
# sets once it has opened the assistant panel on a first visit from localhost.
ASSISTANT_FIRST_VISIT = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tracking_uri: str, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
               MLFLOW_DISABLE_TELEMETRY="true")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    # Own process group: stopping it leaves no uvicorn worker behind.
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"mlflow server did not answer /health within 90 s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


# --- a headless Chromium, driven by Playwright ---------------------------------------------------

def find_chromium() -> str:
    """The system's Chromium (Playwright drives it by path: no browser download needed)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise FileNotFoundError("chromium not found; install it: apt-get install chromium")
    return path


class Chromium:
    """One headless page; ``evaluate`` runs JavaScript in it, ``wait_for`` polls a condition."""

    def __init__(self, binary: str, size: tuple[int, int] = WINDOW):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise FileNotFoundError("Playwright for Python is not installed; install it: "
                                    "pip install 'mmemb[ui]' (no browser download needed)") from None
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=binary, headless=True,
                                                     args=CHROMIUM_FLAGS)
            self.page = self._browser.new_page(viewport={"width": size[0], "height": size[1]})
        except Exception:
            self._pw.stop()
            raise

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (a promise is awaited); None if it threw
        or the page navigated away meanwhile."""
        from playwright.sync_api import Error

        try:
            return self.page.evaluate(expression)
        except Error:
            return None

    def goto(self, url: str) -> None:
        self.page.goto(url, wait_until="commit")

    def wait_for(self, expression: str, done: Callable[[Any], bool], timeout: float,
                 every: float = 0.25) -> tuple[Any, bool]:
        """Evaluate until ``done(value)``; -> (last value, whether done) after at most timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value is not None and done(value):
                return value, True
            if time.monotonic() >= deadline:
                return value, False
            self.page.wait_for_timeout(every * 1000)  # lets the page's own events run

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._browser.close()
        self._pw.stop()


# --- what each page shows ----------------------------------------------------------------------

# The runs table (ag-grid): header ids and texts; for each row, by its row id (the run id, or
# "<group>.<run id>" inside a group), the text of each cell by column id. Pinned and scrolling
# parts of a row are separate elements with the same row id.
_RUNS_JS = """(() => {
  const headers = {}, rows = {};
  document.querySelectorAll('.ag-header-cell[col-id]').forEach(
    h => { headers[h.getAttribute('col-id')] = h.innerText.trim(); });
  document.querySelectorAll('.ag-row[row-id]').forEach(r => {
    const row = rows[r.getAttribute('row-id')] ||= {};
    r.querySelectorAll('.ag-cell[col-id]').forEach(
      c => { row[c.getAttribute('col-id')] = c.innerText.trim(); });
  });
  return {headers, rows};
})()"""

_TEXT_JS = "document.body ? document.body.innerText : ''"

# The compare view's Metrics section: a virtualized grid of metric names beside a virtualized grid
# of values (a column per run, in the order of the link's runs), each rendering only the cells
# scrolled into view. Scroll each grid through its whole extent, waiting (a bounded number of
# frames) at each position until the cells covering the viewport are rendered, and read them by
# position; -> {metric: [value text per run]} for the wanted metrics. The values grid is scrolled
# down with its left fixed, then across with its top at 0, and a scroll is repeated until it
# holds: the grid re-syncs a header on horizontal scrolls with the top it had before.
_COMPARE_JS = """(async (keys) => {
  const section = [...document.querySelectorAll('.du-bois-light-collapse-item')].find(
    e => e.querySelector('.du-bois-light-collapse-header')?.innerText.trim() === 'Metrics');
  const grids = section ? section.querySelectorAll('.ReactVirtualized__Grid') : [];
  if (grids.length < 2) return null;
  const [names, values] = grids;
  const cells = g => [...g.firstElementChild.children].map(c => ({
    top: parseFloat(c.style.top), left: parseFloat(c.style.left),
    h: parseFloat(c.style.height), w: parseFloat(c.style.width), text: c.innerText.trim()}));
  const covers = (g, y, x) => cells(g).some(
    c => c.top <= y && y < c.top + c.h && c.left <= x && x < c.left + c.w);
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const scrollTo = async (g, axis, to) => {  // until there, with the viewport's cells rendered
    const inner = g.firstElementChild;
    const max = axis === 'scrollTop' ? inner.offsetHeight - g.clientHeight
                                     : inner.offsetWidth - g.clientWidth;
    const target = Math.max(0, Math.min(to, max));
    for (let i = 0; i < 240; i++) {
      if (Math.abs(g[axis] - target) > 1) {
        g[axis] = target;  // again if a synced scroll moved it back
      } else {
        const y = g.scrollTop, x = g.scrollLeft;
        if (covers(g, y, x) && covers(g, Math.min(y + g.clientHeight, inner.offsetHeight) - 1,
                                      Math.min(x + g.clientWidth, inner.offsetWidth) - 1)) return;
      }
      await frame();
    }
  };
  const nameAt = {}, valueAt = {};
  let rowH = 0;
  for (let top = 0; top < names.scrollHeight; top += names.clientHeight) {
    await scrollTo(names, 'scrollTop', top);
    cells(names).forEach(c => { nameAt[c.top] = c.text; rowH = c.h; });
  }
  const rows = Object.keys(nameAt).map(Number).filter(t => keys.includes(nameAt[t]))
    .sort((a, b) => a - b);
  for (let left = 0; left < values.scrollWidth; left += values.clientWidth) {
    await scrollTo(values, 'scrollTop', 0);
    await scrollTo(values, 'scrollLeft', left);
    let shownFrom = -Infinity;
    for (const top of rows) {  // only where the wanted rows are
      if (top + rowH > shownFrom + values.clientHeight) {
        await scrollTo(values, 'scrollTop', top);
        shownFrom = values.scrollTop;
      }
      cells(values).filter(c => c.top === top).forEach(
        c => { (valueAt[top] ||= {})[c.left] = c.text; });
    }
  }
  const out = {};
  for (const [top, name] of Object.entries(nameAt)) {
    if (!keys.includes(name)) continue;
    const row = valueAt[top] || {};
    out[name] = Object.keys(row).map(Number).sort((a, b) => a - b).map(l => row[l]);
  }
  return out;
})(%s)"""


def _number(text: str | None) -> float | None:
    try:
        return float((text or "").split()[0])
    except (ValueError, IndexError):
        return None


def _same(shown: float | None, stored: float, rel: float) -> bool:
    return shown is not None and math.isclose(shown, stored, rel_tol=rel, abs_tol=rel)


def check_runs_view(browser: Chromium, url: str, children: Sequence[dict],
                    timeout: float, wanted_settings: Sequence[str] = ()) -> dict:
    """(a) headers, and each child's row with its cell, seed and stored test scores; a group
    row per cell with its label; a column per setting of ``wanted_settings``. The UI loads runs
    100 at a time, in the view's order (by run name): only those rows are expected."""
    children = sorted(children, key=lambda c: c["name"])[:RUNS_PAGE]

    def row_of(rows: Mapping[str, Any], run_id: str) -> Mapping[str, str] | None:
        return next((r for k, r in rows.items() if k == run_id or k.endswith("." + run_id)), None)

    def complete(seen: Mapping[str, Any]) -> bool:
        return all((row := row_of(seen["rows"], c["run_id"])) is not None
                   and all(column("metrics", m) in row for m in c["metrics"])
                   for c in children)

    browser.goto(url)
    seen, _ = browser.wait_for(_RUNS_JS, complete, timeout)
    seen = seen or {"headers": {}, "rows": {}}
    wanted = [column("tags", CELL_TAG), column("tags", SEED_TAG),
              *(column("metrics", m) for m in TEST_METRICS)]
    headers = [seen["headers"][c] for c in wanted if c in seen["headers"]]
    problems = [f"runs view: no column {c}" for c in wanted if c not in seen["headers"]]
    rows = {}
    for c in children:
        row = row_of(seen["rows"], c["run_id"])
        if row is None:
            problems.append(f"runs view: no row for {c['name']} ({c['run_id']})")
            continue
        shown = {m: row.get(column("metrics", m)) for m in TEST_METRICS}
        rows[c["run_id"]] = {"cell": row.get(column("tags", CELL_TAG)),
                             "seed": row.get(column("tags", SEED_TAG)), **shown}
        if rows[c["run_id"]]["cell"] != c["cell"] or rows[c["run_id"]]["seed"] != c["seed"]:
            problems.append(f"runs view: {c['name']} shows cell/seed "
                            f"{rows[c['run_id']]['cell']!r}/{rows[c['run_id']]['seed']!r}")
        problems += [f"runs view: {c['name']} {m} shows {shown[m]!r}, stored {v}"
                     for m, v in c["metrics"].items() if not _same(_number(shown[m]), v, 1e-6)]
    cells = sorted({r["cell"] for r in rows.values() if r["cell"]})
    labels = {k.split(".", 3)[-1]: v for k, v in seen["rows"].items()
              if k.startswith(f"tag.{views.LABEL_TAG}.") and k.count(".") >= 3
              and not any(k.endswith("." + c["run_id"]) for c in children)}
    groups = sorted(line.removeprefix("Group: ") for cells_ in labels.values()
                    for line in [next((x for text in cells_.values()
                                       for x in str(text).splitlines()
                                       if x.startswith("Group: ")), "")] if line)
    expected = sorted({c["label"] for c in children if c.get("label")})
    if expected and groups != expected:
        problems.append(f"runs view: group rows {groups}, expected one per cell {expected}")
    if len({g.split(" ", 1)[0] for g in groups}) != len(groups):
        problems.append(f"runs view: group labels {groups} do not start apart")
    settings = [seen["headers"].get(column("params", k)) for k in wanted_settings]
    problems += [f"runs view: no column for the setting {k}"
                 for k, h in zip(wanted_settings, settings, strict=True) if not h]
    return {"url": url, "headers": headers, "cells": cells, "groups": groups,
            "settings": [h for h in settings if h], "rows": rows, "problems": problems}


AXIS_CHARS = 15
"""MLflow 3's parallel-coordinates chart writes an axis label longer than this as its first and
last six characters around '...' (``objective.adaptive_margin`` reads ``object...margin``); the
runs view's columns give the whole name."""


def axis_label(name: str) -> str:
    """A setting's axis label as the parallel-coordinates chart draws it when it cuts it."""
    return name if len(name) <= AXIS_CHARS else f"{name[:6]}...{name[-6:]}"


def missing_axes(text: str, charted: Sequence[str]) -> list[str]:
    """The charted settings with no axis in the chart's ``text``. A label over AXIS_CHARS is
    cut only where the chart lacks room: a chart of one setting draws it whole, so either
    form counts."""
    return [name for name in charted if name not in text and axis_label(name) not in text]


def check_charts(browser: Chromium, url: str, charted: Sequence[str], timeout: float) -> dict:
    """(d) the saved view's chart mode opens on the table's charts: the parallel-coordinates
    chart of the charted settings against test/avg, and test/avg per run."""
    want = ["The table: settings against the test average", "Parallel Coordinates", AVG]
    browser.goto(url)
    text, _ = browser.wait_for(
        _TEXT_JS, lambda t: all(w in t for w in want) and not missing_axes(t, charted), timeout)
    text = text or ""
    problems = [f"chart view: no {w!r}" for w in want if w not in text]
    problems += [f"chart view: no axis for {name} (neither whole nor {axis_label(name)!r})"
                 for name in missing_axes(text, charted)]
    if "does not support" in text:
        problems.append("chart view: the parallel-coordinates chart refuses its data")
    return {"url": url, "charted": list(charted), "problems": problems}


def check_run_page(browser: Chromium, url: str, child: dict, timeout: float) -> dict:
    """(b) a child's page lists its test scores (metric name, then its value)."""
    def shown(text: str) -> dict[str, str]:
        lines = [x.strip() for x in text.splitlines()]
        return {m: lines[i + 1] for i, m in enumerate(lines[:-1]) if m in TEST_METRICS}

    browser.goto(url)
    text, _ = browser.wait_for(_TEXT_JS, lambda t: set(child["metrics"]) <= set(shown(t)),
                               timeout)
    seen = shown(text or "")
    problems = [f"run page: {child['name']} {m} shows {seen.get(m)!r}, stored {v}"
                for m, v in child["metrics"].items() if not _same(_number(seen.get(m)), v, 1e-6)]
    if "test/avg" not in child["metrics"]:
        problems.append(f"run page: {child['name']} has no test/avg in the store")
    return {"url": url, "run": child["run_id"], "name": child["name"], "metrics": seen,
            "problems": problems}


def check_compare(browser: Chromium, url: str, compared: Sequence[dict], timeout: float) -> dict:
    """(c) the compare view has a row per test score with each compared run's value, in order."""
    expected = [m for m in TEST_METRICS if any(m in c["metrics"] for c in compared)]
    browser.goto(url)
    # The Metrics section is there once the runs are loaded; then read it (it scrolls itself).
    browser.wait_for(_TEXT_JS, lambda t: "Metrics" in t and "Run ID:" in t
                     and all(c["run_id"] in t for c in compared), timeout)
    seen = browser.evaluate(_COMPARE_JS % json.dumps(expected)) or {}
    problems = []
    for m in expected:
        values = seen.get(m)
        if values is None:
            problems.append(f"compare view: no row {m}")
            continue
        if len(values) != len(compared):
            problems.append(f"compare view: {m} has {len(values)} values for {len(compared)} runs")
        for c, text in zip(compared, values, strict=False):
            # the compare view rounds to 4 significant digits
            if m in c["metrics"] and not _same(_number(text), c["metrics"][m], 1e-3):
                problems.append(f"compare view: {c['name']} {m} shows {text!r}, "
                                f"stored {c['metrics'][m]}")
    return {"url": url, "runs": len(compared), "metrics": seen, "problems": problems}


# --- the check ---------------------------------------------------------------------------------

def _child(run: Any) -> dict:
    tags = run.data.tags
    return {"run_id": run.info.run_id, "name": run.info.run_name or run.info.run_id,
            "cell": tags.get(CELL_TAG, ""), "seed": tags.get(SEED_TAG, ""),
            "label": tags.get(views.LABEL_TAG, ""),
            "metrics": {k: v for k, v in run.data.metrics.items() if k in TEST_METRICS}}


def check_ui(tracking_uri: str, out: Path, experiment: str = "mmemb",
             parent_id: str | None = None, timeout: float = 60) -> dict:
    """Renders (a)-(c) for one table (``parent_id``, or the latest with children); -> what was
    seen, with ``problems`` listing what is missing (empty when the UI shows everything)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    chromium = find_chromium()
    tmp = Path(tempfile.mkdtemp(prefix="mmemb-ui-"))
    if tracking_uri.startswith(("http://", "https://")):  # a running server is the UI itself
        proc, base = None, tracking_uri.rstrip("/")
    else:
        port = _free_port()
        proc = start_server(tracking_uri, port, tmp / "server.log")
        base = f"http://127.0.0.1:{port}"
    try:
        client = MlflowClient(base)  # everything read through the server the browser uses
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise ValueError(f"experiment {experiment!r} not in {tracking_uri}")
        runs = client.search_runs([exp.experiment_id], max_results=5000,
                                  order_by=["attributes.start_time DESC"])
        parents = [r for r in runs if "mmemb.kind" in r.data.tags]
        with_children = {r.data.tags.get("mlflow.parentRunId") for r in runs}
        if parent_id is None:
            parent_id = next((p.info.run_id for p in parents if p.info.run_id in with_children),
                             None)
            if parent_id is None:
                raise ValueError(f"no table with child runs in {tracking_uri}")
        children = views.order_children(
            [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id])
        if not children:
            raise ValueError(f"run {parent_id} has no child runs")
        name = client.get_run(parent_id).info.run_name or parent_id
        # The table's saved view: written here when the table has none yet.
        key, _ = views.view_tag(parent_id, "")
        view = "present" if key in exp.tags else "published by the check"
        if key not in exp.tags:
            views.publish(client, exp.experiment_id, parent_id,
                          views.view_name(name, parent_id), children=children)
        settings = views.differing_params(children)
        charted = views.chart_params(children, settings)
        here = views.links(parent_id, children, base)
        seen: dict[str, Any] = {
            "mlflow": mlflow.__version__, "experiment": exp.experiment_id,
            "parents": len(parents),
            "children_in_experiment": sum("mlflow.parentRunId" in r.data.tags for r in runs),
            "table": {"parent": parent_id, "name": name, "children": len(children)},
            "saved_view": view,
            "links": views.links(parent_id, children),  # for `mlflow ui` on its default port
        }
        kids = [_child(r) for r in children]
        browser = Chromium(chromium)
        try:
            browser.goto(f"{base}/health")  # same origin as the UI, so the same localStorage
            browser.wait_for("document.readyState", lambda s: s == "complete", timeout)
            browser.evaluate(f"localStorage.setItem('{ASSISTANT_FIRST_VISIT}', 'true')")
            seen["runs_view"] = check_runs_view(browser, here["runs"], kids, timeout, settings)
            browser.screenshot(out)
            seen["charts"] = check_charts(browser, here["charts"], charted, timeout)
            charts_png = out.with_name(f"{out.stem}-charts{out.suffix}")
            browser.screenshot(charts_png)
            seen["charts"]["screenshot"] = str(charts_png)
            first = next((c for c in kids if "test/avg" in c["metrics"]), kids[0])
            seen["run_page"] = check_run_page(
                browser, views.run_url(base, exp.experiment_id, first["run_id"]), first,
                timeout)
            seen["compare"] = check_compare(browser, here["compare"], kids, timeout)
        finally:
            browser.close()
        seen["screenshot"] = str(out) if out.exists() else None
        seen["problems"] = [p for k in ("runs_view", "run_page", "compare", "charts")
                            for p in seen[k]["problems"]]
        if seen["screenshot"] is None:
            seen["problems"].append("no screenshot")
        return seen
    finally:
        if proc is not None:
            stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)
