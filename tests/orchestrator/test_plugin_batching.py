"""Batched or one by one, said before anything trains (issue 38): a plug-in whose loss calls
``.item()`` is reported ``one by one: <reason>`` by its grid's dry run and on the console of its
real run, before the run starts, and its MLflow runs and the parent are tagged; a vmap-able one
(MCSE) is reported ``batched``. The real run also shows what its runs are in MLflow: the params
their method reads, the cells' labels, the parent's profile and loss histories of 10 points."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from orchestrator import ablate
from orchestrator.tracking.client import Tracker

HERE = Path(__file__).resolve().parent
METHOD = HERE.parent / "trainables" / "itemloss_method.py"
GRID = '''
import itemloss_method  # noqa: F401  (registers "itemloss")

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(name="itemgrid", title="a loss with .item() vs MCSE",
            cells=(Cell("MCSE", {"objective.method": "mcse"}),
                   Cell("Item", {"objective.method": "itemloss"})),
            baseline="MCSE")
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_bert) -> Path:
    from trainables.testing import write_tiny_profile

    d = tmp_path_factory.mktemp("itemgrid")
    shutil.copy(METHOD, d / "itemloss_method.py")
    (d / "itemgrid.py").write_text(GRID)
    write_tiny_profile(d, tiny_bert, max_steps=10, eval_every=5)
    return d


def _args(d: Path, *extra: str) -> list[str]:
    return ["--grid", str(d / "itemgrid.py"), "--profile", str(d / "tiny.yaml"), "--seeds", "0",
            "1", "--storage", str(d / "runs"), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}",
            *extra]


WHY = re.compile(r"method itemloss: one by one: RuntimeError: vmap: It looks like you're calling "
                 r"\.item\(\) on a Tensor\..* \(at itemloss_method\.py line \d+: "
                 r"shift = logits\.max\(\)\.item\(\)[^)]*\); each member of it adds \d+ kernels a step")


def test_the_dry_run_says_batched_or_one_by_one_and_why(folder, capfd):
    assert ablate.main(_args(folder, "--dry-run")) == 0
    out, err = capfd.readouterr()
    said = [ln for ln in err.splitlines() if "one by one" in ln]
    assert len(said) == 1 and said[0].startswith("warning: ") and WHY.search(said[0]), err
    assert re.search(r"checked: method mcse: batched: its heads and loss run once a step for all "
                     r"its members of an array \(\d+ kernels a step at hidden 32, whatever the "
                     r"number of members\)", out), out
    assert "checked: method itemloss: one by one" in out


@pytest.fixture(scope="module")
def table(folder):
    """The real run, Ray and all; -> (exit code, what the driver printed, in order)."""
    import contextlib
    import io

    import ray

    from trainables.runtime.ray_env import init_ray

    console = io.StringIO()
    init_ray(num_cpus=2, log_to_driver=False)
    try:
        with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
            rc = ablate.main(_args(folder, "--array-size", "4"))
    finally:
        ray.shutdown()
    return rc, console.getvalue()


@pytest.mark.slow  # a real table; the plug-in join runs -m slow here
def test_the_real_run_says_it_once_on_the_console_and_tags_its_runs(folder, table):
    rc, text = table
    assert rc == 0, text[-3000:]
    # once on the driver's console (the report printed at the end lists it again, as "- ")
    said = [ln for ln in text.splitlines() if "one by one" in ln and "itemloss" in ln
            and not ln.startswith("- ")]
    assert len(said) == 1 and WHY.search(said[0]), said
    assert text.index(said[0]) < text.index("starting Ray")  # before anything trains
    tr = Tracker(f"sqlite:///{folder / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    tags = parent.data.tags
    assert tags["mmemb.batched"] == "false" and tags["mmemb.batched_reason"].startswith(
        "itemloss: RuntimeError: vmap")
    assert tags["mmemb.profile"] == "tiny"  # the profile that ran, not 'default'
    assert tags["mmemb.profile_file"] == str(folder / "tiny.yaml")
    kids = tr.children(parent.info.run_id)
    assert len(kids) == 4
    for k in kids:
        t, p = k.data.tags, k.data.params
        item = p["objective.method"] == "itemloss"
        assert t["mmemb.batched"] == ("false" if item else "true")
        if item:
            assert ".item()" in t["mmemb.batched_reason"]
            assert t["mmemb.event.one_by_one"].startswith("method itemloss: RuntimeError")
        else:  # MCSE's params: what its loss reads, resolved
            assert p["objective.adaptive_margin"] == "False"
            assert "objective.grounding_margin" not in p and "objective.threshold_on" not in p
            assert "objective.grounding_margin" in t["mmemb.unread"]
        assert t["mmemb.cell_label"] == ("2. Item" if item else "1. MCSE")
        hist = tr.client.get_metric_history(k.info.run_id, "loss/total")
        assert len(hist) >= 10 and len({h.step for h in hist}) == len(hist)
    md = tr.load_artifact_text(parent.info.run_id, "report.md")
    notes = md.split("Run notes", 1)[1]
    assert "heads and losses run one by one" in notes.splitlines()[1]
    assert "Item seed 0, Item seed 1: method itemloss: RuntimeError: vmap" in notes
