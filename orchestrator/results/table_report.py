"""A table's paper-shaped report, built from MLflow alone: Markdown, CSV and PNG.

The parent run stores the table's spec (``grid.json``: cells, baseline, seeds, published numbers);
the children store per-seed test scores. :func:`build_report` joins them, runs the statistics
(``orchestrator.analysis.tables``) and writes ``report.md``, ``report.csv`` and ``report.png``
beside the store and to the parent run's artifacts. ``python -m orchestrator.report`` calls it. A
table that reports SentEval's transfer tasks gets a second table (TR, the children's
``transfer/`` metrics) with the same statistics, its rows in the same CSV and its own
``report_transfer.png``; when they could not run (the demo profile without the real data), the
report says why.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

from orchestrator.analysis import plots, tables
from orchestrator.spec.grids import grid_spec, path_part  # noqa: F401  (grid_spec: its old home)
from orchestrator.tracking.client import Tracker
from orchestrator.tracking.events import report_lines
from orchestrator.tracking.uris import masked


def build_report(tracker: Tracker, parent_id: str, spec: dict[str, Any], outdir: Path,
                 extra_md: str = "", lead_md: str = ""
                 ) -> tuple[tables.TableAnalysis, str, str | None]:
    """Analyse the parent's children and write report.md/csv/png to ``outdir``, then upload them
    to the parent run; ``lead_md`` is its first line (a search's verdict). -> (analysis, markdown, None or why the upload failed): the files on disk
    and the printed table never depend on the upload."""
    ok, failed = tracker.scores(parent_id)
    cells = spec["cells"]  # the cells that ran: with --cells, a subset of the grid's
    results = {c: ok.get(c, {}) for c in cells}
    failed = {c: s for c, s in failed.items() if c in cells}
    demo = bool(spec.get("demo"))
    published = {c: v for c, v in (spec.get("published") or {}).items() if c in cells}
    sts_pub, tr_pub = _split_published(published)
    offsets = {c: o for c, o in (spec.get("seed_offsets") or {}).items() if c in cells}
    # Every cell on the baseline's seeds: a seed fixes data order and initialisation in both,
    # so the summary lines (Holm, the published direction's "significant here") use the paired
    # test; the '*' stays the papers' unpaired Student test.
    holm_on = "student" if offsets else "paired"
    analysis = tables.analyze(
        results, baseline=spec["baseline"], seeds=spec["seeds"], columns=spec["columns"],
        published=sts_pub or None, title=spec["title"], directions_only=demo, holm_on=holm_on,
    )
    md = tables.to_markdown(analysis)
    transfer = None
    if spec.get("transfer"):
        transfer, tr_md = _transfer_section(results, spec, tr_pub, demo, holm_on)
        md += tr_md
    for cell, offset in offsets.items():
        md += (f"\n{cell} trains with seeds + {offset} (disjoint from {spec['baseline']}'s); its "
               "paired test pairs grid seed i with the baseline's seed i, an arbitrary pairing.\n")
    if failed:
        md += "\n\nFailed runs:\n" + "\n".join(
            f"- {cell} seed {seed}: {why}" for cell, seeds in failed.items()
            for seed, why in sorted(seeds.items()))
    notes = report_lines(c for c in tracker.children(parent_id)
                         if c.data.tags.get("mmemb.cell") in cells)
    if notes:  # the members' events, from their MLflow tags (tracking/events.py)
        md += ("\n\nRun notes (what changed what a run is; its MLflow run carries the tag "
               "mmemb.event.<kind>):\n" + "\n".join(notes) + "\n")
    md += _stores_line({c: s for c, s in (spec.get("stores") or {}).items() if c in cells})
    if spec.get("note"):
        md += f"\n\nNote: {spec['note']}\n"
    if spec.get("warnings"):  # what the pre-start checks allowed but said (preflight)
        md += "\n\nNotes from the checks before the start:\n" + "".join(
            f"- {w}\n" for w in spec["warnings"])
    if demo:
        md += ("\nDemo profile: a generated corpus and a small student, so the papers' values are "
               "not comparable and no parity is shown; the report compares only the direction of "
               "each published effect. The paper profile's report shows parity.\n")
    md += extra_md
    if lead_md:
        md = f"{lead_md}\n\n{md}"
    csv = tables.to_csv(analysis)
    if transfer is not None:  # the TR rows below the STS rows, one header
        csv += tables.to_csv(transfer).split("\n", 1)[1]
    x = {c: v for c, v in (spec.get("x") or {}).items() if c in cells}
    kind = spec["plot"] if spec["plot"] == "sweep" and x else "bars"
    writers = {"report.md": lambda f: f.write_text(md), "report.csv": lambda f: f.write_text(csv),
               "report.png": lambda f: plots.to_png(analysis, f, kind=kind,
                                                    x=x if kind == "sweep" else None,
                                                    xlabel=spec.get("xlabel"))}
    if transfer is not None:
        writers["report_transfer.png"] = lambda f: plots.to_png(
            transfer, f, kind=kind, x=x if kind == "sweep" else None, xlabel=spec.get("xlabel"),
            metric="transfer/avg")
    write_all(outdir, writers, f"python -m orchestrator.report --run {parent_id} "
                               f"--tracking-uri {masked(tracker.uri)} --out DIR")
    files = list(writers)
    try:
        for name in files:
            tracker.log_artifact_file(parent_id, outdir / name)
        _log_summary(tracker, parent_id, analysis, spec)
        if transfer is not None:
            _log_summary(tracker, parent_id, transfer, spec, metric="transfer/avg", name="tr_avg")
    except Exception as e:  # an unwritable artifact store must not hide the finished table
        return analysis, md, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    # Stored now: an earlier failure to store it (a read-only artifact folder, since fixed) no
    # longer holds, and the parent must not go on saying it does.
    tracker.clear_tag(parent_id, "mmemb.report_error")
    return analysis, md, None


def write_all(outdir: Path, writers: dict[str, Any], elsewhere: str) -> None:
    """Each file written under a temporary name beside its place, then all moved into place: a
    disk that fills half-way leaves the report that was there (or none), never half of one, and
    one line naming the folder and what to do (``elsewhere``: the command that writes it to
    another folder)."""
    done: list[tuple[Path, Path]] = []
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        for name, write in writers.items():
            done.append((outdir / f".partial-{name}", outdir / name))
            write(done[-1][0])
        for tmp, final in done:
            os.replace(tmp, final)
    except OSError as e:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        full = e.errno == errno.ENOSPC or "No space left" in str(e)
        fix = ("free space there (the table's runs are safe in MLflow)" if full else
               "make it writable")
        raise ValueError(f"cannot write the report in {outdir}: {e.strerror or e}; nothing was "
                         f"written there. {fix[0].upper()}{fix[1:]}, or write the report to another "
                         f"folder: {elsewhere}") from None


def _split_published(published: dict[str, dict[str, float]]) -> tuple[dict, dict]:
    """cell -> metric -> value, split into the STS table's and the TR table's numbers."""
    sts, tr = {}, {}
    for cell, row in published.items():
        for m, v in row.items():
            (tr if m.startswith(tables.TRANSFER_PREFIX) else sts).setdefault(cell, {})[m] = v
    return sts, tr


def _transfer_section(results, spec: dict[str, Any], published: dict, demo: bool,
                      holm_on: str = "student") -> tuple[tables.TableAnalysis | None, str]:
    """The TR table (SentEval's transfer tasks) with the STS table's statistics, or why there is
    none (the demo profile without the real data)."""
    from orchestrator.spec.grids import TRANSFER_COLUMNS

    head = "\n## Transfer tasks (TR)\n\n"
    mode = spec.get("transfer_mode")
    if not mode:
        why = spec.get("transfer_note") or "not evaluated"
        return None, head + f"Transfer tasks {why}.\n"
    a = tables.analyze(
        results, baseline=spec["baseline"], seeds=spec["seeds"], columns=TRANSFER_COLUMNS,
        published=published or None, title=f"{spec['title']}: transfer tasks (TR)",
        directions_only=demo, holm_on=holm_on,
    )
    protocol = ("SimCSE's evaluation.py --mode test: 10-fold, Adam, batch 64, the papers' protocol"
                if mode == "full" else "SimCSE's --mode fasttest: 5-fold, RMSprop, batch 128")
    text = (f"{head}SentEval's seven transfer tasks, {mode} mode ({protocol}): test accuracy x 100 "
            "of a logistic-regression probe on each run's frozen embeddings "
            "(trainables.evaluation.transfer); TR Avg is their mean.\n\n" + tables.to_markdown(a))
    return a, text


def _log_summary(tracker: Tracker, parent_id: str, a: tables.TableAnalysis, spec,
                 metric: str = "avg", name: str = "avg") -> None:
    """Headline numbers on the parent so the MLflow run list can sort and compare tables."""
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = []
    for cell in spec["cells"]:
        try:
            e = a.entry(cell, metric)
        except KeyError:
            continue
        slug = "".join(ch if ch.isalnum() else "_" for ch in cell).strip("_")
        values = {"mean": e.mean, "std": e.std, "holm_p": e.holm_p}
        if e.comparison is not None:
            values.update(diff=e.comparison.diff, student_p=e.comparison.t_student_p,
                          paired_p=e.comparison.paired_p,
                          detectable=e.comparison.detectable_student)
        for stat, v in values.items():
            if isinstance(v, int | float) and v == v:
                metrics.append(Metric(f"{slug}/{name}_{stat}", float(v), now, 0))
    if metrics:
        tracker.client.log_batch(parent_id, metrics=metrics)


def report_dir(tracker: Tracker, name: str, parent_id: str) -> Path:
    """Beside the MLflow store: ``<store folder>/reports/<name>-<run id prefix>``, the name
    reduced to one safe path component (``orchestrator.spec.grids.path_part``)."""
    uri = tracker.uri
    root = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else Path.cwd()
    return root / "reports" / path_part(f"{name}-{parent_id[:8]}")


def _stores_line(stores: dict[str, str | None]) -> str:
    """Which caption-image store each cell trained on: one for all (a controlled comparison), or
    each method family its own official one (the paper profile's default)."""
    if not stores:
        return ""
    names = {c: (Path(s).name if s and s != "generated demo corpus" else s or "none (text only)")
             for c, s in stores.items()}
    if len(set(names.values())) == 1:
        return (f"\n\nData: every cell trained on one caption-image store, {next(iter(names.values()))} "
                "(a controlled comparison).\n")
    return "\n\nData: each cell on its method's store: " + "; ".join(
        f"{c}: {s}" for c, s in names.items()) + ".\n"
