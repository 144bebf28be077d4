"""An array on two workers (gloo on the CPU, two processes, no Ray): successive halving and the
threshold filter's stop rule agree across ranks, so both ranks keep the same members and the
next gradient all-reduce sees the same shapes on both (rank 0 alone used to halve, and the
second rank then failed with a size mismatch)."""

from __future__ import annotations

import json
from pathlib import Path

import torch.multiprocessing as mp

from tests.trainables.arrays.harness import Reports, cfg


def _worker(rank: int, world: int, init: str, out: str, encoder: str, cache: str) -> None:
    import torch
    import torch.distributed as dist

    from trainables.arrays.trainer import ArrayTrainer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        over = {"max_steps": 9, "final_eval": False}
        members = [(f"c{c}/s{s}", cfg(encoder, cache, "mcse", seed=s, lr=lr, **over))
                   for c, lr in enumerate((1e-5, 1e-3, 1e-4)) for s in (0, 1)]
        members.append(("kd/s0", cfg(encoder, cache, "kdmcse", seed=0, **over,
                                     **{"objective.threshold": 0.8})))
        groups = {k: k.split("/")[0] for k, _ in members}
        t = ArrayTrainer(members, rank=rank, world=world, halving=((3, 6), 2.0), groups=groups)
        reports = Reports()
        t.fit(reports, Path(out) / f"work-{rank}")
        # every parameter's gradient is all-reduced, so the ranks hold the same weights: the
        # embedding tables kept out of the optimiser's flat buffer as well as the rest
        weights = {n: float(p.detach().double().abs().sum()) for n, p in t.model.named_parameters()}
        Path(out, f"rank{rank}.json").write_text(json.dumps({
            "step": t.step, "alive": [m.key for m in t.alive], "weights": weights,
            "pruned": sorted(e["key"] for r in reports.metrics for e in r["members"]
                             if e.get("pruned")),
            "masked": [e["filter/masked_fraction"] for e in reports.member("kd/s0")
                       if "filter/masked_fraction" in e]}))
    finally:
        dist.destroy_process_group()


def test_halving_and_the_filter_stop_agree_on_two_workers(tiny_bert, tmp_path_factory, tmp_path):
    cache = tmp_path_factory.mktemp("cache")
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(2, init, str(tmp_path), str(tiny_bert), str(cache)), nprocs=2,
             join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["step"] == r1["step"] == 9  # both ranks trained to the end
    assert r0["alive"] == r1["alive"] and len(r0["alive"]) < 7
    assert r0["pruned"] == r1["pruned"] and r0["pruned"]
    assert r0["weights"] == r1["weights"]
    assert any("word_embeddings" in n for n in r0["weights"])
    # the filter's share is the array's (both workers' rows), the same number on both ranks
    assert r0["masked"] and r0["masked"] == r1["masked"]
