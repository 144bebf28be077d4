"""Operator launches per training step of an array, as the member count grows: torch.profiler on a CPU.

    python bench/launch_count.py --json launch_count.json                 # BERT-base depth, bs 64, L 32
    python bench/launch_count.py --shapes 96:1,5,20 --methods mcse kdmcse dalr   # a mixed array

What a GPU sees of one ``ArrayTrainer.train_step`` is the operators the host dispatches, each a
kernel launch (or none, for a view). Those do not depend on the device, so a CPU profile counts
them. Counted per step, after a warm-up step:

- **ops**: the outermost aten operators (an ``aten::linear`` that calls ``aten::addmm`` is one);
- **kernels**: the ops that compute something, i.e. whose subtree holds an operator other than a
  view, a metadata query or an allocation (``view``, ``select``, ``transpose``, ``expand``,
  ``empty``, a ``to`` or ``contiguous`` that copies nothing, ...). On a GPU each launches at least
  one kernel; a composite op may launch more, and torch's fused AdamW launches one kernel per
  chunk of its tensor list, so this is a lower bound there.

Each op is attributed by the Python frames it was called from to a phase of the step: data
(each member's batch), batch assembly (padding and stacking the members' batches), dropout draws
(``arrays/dropout.py``), encoder (``arrays/encoder.py`` and the MLP in ``arrays/array_model.py``),
heads + objective (``heads.py``, ``objectives/``), teachers, finite check, bookkeeping (loss sums),
optimizer (``arrays/optim.py``, ``arrays/flat.py``: clipping, AdamW, zero_grad), and the backward of each: an op the
autograd engine runs is counted under "backward: <phase of the forward op that made its node>",
gradient accumulation into leaves under "backward: accumulate".

Shapes: BERT-base depth (12 layers, 12 heads, intermediate 4 x hidden, vocab 30522), batch 64,
32 tokens, caption+image steps (``--kinds pair text`` for both kinds). An op count does not
depend on the hidden size, the batch or the length, only on the layers, the methods and M; a
BERT-base member needs about 5 GB of CPU memory in fp32 (weights, AdamW moments, activations),
so ``--shapes 768:1,2 96:1,2,5,20`` (the default) counts hidden 768 for M = 1 and 2 and hidden 96
(12 heads of 8) for M = 1, 2, 5 and 20; equal counts at M = 1 and 2 in both widths show the
width does not matter. Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a fresh clone: python bench/...
from bench.train_step import (  # noqa: E402
    METHODS,
    BenchConfig,
    SyntheticData,
    build_ours,
    environment,
    make_workspace,
)

NO_KERNEL = frozenset(f"aten::{n}" for n in (
    "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "slice", "select", "narrow",
    "transpose", "t", "permute", "unsqueeze", "squeeze", "expand", "expand_as", "as_strided",
    "alias", "detach", "detach_", "lift_fresh", "new_empty", "new_empty_strided", "unbind", "split", "split_with_sizes", "chunk",
    "unflatten", "flatten", "diagonal", "empty", "empty_like", "empty_strided", "resize_", "set_",
    "to", "contiguous", "result_type", "promote_types", "scalar_tensor", "resolve_conj",
    "resolve_neg", "_has_compatible_shallow_copy_type", "size", "stride", "numel", "dim",
    "is_floating_point", "is_complex", "_nested_tensor_from_mask_left_aligned",
    "dropout"))
"""operators that launch nothing themselves: views, metadata, allocations (a ``to`` or
``contiguous`` that copies shows its ``_to_copy``/``copy_``/``clone`` child, which counts; so does
a ``dropout`` in train mode, while in eval mode, as in the frozen teachers, it returns its input)"""
FRAME = re.compile(r"(?:^|/)(trainables|bench)/([\w/]+)\.py\(\d+\): (\w+)")
PHASES = ("data", "batch assembly", "dropout draws", "encoder", "teachers", "heads + objective",
          "finite check", "bookkeeping", "optimizer", "other")
CONSTANT = ("encoder", "backward: encoder")
"""phases that must not grow with M (the stacked encoder's forward and backward)"""


def phase_of_frame(pkg: str, path: str, func: str) -> str | None:
    """The phase of a Python frame in this repository, or None to look further out."""
    if pkg == "bench":
        return "data" if func == "batch" else None
    if path == "arrays/dropout":
        return "encoder" if func == "apply" else "dropout draws"
    if path in ("arrays/encoder", "arrays/array_model"):
        return "encoder"
    if path in ("heads", "arrays/batched") or path.startswith("objectives/"):
        return "heads + objective"
    if path == "teachers":
        return "teachers"
    if path in ("arrays/optim", "arrays/flat"):
        return "optimizer"
    if path in ("data", "corpus"):
        return "data"
    if path == "arrays/members":
        return "bookkeeping" if func in ("add_terms", "pop_means") else "batch assembly"
    if path == "arrays/teachers":
        return {"teacher_outputs": "teachers", "teacher_inputs": "heads + objective"}.get(func, "other")
    if path == "arrays/finite_check":
        return "finite check"
    if path == "arrays/trainer":
        return {"train_step": "batch assembly"}.get(func, "other")
    return None


def _ancestors(e) -> Iterable[Any]:
    p = e.cpu_parent
    while p is not None:
        yield p
        p = p.cpu_parent


def _subtree(e) -> Iterable[Any]:
    yield e
    for c in e.cpu_children:
        yield from _subtree(c)


def _phase_by_frames(e) -> str:
    """The phase of the innermost repository frame an event was called from ("other" if none):
    whatever ``teachers.teacher_outputs`` runs is "teachers", whichever module computes it (stacked
    teachers: arrays/encoder.py)."""
    frames = [m.groups() for a in _ancestors(e) if (m := FRAME.search(a.name))]
    if any(f[1:] == ("arrays/teachers", "teacher_outputs") for f in frames):
        return "teachers"
    return next((ph for f in frames if (ph := phase_of_frame(*f))), "other")


def count_ops(events: Sequence[Any]) -> dict[str, Counter]:
    """-> {"ops": phase -> outermost aten ops, "kernels": phase -> those that compute,
    "names": op name -> kernel ops of that name}."""
    fwd_phase: dict[int, str] = {}
    for e in events:  # a custom autograd.Function's node (encoder.batched_linear) is no aten op
        if (e.sequence_nr >= 0 and not e.name.startswith(("aten::", "autograd::"))
                and not any(a.name.startswith("autograd::") for a in _ancestors(e))):
            fwd_phase.setdefault(e.sequence_nr, _phase_by_frames(e))
    outer = []
    for e in events:
        if not e.name.startswith("aten::") or any(a.name.startswith("aten::") for a in _ancestors(e)):
            continue
        node = next((a for a in _ancestors(e) if a.name.startswith("autograd::engine::evaluate_function")), None)
        phase = None
        if node is None:
            phase = _phase_by_frames(e)
            for d in _subtree(e):  # the autograd node of this op (or of an op inside it)
                if d.sequence_nr >= 0:
                    fwd_phase.setdefault(d.sequence_nr, phase)
        outer.append((e, phase, node))
    ops, kernels, names, by_phase = Counter(), Counter(), Counter(), Counter()
    for e, phase, node in outer:
        if node is not None:
            phase = ("backward: accumulate" if "AccumulateGrad" in node.name
                     else f"backward: {fwd_phase.get(node.sequence_nr, 'other')}")
        ops[phase] += 1
        if any(d.name.startswith("aten::") and d.name not in NO_KERNEL for d in _subtree(e)):
            kernels[phase] += 1
            names[e.name] += 1
            by_phase[f"{phase} | {e.name}"] += 1
    return {"ops": ops, "kernels": kernels, "names": names, "by_phase": by_phase}


def profile_steps(step, steps: int) -> dict[str, Counter]:
    """Counts per step over ``steps`` profiled steps (each step's counts are the same)."""
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(steps):
            step()
    counts = count_ops(prof.events())
    for c in counts.values():
        for k in c:
            if c[k] % steps:
                raise RuntimeError(f"{k}: {c[k]} ops over {steps} steps differ between steps")
            c[k] //= steps
    return counts


def memory_needed(width: int, members: int, bc: BenchConfig) -> float:
    """Bytes an array of ``members`` at hidden ``width`` (BERT-base depth) needs on a CPU in fp32:
    weights, gradients and two AdamW moments, plus about 20 saved floats per hidden unit, token
    and layer for the backward (5.5 GB measured for one BERT-base member, process included)."""
    params = 12 * (12 * width * width + 13 * width) + (30522 + 512 + 2) * width
    tokens = 2 * bc.batch_sizes[0] * bc.max_length
    return members * (16 * params + 20 * 4 * tokens * width * 12) + 1.0e9


def memory_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None


def measure(width: int, members: Sequence[int], kind: str, bc: BenchConfig, methods: Sequence[str],
            steps: int, warmup: int, root: Path, log=lambda s: None) -> list[dict]:
    """One row per M at hidden ``width`` (BERT-base depth), each from a fresh array."""
    dims = (width, 12, 12)
    bc = replace(bc, kind=kind)
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"launch-{width}-", dir=root) as tmp:
        ws = make_workspace(Path(tmp), bc, dims)
        data = SyntheticData(ws, width, bc.max_length, torch.device("cpu"), bc.seed, kind, bc.vocab,
                             clip_text=bc.store == "clip")
        for m in members:
            need, free = memory_needed(width, m, bc), memory_available()
            if free is not None and need > free:
                log(f"hidden {width:4d} M {m:3d} {kind}: skipped, needs about {need / 2**30:.1f} GiB, "
                    f"{free / 2**30:.1f} GiB available")
                rows.append({"width": width, "members": m, "kind": kind, "skipped":
                             f"needs about {need / 2**30:.1f} GiB of memory, {free / 2**30:.1f} GiB were available"})
                continue
            mix = [methods[i % len(methods)] for i in range(m)]
            t0 = time.perf_counter()
            trainer, step, _eval, _ckpt = build_ours(bc, ws, data, mix, bc.batch_sizes[0], members=m)
            for _ in range(warmup):
                step()
            c = profile_steps(step, steps)
            rows.append({"width": width, "layers": 12, "heads": 12, "members": m, "kind": kind,
                         "methods": dict(Counter(mix)), "store": bc.store,
                         "per_member_fallback": dict(trainer.objectives.looped),
                         "ops": sum(c["ops"].values()),
                         "kernels": sum(c["kernels"].values()), "ops_by_phase": dict(c["ops"]),
                         "kernels_by_phase": dict(c["kernels"]), "kernels_by_name": dict(c["names"]),
                         "kernels_by_phase_and_name": dict(c["by_phase"]),
                         "seconds": time.perf_counter() - t0})
            log(f"hidden {width:4d} M {m:3d} {kind}: {rows[-1]['ops']} ops, {rows[-1]['kernels']} kernels "
                f"({rows[-1]['seconds']:.0f} s)")
            del trainer, step, _eval, _ckpt
            gc.collect()
    return rows


def slopes(rows: list[dict]) -> dict[str, Any]:
    """Per (width, kind): kernels per step of M = 1, the extra kernels per extra member per phase,
    and whether the encoder's phases stay constant."""
    rows = [r for r in rows if "skipped" not in r]
    out = {}
    for key in sorted({(r["width"], r["kind"]) for r in rows}):
        rs = sorted((r for r in rows if (r["width"], r["kind"]) == key), key=lambda r: r["members"])
        if len(rs) < 2 or rs[0]["members"] != 1:
            continue
        one, big = rs[0], rs[-1]
        phases = sorted(set(one["kernels_by_phase"]) | set(big["kernels_by_phase"]))
        per = {p: (big["kernels_by_phase"].get(p, 0) - one["kernels_by_phase"].get(p, 0)) / (big["members"] - 1)
               for p in phases}
        out[f"{key[0]}/{key[1]}"] = {
            "one_member": one["kernels"], "per_extra_member": (big["kernels"] - one["kernels"]) / (big["members"] - 1),
            "per_extra_member_by_phase": {p: v for p, v in per.items() if v},
            "encoder_constant": all(r["kernels_by_phase"].get(p, 0) == one["kernels_by_phase"].get(p, 0)
                                    for r in rs for p in CONSTANT)}
    return out


def format_rows(rows: list[dict]) -> str:
    skipped = [r for r in rows if "skipped" in r]
    rows = [r for r in rows if "skipped" not in r]
    phases = [p for p in (*PHASES, *(f"backward: {q}" for q in PHASES), "backward: accumulate")
              if any(r["kernels_by_phase"].get(p) for r in rows)]
    head = ["hidden", "M", "kind", "ops", "kernels", *phases]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in (
            r["width"], r["members"], r["kind"], r["ops"], r["kernels"],
            *(r["kernels_by_phase"].get(p, 0) for p in phases))) + " |")
    lines += [f"hidden {r['width']} M {r['members']} {r['kind']}: skipped, {r['skipped']}" for r in skipped]
    return "\n".join(lines)


def _shape(text: str) -> tuple[int, list[int]]:
    try:
        width, ms = text.split(":")
        out = int(width), [int(m) for m in ms.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use HIDDEN:M,M,... e.g. 96:1,5,20") from None
    if out[0] % 12 or out[0] < 12 or min(out[1]) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: hidden a multiple of 12 (12 heads), members >= 1")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", type=_shape, default=[(768, [1, 2]), (96, [1, 2, 5, 20])],
                   metavar="HIDDEN:M,...", help="hidden sizes and the array sizes counted at each")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=["mcse"],
                   help="member i trains methods[i %% len] (default: MCSE only, for a clean slope)")
    p.add_argument("--kinds", nargs="+", choices=["pair", "text"], default=["pair"])
    p.add_argument("--store", choices=["clip", "resnet"], default="clip",
                   help="caption features: clip (image + CLIP text) or resnet (image only: MCSE's own store)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=1, help="profiled steps per row")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    # the clip norm as a GPU takes it (one norm a row; a CPU takes a long row in chunks)
    import trainables.arrays.flat as flat

    flat.CHUNKED_NORM_DEVICES = ()
    bc = BenchConfig(device="cpu", methods=tuple(dict.fromkeys(a.methods)), batch_sizes=(a.batch_size,),
                     max_length=a.max_length, eval_pairs=(8, 8, 8), store=a.store)
    command = " ".join(["python", "bench/launch_count.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    env = environment(bc, command)
    for key in ("command", "git", "torch", "transformers", "device", "torch_threads", "loadavg_1m"):
        print(f"# {key:13s} {env[key]}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="launch-count-") as root:
        for kind in a.kinds:
            for width, members in a.shapes:
                rows += measure(width, members, kind, bc, a.methods, a.steps, a.warmup, Path(root),
                                log=lambda s: print(s, file=sys.stderr, flush=True))
    report = {"env": env, "rows": rows, "slopes": slopes(rows)}
    print(format_rows(rows))
    for key, s in report["slopes"].items():
        by = ", ".join(f"{k} {v:+g}" for k, v in s["per_extra_member_by_phase"].items())
        print(f"hidden/kind {key}: {s['one_member']} kernels at M = 1, {s['per_extra_member']:+g} per extra "
              f"member ({by}); encoder forward and backward constant in M: {s['encoder_constant']}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
