"""What bf16 autocast changes against fp32 (the official runs' arithmetic): one array of an
MCSE, a KDMCSE and a DALR member (members train as they would alone, so one array per precision
is three runs each), the same seeds and batches, ``--steps`` steps.

Per member and term: the mean and largest |bf16 - fp32| of the loss over the steps, relative to
the fp32 value; the STS-B dev Spearman of both every ``--eval-every`` steps and their largest gap.
The default sizes are CPU-sized (a random 2-layer BERT of width 32 on the demo corpus);
``--encoder minilm-l6-top1`` uses the demo student, and on a GPU ``--device cuda`` at paper
shapes (``--profile paper``) the same comparison says what bf16 does there.

    python bench/precision.py --steps 175            # CPU, a few min; figures in bench/README.md
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

METHODS = ("mcse", "kdmcse", "dalr")


def run(precision: str, a: argparse.Namespace, encoder: str, cache: str) -> dict:
    from trainables.arrays.trainer import ArrayTrainer
    from trainables.config.profiles import build_config

    members = []
    for i, m in enumerate(METHODS):
        over = {"encoder": encoder, "text_teachers": [encoder], "data.cache_dir": cache,
                "max_steps": a.steps, "eval_every": a.eval_every, "seed": i, "precision": precision,
                "final_eval": False}
        if a.profile == "demo":
            over |= {"data.demo_dim": a.demo_dim, "batch_size": a.batch_size}
        members.append((m, build_config(a.profile, m, over)))
    t = ArrayTrainer(members, device=a.device)
    terms: dict[str, dict[str, list[float]]] = {m: {} for m in METHODS}
    dev: dict[str, list[float]] = {m: [] for m in METHODS}
    start = time.perf_counter()
    for step in range(1, t.total_steps + 1):
        for key, ts in t.train_step().items():
            for name, v in ts.items():
                terms[key].setdefault(name, []).append(float(v))
        if step % a.eval_every == 0 or step == t.total_steps:
            for m, s in zip(METHODS, t.evaluate_dev(), strict=True):
                dev[m].append(float(s))
    return {"terms": terms, "dev": dev, "seconds": time.perf_counter() - start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--profile", default="demo")
    p.add_argument("--encoder", default=None, help="default: a random 2-layer BERT of width 32")
    p.add_argument("--demo-dim", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="also write the figures as JSON here")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench-precision-"))
    encoder = a.encoder
    if encoder is None:
        from trainables.testing import make_tiny_bert

        encoder = str(make_tiny_bert(tmp / "bert"))
    res = {prec: run(prec, a, encoder, str(tmp / "cache")) for prec in ("fp32", "bf16")}
    print(f"### precision.py: bf16 autocast against fp32, {a.steps} steps, {a.device}, encoder "
          f"{a.encoder or 'random BERT 2x32'}\n")
    print("| member | term | mean rel. gap | max rel. gap | dev fp32 (every eval) | dev bf16 | max dev gap |")
    print("|---|---|---|---|---|---|---|")
    out = {}
    for m in METHODS:
        d32, d16 = res["fp32"]["dev"][m], res["bf16"]["dev"][m]
        gap = max(abs(x - y) for x, y in zip(d32, d16, strict=True))
        for name, v32 in res["fp32"]["terms"][m].items():
            x, y = np.array(v32), np.array(res["bf16"]["terms"][m][name])
            rel = np.abs(y - x) / np.maximum(np.abs(x), 1e-8)
            out[f"{m}/{name}"] = {"mean_rel": float(rel.mean()), "max_rel": float(rel.max())}
            dev_cells = (" ".join(f"{s:.2f}" for s in d32), " ".join(f"{s:.2f}" for s in d16),
                         f"{gap:.2f}") if name == "total" else ("", "", "")
            print(f"| {m} | {name} | {rel.mean():.2%} | {rel.max():.2%} | {' | '.join(dev_cells)} |")
        out[f"{m}/dev"] = {"fp32": d32, "bf16": d16}
    print(f"\nwall: fp32 {res['fp32']['seconds']:.0f} s, bf16 {res['bf16']['seconds']:.0f} s")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
