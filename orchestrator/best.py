"""The best student of a cell: which seed, its score, and its model (downloaded on request).

    python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE
    python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE --metric best_stsb_dev --out student/

``--out student/`` writes the MLflow model there: ``SentenceTransformer("student/model.sentence_transformer")``
and ``mlflow.sentence_transformers.load_model("student")`` load it.

Selecting on a test score picks the luckiest seed; ``--metric best_stsb_dev`` selects on dev.
A question, not a change: it writes nothing into the MLflow store.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from orchestrator import cli
from trainables.models.mlflow_export import DATA


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.best", __doc__)
    p.add_argument("--run", required=True, help="the table's (or search's) parent run id")
    p.add_argument("--cell", required=True, help="the cell, as the report names it")
    p.add_argument("--metric", default="test/avg", help="what 'best' means (default test/avg)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite ./mlflow.db)")
    p.add_argument("--out", help="download the MLflow model folder here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.results.students import best_child
    from orchestrator.tracking.client import TAG, Tracker

    out = None
    if args.out:  # checked before the store is read; printed as the user gave it
        cli.check_out(args.out)
        out = Path(args.out)
        check_out(out)
    tracker = Tracker(args.tracking_uri, create=False, write=False)
    tracker.parent_run(args.run)
    c = best_child(tracker, args.run, args.cell, args.metric)
    t = c.data.tags
    print(f"cell {args.cell}: seed {t.get(f'{TAG}seed')}, {args.metric} "
          f"{c.data.metrics[args.metric]:.2f}, child run {c.info.run_id}")
    print(f"model: {t[f'{TAG}model']}\nfolder: {t.get(f'{TAG}checkpoint', '')}")
    if out is not None:
        out = download_model(t[f"{TAG}model"], out)
        print(f"downloaded the MLflow model to {out}; its student loads with\n"
              f"  SentenceTransformer(\"{out / DATA}\")\n"
              f"  mlflow.sentence_transformers.load_model(\"{out}\")")
    return 0


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out}: already exists and is not an empty folder; name a new "
                         "folder (it is created)")


def download_model(uri: str, out: Path) -> Path:
    """The MLflow model at ``uri`` as the folder ``out`` itself (MLmodel, requirements and the
    student folder ``DATA`` directly inside), written whole or not at all."""
    import shutil
    import tempfile

    import mlflow

    check_out(out)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one line, not a bar
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        got = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp)))
        if out.exists():
            out.rmdir()
        got.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
