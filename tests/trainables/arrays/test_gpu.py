"""Arrays on a CUDA device: bf16 autocast trains every method alone and mixed in one array, fp32
master weights and optimiser moments, DALR's text teachers in bf16 on the GPU, CUDA dropout
streams; the objective on the GPU agrees with the CPU; a GPU array resumes from its checkpoint as
if never stopped, and its checkpoint and exported students load on a CPU-only reader.

Run with `python -m pytest -m gpu tests/trainables/arrays/test_gpu.py` on a machine with a GPU; the
default suite deselects them (pyproject addopts)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainables.arrays.harness import Reports, cfg, kill_and_resume
from tests.trainables.objectives.references import batch as objective_batch
from trainables.arrays.trainer import ArrayTrainer
from trainables.objectives import StudentOutputs, TeacherInputs, compute_objective
from trainables.objectives.methods import get

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
METHODS = ("simcse", "mcse", "kdmcse", "dalr")
TERMS = {"simcse": set(), "mcse": {"grounding_image"}, "kdmcse": {"grounding_image", "grounding_text"},
         "dalr": {"consistency", "cma", "info", "ima", "rank", "g2l"}}


def _to(obj, device, dtype=None):
    fields = {}
    for k, v in vars(obj).items():
        if isinstance(v, torch.Tensor):
            v = v.to(device, dtype if (dtype and v.is_floating_point()) else None)
        elif isinstance(v, tuple):
            v = tuple(t.to(device, dtype if dtype else None) for t in v)
        fields[k] = v
    return type(obj)(**fields)


def _check_on_cuda_in_bf16(t: ArrayTrainer) -> None:
    assert t.amp, "precision=bf16 on CUDA must mean bf16 autocast"
    params = list(t.model.parameters())
    assert all(p.is_cuda for p in params)
    # parameters stay fp32 under autocast (master weights); only the matmuls run in bf16
    assert all(p.dtype == torch.float32 for p in params)
    moments = t.optimizer.m_st + t.optimizer.v_st + [x for ms in t.optimizer.m_own for x in ms]
    assert moments and all(x.is_cuda and x.dtype == torch.float32 for x in moments)
    for m in t.members:
        assert m.dropout.device.type == "cuda"  # each member's dropout stream is a CUDA generator
        if m.needs_teachers:  # DALR's frozen teachers: bf16, on the GPU, outside the optimiser
            for teacher in m.teachers.teachers:
                w = next(teacher.model.parameters())
                assert teacher.dtype == w.dtype == torch.bfloat16 and w.is_cuda
                assert not w.requires_grad


def test_the_default_trains_on_cuda_in_fp32_with_tf32_matmuls(tiny_bert, cache):
    """The official runs' arithmetic: fp32, TF32 matmuls (torch 1.7-1.11's default on Ampere)."""
    t = ArrayTrainer([("a", cfg(tiny_bert, cache, "dalr", max_steps=6, eval_every=3))], device="cuda")
    assert not t.amp and torch.backends.cuda.matmul.allow_tf32
    for teacher in t.members[0].teachers.teachers:
        assert next(teacher.model.parameters()).dtype == torch.float32
    t.train_step()


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_on_cuda_in_bf16(method, tiny_bert, cache, tmp_path):
    t = ArrayTrainer([("a", cfg(tiny_bert, cache, method, max_steps=6, eval_every=3, precision="bf16"))],
                     device="cuda")
    _check_on_cuda_in_bf16(t)
    reports = Reports()
    final = t.fit(reports, tmp_path)
    assert [r["step"] for r in reports.metrics] == [3, 6]
    for e in reports.member("a"):
        assert math.isfinite(e["loss/total"]) and e["loss/total"] > 0
        assert 0 <= e["best_stsb_dev"] <= 100
    logged = {k.removeprefix("loss/") for k in reports.member("a")[0] if k.startswith("loss/")}
    assert TERMS[method] <= logged, (TERMS[method], logged)
    _check_on_cuda_in_bf16(t)  # still so after training
    tests = {k: v for k, v in final["a"].items() if k.startswith("test/")}
    assert tests and all(math.isfinite(v) for v in tests.values()), final


def test_a_mixed_array_trains_on_cuda_in_bf16(tiny_bert, cache, tmp_path):
    members = [(m, cfg(tiny_bert, cache, m, seed=i, max_steps=6, eval_every=3, precision="bf16"))
               for i, m in enumerate(METHODS)]
    t = ArrayTrainer(members, device="cuda")
    _check_on_cuda_in_bf16(t)
    assert t.model.n_members == len(METHODS)
    reports = Reports()
    final = t.fit(reports, tmp_path)
    assert set(final) == set(METHODS) and not [m for m in t.members if m.record.error]
    for method in METHODS:
        entries = reports.member(method)
        assert [e["step"] for e in entries] == [3, 6]
        assert all(math.isfinite(e["loss/total"]) for e in entries)
        assert TERMS[method] <= {k.removeprefix("loss/") for k in entries[0] if k.startswith("loss/")}
        assert all(math.isfinite(v) for k, v in final[method].items() if k.startswith("test/"))


@pytest.mark.parametrize("method", ["mcse", "kdmcse", "dalr"])
def test_objective_on_cuda_matches_cpu(method):
    ocfg = get(method).settings(**({"threshold": 0.3} if method == "kdmcse" else {}))
    st, te = objective_batch(seed=31)
    cpu = compute_objective(ocfg, st, te, generator=torch.Generator().manual_seed(3))
    st_c, te_c = _to(st, "cuda"), _to(te, "cuda")
    assert isinstance(st_c, StudentOutputs) and isinstance(te_c, TeacherInputs)
    gpu = compute_objective(ocfg, st_c, te_c, generator=torch.Generator("cuda").manual_seed(3))
    for k, v in cpu.items():
        if k == "rank":  # ListMLE draws its tie-break from the generator: device RNGs differ
            continue
        assert abs(gpu[k].item() - v.item()) < 1e-9 * max(1.0, abs(v.item())), k
    # float32 under bf16 autocast: the loss matrices stay float32 and close to float64
    st32, te32 = _to(st, "cuda", torch.float32), _to(te, "cuda", torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        amp = compute_objective(ocfg, st32, te32, generator=torch.Generator("cuda").manual_seed(3))
    assert amp["total"].dtype == torch.float32
    assert abs(amp["total"].item() - gpu["total"].item()) < 1e-3 * max(1.0, abs(gpu["total"].item()))


@pytest.fixture()
def deterministic():
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(False)


def test_cuda_resume_matches_uninterrupted_and_loads_on_cpu(tiny_bert, cache, tmp_path, monkeypatch,
                                                            deterministic):
    from transformers import AutoModel

    from trainables.models.mlflow_export import DATA

    members = [("k", cfg(tiny_bert, cache, "kdmcse", max_steps=6, eval_every=3, precision="bf16")),
               ("d", cfg(tiny_bert, cache, "dalr", seed=1, max_steps=6, eval_every=3, precision="bf16"))]
    ref = ArrayTrainer(members, device="cuda")
    ref_reports = Reports()
    ref_final = ref.fit(ref_reports, tmp_path / "ref")

    r = kill_and_resume(members, 5, tmp_path, monkeypatch, device="cuda")
    assert r.start == 3
    partial, both, final, resumed = r.partial, r.reports, r.final, r.trainer
    for key, _ in members:
        got = [e["loss/total"] for e in both.member(key)]
        want = [e["loss/total"] for e in ref_reports.member(key)]
        assert got == pytest.approx(want, rel=1e-4), key
        assert final[key]["test/avg"] == pytest.approx(ref_final[key]["test/avg"], abs=1e-2), key

    # the GPU checkpoint opens on a CPU-only reader (weights, optimiser, member records) ...
    state = torch.load(partial.ckpts[-1] / "state.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 3 and state["alive"] == ["k", "d"]
    assert all(not v.is_cuda for v in state["model"].values())
    # ... and each exported best student loads there (an MLflow model: needs the project's mlflow)
    pytest.importorskip("mlflow", reason="exporting an MLflow model needs mlflow installed")
    out = resumed.export_best(tmp_path / "export")
    assert set(out) == {"k", "d"}
    for folder in out.values():
        model = AutoModel.from_pretrained(folder / DATA)
        assert not next(model.parameters()).is_cuda
