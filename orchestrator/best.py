"""The best student of a cell: which seed, its score, and its model (downloaded on request).

    python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE
    python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE --metric best_stsb_dev --out student/

Selecting on a test score picks the luckiest seed; ``--metric best_stsb_dev`` selects on dev.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.results.students import best_child
from orchestrator.tracking.client import TAG, Tracker


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.best", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="the table's (or search's) parent run id")
    p.add_argument("--cell", required=True, help="the cell, as the report names it")
    p.add_argument("--metric", default="test/avg", help="what 'best' means (default test/avg)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite ./mlflow.db)")
    p.add_argument("--out", help="download the MLflow model folder here")
    args = p.parse_args(argv)
    try:
        tracker = Tracker(args.tracking_uri)
        c = best_child(tracker, args.run, args.cell, args.metric)
    except (ValueError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = c.data.tags
    print(f"cell {args.cell}: seed {t.get(f'{TAG}seed')}, {args.metric} "
          f"{c.data.metrics[args.metric]:.2f}, child run {c.info.run_id}")
    print(f"model: {t[f'{TAG}model']}\nfolder: {t.get(f'{TAG}checkpoint', '')}")
    if args.out:
        import mlflow

        path = mlflow.artifacts.download_artifacts(t[f"{TAG}model"], dst_path=args.out)
        print(f"downloaded to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
