"""Every private API the project leans on exists in the installed versions, and each is read in one
place: a Ray or torch upgrade that moves one fails here, by name, instead of silently somewhere.

Where: ``trainables/runtime/ray_env.py`` (Ray's ``_private.state``, ``_private.worker``, Train V2's
``_internal`` context) and ``trainables/arrays/optim.py`` (torch's fused AdamW kernel and
``_foreach_norm``).
"""

from __future__ import annotations

import re

import pytest

from tests.test_imports import ROOT

PLACES = {
    "ray._private": "trainables/runtime/ray_env.py",
    "ray.train.v2._internal": "trainables/runtime/ray_env.py",
    "torch._fused_adamw_": "trainables/arrays/optim.py",
    "torch._foreach_norm": "trainables/arrays/optim.py",
}


def test_ray_private_state_is_there():
    from trainables.runtime.ray_env import private_state_api

    assert private_state_api() is not None, "ray._private.state moved: see ray_env.private_state_api"


def test_ray_private_worker_printer_is_there():
    import ray._private.worker as rw

    assert callable(getattr(rw, "print_to_stdstream", None)), (
        "ray._private.worker.print_to_stdstream moved: ray_env.quiet_raylet does nothing")


def test_ray_train_v2_context_is_there():
    import ray.train.v2._internal.execution.context as ctx

    assert callable(getattr(ctx, "get_train_context", None)), "Train V2's get_train_context moved"
    assert hasattr(ctx, "logger"), "Train V2's context logger moved: reports echo at INFO"


def test_torch_fused_adamw_kernel_is_there():
    import torch

    from trainables.arrays import optim

    # optim falls back to a slower per-tensor loop without it: found by hasattr, so only this says so
    assert hasattr(torch, "_fused_adamw_") and optim.FUSED, "torch._fused_adamw_ is gone"
    assert callable(getattr(torch, "_foreach_norm", None)), "torch._foreach_norm is gone"


@pytest.mark.parametrize("api", sorted(PLACES))
def test_each_private_api_is_read_in_one_place(api):
    pattern = re.compile(re.escape(api) + r"\b")
    users = sorted(str(p.relative_to(ROOT)) for pkg in ("trainables", "orchestrator", "search_spaces")
                   for p in (ROOT / pkg).rglob("*.py") if pattern.search(p.read_text()))
    assert users == [PLACES[api]], f"{api} is used in {users}; wrap it in {PLACES[api]} instead"
