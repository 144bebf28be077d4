"""The demo world's measurements: what trainables/data/demo_corpus.py and the DEMO profile claim.

Parts (``--parts``, default all; every run is a member of a ``trainables.arrays.ArrayTrainer`` on
the demo profile (a cell's seeds train together as one array), one process,
``torch.set_num_threads(--threads)``):

- ``world``: corpus checks. Generation time; the share of negatives that KDMCSE's threshold
  filter (raw dot product of the stored CLIP caption and image features > 0.8) masks in random
  caption batches of the profile's size, and how similar the masked scenes are; Spearman of the
  image-image and CLIP-text cosines with the scenes' similarity (the gold's noiseless core); STS
  of a bag of words, of the lexicon oracle (the ceiling) and of the untrained student.
- ``timing``: ``ArrayTrainer.train_step`` of one member (text and pair steps) and of an array of
  five, one dev evaluation and the final seven-task evaluation, and the compute of one run.
- ``positive``: SimCSE against MCSE over ``--seeds`` (paired t-test): the positive control.
- ``negative``: MCSE against MCSE on disjoint seeds (``--seeds`` + 100): the negative control.
- ``table3``: the cells of ``search_spaces/kdmcse_table3.py`` (the grid ``table3``) over ``--seeds``, paired t-tests against
  MCSE with Holm's adjustment, and whether any two cells are identical on every seed.
- ``shuffle``: MCSE with ``data.shuffle_images`` (each caption grounded on another image).
- ``recipe`` (only when named): why the DEMO profile's lr and lam. MCSE at lam 0.01 and 0.1, and
  SimCSE and MCSE at lr 1e-3 and 3e-4, against the profile (lam 1.0, lr 5e-4).

Commands and figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # one "Loading weights" bar per run

import numpy as np  # noqa: E402
import torch  # noqa: E402

PARTS = ("world", "timing", "positive", "negative", "table3", "shuffle")
EXTRA_PARTS = ("recipe",)  # run only when named: the profile's lr and lam against neighbours
THRESHOLD = 0.8  # KDMCSE's score_base, as the table3 grid sets it


def header(args: argparse.Namespace) -> None:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent).stdout.strip()
    print("command: python " + shlex.join(sys.argv))
    print(f"git {rev}  python {platform.python_version()}  torch {torch.__version__}  "
          f"threads {args.threads}  cpus {os.cpu_count()}  load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


def config(args: argparse.Namespace, overrides: dict[str, Any]):
    from trainables.config.profiles import build_config

    return build_config("demo", overrides={"data.cache_dir": args.cache, **overrides})


# --- world -----------------------------------------------------------------------------------
def world(args: argparse.Namespace) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from trainables.arrays.trainer import ArrayTrainer
    from trainables.data import demo_corpus as dc
    from trainables.data.store import FeatureStore
    from trainables.evaluation.sts import ALL_TASKS, evaluate_sts, load_stsb

    cfg = config(args, {})
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        dc.generate_demo(tmp, seed=cfg.data.demo_seed, dim=cfg.data.demo_dim)
        gen_s = time.perf_counter() - t0
    corpus = dc.generate_demo(Path(cfg.data.cache_dir) / "demo", seed=cfg.data.demo_seed,
                              dim=cfg.data.demo_dim)
    store = FeatureStore(corpus.pairs_store)
    rows = store.batch(np.arange(len(store)))
    img, txt, ids = rows["image"], rows["clip_text"], np.asarray(rows["image_id"])
    scenes = [dc.parse_scene(c) for c in rows["caption"]]
    rng = np.random.default_rng(0)
    bs = cfg.batch_size
    off = ~np.eye(bs, dtype=bool)
    masked, with_dup, sim_masked, sim_kept = [], [], [], []
    for _ in range(1000):
        ix = rng.choice(len(ids), bs, replace=False)
        hit = (txt[ix] @ img[ix].T > THRESHOLD) & off
        sim = np.array([[dc.scene_similarity(scenes[i], scenes[j]) for j in ix] for i in ix])
        masked.append(hit[off].mean())
        with_dup.append(bool(((sim >= 0.7) & off).any()))
        sim_masked += sim[hit].tolist()
        sim_kept += sim[off & ~hit].tolist()
    first = np.unique(ids, return_index=True)[1]
    pick = rng.choice(first, min(300, len(first)), replace=False)
    tri = np.triu_indices(len(pick), 1)
    truth = np.array([[dc.scene_similarity(scenes[i], scenes[j]) for j in pick] for i in pick])[tri]

    def rho(x: np.ndarray) -> float:
        u = x[pick] / np.linalg.norm(x[pick], axis=1, keepdims=True)
        return float(spearmanr((u @ u.T)[tri], truth)[0])

    dev = load_stsb(corpus.senteval_dir, "dev")
    gold_rho = spearmanr(dev.gold, [dc.scene_similarity(dc.parse_scene(a), dc.parse_scene(b))
                                    for a, b in zip(dev.sent1, dev.sent2, strict=True)])[0]
    vocab: dict[str, int] = {}

    def bag_of_words(sentences: list[str]) -> np.ndarray:
        out = np.zeros((len(sentences), 4096))
        for i, s in enumerate(sentences):
            np.add.at(out[i], [vocab.setdefault(w, len(vocab)) for w in s.split()], 1.0)
        return out

    start = ArrayTrainer([("start", cfg)]).final_metrics()["start"]  # untrained: the model as built
    out = {
        "generate_s": gen_s, "rows": len(store), "images": len(first),
        "masked_share": float(np.mean(masked)), "batches_without_mask": float(np.mean(np.array(masked) == 0)),
        "batches_with_near_duplicate": float(np.mean(with_dup)),
        "scene_sim_masked": float(np.mean(sim_masked)), "scene_sim_kept": float(np.mean(sim_kept)),
        "rho_image": rho(img), "rho_clip_text": rho(txt), "rho_gold_dev": float(gold_rho),
        "bag_of_words": evaluate_sts(bag_of_words, corpus.senteval_dir)["avg"],
        "oracle": evaluate_sts(dc.lexicon_oracle, corpus.senteval_dir)["avg"],
        "student_start": start["test/avg"],
        "student_start_tasks": {t: start[f"test/{t}"] for t in ALL_TASKS},
    }
    print(f"\n## world (demo seed {cfg.data.demo_seed}, {len(store)} captions of {len(first)} images)")
    print(f"generated in {gen_s:.1f} s")
    print(f"threshold {THRESHOLD} on raw caption-image dot products, random caption batches of {bs}: "
          f"masks {100 * out['masked_share']:.1f} % of negatives ({100 * out['batches_without_mask']:.0f} % "
          f"of batches mask none); masked scenes have similarity {out['scene_sim_masked']:.2f} to the "
          f"anchor's, kept ones {out['scene_sim_kept']:.2f}; {100 * out['batches_with_near_duplicate']:.0f} % "
          f"of batches hold a near-duplicate (similarity >= 0.7)")
    print(f"Spearman with scene similarity: image-image cosine {out['rho_image']:.3f}, CLIP-text cosine "
          f"{out['rho_clip_text']:.3f}; STS-B dev gold {out['rho_gold_dev']:.3f}")
    print(f"STS avg: bag of words {out['bag_of_words']:.1f}, lexicon oracle {out['oracle']:.1f}, "
          f"untrained student ({cfg.encoder}, [CLS]) {out['student_start']:.1f}")
    print("  " + "  ".join(f"{k} {v:.1f}" for k, v in out["student_start_tasks"].items()))
    return out


# --- timing ----------------------------------------------------------------------------------
def timing(args: argparse.Namespace) -> dict[str, Any]:
    from trainables.arrays.trainer import ArrayTrainer

    cfg = config(args, {"objective.method": "kdmcse", "objective.threshold": THRESHOLD})
    tr = ArrayTrainer([("t", cfg)])
    sched = tr.members[0].schedule
    n_pair = sum(sched.kind_at(i % sched.steps_per_epoch) == "pair" for i in range(tr.total_steps))
    n_dev = -(-tr.total_steps // cfg.eval_every)
    out: dict[str, Any] = {"steps": tr.total_steps, "pair_steps": n_pair, "dev_evals": n_dev}
    print(f"\n## timing (KDMCSE, the most expensive of table3's cells; {args.threads} thread(s); "
          "wall and this process's CPU seconds, median)")
    for clock, now in (("wall", time.perf_counter), ("cpu", time.process_time)):
        times: dict[str, list[float]] = {"text": [], "pair": [], "dev": []}
        for i in range(24):
            kind = sched.kind_at(sched.global_step % sched.steps_per_epoch)
            t0 = now()
            tr.train_step()
            if i >= 4:  # warm-up
                times[kind].append(now() - t0)
        for _ in range(3):
            t0 = now()
            tr.evaluate_dev()
            times["dev"].append(now() - t0)
        t0 = now()
        tr.final_metrics()
        final = now() - t0
        m = {k: statistics.median(v) for k, v in times.items()}
        run_s = n_pair * m["pair"] + (tr.total_steps - n_pair) * m["text"] + n_dev * m["dev"] + final
        out[clock] = {**m, "final": final, "run": run_s}
        print(f"{clock:>4}: train_step text {m['text']:.3f} s, pair {m['pair']:.3f} s; dev eval "
              f"{m['dev']:.2f} s; final 7-task eval {final:.2f} s; one run = {tr.total_steps} steps "
              f"({n_pair} pair) + {n_dev} dev evals + final = {run_s:.1f} s, 20 runs "
              f"{20 * run_s / 60:.1f} min")
    five = ArrayTrainer([(f"s{s}", cfg.with_overrides({"seed": s})) for s in range(5)])
    t0 = time.perf_counter()
    for _ in range(12):
        five.train_step()
    out["array5_step"] = (time.perf_counter() - t0) / 12
    print(f"array of 5 members: {out['array5_step']:.3f} s per step (wall, mean of 12 mixed steps), "
          f"{out['array5_step'] / 5:.3f} s per member-step")
    return out


# --- training runs ---------------------------------------------------------------------------
class Runs:
    """Trains each (label, overrides, seed) once per process; results shared by the parts.
    A cell's missing seeds train together as one array (members are independent)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.done: dict[tuple[str, int], dict[str, Any]] = {}

    def __call__(self, label: str, overrides: dict[str, Any], seed: int) -> dict[str, Any]:
        return self.cell_runs(label, overrides, [seed])[seed]

    def cell_runs(self, label: str, overrides: dict[str, Any], seeds: list[int]) -> dict[int, dict[str, Any]]:
        from trainables.arrays.trainer import ArrayTrainer

        todo = [s for s in seeds if (label, s) not in self.done]
        if todo:
            members = [(f"seed{s}", config(self.args, {**overrides, "seed": s})) for s in todo]
            t0, c0 = time.perf_counter(), time.process_time()
            with tempfile.TemporaryDirectory() as tmp:
                finals = ArrayTrainer(members).fit(lambda metrics, ckpt: None, Path(tmp))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            for s in todo:
                res = {k: v for k, v in finals[f"seed{s}"].items() if isinstance(v, int | float)}
                res["wall_s"], res["cpu_s"] = wall / len(todo), cpu / len(todo)
                self.done[(label, s)] = res
                print(f"  {label:<30} seed {s:>3}: avg {res['test/avg']:.2f}  best step "
                      f"{res['best_step']:>3}", flush=True)
            print(f"  {label:<30} {len(todo)} seeds as one array: {wall:.1f} s wall, {cpu:.1f} s cpu",
                  flush=True)
        return {s: self.done[(label, s)] for s in seeds}

    def cell(self, label: str, overrides: dict[str, Any], seeds: list[int]) -> dict[int, float]:
        return {s: r["test/avg"] for s, r in self.cell_runs(label, overrides, seeds).items()}


def summary(label: str, values: dict[int, float]) -> str:
    v = list(values.values())
    return f"{label:<30} {statistics.mean(v):6.2f} +- {statistics.stdev(v):4.2f}  " + " ".join(
        f"{x:.2f}" for x in v)


def positive(args: argparse.Namespace, runs: Runs) -> dict[str, Any]:
    from orchestrator.analysis.stats import compare

    simcse = runs.cell("SimCSE", {"objective.method": "simcse"}, args.seeds)
    mcse = runs.cell("MCSE", {"objective.method": "mcse"}, args.seeds)
    c = compare(mcse, simcse)
    print("\n## positive control: MCSE vs text-only SimCSE (STS avg, seeds " + str(args.seeds) + ")")
    print(summary("SimCSE", simcse))
    print(summary("MCSE", mcse))
    print(f"MCSE - SimCSE = {c.diff:+.2f}, paired p = {c.paired_p:.2g}, Student p = {c.t_student_p:.2g}, "
          f"Hedges g = {c.hedges_g:.1f}")
    return {"simcse": simcse, "mcse": mcse, "diff": c.diff, "paired_p": c.paired_p}


def negative(args: argparse.Namespace, runs: Runs) -> dict[str, Any]:
    from orchestrator.analysis.stats import compare

    other = [s + 100 for s in args.seeds]
    a = runs.cell("MCSE", {"objective.method": "mcse"}, args.seeds)
    b = runs.cell("MCSE", {"objective.method": "mcse"}, other)
    c = compare(b, a)
    pooled = statistics.stdev([*a.values(), *b.values()])
    print(f"\n## negative control: MCSE seeds {args.seeds} vs seeds {other}")
    print(summary("MCSE", a))
    print(summary("MCSE (other seeds)", b))
    print(f"difference {c.diff:+.2f}, Student p = {c.t_student_p:.2g}, Welch p = {c.welch_p:.2g}; "
          f"seed std of the STS avg over all {len(a) + len(b)} runs {pooled:.2f}")
    return {"a": a, "b": b, "diff": c.diff, "student_p": c.t_student_p, "seed_std": pooled}


def table3(args: argparse.Namespace, runs: Runs) -> dict[str, Any]:
    from orchestrator.analysis.stats import compare, holm
    from orchestrator.spec.registry import load_grid
    from trainables.evaluation.sts import ALL_TASKS

    grid = load_grid("table3")
    cells = {c.name: runs.cell(c.name, {**grid.base, **c.overrides}, args.seeds)
             for c in grid.cells}
    base = cells[grid.baseline]
    print(f"\n## table3 cells (STS avg, seeds {args.seeds}; t-tests vs {grid.baseline}: Student, the "
          "papers' test, and paired over seeds; Holm of the Student p over the three cells)")
    names = [n for n in cells if n != grid.baseline]
    comps = {n: compare(cells[n], base) for n in names}
    adj = dict(zip(names, holm([comps[n].t_student_p for n in names]), strict=True))
    print(summary(grid.baseline, base))
    for n in names:
        c = comps[n]
        print(summary(n, cells[n]) + f"   {c.diff:+.2f}  Student p {c.t_student_p:.2g}  paired p "
              f"{c.paired_p:.2g}  Holm {adj[n]:.2g}")
    same = [(a, b) for i, a in enumerate(cells) for b in list(cells)[i + 1:] if cells[a] == cells[b]]
    print("identical on every seed: " + (", ".join(f"{a} = {b}" for a, b in same) or "none"))
    tasks = [f"test/{t}" for t in ALL_TASKS]
    print("per task (mean over seeds): " + "  ".join(ALL_TASKS))
    for c in grid.cells:
        ov = {**grid.base, **c.overrides}
        vals = [statistics.mean(runs(c.name, ov, s)[t] for s in args.seeds) for t in tasks]
        print(f"  {c.name:<30} " + "  ".join(f"{v:5.1f}" for v in vals))
    return {"cells": cells, "student_p": {n: comps[n].t_student_p for n in names},
            "paired_p": {n: comps[n].paired_p for n in names}, "holm": adj, "identical": same}


def shuffle(args: argparse.Namespace, runs: Runs) -> dict[str, Any]:
    from orchestrator.analysis.stats import compare

    shuf = runs.cell("MCSE shuffled images", {"objective.method": "mcse", "data.shuffle_images": True},
                     args.seeds)
    mcse = runs.cell("MCSE", {"objective.method": "mcse"}, args.seeds)
    simcse = runs.cell("SimCSE", {"objective.method": "simcse"}, args.seeds)
    print("\n## control: MCSE grounded on the wrong images (data.shuffle_images)")
    print(summary("MCSE shuffled images", shuf))
    for name, other in (("MCSE", mcse), ("SimCSE", simcse)):
        c = compare(shuf, other)
        print(f"shuffled - {name} = {c.diff:+.2f}, paired p = {c.paired_p:.2g}")
    return {"shuffled": shuf}


def recipe(args: argparse.Namespace, runs: Runs) -> dict[str, Any]:
    from trainables.config.profiles import build_config

    prof = build_config("demo", "mcse")
    rows = {"SimCSE": {"objective.method": "simcse"}, "MCSE": {"objective.method": "mcse"}}
    for lam in (0.01, 0.1):
        rows[f"MCSE lam {lam}"] = {"objective.method": "mcse", "objective.lam": lam}
    for lr in (1e-3, 3e-4):
        rows[f"SimCSE lr {lr:g}"] = {"objective.method": "simcse", "lr": lr}
        rows[f"MCSE lr {lr:g}"] = {"objective.method": "mcse", "lr": lr}
    cells = {name: runs.cell(name, ov, args.seeds) for name, ov in rows.items()}
    print(f"\n## recipe: the profile (lam {prof.objective.lam}, lr {prof.lr:g}) against neighbours, "
          f"seeds {args.seeds}")
    for name, values in cells.items():
        print(summary(name, values))
    return {"cells": cells}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=PARTS + EXTRA_PARTS, default=list(PARTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    ap.add_argument("--cache", default=".cache/mmemb", help="data.cache_dir (demo corpus, student)")
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(args)
    runs = Runs(args)
    out: dict[str, Any] = {}
    for part in args.parts:
        fn = globals()[part]
        out[part] = fn(args) if part in ("world", "timing") else fn(args, runs)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
