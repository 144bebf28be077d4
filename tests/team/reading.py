"""Reading a table back from a tracking store, for the team tests: its parent, its children by
trial key (each exactly once), their numbers, and what each child holds in MLflow."""

from __future__ import annotations

import re

from orchestrator.tracking.client import Tracker


def parent_of(out: str) -> str:
    # a table says "MLflow parent run ID at ...", a search "MLflow parent ID at ..."
    found = re.findall(r"MLflow parent (?:run )?([0-9a-f]{32})", out)
    assert found, out[-3000:]
    return found[-1]


def table_of(uri: str, out: str) -> tuple[Tracker, str, dict]:
    """(tracker, parent, trial key -> child) of the table whose output is ``out``."""
    tr = Tracker(uri, create=False)
    parent = parent_of(out)
    kids = tr.children(parent)
    keys = [c.data.tags["mmemb.trial"] for c in kids]
    assert len(keys) == len(set(keys)), f"a trial twice: {sorted(keys)}"
    return tr, parent, {c.data.tags["mmemb.trial"]: c for c in kids}


def numbers(child) -> dict[str, float]:
    m = child.data.metrics
    return {k: v for k, v in m.items()
            if k.startswith("test/") or k in ("best_stsb_dev", "best_step")}


def has_model(tr: Tracker, child) -> bool:
    """The child's student is in MLflow: a ``model`` artifact with its MLmodel file."""
    return any(a.path == "model/MLmodel"
               for a in tr.client.list_artifacts(child.info.run_id, "model"))


def running(tr: Tracker) -> list[str]:
    """Runs of the store still RUNNING."""
    return [r.info.run_name for r in tr.client.search_runs([tr.experiment_id],
                                                            "attributes.status = 'RUNNING'")]
