"""A captured step: the array's encoder forward and backward through ``torch.compile`` and, on
CUDA, CUDA graphs (``RunConfig.compile``).

What is captured is the stacked encoder's forward once its dropout masks are drawn
(``StackedEncoder.encode``): pure tensor code over fixed parameters, where nearly all of a step's
FLOPs are. The masks are drawn eagerly, each member from its own generator over its own extent,
so a member's random stream, and with it its numbers, are what the eager step gives (to the
rounding of fused kernels). The heads and losses run as one vmapped computation per method
(``batched.py``) and the optimiser eagerly; capturing them too is not done.

- ``default``: ``torch.compile`` (Inductor); shapes may change from step to step (a batch's
  longest sentence), which costs a recompilation per new shape until Dynamo marks them dynamic;
- ``graphs``: ``mode="reduce-overhead"`` on CUDA (CUDA graphs: one launch replays the whole
  forward), the trainer pads every step's batches to batch_size x max_length so that each step
  has one shape. On a CPU there are no CUDA graphs: it compiles as ``default`` at that one shape.

The eager step stays the default until GPU figures (bench/gpu_suite.py) show a captured one both
faster and exact.
"""

from __future__ import annotations

import torch

from trainables.arrays.encoder import StackedEncoder

MODES = ("off", "default", "graphs")
BACKEND = "inductor"
"""torch.compile's backend (the CPU tests use "aot_eager": the same capture, no code generation)"""


def capture(encoder: torch.nn.Module, mode: str, device: torch.device) -> str | None:
    """Compile ``encoder``'s ``encode`` in place for ``mode``; returns a line saying what was not
    captured (a looped encoder: one Hugging Face model per member), else None."""
    if mode not in MODES:
        raise ValueError(f"compile={mode!r}; use one of {MODES}")
    if mode == "off":
        return None
    if not isinstance(encoder, StackedEncoder):
        return (f"compile={mode}: the looped encoder ({type(encoder).__name__}) runs eagerly; "
                "only the stacked encoder is captured")
    how = "reduce-overhead" if mode == "graphs" and device.type == "cuda" else "default"
    kw = {"mode": how} if BACKEND == "inductor" else {}
    encoder.encode = torch.compile(encoder.encode, backend=BACKEND, **kw)  # instance attribute: the module
    return None                                              # and its state_dict are unchanged
