"""Tables that report SentEval's transfer tasks (TR): how their runs are set up per profile, what
the pre-start check reads, the report's TR table, and one tiny table end to end (runs, MLflow
metrics, report, re-render)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.analysis import tables
from orchestrator.results.table_report import build_report, grid_spec
from orchestrator.spec.grids import TRANSFER_COLUMNS, TRANSFER_TASKS, Cell, Grid
from orchestrator.spec.plan import plan_runs
from orchestrator.spec.validate import validate_grid
from orchestrator.tracking.client import _is_metric
from tests.orchestrator.results.report_store import ReportStore
from trainables.evaluation.transfer import TASK_FILES
from trainables.testing import write_transfer_data

GRID = Grid("tr", "TR test table", (Cell("MCSE", {"objective.method": "mcse"},
                                         {"transfer/avg": 85.64}),
                                    Cell("KDMCSE", {"objective.method": "kdmcse"},
                                         {"transfer/avg": 86.53, "avg": 78.6})),
            baseline="MCSE", seeds=(0, 1, 2), transfer=True)


def test_task_names_match_the_evaluation():
    from trainables.evaluation.transfer import TRANSFER_TASKS as EVALUATED

    assert TRANSFER_TASKS == EVALUATED
    assert TRANSFER_COLUMNS[-1] == "transfer/avg" and len(TRANSFER_COLUMNS) == 8
    assert _is_metric("transfer/MR", 80.0) and _is_metric("transfer/avg", 80.0)


def test_published_tr_numbers_need_a_table_that_reports_tr():
    validate_grid(GRID)
    plain = Grid("p", "p", GRID.cells, baseline="MCSE")
    with pytest.raises(ValueError, match="a transfer column needs transfer=True"):
        validate_grid(plain)


def test_runs_evaluate_tr_per_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("MMEMB_DATA", raising=False)
    demo = plan_runs(GRID, "demo")  # the demo's STS data is generated: no transfer tasks
    assert {m.run.transfer for m in demo} == {None} and demo[0].run.data.senteval is None
    write_transfer_data(tmp_path / "senteval" / "downstream", n=14)
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    real = plan_runs(GRID, "demo")
    assert {m.run.transfer for m in real} == {"fast"}
    assert {m.run.data.senteval for m in real} == {str(tmp_path / "senteval" / "downstream")}
    assert real[0].origins["transfer"] == "grid tr reports TR"
    paper = plan_runs(GRID, "paper")
    assert {m.run.transfer for m in paper} == {"full"}
    off = plan_runs(Grid("o", "o", GRID.cells[:1], baseline="MCSE"), "paper")
    assert {m.run.transfer for m in off} == {None}  # a table without TR: hashes as before
    assert off[0].config_hash != paper[0].config_hash


def test_preflight_reads_every_tr_file_and_refuses_a_broken_one(tmp_path, monkeypatch):
    from orchestrator.run.preflight import check_data

    root = write_transfer_data(tmp_path / "senteval" / "downstream", n=14)
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    members = plan_runs(GRID, "demo", cells=["MCSE"])
    lines = check_data(members).checked
    assert sum(line.startswith("transfer ") for line in lines) == 7
    assert any("MRPC/msr_paraphrase_train.txt, MRPC/msr_paraphrase_test.txt" in x for x in lines)
    (root / "TREC" / "TREC_10.label").write_text("no colon here\n")
    with pytest.raises(ValueError, match=r"TREC_10.label:1: expected 'COARSE:fine question'"):
        check_data(members)


def test_paper_dry_run_names_every_tr_file(tmp_path, tiny_bert, capsys, monkeypatch):
    """``--grid dalr_table2 --profile paper --dry-run`` on ``$MMEMB_DATA`` in the paper profile's
    layout (tiny files; the tiny BERT under the encoder's and the teachers' names): every TR file
    is named among the checked lines, in full mode, and nothing starts. TR files too small for
    10 folds are refused first, for every cell (they all read them)."""
    import shutil

    import ray

    from orchestrator import ablate
    from trainables.config.profiles import MCSE_STORE, TEACHER_DIRS, paper_profile
    from trainables.data.demo_corpus import generate_demo

    data = tmp_path / "data"
    demo = generate_demo(tmp_path / "demo", dim=32)
    data.mkdir()
    shutil.copy(demo.text_file, data / "wiki1m_for_simcse.txt")
    shutil.copy(demo.pairs_store, data / "flickr30k_clip_vitl14.parquet")
    shutil.copy(demo.pairs_store, data / MCSE_STORE)  # MCSE reads its own file (issue 29)
    root = data / "senteval" / "downstream"
    shutil.copytree(demo.senteval_dir, root)  # STS from the demo corpus
    write_transfer_data(root, n=14)  # fewer than 20 per class: too few for full mode's folds
    for t in ("simcse", "diffcse"):
        shutil.copytree(tiny_bert, data / "teachers" / TEACHER_DIRS[t])
    work = tmp_path / "work"
    shutil.copytree(tiny_bert, work / "bert-base-uncased")  # a local folder wins over the hub
    monkeypatch.setenv("MMEMB_DATA", str(data))
    monkeypatch.chdir(work)
    assert paper_profile()["encoder"] == "bert-base-uncased"
    argv = ["--grid", "dalr_table2", "--profile", "paper", "--dry-run", "--storage",
            str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    assert ablate.main(argv) == 2
    (error,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert error.startswith("error: cell(s) ['MCSE', 'KDMCSE', 'DALR']: ") and "MR has [14, 14] " \
        "samples per class, full mode (10-fold) needs at least 20" in error, error
    assert "the other cells run" not in error
    write_transfer_data(root, n=30)
    rc = ablate.main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, out[-2000:] + err[-2000:]
    checked = [ln.removeprefix("checked: ") for ln in out.splitlines() if ln.startswith("checked: ")]
    tr = [ln for ln in checked if ln.startswith("transfer ")]
    assert len(tr) == 7 and all("(full mode)" in ln for ln in tr), tr
    for rel in (f for files in TASK_FILES.values() for f in files):
        assert sum(rel in ln for ln in tr) == 1, (rel, tr)
    n_files = sum(map(len, TASK_FILES.values()))  # 15
    assert any(ln.startswith(f"SentEval transfer {root}: 7 tasks, {n_files} files") for ln in checked)
    assert "dry run: everything checked, nothing started" in out
    assert not ray.is_initialized()
    assert not (work / "mlflow.db").exists() and not (work / "runs").exists()


def scores(shift: float) -> dict:
    rng = np.random.default_rng(int(shift * 10))
    out = {}
    for seed in GRID.seeds:
        m = {t: 70 + shift + rng.normal() for t in tables.STS_TASKS}
        tr = {f"transfer/{t}": 80 + shift + rng.normal() for t in TRANSFER_TASKS}
        tr["transfer/avg"] = float(np.mean(list(tr.values())))
        out[seed] = {**m, **tr}
    return out


def test_report_has_a_tr_table_with_the_sts_statistics(tmp_path):
    tracker = ReportStore({"MCSE": scores(0.0), "KDMCSE": scores(3.0)})
    spec = grid_spec(GRID) | {"transfer_mode": "full", "demo": False}
    a, md, err = build_report(tracker, "parent", spec, tmp_path)
    assert err is None
    sts, tr = md.split("## Transfer tasks (TR)")
    assert "| cell | MR | CR | SUBJ | MPQA | SST-2 | TREC | MRPC | TR Avg |" in tr
    assert "full mode" in tr and "#### Statistics vs MCSE" in tr
    assert "| KDMCSE | TR Avg | 86.530 |" in tr  # parity with the published TR Avg
    assert "| KDMCSE | Avg | 78.60 |" in sts and "TR Avg" not in sts
    csv = (tmp_path / "report.csv").read_text().splitlines()
    assert csv[0].startswith("cell,metric") and sum(r.startswith("cell,") for r in csv) == 1
    assert sum(",transfer/" in r for r in csv) == 2 * 8
    assert {"report.md", "report.csv", "report.png", "report_transfer.png"} <= set(tracker.files)
    logged = [m.key for m in tracker.metrics]
    assert "KDMCSE/tr_avg_mean" in logged and "KDMCSE/avg_mean" in logged


def test_demo_report_says_why_tr_is_missing(tmp_path):
    tracker = ReportStore({"MCSE": scores(0.0), "KDMCSE": scores(1.0)})
    spec = grid_spec(GRID) | {"transfer_mode": None, "demo": True,
                              "transfer_note": "not evaluated: no data here"}
    _, md, _ = build_report(tracker, "parent", spec, tmp_path)
    assert "## Transfer tasks (TR)\n\nTransfer tasks not evaluated: no data here." in md
    assert "transfer/" not in (tmp_path / "report.csv").read_text()
    assert "report_transfer.png" not in tracker.files


# --- end to end -------------------------------------------------------------------------------
TINY_TR = '''
from orchestrator.spec.grids import Cell, Grid

GRID = Grid(name="tiny_tr", title="TR end to end: MCSE vs KDMCSE (tiny BERT, demo data)",
            cells=(Cell("MCSE", {"objective.method": "mcse"}, {"transfer/avg": 85.64}),
                   Cell("KDMCSE", {"objective.method": "kdmcse"}, {"transfer/avg": 86.53})),
            baseline="MCSE", seeds=(0, 1), transfer=True)
'''


@pytest.mark.slow
def test_a_table_with_tr_end_to_end(tmp_path, tiny_bert, capsys):
    import ray

    from orchestrator import ablate, report
    from orchestrator.tracking.client import Tracker
    from trainables.runtime.ray_env import init_ray
    from trainables.testing import write_tiny_profile

    senteval = write_transfer_data(tmp_path / "senteval", n=14)
    write_tiny_profile(tmp_path, tiny_bert, max_steps=3, eval_every=3,
                       data={"demo": True, "demo_dim": 32, "cache_dir": str(tmp_path / "cache"),
                             "senteval": str(senteval)})
    (tmp_path / "grid_tr.py").write_text(TINY_TR)
    db = tmp_path / "mlflow.db"
    argv = ["--grid", str(tmp_path / "grid_tr.py"), "--profile", str(tmp_path / "tiny.yaml"),
            "--storage", str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{db}"]
    init_ray(num_cpus=2, log_to_driver=False)
    try:
        assert ablate.main(argv) == 0, capsys.readouterr().err[-3000:]
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert "## Transfer tasks (TR)" in out and "fast mode" in out
    tr = Tracker(f"sqlite:///{db}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    children = tr.children(parent.info.run_id)
    assert len(children) == 4
    for c in children:
        m = c.data.metrics
        assert c.data.params["transfer"] == "fast"
        for col in TRANSFER_COLUMNS:
            assert 0.0 <= m[col] <= 100.0, col
        assert m["transfer/avg"] == pytest.approx(np.mean([m[f"transfer/{t}"] for t in TRANSFER_TASKS]))
    spec = json.loads(tr.load_artifact_text(parent.info.run_id, "grid.json"))
    assert spec["transfer"] and spec["transfer_mode"] == "fast"
    assert report.main(["--run", parent.info.run_id, "--tracking-uri", f"sqlite:///{db}",
                        "--out", str(tmp_path / "again")]) == 0
    again = (tmp_path / "again" / "report.md").read_text()
    assert "TR end to end" in again and "| cell | MR | CR |" in again
    assert (tmp_path / "again" / "report_transfer.png").is_file()
