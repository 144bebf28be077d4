"""What is checked before Ray starts and before any MLflow run (or ``mlflow.db``) exists.

``check_campaign`` is the one pre-start validation of a table or a search, and the list of what
``--dry-run`` prints as checked: the seeds, every member's config (encoder and teachers found,
the encoder stacked or looped), the tracking URI, the storage folder, the resources against this
machine (without ``--address``), and the data every member trains on, opened once per distinct
source: store values (NaN/inf, empty captions, page checksums), feature dimensions against the
objective, each method's heads and loss once at the run's sizes (and whether they run batched,
or one by one: a warning that the console and the report repeat), the threshold filter on a
sample of negatives, and every SentEval file the evaluation reads (the
transfer tasks' too, when the runs evaluate them). Each refusal is one line naming the file or option, the problem and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        which = ("every cell needs its" if len(own) == len(grid.cells)
                 else f"cell(s) {own} need their")
        rest = [c.name for c in grid.cells if c.name not in own]
        leave = ("" if grid.baseline in own or not rest else  # --cells cannot leave the baseline
                 f", or leave them out: --cells {' '.join(repr(c) if ' ' in c else c for c in rest if c != grid.baseline)}")
        raise ValueError(
            f"grid {grid.name!r}: {which} own {', '.join(keys)} "
            f"({grid.note or 'see the grid file'}), which the demo profile replaces with its "
            f"generated world; run it on the real data: python -m orchestrator.ablate --grid "
            f"{grid.name} --profile paper --dry-run (or a YAML profile){leave}")


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
    not_here: str | None = None
    """a dry run's resource refusal: the plan does not fit this machine (it is still listed and
    priced, then the dry run exits non-zero with this line)"""
    runs: dict[str, str] = field(default_factory=dict)
    """member key -> its run's length and data in words (``--dry-run --explain``)"""
    one_by_one: dict[str, str] = field(default_factory=dict)
    """method -> why vmap cannot run its heads and loss (its members train one by one); the
    methods that run batched are absent"""


def check_storage(storage: str) -> str:
    """A local ``--storage`` folder can be created and written (URIs are the cluster's business)."""
    if "://" in storage:
        return f"storage {storage} (remote: checked by Ray when the first checkpoint is written)"
    from trainables.runtime.command_line import writable_folder

    path = writable_folder(storage, "--storage", " (shared by all nodes on a cluster)")
    return f"storage {path}: writable"


def check_models(members: Sequence[RunPlan]) -> str:
    """Every encoder and text teacher a member loads is a cached hub name or a model folder with
    its weights (and the fetch's recorded sizes, where it wrote the folder)."""
    from trainables.models.pretrained import resolve_encoder
    from trainables.models.student import loadable_source

    names: dict[str, tuple[str, str]] = {}
    for m in members:
        names.setdefault(m.run.encoder, (f"cell {m.cell!r}: encoder", m.run.data.cache_dir))
        if m.run.needs.text_teachers:
            for t in m.run.text_teachers:
                names.setdefault(t, (f"cell {m.cell!r}: text teacher", m.run.data.cache_dir))
    for name, (what, cache) in names.items():
        try:
            source = loadable_source(resolve_encoder(name, cache))
        except (OSError, ValueError) as e:
            raise ValueError(f"{what} {e}") from None
        if Path(source).is_dir():  # a config alone loads; the run would fail on the weights
            from trainables.fetch.folders import incomplete

            why = incomplete(Path(source))
            if why:
                raise ValueError(f"{what} {why}")
    return f"models: {len(names)} encoder/teacher folder(s) found"


def check_fetched(members: Sequence[RunPlan]) -> None:
    """Before the per-file checks: when what the members read under ``$MMEMB_DATA`` (the paper
    profile's layout) is missing, or a student the fetch brings is not cached, one line naming
    ``$MMEMB_DATA``, what is missing and ``python -m trainables.fetch paper``."""
    from trainables.fetch import PAPER, data_root, hub_cache

    root = data_root()
    missing: dict[str, None] = {}
    encoders: dict[str, None] = {}
    fetchable = {i.cache_name: i.name for i in PAPER if i.cache_name}
    for m in members:
        cfg = m.run
        if cfg.data.demo:
            continue
        paths = [cfg.data.text, cfg.data.senteval]
        paths += [cfg.data.pairs] if cfg.needs.captions else []
        paths += list(cfg.text_teachers) if cfg.needs.text_teachers else []
        for p in filter(None, paths):
            path = Path(p).expanduser().resolve()
            if path.is_relative_to(root) and not path.exists():
                missing[path.relative_to(root).as_posix()] = None
        if cfg.encoder in fetchable and not Path(cfg.encoder).exists():  # a local folder wins
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(cfg.encoder, "config.json",
                                                     cache_dir=str(hub_cache())), str):
                encoders[f"the encoder {cfg.encoder} (Hugging Face cache) (python -m "
                         f"trainables.fetch paper --only {fetchable[cfg.encoder]})"] = None
    from trainables.models.student import _hub_offline

    if missing or _hub_offline():  # online, a lone uncached encoder is downloaded on first use
        missing.update(encoders)
    if missing:
        from trainables.fetch.catalog import how_to_make

        made = [f"{m} ({how_to_make(m)})" if how_to_make(m) else m for m in missing]
        raise ValueError(f"$MMEMB_DATA={root} lacks what these runs read: run python -m "
                         "trainables.fetch paper (it downloads what it can and says how to bring "
                         "the rest), or set MMEMB_DATA to the folder holding them; missing: "
                         f"{'; '.join(made)}")


def check_encoders(members: Sequence[RunPlan]) -> list[str]:
    """Every student encoder is a bidirectional text encoder; which arrays stack and which loop.

    One line per distinct encoder: stacked (BERT, RoBERTa), or the looped fallback's note (any
    other encoder, ``trainables.arrays.looped``). Its members never share an array with stacked
    ones: the array key holds the encoder (``trainables.arrays.members.array_key``).
    """
    from transformers import AutoConfig

    from trainables.arrays.looped import backend_note
    from trainables.models.pretrained import resolve_encoder
    from trainables.models.student import check_encoder_only

    lines, seen = [], set()
    for m in members:
        name = m.run.encoder
        if name in seen:
            continue
        seen.add(name)
        cfg = AutoConfig.from_pretrained(resolve_encoder(name, m.run.data.cache_dir))
        try:
            check_encoder_only(cfg, name)
        except ValueError as e:
            raise ValueError(f"cell {m.cell!r}: {e}") from None
        note = backend_note(name, m.run.data.cache_dir)
        lines.append(f"encoder {name}: {note}" if note else
                     f"encoder {name}: {cfg.model_type}, trained as stacked arrays")
    return lines


def check_methods(members: Sequence[RunPlan]) -> str:
    """Which methods the runs use, and where Ray workers load those not shipped with mmemb."""
    from trainables.objectives.methods import sources

    used = sorted({m.run.objective.method for m in members})
    own = sources(used)
    where = "; ".join(f"{n} from {file or module}" for n, (module, file) in sorted(own.items()))
    return f"methods: {', '.join(used)}" + (f" ({where}, loaded by every worker)" if own else "")


def array_resources(opts: Options, members: Sequence[RunPlan],
                    gpus: float | None = None) -> tuple[Resources, str]:
    """What the largest array asks for: ``num_workers`` Train workers of --cpus-per-trial CPUs
    and --gpus-per-trial GPUs each (``gpus`` once the cluster has decided the default); and which
    cells set that worker count ("cell 'X': ", for the refusal)."""
    workers = max((m.run.num_workers for m in members), default=1)
    cells = sorted({m.cell for m in members if m.run.num_workers == workers})
    who = "" if workers == 1 else (
        f"cell(s) {cells}: " if len(cells) < len({m.cell for m in members}) else "")
    g = opts.gpus_per_trial if gpus is None else gpus
    return Resources(opts.cpus_per_trial, g or 0.0, opts.max_concurrent, workers), who


def check_resources(opts: Options, members: Sequence[RunPlan] = ()) -> str:
    """Without ``--address`` nothing can join the embedded Ray: what does not fit is refused,
    each array's workers counted as Ray places them (``Resources.fits``)."""
    if opts.address:
        return "resources: checked against the cluster once joined (--address)"
    here = local_resources()
    res, who = array_resources(opts, members)
    res.check_fits(here, "this machine", who)
    per = f"{res.cpus_per_trial:g} CPU + {res.gpus_per_trial:g} GPU per worker"
    return (f"resources: {res.workers} worker(s) x {per} per array fit this machine "
            f"({here['CPU']:g} CPUs, {here['GPU']:g} GPUs)")


def check_data(members: Sequence[RunPlan], baseline: str | None = None,
               varying: Sequence[str] = ()) -> DataCheck:
    """Open every distinct data source once and check each member's features against its
    objective, before Ray starts. A refusal names the cells it hits and the ``--cells`` that run,
    unless it hits the ``baseline`` (which every ``--cells`` keeps): then where the refused
    setting comes from, to change it there."""
    opened: dict = {}
    checked: set = set()
    keys: dict[str, str] = {}
    steps: dict[str, int] = {}
    runs: dict[str, str] = {}
    lines: list[str] = []
    warnings: list[str] = []
    senteval: set[str] = set()
    failed: dict[str, list[str]] = {}  # message -> cells
    verdicts: dict[str, Any] = {}
    differing = differing_settings(members, varying)
    for m in members:
        try:
            _check_member(m, opened, checked, keys, steps, lines, warnings, senteval, runs,
                          verdicts, differing)
        except (ValueError, FileNotFoundError, OSError) as e:
            cells = failed.setdefault(str(e), [])
            if m.cell not in cells:
                cells.append(m.cell)
    if failed:
        msg, cells = next(iter(failed.items()))
        ok = sorted({m.cell for m in members} - {c for cs in failed.values() for c in cs})
        hint = f"; the other cells run: --cells {' '.join(repr(c) for c in ok)}" if ok else ""
        if baseline in cells:
            hint = _baseline_hint(members, baseline, msg)
        raise ValueError(f"cell(s) {cells}: {msg}{hint}")
    looped = {n: v.reason for n, v in verdicts.items() if not v.batched}
    warnings += [v.line() for v in verdicts.values() if not v.batched]
    ignored = ignored_line(members)
    if ignored:
        warnings.append(ignored)
    return DataCheck(keys, steps, tuple(lines), tuple(warnings), runs=runs, one_by_one=looped)


def differing_settings(members: Sequence[RunPlan], varying: Sequence[str] = ()) -> dict[str, set[str]]:
    """Per method, its settings on which these members differ (and those a search varies,
    ``varying``: 'objective.<name>'): what reaches its loss as a tensor with a member axis when
    they share an array (``trainables.arrays.batched.member_settings``)."""
    values: dict[str, dict[str, set]] = {}
    for m in members:
        s = m.run.objective
        for f in dataclasses.fields(s):
            values.setdefault(s.method, {}).setdefault(f.name, set()).add(repr(getattr(s, f.name)))
    searched = {k.removeprefix("objective.") for k in varying if k.startswith("objective.")}
    return {method: {k for k, v in fields.items() if len(v) > 1} | searched
            for method, fields in values.items()}


def ignored_line(members: Sequence[RunPlan]) -> str | None:
    """One warning for every setting a run was given that its method does not read (the runs
    train without it; MLflow tags them ``mmemb.event.ignored``)."""
    from orchestrator.tracking.events import ignored_settings

    found: dict[tuple[str, str, str], list[str]] = {}
    for m in members:
        for key, layer in ignored_settings(m).items():
            cells = found.setdefault((key, layer, m.run.objective.method), [])
            if m.cell not in cells:
                cells.append(m.cell)
    if not found:
        return None
    return "settings not read by the method they were given to (the runs train without them; " \
        "tagged mmemb.event.ignored): " + "; ".join(
            f"{k} (from {layer}) by method {method} in cell(s) {', '.join(map(repr, cells))}"
            for (k, layer, method), cells in found.items())


def _baseline_hint(members: Sequence[RunPlan], baseline: str, msg: str) -> str:
    """A refusal of the baseline cannot be avoided with --cells: name where its refused setting
    comes from (a profile, the grid), so the fix is made there."""
    import re

    first = next(m for m in members if m.cell == baseline)
    named = [k for k in re.findall(r"\b([a-z_]+\.[a-z_]+)=", msg) if k in first.origins]
    where = "; ".join(f"{k} comes from {first.origins[k]}" for k in dict.fromkeys(named))
    return (f"; {baseline} is the baseline, which runs with any --cells, so change the setting "
            f"where it is set" + (f" ({where}; a profile's setting can be removed there, each "
                                   "cell then keeping its own)" if where else ""))


def _check_member(m: RunPlan, opened: dict, checked: set, keys: dict, steps: dict,
                  lines: list[str], warnings: list[str], senteval: set[str], runs: dict,
                  verdicts: dict, differing: dict[str, set[str]]) -> None:
    from trainables.arrays.members import array_key
    from trainables.data.batches import check_batch_fits, check_dims, load_data, threshold_sample
    from trainables.data.schedule import count_steps, run_length
    from trainables.evaluation.sts import check_senteval
    from trainables.evaluation.transfer import check_transfer_files
    from trainables.objectives.methods import method_of

    cfg = m.run
    dkey = json.dumps([cfg.to_dict()["data"], cfg.needs.captions], sort_keys=True)
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
    data = opened[dkey]
    check_batch_fits(cfg, data)  # per member: batch_size is not in the keys checked once
    if str(data.senteval_dir) not in senteval:  # marked done once passed, so that a refusal
        lines.append(check_senteval(data.senteval_dir))  # names every cell it hits
        senteval.add(str(data.senteval_dir))
    if cfg.transfer is not None and data.transfer_dir is not None:
        tkey = f"transfer {cfg.transfer} {data.transfer_dir}"
        if tkey not in senteval:  # every TR file the final evaluation reads, parsed once
            lines.extend(check_transfer_files(data.transfer_dir, mode=cfg.transfer))
            senteval.add(tkey)
    ckey = json.dumps([dkey, cfg.encoder, cfg.to_dict()["objective"]], sort_keys=True)
    if ckey not in checked:
        checked.add(ckey)
        check_dims(cfg, data)
        try_method_once(cfg, data, lines)
        if cfg.objective.method not in verdicts:  # measured once per method
            v = verdicts[cfg.objective.method] = try_batched_once(
                cfg, data, differing.get(cfg.objective.method, set()))
            lines.append(v.line() if v.batched else
                         f"method {v.method}: one by one (the warning above says why and what "
                         "it costs)")
        sample = threshold_sample(cfg, data)
        if sample is not None:
            f = method_of(cfg.objective).negative_filter(cfg.objective)
            lines.append(f"cell {m.cell!r}: threshold {f.threshold:g} ({f.on}) masks "
                         f"{sample.masked:.1%} of {sample.n_pairs} sampled negatives (mean "
                         f"norms clip_text {sample.text_norm:.3g}, image {sample.image_norm:.3g})")
            if sample.most:  # allowed (up to feature_stats.NEARLY_ALL), but said up front
                warnings.append(
                    f"cell {m.cell!r}: objective.threshold={f.threshold:g} ({f.on}) "
                    f"masks {sample.masked:.0%} of {sample.n_pairs} sampled negatives of "
                    f"{data.pairs.path}, so {m.run.objective.method}'s grounding terms learn from only the "
                    f"{1 - sample.masked:.0%} left of each batch's negatives; to mask fewer, set a threshold above "
                    f"{sample.median:.3g} (the median score), objective.threshold_on=cosine or "
                    "objective.threshold=None")
    counts = count_steps(data.n_text, data.n_pair, cfg.batch_size, cfg.epochs, cfg.schedule)
    steps[m.key], epochs = run_length(counts, cfg.max_steps)
    store = "generated demo corpus" if cfg.data.demo else (cfg.data.pairs or "no pairs (text only)")
    runs[m.key] = (f"{steps[m.key]} steps = {epochs} epoch(s) of {counts.steps_per_epoch} "
                   f"({counts.text_batches} text + {counts.pair_batches} pair batches, a pair batch "
                   f"every {counts.paired_sample_step or '-'} steps), lr decaying to 0 over them; "
                   f"optimizer {cfg.optimizer}, precision {cfg.precision}; pairs {store}")
    keys[m.key] = array_key(cfg, steps[m.key])


def _hidden(name: str, cache: str, teacher: bool = False) -> int:
    """An encoder's hidden size; a text teacher's embedding size (a CLIP text teacher's is its
    projection, ``trainables.models.teachers.TextTeacher.dim``)."""
    from transformers import AutoConfig

    from trainables.models.pretrained import resolve_encoder
    from trainables.models.teachers import CLIP_TYPES

    cfg = AutoConfig.from_pretrained(resolve_encoder(name, cache))
    if teacher and cfg.model_type in CLIP_TYPES:
        return int(cfg.projection_dim)
    return int(cfg.hidden_size)


def try_method_once(cfg, data, lines: list[str]) -> None:
    """One forward and backward of the member's method (heads and loss terms) on a tiny batch
    at its real sizes (``trainables.arrays.method_check``): a plug-in's shape or dtype error is
    refused here, naming the method, its heads and the sizes, before anything trains."""
    from trainables.arrays.method_check import try_method

    hidden = _hidden(cfg.encoder, cfg.data.cache_dir)
    teachers = [_hidden(t, cfg.data.cache_dir, teacher=True) for t in cfg.text_teachers] \
        if cfg.needs.text_teachers else []
    try_method(cfg, hidden, data.image_dim if data.pairs is not None else None,
               data.clip_text_dim, teachers)
    line = f"method {cfg.objective.method}: one step of its heads and loss at hidden {hidden} builds"
    if line not in lines:
        lines.append(line)


def run_notes(members: Sequence[RunPlan], steps: dict[str, int], opts: Options) -> list[str]:
    """What the runs will do that their settings do not say, and the user must know (the run
    goes on): a dev evaluation interval longer than the run (the only evaluation is the last
    step's, so the "best" checkpoint is the last one), ``use_gpu`` where no GPU will be given."""
    notes = []
    late: dict[tuple[int, int], list[str]] = {}
    for m in members:
        n = steps.get(m.key)
        if n is not None and m.run.eval_every > n and m.cell not in late.get((n, m.run.eval_every), []):
            late.setdefault((n, m.run.eval_every), []).append(m.cell)
    for (n, every), cells in late.items():
        notes.append(f"cell(s) {cells}: eval_every={every} but each run is {n} steps, so no STS-B "
                     "dev evaluation falls inside the run: the only one is at its last step, which "
                     f"is then its best checkpoint; set eval_every={max(1, n // 2)} or lower to "
                     "choose among checkpoints")
    wants = list(dict.fromkeys(m.cell for m in members if m.run.use_gpu))
    if wants:
        gpus = opts.gpus_per_trial
        if gpus is None and not opts.address:  # the embedded Ray gives what this machine has
            gpus = 1.0 if local_resources()["GPU"] > 0 else 0.0
        if gpus == 0:
            why = ("--gpus-per-trial 0 gives their workers none" if opts.gpus_per_trial == 0
                   else "this machine has no GPU")
            notes.append(f"cell(s) {wants}: use_gpu=true, but {why}, so they train on the CPU; "
                         "to use a GPU, run them where one is (--address of a GPU cluster)")
    return notes


_VERDICTS: dict[tuple, Any] = {}
"""what ``try_batched_once`` found, by method and sizes: a search's rounds check their new
members with ``check_data`` again, and the verdict is measured once"""


def try_batched_once(cfg, data, differing: set[str]):
    """The method's heads and loss under the array's vmap, at the run's sizes
    (``trainables.arrays.method_check.try_batched``): batched, or one by one and why."""
    from trainables.arrays.method_check import try_batched

    hidden = _hidden(cfg.encoder, cfg.data.cache_dir)
    teachers = [_hidden(t, cfg.data.cache_dir, teacher=True) for t in cfg.text_teachers] \
        if cfg.needs.text_teachers else []
    image = data.image_dim if data.pairs is not None else None
    key = (cfg.objective.method, hidden, cfg.proj_dim, image, data.clip_text_dim, tuple(teachers),
           tuple(sorted(differing)))
    if key not in _VERDICTS:
        _VERDICTS[key] = try_batched(cfg, hidden, image, data.clip_text_dim, teachers, differing)
    return _VERDICTS[key]


def check_campaign(members: Sequence[RunPlan], opts: Options,
                   checked: Sequence[str] = (), dry_run: bool = False,
                   baseline: str | None = None, varying: Sequence[str] = ()) -> DataCheck:
    """Everything a table or search needs, before Ray or MLflow: refuses in one line, prints the
    warnings up front, returns what was checked. ``checked``: what the caller has already checked
    (a table's seeds, before its members could be built), listed first. ``dry_run``: a plan too
    big for this machine is not refused here but returned as ``not_here``, so that a laptop can
    list and price a GPU plan."""
    from orchestrator.tracking.artifacts import artifacts_line
    from orchestrator.tracking.store_checks import check_tracking_uri
    from orchestrator.tracking.uris import default_tracking_uri, masked

    lines = list(checked)
    cells = sorted({m.cell for m in members})
    lines.append(f"run configs: {len(members)} built and valid ({len(cells)} cells or configurations)")
    lines.append(check_methods(members))
    uri = opts.tracking_uri or default_tracking_uri()
    check_tracking_uri(uri, "--tracking-uri" if opts.tracking_uri else "the default tracking store")
    from orchestrator.tracking.journal import retry_s
    from orchestrator.tracking.store_lock import store_busy_s

    retry_s(), store_busy_s()  # the journal's waits: a bad value refused now, not mid-table
    lines.append(f"tracking {masked(uri)}: scheme known, store reachable or creatable; "
                 f"{artifacts_line(uri, opts.artifact_location)}")
    lines.append(check_storage(opts.storage))
    not_here = None
    try:
        lines.append(check_resources(opts, members))
    except ValueError as e:
        if not dry_run:
            raise
        not_here = str(e)
        lines.append("resources: do NOT fit this machine (below)")
    check_fetched(members)
    lines.append(check_models(members))
    lines.extend(check_encoders(members))
    data = check_data(members, baseline, varying)
    for w in data.warnings:
        print(f"warning: {w}", file=sys.stderr, flush=True)
    for note in run_notes(members, data.total_steps, opts):
        print(f"note: {note}", file=sys.stderr, flush=True)
    return DataCheck(data.array_keys, data.total_steps, (*lines, *data.checked), data.warnings,
                     not_here, data.runs, data.one_by_one)
