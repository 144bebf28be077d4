"""The worked example (examples/softground.py, examples/softground_grid.py): its loss against a
loop reference and against MCSE at alpha = 0, and its grid end to end on the tiny profile through
the real Ray path, whose workers load the method from its file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from orchestrator import ablate
from orchestrator.tracking.client import Tracker
from tests.trainables.objectives.references import batch, close, ref_ce, ref_cos_matrix, rows
from trainables.objectives import MCSESettings, compute_objective
from trainables.objectives.methods import get, load_methods
from trainables.testing import write_tiny_profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
load_methods([str(EXAMPLES / "softground.py")])
import softground  # noqa: E402  (the module load_methods just loaded)


def ref_soft(P, V, img, alpha, tau=0.05, tau_t=0.05):
    """mean_i -sum_j q_ij log softmax_j(cos(P_i, V_j)/tau), q_i = (1-alpha) e_i + alpha softmax."""
    S, L = ref_cos_matrix(img, img), ref_cos_matrix(P, V)
    total = 0.0
    for i in range(len(P)):
        ex = [math.exp(s / tau_t) for s in S[i]]
        q = [(1 - alpha) * (i == j) + alpha * e / sum(ex) for j, e in enumerate(ex)]
        lse = math.log(sum(math.exp(c / tau) for c in L[i]))
        total += -sum(qj * (c / tau - lse) for qj, c in zip(q, L[i], strict=True))
    return total / len(P)


def test_soft_grounding_matches_its_loop_reference():
    st, te = batch(seed=41)
    P1, P2, V, img = rows(st.p1), rows(st.p2), rows(st.v), rows(te.image)
    for alpha in (0.0, 0.3, 1.0):
        got = softground.soft_grounding_loss(st.p1, st.p2, st.v, te.image, alpha)
        want = (ref_soft(P1, V, img, alpha) + ref_soft(P2, V, img, alpha)) / 2
        assert close(got, want, 1e-12), alpha
    q = softground.soft_targets(te.image, 0.3, 0.05)
    assert torch.allclose(q.sum(1), torch.ones(7, dtype=q.dtype)) and (q >= 0).all()


def test_alpha_zero_is_mcse_and_alpha_changes_the_loss():
    st, te = batch(seed=42)
    s0 = get("softground").settings(alpha=0.0)
    mcse = compute_objective(MCSESettings(), st, te)
    mine = compute_objective(s0, st, te)
    assert close(mine["grounding"], mcse["grounding_image"], 1e-12)
    assert close(mine["total"], mcse["total"], 1e-12) and close(mine["text"], mcse["text"], 1e-15)
    assert close(mine["grounding"], ref_ce([[c / 0.05 for c in r] for r in
                                            ref_cos_matrix(rows(st.p1), rows(st.v))]) / 2
                 + ref_ce([[c / 0.05 for c in r] for r in
                           ref_cos_matrix(rows(st.p2), rows(st.v))]) / 2, 1e-12)
    other = compute_objective(get("softground").settings(alpha=0.3), st, te)
    assert not close(other["grounding"], mine["grounding"], 1e-6)
    assert set(compute_objective(s0, st, None)) == {"text", "total"}  # a text batch


def test_soft_grounding_gradients_are_right():
    st, te = batch(bs=4, d=3, g=3, seed=43)
    leaves = tuple(x.clone().requires_grad_() for x in (st.p1, st.p2, st.v))
    assert torch.autograd.gradcheck(
        lambda p1, p2, v: softground.soft_grounding_loss(p1, p2, v, te.image, 0.4), leaves)


# --- the grid, end to end through Ray ------------------------------------------------------
@pytest.fixture(scope="module")
def table(tmp_path_factory, tiny_bert):
    import ray

    from trainables.runtime.ray_env import init_ray

    d = tmp_path_factory.mktemp("softground")
    write_tiny_profile(d, tiny_bert, max_steps=3, eval_every=3)
    init_ray(num_cpus=2, log_to_driver=False)
    try:
        # one cell and the baseline in one array: one Ray Train worker, a fresh process that
        # must load the method from its file before it builds its members
        rc = ablate.main(["--grid", str(EXAMPLES / "softground_grid.py"), "--profile",
                          str(d / "tiny.yaml"), "--seeds", "0", "1", "--cells",
                          "SoftGround tau_t=0.2", "--array-size", "4", "--storage",
                          str(d / "runs"), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"])
    finally:
        ray.shutdown()
    return d, rc


@pytest.mark.slow  # a real table; the plug-in join runs the examples' grids for real
def test_the_example_grid_runs_against_mcse_end_to_end(table):
    d, rc = table
    assert rc == 0
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    children = tr.children(parent.info.run_id)
    cells = {c.data.tags["mmemb.cell"] for c in children}
    assert cells == {"MCSE", "SoftGround tau_t=0.2"} and len(children) == 4
    assert len({c.data.tags["mmemb.array"] for c in children}) == 1
    for c in children:
        assert c.info.status == "FINISHED"
        assert c.data.tags["mmemb.model"] == f"runs:/{c.info.run_id}/model"
        assert "test/avg" in c.data.metrics
        p = c.data.params
        if c.data.tags["mmemb.cell"] == "MCSE":
            assert p["objective.method"] == "mcse" and "objective.alpha" not in p
            continue
        assert p["objective.method"] == "softground" and "objective.teacher_weights" not in p
        assert (p["objective.teacher_temperature"], p["objective.alpha"], p["objective.lam"]) == (
            "0.2", "0.3", "1.0")  # the cell's, the method's default, its demo recipe
        assert tr.client.get_metric_history(c.info.run_id, "loss/grounding")  # its own term
    md = tr.load_artifact_text(parent.info.run_id, "report.md")
    assert "SoftGround tau_t=0.2" in md and "MCSE" in md


def test_the_docs_example_starts_with_imports_that_work_and_explains_every_head_field():
    """docs/methods.md shows the example's import lines first (everything, ``setting``
    included, from trainables.objectives), and they run; its Head reference names every field
    of ``Head``."""
    import dataclasses
    import re
    from pathlib import Path

    from trainables.objectives.methods import Head

    text = (Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text()
    first = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert "from trainables.objectives import" in first and "setting" in first
    exec(compile(first, "docs/methods.md", "exec"), {})  # noqa: S102 - the docs' own lines
    reference = text[text.index("### `Head`"):text.index("### What the loss receives")]
    for f in dataclasses.fields(Head):
        assert f"- `{f.name}`" in reference, f.name
