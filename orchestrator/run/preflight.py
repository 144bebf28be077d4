"""What is checked before Ray starts and before any MLflow run (or ``mlflow.db``) exists.

``check_campaign`` is the one pre-start validation of a table or a search, and the list of what
``--dry-run`` prints as checked: the seeds, every member's config (encoder and teachers found),
the tracking URI, the storage folder, the resources against this machine (without
``--address``), and the data every member trains on, opened once per distinct source: store
values (NaN/inf, empty captions, page checksums), feature dimensions against the objective, the
threshold filter on a sample of negatives, and every SentEval file the evaluation reads. Each
refusal is one line naming the file or option, the problem and the fix.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.run.options import Options
from orchestrator.run.resources import Resources, local_resources
from orchestrator.spec.plan import RunPlan

DEMO_REPLACES = ("encoder", "data.text", "data.pairs", "data.senteval")
"""what the demo profile supplies itself: a cell that names its own refuses the demo"""


def check_demo_fit(grid, cells: Sequence[str] | None) -> None:
    """On the demo profile, refuse at once the cells that need data or an encoder of their own
    (wiki+coco, RoBERTa rows) instead of running them silently on the demo world."""
    own = [c.name for c in grid.cells if (cells is None or c.name in cells or c.name == grid.baseline)
           and any(k in {**grid.base, **c.overrides} for k in DEMO_REPLACES)]
    if own:
        keys = sorted({k for c in grid.cells if c.name in own
                       for k in {**grid.base, **c.overrides} if k in DEMO_REPLACES})
        which = "every cell" if len(own) == len(grid.cells) else f"cell(s) {own}"
        raise ValueError(
            f"grid {grid.name!r}: {which} need their own {', '.join(keys)} "
            f"({grid.note or 'see the grid file'}), which the demo profile replaces with its "
            "generated world; run them with --profile paper (or a YAML profile), or leave them "
            "out with --cells")


@dataclass(frozen=True)
class DataCheck:
    array_keys: dict[str, str]
    """member key -> array key (who may share an array)"""
    total_steps: dict[str, int]
    """member key -> optimiser steps of its run"""
    checked: tuple[str, ...] = ()
    """what was checked, one line each (``--dry-run`` prints them)"""
    warnings: tuple[str, ...] = field(default=())
    """what is allowed but should be said up front (printed as ``warning:`` lines)"""


def check_storage(storage: str) -> str:
    """A local ``--storage`` folder can be created and written (URIs are the cluster's business)."""
    if "://" in storage:
        return f"storage {storage} (remote: checked by Ray when the first checkpoint is written)"
    path = Path(storage).absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"--storage {storage}: {probe} is not a writable folder; point --storage "
                         "at a folder you can write (shared by all nodes on a cluster)")
    return f"storage {path}: writable"


def check_models(members: Sequence[RunPlan]) -> str:
    """Every encoder and text teacher a member loads is a model folder or a cached hub name."""
    from trainables.model import _loadable_source
    from trainables.profiles import resolve_encoder

    names: dict[str, tuple[str, str]] = {}
    for m in members:
        names.setdefault(m.run.encoder, (f"cell {m.cell!r}: encoder", m.run.data.cache_dir))
        if m.run.objective.method == "dalr":
            for t in m.run.text_teachers:
                names.setdefault(t, (f"cell {m.cell!r}: text teacher", m.run.data.cache_dir))
    for name, (what, cache) in names.items():
        try:
            _loadable_source(resolve_encoder(name, cache))
        except (OSError, ValueError) as e:
            raise ValueError(f"{what} {e}") from None
    return f"models: {len(names)} encoder/teacher folder(s) found"


def check_resources(opts: Options) -> str:
    """Without ``--address`` nothing can join the embedded Ray: what does not fit is refused."""
    if opts.address:
        return "resources: checked against the cluster once joined (--address)"
    here = local_resources()
    res = Resources(opts.cpus_per_trial, opts.gpus_per_trial or 0.0, opts.max_concurrent)
    res.check_fits(here, "this machine")
    return (f"resources: {res.cpus_per_trial:g} CPU + {res.gpus_per_trial:g} GPU per array fit "
            f"this machine ({here['CPU']:g} CPUs, {here['GPU']:g} GPUs)")


def check_data(members: Sequence[RunPlan]) -> DataCheck:
    """Open every distinct data source once and check each member's features against its
    objective, before Ray starts. A refusal names the cells it hits and the ``--cells`` that run."""
    opened: dict = {}
    checked: set = set()
    keys: dict[str, str] = {}
    steps: dict[str, int] = {}
    lines: list[str] = []
    warnings: list[str] = []
    senteval: set[str] = set()
    failed: dict[str, list[str]] = {}  # message -> cells
    for m in members:
        try:
            _check_member(m, opened, checked, keys, steps, lines, warnings, senteval)
        except (ValueError, FileNotFoundError, OSError) as e:
            cells = failed.setdefault(str(e), [])
            if m.cell not in cells:
                cells.append(m.cell)
    if failed:
        msg, cells = next(iter(failed.items()))
        ok = sorted({m.cell for m in members} - {c for cs in failed.values() for c in cs})
        hint = f"; the other cells run: --cells {' '.join(repr(c) for c in ok)}" if ok else ""
        raise ValueError(f"cell(s) {cells}: {msg}{hint}")
    return DataCheck(keys, steps, tuple(lines), tuple(warnings))


def _check_member(m: RunPlan, opened: dict, checked: set, keys: dict, steps: dict,
                  lines: list[str], warnings: list[str], senteval: set[str]) -> None:
    from trainables.arrays.members import array_key
    from trainables.data import check_dims, load_data, threshold_sample
    from trainables.evaluation import check_senteval
    from trainables.schedule import count_steps

    cfg = m.run
    dkey = json.dumps([cfg.to_dict()["data"], cfg.objective.method == "simcse"], sort_keys=True)
    if dkey not in opened:
        opened[dkey] = data = load_data(cfg)
        if data.pairs is not None:
            s = data.pairs
            dims = ", ".join(f"{c} {s.dim(c)}-d" for c in s.feature_columns)
            crc = "page checksums verified" if s.metadata.page_checksums else "no page checksums"
            lines.append(f"store {s.path}: {len(s)} rows, {dims}, values finite, captions "
                         f"non-empty, {crc}")
            if not s.metadata.page_checksums and not cfg.data.demo:
                warnings.append(f"{s.path} was written without page checksums, so a corrupt "
                                "page would go unnoticed; re-convert it (python -m "
                                "trainables.convert) to add them")
        if str(data.senteval_dir) not in senteval:
            senteval.add(str(data.senteval_dir))
            lines.append(check_senteval(data.senteval_dir))
    data = opened[dkey]
    ckey = json.dumps([dkey, cfg.encoder, cfg.to_dict()["objective"]], sort_keys=True)
    if ckey not in checked:
        checked.add(ckey)
        check_dims(cfg, data)
        sample = threshold_sample(cfg, data)
        if sample is not None:
            o = cfg.objective
            lines.append(f"cell {m.cell!r}: threshold {o.threshold:g} ({o.threshold_on}) masks "
                         f"{sample.masked:.1%} of {sample.n_pairs} sampled negatives (mean "
                         f"norms clip_text {sample.text_norm:.3g}, image {sample.image_norm:.3g})")
    counts = count_steps(data.n_text, data.n_pair, cfg.batch_size, cfg.epochs, cfg.schedule)
    steps[m.key] = int(min(counts.total_steps, cfg.max_steps or math.inf))
    keys[m.key] = array_key(cfg, steps[m.key])


def check_campaign(members: Sequence[RunPlan], opts: Options,
                   checked: Sequence[str] = ()) -> DataCheck:
    """Everything a table or search needs, before Ray or MLflow: refuses in one line, prints the
    warnings up front, returns what was checked. ``checked``: what the caller has already checked
    (a table's seeds, before its members could be built), listed first."""
    from orchestrator.tracking.client import check_tracking_uri, default_tracking_uri

    lines = list(checked)
    cells = sorted({m.cell for m in members})
    lines.append(f"run configs: {len(members)} built and valid ({len(cells)} cells or configurations)")
    uri = opts.tracking_uri or default_tracking_uri()
    check_tracking_uri(uri, "--tracking-uri" if opts.tracking_uri else "the default tracking store")
    lines.append(f"tracking {uri}: scheme known, store reachable or creatable")
    lines.append(check_storage(opts.storage))
    lines.append(check_resources(opts))
    lines.append(check_models(members))
    data = check_data(members)
    for w in data.warnings:
        print(f"warning: {w}", file=sys.stderr, flush=True)
    return DataCheck(data.array_keys, data.total_steps, (*lines, *data.checked), data.warnings)
