"""What a member did that changes what it is, said where users look.

Five events change what a run is, beyond its scores: its method's heads and loss ran one by one
instead of batched, successive halving pruned it, the threshold filter stopped it, its loss went
non-finite, or a setting it was given is not read by its method. Each is

- **a tag on its MLflow run**, ``mmemb.event.<kind>`` holding one line (besides the tags that say
  it in their own terms: ``mmemb.batched=false``, ``mmemb.stopped``, ``mmemb.error``), so the
  runs table can filter on it;
- **one console line at most per kind per table or search** (:class:`Console`): the first
  occurrence is said with what it means, later ones are counted in the status line;
- **a line in the report** (:func:`report_lines`), read back from the tags, so
  ``orchestrator.report`` rebuilds it from MLflow alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orchestrator.tracking.client import TAG

ONE_BY_ONE, PRUNED, FILTER, NAN, IGNORED = "one_by_one", "pruned", "filter", "nan", "ignored"
KINDS = (ONE_BY_ONE, PRUNED, FILTER, NAN, IGNORED)
PREFIX = f"{TAG}event."
"""``mmemb.event.<kind>``: the tag of each event on its run"""
BATCHED, BATCHED_REASON = f"{TAG}batched", f"{TAG}batched_reason"
UNREAD = f"{TAG}unread"
"""the settings of a run's config that its method does not read (not logged as params)"""

HEADS = {
    ONE_BY_ONE: "heads and losses run one by one (torch.func.vmap could not batch the method; "
                "the same numbers, slower)",
    PRUNED: "pruned by successive halving (a worse configuration, stopped at mid-run)",
    FILTER: "stopped by the threshold filter (it masked every negative, so the grounding terms "
            "were 0)",
    NAN: "stopped by a non-finite loss",
    IGNORED: "given a setting its method does not read (the run trained without it)",
}
"""what each kind means, as the report's notes and the console's first line say it"""


def failure_kind(error: str | None) -> str | None:
    """The event behind a member's failure line (``trainables.arrays.finite_check``), if any."""
    if not error:
        return None
    if error.startswith("non-finite loss"):
        return NAN
    if error.startswith("the threshold filter masked every negative"):
        return FILTER
    return None


def tag(kind: str) -> str:
    return PREFIX + kind


class Console:
    """One console line at most per kind for a whole table or search (its rounds share one);
    the later events of a kind are counted (:meth:`counts`), for the status line."""

    def __init__(self, out: Callable[[str], None] | None = None):
        self.out = out or (lambda line: print(line, file=sys.stdout, flush=True))
        self.seen: dict[str, int] = {}

    def said(self, kind: str) -> bool:
        return self.seen.get(kind, 0) > 0

    def event(self, kind: str, line: str, say: bool | Callable[[str], None] = True) -> bool:
        """Count one event of ``kind``; say ``line`` if it is the first. -> whether it was said.
        ``say``: True prints it, a callable takes it instead (the live view's next lines), False
        counts an event said elsewhere (the pre-start checks' warning)."""
        first = not self.said(kind)
        self.seen[kind] = self.seen.get(kind, 0) + 1
        if first and say:
            (say if callable(say) else self.out)(line)
        return bool(first and say)

    def counts(self) -> str:
        """', 2 pruned, 1 NaN' for the status line: the events beyond the first of each kind
        are said only here."""
        names = {PRUNED: "pruned", FILTER: "stopped by the filter", NAN: "NaN"}
        return "".join(f", {n} {names[k]}" for k, n in self.seen.items() if k in names and n)


def report_lines(children: Iterable[Any]) -> list[str]:
    """The report's run notes: per kind, the runs it hit (cell and seed) and what it was,
    from each child's ``mmemb.event.<kind>`` tag."""
    by_kind: dict[str, dict[str, list[str]]] = {}
    for r in children:
        t: Mapping[str, str] = r.data.tags
        who = f"{t.get(f'{TAG}cell', '?')} seed {t.get(f'{TAG}seed', '?')}"
        for kind in KINDS:
            what = t.get(tag(kind))
            if what:
                by_kind.setdefault(kind, {}).setdefault(what, []).append(who)
    lines = []
    for kind in KINDS:
        for what, runs in by_kind.get(kind, {}).items():
            lines.append(f"- {HEADS[kind]}: {', '.join(sorted(runs))}: {what}")
    return lines


def resolved_run(run: Any) -> tuple[dict[str, Any], list[str]]:
    """A run config as MLflow's params show it: its method's settings as the loss uses them
    (``Method.describe``: MCSE's ``adaptive_margin`` is False when its margin is 0), and
    ``text_teachers`` only for a method that reads them; -> (that dict, the dotted keys left
    out because the method does not read them at these settings)."""
    d = run.to_dict()
    used = run.objective.get_config_dict()
    unread = [f"objective.{k}" for k in d["objective"] if k not in used]
    d["objective"] = {"method": run.objective.method, **{k: v for k, v in used.items()
                                                         if k != "method"}}
    if not run.needs.text_teachers and d.get("text_teachers"):
        unread.append("text_teachers")
        del d["text_teachers"]
    return d, unread


NOT_GIVEN = ("method default", "recipe ", "default", "profile ")
"""where a value comes from when nobody set it for this run (``--dry-run --explain``'s words):
a profile serves every method, so what it sets that a method does not read is no event"""


def ignored_settings(plan: Any) -> dict[str, str]:
    """The settings a run was given (by its cell, its grid or a search) that its method does not
    read at its settings: dotted key -> the layer that set it."""
    _, unread = resolved_run(plan.run)
    return {k: layer for k, layer in plan.origins.items()
            if k in unread and not layer.startswith(NOT_GIVEN)}
