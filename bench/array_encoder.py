"""Time M encoder members' forward+backward: a Python loop, torch.func vmap, and StackedEncoder.

One training step of a trial array of M members (each its own weights, its own batch of 2 * bs
rows, i.e. both SimCSE dropout views, of length L, dropout on), forward + backward of a loss on
every member's [CLS] (no optimizer), timed three ways:

  loop     M Hugging Face ``BertModel``s, one forward/backward each in a Python loop (what M
           packed processes do, minus the process overhead);
  vmap     ``torch.func.stack_module_state`` + ``functional_call`` + ``vmap(randomness="different")``
           over one ``BertModel`` (the mask is passed as a 4-d additive float mask: HF's mask
           helpers branch on the mask's values, which vmap refuses for a batched 2-d mask);
  stacked  ``trainables.arrays.StackedEncoder`` with one ``torch.Generator`` per member.

On CUDA all three run under bf16 autocast (as ``Trainer``), on CPU in fp32. tokens/s counts
2 * bs * L * M tokens per step. The independence line compares member 0's train-mode output in an
array of 1 and in an array of M (same weights, rows and seed): vmap draws one dropout tensor for the
whole array from the global RNG, so member 0's masks change with M; StackedEncoder's do not.
(The loop shares the global RNG too: member i's masks depend on how many numbers members 0..i-1
drew, so it is independent only with a forked RNG per member.) Commands: bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.train_step import _peak_bytes, _reset_peak, _sync  # noqa: E402
from trainables.arrays import StackedEncoder  # noqa: E402

APPROACHES = ("loop", "vmap", "stacked")


def base_model(a: argparse.Namespace):
    """One fp32 BertModel (no pooler): MiniLM's real weights, or a random BERT-base / tiny config."""
    from transformers import AutoModel, BertConfig, BertModel

    if a.minilm:
        return AutoModel.from_pretrained(a.minilm, dtype=torch.float32, add_pooling_layer=False)
    torch.manual_seed(0)
    dims = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
            if a.tiny else {})
    return BertModel(BertConfig(**dims), add_pooling_layer=False)


def member_states(base, m: int) -> list[dict[str, torch.Tensor]]:
    """M distinct members: the base weights plus member-seeded noise (member 0 = the base)."""
    out = []
    for i in range(m):
        g = torch.Generator().manual_seed(i)
        out.append({k: v if i == 0 else v + 1e-3 * torch.randn(v.shape, generator=g)
                    for k, v in base.state_dict().items()})
    return out


def batches(cfg, m: int, rows: int, length: int, ragged: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, rows, L) ids and mask; ``ragged``: member i's rows end by L - (i % 3), lengths >= 4."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(999, cfg.vocab_size, (m, rows, length), generator=g)
    if ragged:
        top = torch.tensor([length - i % 3 for i in range(m)])[:, None]
        lens = 4 + (torch.rand(m, rows, generator=g) * (top - 3)).long().clamp(max=top)
    else:
        lens = torch.full((m, rows), length)
    mask = (torch.arange(length) < lens[..., None]).long()
    return ids.masked_fill(mask == 0, cfg.pad_token_id).to(device), mask.to(device)


class Runner:
    """One approach over M members: ``forward`` -> (M, rows, L, H) in train mode, ``step`` = one
    timed forward + backward of every member (the loop: member by member, as separate runs)."""

    def __init__(self, approach: str, base, states, device: torch.device):
        self.approach, self.device, m = approach, device, len(states)
        if approach == "stacked":
            self.enc = StackedEncoder(base.config, states).to(device)
            self.leaves = list(self.enc.parameters())
            return
        self.models = []
        for sd in states:
            mod = copy.deepcopy(base)
            mod.load_state_dict(sd)
            self.models.append(mod.to(device).train())
        if approach == "loop":
            self.leaves = [p for mod in self.models for p in mod.parameters()]
            return
        self.params, self.buffers = stack_module_state(self.models)
        skeleton = copy.deepcopy(self.models[0]).to("meta")
        del self.models

        def one(p, b, ids, add_mask):
            return functional_call(skeleton, (p, b), (ids,), {"attention_mask": add_mask}).last_hidden_state

        self.batched = vmap(one, randomness="different")
        self.leaves = list(self.params.values())
        assert m == next(iter(self.params.values())).shape[0]

    def _autocast(self):
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
        with self._autocast():
            if self.approach == "stacked":
                gens = [torch.Generator(device=self.device).manual_seed(seed + i)
                        for i in range(ids.shape[0])]
                return self.enc(ids, mask, gens)
            torch.manual_seed(seed)
            if self.approach == "loop":
                return torch.stack([mod(input_ids=ids[i], attention_mask=mask[i]).last_hidden_state
                                    for i, mod in enumerate(self.models)])
            add = (1.0 - mask[:, :, None, None, :].float()) * torch.finfo(torch.float32).min
            return self.batched(self.params, self.buffers, ids, add)

    def step(self, ids: torch.Tensor, mask: torch.Tensor, seed: int) -> None:
        for p in self.leaves:
            p.grad = None
        if self.approach != "loop":
            self.forward(ids, mask, seed)[:, :, 0].float().square().mean().backward()
            return
        torch.manual_seed(seed)
        for i, mod in enumerate(self.models):
            with self._autocast():
                out = mod(input_ids=ids[i], attention_mask=mask[i]).last_hidden_state
            out[:, 0].float().square().mean().backward()


def time_steps(run: Runner, ids, mask, a, device) -> list[float]:
    for s in range(a.warmup):
        run.step(ids, mask, s)
    windows = []
    for w in range(a.windows):
        _sync(device)
        t0 = time.perf_counter()
        for s in range(a.steps):
            run.step(ids, mask, 1000 * w + s)
        _sync(device)
        windows.append((time.perf_counter() - t0) / a.steps)
    return windows


def member0_drift(approach: str, base, m: int, a, device) -> float:
    """Max |member 0's train output in an array of M - in an array of 1| (same weights/rows/seed)."""
    states = member_states(base, m)
    ids, mask = batches(base.config, m, 2 * a.batch_size, a.max_length, a.ragged, device)
    outs = []
    for k in (1, m):
        with torch.no_grad():
            outs.append(Runner(approach, base, states[:k], device).forward(ids[:k], mask[:k], 0)[0].float())
    return (outs[0] - outs[1]).abs().max().item()


def environment(a: argparse.Namespace, command: str) -> dict:
    import transformers

    if a.device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                     if ln.startswith("model name")), platform.processor() or "cpu")
    git = ""
    with contextlib.suppress(OSError):
        import subprocess

        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=False).stdout.strip()
    return {"command": command, "git": git or None, "torch": torch.__version__,
            "transformers": transformers.__version__, "cuda": torch.version.cuda, "device": name,
            "torch_threads": torch.get_num_threads(), "loadavg_1m": round(os.getloadavg()[0], 2),
            "model": a.minilm or ("tiny" if a.tiny else "bert-base (random)")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, 4 heads")
    model.add_argument("--minilm", default=None, help="a MiniLM (BERT) folder: real weights")
    p.add_argument("--batch-size", type=int, default=16, help="sentences; 2x rows (two views)")
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--members", nargs="+", type=int, default=[1, 5, 20])
    p.add_argument("--approaches", nargs="+", choices=APPROACHES, default=list(APPROACHES))
    p.add_argument("--ragged", action="store_true", help="members of different lengths (<= L)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (5 cuda, 1 cpu)")
    p.add_argument("--steps", type=int, default=None, help="steps per window (20 cuda, 2 cpu)")
    p.add_argument("--windows", type=int, default=None, help="timed windows (5 cuda, 2 cpu)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    gpu = a.device == "cuda"
    if gpu and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    a.warmup = a.warmup if a.warmup is not None else (5 if gpu else 1)
    a.steps, a.windows = a.steps or (20 if gpu else 2), a.windows or (5 if gpu else 2)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    command = " ".join(["python", *map(shlex.quote, sys.argv if argv is None else ["bench/array_encoder.py", *argv])])
    env = environment(a, command)
    for key, value in env.items():
        print(f"# {key:13s} {value}")
    device = torch.device(a.device)
    base = base_model(a)
    rows, length = 2 * a.batch_size, a.max_length
    head = f"{'approach':8s} {'M':>3s} {'ms/step':>9s} {'ms/member':>9s} {'tokens/s':>9s} {'peak MiB':>9s}"
    print(head + "\n" + "-" * len(head))
    results = []
    for m in a.members:
        states = member_states(base, m)
        ids, mask = batches(base.config, m, rows, length, a.ragged, device)
        for approach in a.approaches:
            _reset_peak(device)
            run = Runner(approach, base, states, device)
            windows = time_steps(run, ids, mask, a, device)
            mem = _peak_bytes(device)
            del run
            step_s = statistics.median(windows)
            r = {"approach": approach, "members": m, "step_ms": step_s * 1e3,
                 "window_ms": [w * 1e3 for w in windows],
                 "tokens_per_s": rows * length * m / step_s, "peak_mem_bytes": mem}
            results.append(r)
            print(f"{approach:8s} {m:3d} {r['step_ms']:9.1f} {r['step_ms'] / m:9.1f} "
                  f"{r['tokens_per_s']:9.0f} {mem / 2**20:9.0f}", flush=True)
    drift = {}
    m_max = max(a.members)
    if m_max > 1:
        print(f"\nindependence: max |member 0 in an array of {m_max} - alone| (train mode, same seed)")
        for approach in [x for x in a.approaches if x != "loop"]:
            drift[approach] = member0_drift(approach, base, m_max, a, device)
            verdict = "independent" if drift[approach] == 0 else "NOT independent: its masks change with M"
            print(f"  {approach:8s} {drift[approach]:.3g}  {verdict}")
    if a.json:
        a.json.write_text(json.dumps({"env": env, "results": results, "member0_drift": drift}, indent=2) + "\n")


if __name__ == "__main__":
    main()
