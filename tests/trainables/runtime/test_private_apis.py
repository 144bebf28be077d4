"""Every private API the project leans on exists in the installed versions, and each is read in one
place: a Ray or torch upgrade that moves one fails here, by name, instead of silently somewhere.

Where: ``trainables/runtime/ray_private.py`` (Ray's ``_private`` modules), ``ray_env.py`` (Train V2's
``_internal`` context) and ``trainables/arrays/kernels.py`` (torch's fused AdamW kernel and its
multi-tensor ``_foreach_`` calls, each checked against its schema at import, with a public
fallback). No other module of the project, its benchmarks or its examples calls a private torch
function (``test_no_private_torch_call_elsewhere`` reads them all).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.test_imports import ROOT
from trainables.arrays import kernels

KERNELS = "trainables/arrays/kernels.py"
PLACES = {
    "ray._private": "trainables/runtime/ray_private.py",
    "ray.experimental.internal_kv": "trainables/runtime/ray_private.py",
    "ray.train.v2._internal": "trainables/runtime/ray_env.py",
    "torch._fused_adamw_": KERNELS,
    "torch._foreach_norm": KERNELS,
    "torch._foreach_mul_": KERNELS,
    "torch._foreach_copy_": KERNELS,
    "torch.ops.aten": KERNELS,  # the private operators' schemas (``OpOverload._schema``)
    "torch._dynamo.config": KERNELS,  # the captured step's switch to trace autograd.grad
    "torch.utils._python_dispatch": KERNELS,  # counting a method's operators
}
NOT_OPERATORS = ("torch._dynamo.config",)
"""private APIs of ``PLACES`` in kernels.py that are no operator with a schema to check"""
"""every private API -> the one module that calls it"""
TEST_ONLY = {"torch._dynamo": "tests/trainables/arrays/test_capture.py"}
"""private APIs only a test reads: whether Dynamo compiled a frame is in its counters alone"""
PRIVATE_TORCH = re.compile(r"\btorch(?:\.\w+)*\._[a-z]\w*|\b_foreach_\w+|\b_fused_\w+_\b|\._schema\b")
"""a private torch name: ``torch._x``, ``torch.a._x``, a ``_foreach_`` or in-place ``_fused_..._``
kernel by any path (``getattr(torch, "_fused_adamw_")``), an operator's ``_schema``"""


def test_ray_private_state_is_there():
    from trainables.runtime.ray_env import private_state_api

    assert private_state_api() is not None, "ray._private.state moved: see ray_env.private_state_api"


def test_ray_private_worker_printer_is_there():
    import ray._private.worker as rw

    assert callable(getattr(rw, "print_to_stdstream", None)), (
        "ray._private.worker.print_to_stdstream moved: ray_env.quiet_raylet does nothing")


def test_the_gcs_key_value_store_is_there():
    import ray.experimental.internal_kv as kv

    for name in ("_internal_kv_put", "_internal_kv_get", "_internal_kv_del"):
        assert callable(getattr(kv, name, None)), f"ray.experimental.internal_kv.{name} moved"


def test_ray_train_v2_context_is_there():
    import ray.train.v2._internal.execution.context as ctx

    assert callable(getattr(ctx, "get_train_context", None)), "Train V2's get_train_context moved"
    assert hasattr(ctx, "logger"), "Train V2's context logger moved: reports echo at INFO"


def test_train_v2_default_callbacks_are_there():
    """``ray_env.lean_trainer`` filters Train's default callbacks by class and switches its
    preemption watcher off by name."""
    import ray.train.v2._internal.constants as constants
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from trainables.runtime.ray_env import PREEMPTION_WATCHER

    assert callable(getattr(DataParallelTrainer, "_create_default_callbacks", None))
    assert DatasetsCallback and PlacementGroupCleanerCallback
    assert constants.ENABLE_PREEMPTION_WATCHER_ENV_VAR == PREEMPTION_WATCHER
    assert PREEMPTION_WATCHER in constants.ENV_VARS_TO_PROPAGATE  # reaches the controller


def test_every_private_torch_call_fits_this_torch():
    """Each kernel is found and its schema is the one kernels.py calls: no fallback runs here
    (a torch upgrade that changes one names it, and the arrays train slower until it is mended)."""
    assert kernels.fallbacks() == {}, kernels.fallbacks()
    assert kernels.FUSED_ADAMW
    assert {c.name for c in kernels.CALLS} == {k for k, v in PLACES.items()
                                               if v == KERNELS and k.startswith("torch._")
                                               and k not in NOT_OPERATORS}
    assert kernels.optimizer_path() == "optimizer: fused AdamW (torch._fused_adamw_)"
    assert kernels.autograd_in_graphs_why() is None  # compile=graphs captures the whole step


@pytest.mark.parametrize("api", sorted(PLACES))
def test_each_private_api_is_read_in_one_place(api):
    pattern = re.compile(re.escape(api) + r"\b")
    users = sorted(str(p.relative_to(ROOT)) for pkg in ("trainables", "orchestrator", "search_spaces")
                   for p in (ROOT / pkg).rglob("*.py") if pattern.search(p.read_text()))
    assert users == [PLACES[api]], f"{api} is used in {users}; wrap it in {PLACES[api]} instead"


def test_no_private_torch_call_elsewhere():
    """Every private torch name in the project's code, benchmarks, examples and tests is in
    kernels.py, or a test's reading of Dynamo's counters."""
    found = {}
    for folder in ("trainables", "orchestrator", "search_spaces", "bench", "examples", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel in (KERNELS, "tests/trainables/runtime/test_private_apis.py"):
                continue  # the module that calls them, and this test, which names them
            for name in PRIVATE_TORCH.findall(path.read_text()):
                if TEST_ONLY.get(name) != rel:
                    found.setdefault(rel, set()).add(name)
    assert not found, f"private torch calls outside {KERNELS}: {found}"


# --- the checks themselves ----------------------------------------------------------------
def schema_of(text: str):
    """A parsed operator schema, as torch.ops.aten gives one."""
    return torch._C.parse_schema(text)


FUSED = kernels.CALLS[0]
REAL = ("aten::_fused_adamw_(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, "
        "Tensor(d!)[] exp_avg_sqs, Tensor(e!)[] max_exp_avg_sqs, Tensor[] state_steps, *, float lr, "
        "float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, "
        "Tensor? grad_scale=None, Tensor? found_inf=None) -> ()")


@pytest.mark.parametrize("text, why", [
    (REAL, None),
    (REAL.replace("Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs",
                  "Tensor(d!)[] exp_avg_sqs, Tensor(c!)[] exp_avgs"), "now takes (self, grads, exp_avg_sqs"),
    (REAL.replace("Tensor(e!)[] max_exp_avg_sqs, ", ""), "now takes (self, grads, exp_avgs, exp_avg_sqs, state_steps)"),
    (REAL.replace("bool maximize,", "bool maximize, float momentum,"), "now requires momentum"),
    (REAL.replace("float eps,", "float epsilon,"), "no longer takes eps"),
    (REAL.replace("Tensor[] state_steps", "float[] state_steps"), "state_steps is now List[float]"),
])
def test_the_fused_kernels_positional_signature_is_checked(text, why):
    got = kernels.mismatch(FUSED, schema_of(text))
    assert got is None if why is None else (got is not None and why in got), got


def test_a_missing_kernel_is_named(monkeypatch):
    monkeypatch.delattr(torch, "_foreach_copy_")
    assert kernels.mismatch(kernels.CALLS[-1]) == "torch._foreach_copy_ is missing"


def test_the_public_fallbacks_compute_what_the_kernels_do(monkeypatch):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g)]
    norms = kernels.foreach_norm(xs)
    a, b = [x.clone() for x in xs], [x.clone() for x in xs]
    kernels.foreach_mul_(a, [torch.tensor(2.0), torch.tensor(-0.5)])
    kernels.foreach_mul_(b, 3.0)
    c = [torch.zeros_like(x) for x in xs]
    kernels.foreach_copy_(c, xs)
    for name in ("_norm_kernel", "_mul_kernel", "_copy_kernel"):
        monkeypatch.setattr(kernels, name, None)
    a2, b2 = [x.clone() for x in xs], [x.clone() for x in xs]
    kernels.foreach_mul_(a2, [torch.tensor(2.0), torch.tensor(-0.5)])
    kernels.foreach_mul_(b2, 3.0)
    c2 = [torch.zeros_like(x) for x in xs]
    kernels.foreach_copy_(c2, xs)
    torch.testing.assert_close(kernels.foreach_norm(xs), norms)
    for got, want in ((a2, a), (b2, b), (c2, c)):
        for x, y in zip(got, want, strict=True):
            assert torch.equal(x, y)


def test_the_path_is_said_once_and_names_a_fallback(monkeypatch):
    said = []
    monkeypatch.setattr(kernels, "_announced", False)
    kernels.announce(said.append)
    kernels.announce(said.append)
    assert said == ["optimizer: fused AdamW (torch._fused_adamw_)"]
    monkeypatch.setattr(kernels, "FUSED_ADAMW", False)
    monkeypatch.setattr(kernels, "FUSED_ADAMW_WHY", "torch._fused_adamw_ is missing")
    monkeypatch.setattr(kernels, "_COPY_WHY", "torch._foreach_copy_ is missing")
    assert kernels.optimizer_path() == (
        "optimizer: single-tensor AdamW, slower (torch._fused_adamw_ is missing); public loops "
        "instead of torch._foreach_copy_ is missing")


def test_counting_operators_does_not_import_dynamo():
    """The driver's pre-start check counts a method's operators: torch wraps a dispatch mode in
    ``_disable_dynamo``, whose first call imports torch._dynamo (~3 s before anything starts),
    unless the mode's ``_should_skip_dynamo`` says no. A torch that drops that hook fails here."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from trainables.arrays.kernels import KernelCount\n"
            "with KernelCount(frozenset()) as c:\n"
            "    (torch.ones(3, requires_grad=True) * 2).sum().backward()\n"
            "assert c.count >= 3, c.count\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", "counting imported torch._dynamo: see kernels.KernelCount"
