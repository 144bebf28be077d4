"""The loop on a CUDA device: bf16 autocast and fused AdamW train every method, the objective on
the GPU agrees with the CPU, a GPU checkpoint resumes and exports to a CPU-only reader.

Run with `python -m pytest -m gpu tests/trainables/test_gpu.py` on a machine with a GPU; the
default suite deselects them (pyproject addopts)."""

from __future__ import annotations

import math

import pytest
import torch
from trainables.loop import Trainer

from tests.trainables.objectives.references import batch as objective_batch
from tests.trainables.test_loop import Reports, tiny_cfg
from trainables.objectives import ObjectiveConfig, StudentOutputs, TeacherInputs, compute_objective

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def _to(obj, device, dtype=None):
    fields = {}
    for k, v in vars(obj).items():
        if isinstance(v, torch.Tensor):
            v = v.to(device, dtype if (dtype and v.is_floating_point()) else None)
        elif isinstance(v, tuple):
            v = tuple(t.to(device, dtype if dtype else None) for t in v)
        fields[k] = v
    return type(obj)(**fields)


@pytest.mark.parametrize("method", ["simcse", "mcse", "kdmcse", "dalr"])
def test_every_method_trains_on_cuda_in_bf16(method, tiny_bert, cache, tmp_path):
    cfg = tiny_cfg(tiny_bert, cache, method, max_steps=6, eval_every=3)
    t = Trainer(cfg, device="cuda")
    assert t.amp, "auto precision on CUDA must mean bf16 autocast"
    assert t.optimizer.defaults.get("fused"), "AdamW must be the fused CUDA kernel"
    assert next(t.student.parameters()).is_cuda
    reports = Reports()
    final = t.fit(reports, tmp_path)
    assert [m["step"] for m in reports.metrics] == [3, 6]
    for m in reports.metrics:
        assert math.isfinite(m["loss/total"]) and m["loss/total"] > 0
    # parameters stay fp32 under autocast (master weights); only the matmuls run in bf16
    assert all(p.dtype == torch.float32 for p in t.student.parameters())
    tests = {k: v for k, v in final.items() if k.startswith("test/")}
    assert tests and all(math.isfinite(v) for v in tests.values()), final


@pytest.mark.parametrize("method", ["mcse", "kdmcse", "dalr"])
def test_objective_on_cuda_matches_cpu(method):
    cfg = ObjectiveConfig(method=method, threshold=0.3 if method == "kdmcse" else None)
    st, te = objective_batch(seed=31)
    cpu = compute_objective(cfg, st, te, generator=torch.Generator().manual_seed(3))
    st_c, te_c = _to(st, "cuda"), _to(te, "cuda")
    assert isinstance(st_c, StudentOutputs) and isinstance(te_c, TeacherInputs)
    gpu = compute_objective(cfg, st_c, te_c, generator=torch.Generator("cuda").manual_seed(3))
    for k, v in cpu.items():
        if k == "rank":  # ListMLE draws its tie-break from the generator: device RNGs differ
            continue
        assert abs(gpu[k].item() - v.item()) < 1e-9 * max(1.0, abs(v.item())), k
    # float32 under bf16 autocast: the loss matrices stay float32 and close to float64
    st32, te32 = _to(st, "cuda", torch.float32), _to(te, "cuda", torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        amp = compute_objective(cfg, st32, te32, generator=torch.Generator("cuda").manual_seed(3))
    assert amp["total"].dtype == torch.float32
    assert abs(amp["total"].item() - gpu["total"].item()) < 1e-3 * max(1.0, abs(gpu["total"].item()))


def test_cuda_resume_matches_uninterrupted_and_exports_for_cpu(tiny_bert, cache, tmp_path,
                                                              monkeypatch):
    cfg = tiny_cfg(tiny_bert, cache, "kdmcse", max_steps=6, eval_every=3)
    torch.use_deterministic_algorithms(True, warn_only=True)
    ref = Trainer(cfg, device="cuda")
    ref_reports = Reports()
    ref.fit(ref_reports, tmp_path / "ref")

    class Killed(Exception):
        pass

    orig = Trainer.train_step

    def dying_step(self, kind, indices):
        if self.step + 1 == 5:
            raise Killed
        return orig(self, kind, indices)

    t = Trainer(cfg, device="cuda")
    partial = Reports()
    monkeypatch.setattr(Trainer, "train_step", dying_step)
    with pytest.raises(Killed):
        t.fit(partial, tmp_path / "killed")
    monkeypatch.setattr(Trainer, "train_step", orig)
    resumed = Trainer(cfg, device="cuda")
    resumed.load_state(partial.ckpts[-1])
    rest = Reports()
    resumed.fit(rest, tmp_path / "resumed")
    got = [m["loss/total"] for m in partial.metrics + rest.metrics]
    want = [m["loss/total"] for m in ref_reports.metrics]
    assert got == pytest.approx(want, rel=1e-4)

    # a checkpoint written on the GPU resumes on a CPU-only reader, and the export loads there
    cpu = Trainer(cfg, device="cpu")
    cpu.load_state(partial.ckpts[-1])
    assert cpu.step == 3 and not next(cpu.student.parameters()).is_cuda
    out = resumed.export_best(tmp_path / "export")
    from transformers import AutoModel

    model = AutoModel.from_pretrained(out)
    assert not next(model.parameters()).is_cuda
