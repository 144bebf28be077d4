"""The trainable part of an array: one stacked encoder and MLP, and each member's own heads.

The encoder and the SimCSE MLP have the same shape in every member, so they are stacked along a
leading member axis and run as batched matmuls; a method's heads differ between members (MCSE,
KDMCSE and DALR may share an array), are small, and stay per member. An encoder the stacked one
cannot express is a ``LoopedEncoder`` (``looped.py``): its parameters are per member too, and
the MLP stays stacked.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from trainables.arrays.encoder import StackedEncoder, batched_linear
from trainables.arrays.looped import LoopedEncoder
from trainables.models.heads import MethodHeads


class ArrayModel(nn.Module):
    def __init__(self, encoder: StackedEncoder | LoopedEncoder, mlps: Sequence[nn.Sequential],
                 heads: Sequence[MethodHeads]):
        super().__init__()
        if not encoder.n_members == len(mlps) == len(heads):
            raise ValueError(f"{encoder.n_members} encoders, {len(mlps)} MLPs, {len(heads)} heads")
        self.encoder = encoder
        self.mlp_weight = nn.Parameter(torch.stack([m[0].weight.detach() for m in mlps]))
        self.mlp_bias = nn.Parameter(torch.stack([m[0].bias.detach() for m in mlps]))
        self.heads = nn.ModuleList(heads)

    @property
    def n_members(self) -> int:
        return self.encoder.n_members

    def stacked_parameters(self) -> list[nn.Parameter]:
        """Parameters with a leading member axis."""
        return [*self.encoder.stacked_parameters(), self.mlp_weight, self.mlp_bias]

    def gathered_parameters(self) -> list[nn.Parameter]:
        """Stacked parameters that must stay contiguous tensors (``StackedEncoder``'s)."""
        return self.encoder.gathered_parameters()

    def own_parameters(self) -> list[list[nn.Parameter]]:
        """Per member, the trainable parameters only it has: a looped encoder's, its heads'."""
        return [[*self.encoder.member_parameters(i), *(p for p in h.parameters() if p.requires_grad)]
                for i, h in enumerate(self.heads)]

    def cls(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            generators: Sequence[torch.Generator] | None = None,
            extents: tuple[Sequence[int], Sequence[int]] | None = None) -> torch.Tensor:
        """[CLS] before the MLP (the evaluation embedding): (M, N, H). ``extents``: each member's
        rows and length, where known (no read-back of the mask)."""
        return self.encoder(input_ids, attention_mask, generators, extents)[:, :, 0]

    def mlp(self, cls: torch.Tensor) -> torch.Tensor:
        """SimCSE's MLP of every member: tanh(cls W_i^T + b_i), cls (M, N, H)."""
        return torch.tanh(batched_linear(cls, self.mlp_weight, self.mlp_bias))

    @torch.no_grad()
    def select(self, keep: Sequence[int]) -> None:
        """Keep members ``keep`` in that order, with their gradients (the array shrinks)."""
        self.encoder.select(keep)
        idx = torch.as_tensor(list(keep), dtype=torch.long, device=self.mlp_weight.device)
        for p in (self.mlp_weight, self.mlp_bias):
            grad = p.grad
            p.data = p.data[idx]
            p.grad = grad[idx] if grad is not None else None
        self.heads = nn.ModuleList([self.heads[i] for i in keep])

    def member_state(self, i: int) -> dict[str, dict[str, torch.Tensor]]:
        """Member i's weights on the CPU: HF encoder keys, the MLP, the heads."""
        return {
            "encoder": {k: v.detach().to("cpu", copy=True)
                        for k, v in self.encoder.member_state_dict(i).items()},
            "mlp": {"0.weight": self.mlp_weight[i].detach().to("cpu", copy=True),
                    "0.bias": self.mlp_bias[i].detach().to("cpu", copy=True)},
            "heads": {k: v.detach().to("cpu", copy=True)
                      for k, v in self.heads[i].state_dict().items()},
        }

    @torch.no_grad()
    def load_member_state(self, i: int, state: dict[str, dict[str, torch.Tensor]]) -> None:
        self.encoder.load_member_state_dict(i, state["encoder"])
        self.mlp_weight[i].copy_(state["mlp"]["0.weight"])
        self.mlp_bias[i].copy_(state["mlp"]["0.bias"])
        self.heads[i].load_state_dict(state["heads"])
