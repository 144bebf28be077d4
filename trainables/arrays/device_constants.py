"""Small tensors a step reuses on the device, each made once from its values."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class DeviceConstants:
    """Small tensors a step reuses (index and limit vectors), each made once from its values: a
    tensor built from a Python list is a copy from the host, which on CUDA waits for the stream
    (pageable memory)."""

    def __init__(self) -> None:
        self._made: dict[tuple, torch.Tensor] = {}

    def __call__(self, values: Sequence[float] | Sequence[int], dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        key = (tuple(values), dtype, device)
        if key not in self._made:
            self._made[key] = torch.tensor(list(values), dtype=dtype, device=device)
        return self._made[key]

    def clear(self) -> None:
        self._made.clear()
