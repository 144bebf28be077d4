"""A table's paper-shaped report, built from MLflow alone: Markdown, CSV and PNG.

The parent run stores the table's spec (``grid.json``: cells, baseline, seeds, published numbers);
the children store per-seed test scores. :func:`build_report` joins them, runs the statistics
(``orchestrator.analysis.tables``) and writes ``report.md``, ``report.csv`` and ``report.png``
beside the store and to the parent run's artifacts. ``python -m orchestrator.report`` calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.analysis import plots, tables
from orchestrator.tracking.client import Tracker


def grid_spec(grid) -> dict[str, Any]:
    """What the report needs of a Grid, as JSON (stored on the parent run)."""
    return {
        "name": grid.name, "title": grid.title, "baseline": grid.baseline,
        "seeds": list(grid.seeds), "columns": list(grid.columns), "plot": grid.plot,
        "xlabel": grid.xlabel, "note": grid.note,
        "cells": [c.name for c in grid.cells],
        "x": {c.name: c.x for c in grid.cells if c.x is not None},
        "published": {c.name: dict(c.published) for c in grid.cells if c.published},
        "seed_offsets": {c.name: c.seed_offset for c in grid.cells if c.seed_offset},
    }


def build_report(tracker: Tracker, parent_id: str, spec: dict[str, Any], outdir: Path,
                 extra_md: str = "") -> tuple[tables.TableAnalysis, str, str | None]:
    """Analyse the parent's children and write report.md/csv/png to ``outdir``, then upload them
    to the parent run. -> (analysis, markdown, None or why the upload failed): the files on disk
    and the printed table never depend on the upload."""
    ok, failed = tracker.scores(parent_id)
    results = {c: ok.get(c, {}) for c in spec["cells"]}
    demo = bool(spec.get("demo"))
    analysis = tables.analyze(
        results, baseline=spec["baseline"], seeds=spec["seeds"], columns=spec["columns"],
        published=spec["published"] or None, title=spec["title"], directions_only=demo,
    )
    md = tables.to_markdown(analysis)
    for cell, offset in (spec.get("seed_offsets") or {}).items():
        md += (f"\n{cell} trains with seeds + {offset} (disjoint from {spec['baseline']}'s); its "
               "paired test pairs grid seed i with the baseline's seed i, an arbitrary pairing.\n")
    if failed:
        md += "\n\nFailed runs:\n" + "\n".join(
            f"- {cell} seed {seed}: {why}" for cell, seeds in failed.items()
            for seed, why in sorted(seeds.items()))
    if spec.get("note"):
        md += f"\n\nNote: {spec['note']}\n"
    if demo:
        md += ("\nDemo profile: a generated corpus and a small student, so the papers' values are "
               "not comparable and no parity is shown; the report compares only the direction of "
               "each published effect. The paper profile's report shows parity.\n")
    md += extra_md
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "report.md").write_text(md)
    (outdir / "report.csv").write_text(tables.to_csv(analysis))
    kind = spec["plot"] if spec["plot"] == "sweep" and spec["x"] else "bars"
    plots.to_png(analysis, outdir / "report.png", kind=kind,
                 x=spec["x"] if kind == "sweep" else None, xlabel=spec.get("xlabel"))
    try:
        for name in ("report.md", "report.csv", "report.png"):
            tracker.log_artifact_file(parent_id, outdir / name)
        _log_summary(tracker, parent_id, analysis, spec)
    except Exception as e:  # an unwritable artifact store must not hide the finished table
        return analysis, md, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return analysis, md, None


def _log_summary(tracker: Tracker, parent_id: str, a: tables.TableAnalysis, spec) -> None:
    """Headline numbers on the parent so the MLflow run list can sort and compare tables."""
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = []
    for cell in spec["cells"]:
        try:
            e = a.entry(cell, "avg")
        except KeyError:
            continue
        slug = "".join(ch if ch.isalnum() else "_" for ch in cell).strip("_")
        values = {"mean": e.mean, "std": e.std, "holm_p": e.holm_p}
        if e.comparison is not None:
            values.update(diff=e.comparison.diff, student_p=e.comparison.t_student_p,
                          detectable=e.comparison.detectable_student)
        for name, v in values.items():
            if isinstance(v, int | float) and v == v:
                metrics.append(Metric(f"{slug}/avg_{name}", float(v), now, 0))
    if metrics:
        tracker.client.log_batch(parent_id, metrics=metrics)


def report_dir(tracker: Tracker, name: str, parent_id: str) -> Path:
    """Beside the MLflow store: ``<store folder>/reports/<name>-<run id prefix>``."""
    uri = tracker.uri
    root = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else Path.cwd()
    return root / "reports" / f"{name}-{parent_id[:8]}"
