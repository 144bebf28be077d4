"""trainables.objectives.composition: each method's settings, per-method totals and switches.

Every total is rebuilt from the loop references (tests/trainables/objectives/references.py).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.trainables.objectives.references import (
    add,
    batch,
    close,
    dot,
    ref_arcsim,
    ref_bias,
    ref_ce,
    ref_consistency,
    ref_cos_matrix,
    ref_g2l,
    ref_kl,
    ref_listmle,
    ref_weighted,
    rows,
    transpose,
)
from trainables.config.run_config import RunConfig
from trainables.objectives.composition import (
    StudentOutputs,
    TeacherInputs,
    compute_objective,
)
from trainables.objectives.methods import get


def settings(method: str, **values):
    """The method's own settings (its dataclass's defaults, ``values`` changed)."""
    return get(method).settings(**values)


def test_settings_defaults():
    r = {m: settings(m) for m in ("simcse", "mcse", "kdmcse", "dalr")}
    assert (r["mcse"].lam, r["kdmcse"].lam, r["dalr"].lam) == (0.01, 0.01, 0.1)
    assert r["dalr"].mu == 0.2 and not hasattr(r["mcse"], "mu")
    assert (
        r["kdmcse"].text_margin,
        r["dalr"].text_margin,
        r["mcse"].text_margin,
        r["simcse"].text_margin,
    ) == (0.15, 0.18, 0.0, 0.0)
    assert (
        r["kdmcse"].grounding_margin,
        r["dalr"].grounding_margin,
        r["mcse"].grounding_margin,
    ) == (0.15, 0.18, 0.0)
    assert (r["kdmcse"].clip_text_term, r["mcse"].clip_text_term) == (True, False)
    assert not hasattr(r["dalr"], "clip_text_term")
    assert settings("kdmcse", lam=0.5).resolved().lam == 0.5
    assert r["dalr"].resolved() == r["dalr"]  # idempotent


@pytest.mark.parametrize(
    "change, words",
    [
        ({"method": "infocse"}, "not a known method"),
        ({"temperature": -0.05}, "temperature"),
        ({"temperature_vl": 0.0}, "temperature_vl"),
        ({"method": "kdmcse", "text_margin": math.pi}, "text_margin"),
        ({"method": "kdmcse", "grounding_margin": -0.1}, "grounding_margin"),
        ({"lam": -1.0}, "lam"),
        ({"threshold_on": "l2"}, "threshold_on"),
        ({"method": "dalr", "teacher_weights": ()}, "teacher_weights"),
        ({"method": "dalr", "teacher_weights": (0.0, 0.0)}, "teacher_weights"),
        ({"method": "dalr", "consistency_margin": 2.0}, "consistency_margin"),
        ({"method": "dalr", "g2l_normalize": "rows"}, "g2l_normalize"),
    ],
)
def test_config_validation(change, words):
    with pytest.raises(ValueError, match=words) as err:
        settings(**{"method": "mcse", **change}).resolved()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["threshold", "clip_text_term"])
def test_a_setting_the_method_has_not_is_refused(key):
    # DALR has no false-negative filter and no CLIP-text term: its settings have no such field
    with pytest.raises(ValueError, match=f"unknown setting 'objective.{key}' for method 'dalr'"):
        RunConfig().with_overrides({"objective.method": "dalr", f"objective.{key}": 0.8})


def test_text_batch_and_simcse():
    st, te = batch(seed=7)
    Z1, Z2 = rows(st.z1), rows(st.z2)
    for method, m in (("simcse", 0.0), ("mcse", 0.0), ("kdmcse", 0.15), ("dalr", 0.18)):
        out = compute_objective(settings(method), st, None)
        assert set(out) == {"text", "total"}
        assert close(out["total"], ref_ce(ref_arcsim(Z1, Z2, 0.05, m)))
    out = compute_objective(settings("simcse"), st, te)  # captions are just text
    assert set(out) == {"text", "total"} and close(
        out["total"], ref_ce(ref_arcsim(Z1, Z2, 0.05, 0.0))
    )


def test_mcse_total():
    st, te = batch(seed=8)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    g = (ref_ce(ref_arcsim(P1, V, 0.05, 0.0)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.0))) / 2
    text = ref_ce(ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.0))
    out = compute_objective(settings("mcse"), st, te)
    assert set(out) == {"text", "grounding_image", "inter", "total"}
    assert close(out["total"], text + 0.01 * g)
    out = compute_objective(settings("mcse", paper_reading=True), st, te)
    assert close(out["total"], text + 0.01 * 2 * g)  # paper l^M sums the views


def kdmcse_ref(st, te, threshold=None, form="code"):
    P1, P2, V, T = rows(st.p1), rows(st.p2), rows(st.v), rows(st.t)
    img, txt = rows(te.image), rows(te.clip_text)
    vv, cc = ref_cos_matrix(img, img), ref_cos_matrix(txt, txt)
    zero = [[0.0] * 7 for _ in range(7)]
    bv = (
        ref_bias([[dot(a, b) for b in img] for a in txt], threshold)
        if threshold is not None
        else zero
    )
    bt = (
        ref_bias([[dot(a, b) for b in txt] for a in img], threshold)
        if threshold is not None
        else zero
    )
    lv = sum(ref_ce(add(ref_arcsim(P, V, 0.05, 0.15, vv, form), bv)) for P in (P1, P2)) / 2
    lt = sum(ref_ce(add(ref_arcsim(P, T, 0.05, 0.15, cc, form), bt)) for P in (P1, P2)) / 2
    return ref_ce(ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.15)), lv, lt


def test_kdmcse_total_and_switches():
    st, te = batch(seed=9)
    text, lv, lt = kdmcse_ref(st, te)
    base = settings("kdmcse")
    out = compute_objective(base, st, te)
    assert set(out) == {"text", "grounding_image", "grounding_text", "inter", "total"}
    assert close(out["grounding_image"], lv) and close(out["grounding_text"], lt)
    assert close(out["total"], text + 0.01 * (lv + lt))
    # threshold filtering (raw dot products; cv for the image term, vc for the text term)
    text, lv_t, lt_t = kdmcse_ref(st, te, threshold=0.3)
    out = compute_objective(base.replace(threshold=0.3), st, te)
    assert close(out["total"], text + 0.01 * (lv_t + lt_t)) and not close(lv_t, lv)
    # without AdapACSE: plain InfoNCE grounding (text margin stays)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    plain_v = sum(ref_ce(ref_arcsim(P, V, 0.05, 0.0)) for P in (P1, P2)) / 2
    out = compute_objective(base.replace(adaptive_margin=False), st, te)
    assert close(out["grounding_image"], plain_v) and close(out["text"], text)
    # no CLIP-text term: removes exactly grounding_text
    out = compute_objective(base.replace(clip_text_term=False), st, te)
    assert "grounding_text" not in out and close(out["total"], text + 0.01 * lv)
    # paper reading: Eq. 12 negatives (no eligibility test) and inter averaged (Eq. 14)
    _, lv12, lt12 = kdmcse_ref(st, te, form="eq12")
    out = compute_objective(base.replace(paper_reading=True), st, te)
    assert close(out["total"], text + 0.01 * (lv12 + lt12) / 2)


def dalr_ref(st, te, paper=False):
    """docs/official-code.md §6.3 total, every term from the loop references."""
    w = (0.33, 0.67)
    Z1, Z2, img = rows(st.z1), rows(st.z2), rows(te.image)
    T1, T2 = (rows(t) for t in te.text_teachers)
    FT = ref_weighted([T1, T2], w)
    TT, VV = ref_cos_matrix(FT, FT), ref_cos_matrix(img, img)
    Szz = ref_arcsim(Z1, Z2, 0.05, 0.18)
    S = ref_arcsim(Z1, img, 0.05, 0.18)
    ST = ref_weighted([[[c / 0.05 for c in r] for r in ref_cos_matrix(T, T)] for T in (T1, T2)], w)
    L1, L2 = rows(te.text_teacher_local[0]), rows(te.text_teacher_local[1])
    local = [
        [
            [w[0] * a + w[1] * b for a, b in zip(t1, t2, strict=True)]
            for t1, t2 in zip(s1, s2, strict=True)
        ]
        for s1, s2 in zip(L1, L2, strict=True)
    ]
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    t = {
        "text": ref_ce(Szz),
        "consistency": ref_consistency(rows(st.text_aligned), rows(st.image_aligned)),
        "cma": (ref_kl(transpose(S), VV) + ref_kl(S, TT)) / 2,
        "info": sum(ref_ce(ref_arcsim(P, V, 0.05, 0.18, VV)) for P in (P1, P2)) / 2,
        "ima": ref_kl(Szz, TT),
        "rank": ref_listmle(Szz, ST),
        "g2l": ref_g2l(local, Z1, rows(st.attention_mask[:, 1:])),
    }
    return t


def dalr_total(t, on, paper=False):
    g = {k: (v if k in on else 0.0) for k, v in t.items()}
    if paper:
        return (
            g["text"]
            + g["info"]
            + 0.1 * (g["consistency"] + g["cma"])
            + 0.2 * (g["ima"] + g["rank"])
        )
    return (
        g["text"]
        + 0.1 * (0.01 * g["consistency"] + g["cma"] + g["info"])
        + 0.2 * (g["ima"] + g["rank"] + g["g2l"])
    )


SWITCHES = {
    "use_info": "info",
    "use_consistency": "consistency",
    "use_cma": "cma",
    "use_ima": "ima",
    "use_rank": "rank",
    "use_g2l": "g2l",
}


def test_dalr_total_and_each_switch():
    st, te = batch(seed=11)
    ref = dalr_ref(st, te)
    all_on = set(ref)
    out = compute_objective(settings("dalr"), st, te)
    for k, v in ref.items():
        assert close(out[k], v), k
    assert close(out["total"], dalr_total(ref, all_on))
    for switch, term in SWITCHES.items():
        off = compute_objective(settings("dalr", **{switch: False}), st, te)
        assert term not in off
        assert close(off["total"], dalr_total(ref, all_on - {term})), switch
    # w/o L_CML (cons + cma) and w/o L_IML (ima + rank) are two switches each
    off = compute_objective(
        settings("dalr", use_consistency=False, use_cma=False), st, te
    )
    assert close(off["total"], dalr_total(ref, all_on - {"consistency", "cma"}))
    off = compute_objective(settings("dalr", use_ima=False, use_rank=False), st, te)
    assert close(off["total"], dalr_total(ref, all_on - {"ima", "rank"}))


def test_dalr_paper_reading():
    st, te = batch(seed=12)
    ref = dalr_ref(st, te)
    out = compute_objective(settings("dalr", paper_reading=True), st, te)
    assert "g2l" not in out
    assert close(out["total"], dalr_total(ref, set(ref), paper=True))
    assert close(out["cross"], ref["consistency"] + ref["cma"])
    assert close(out["intra"], ref["ima"] + ref["rank"])


def test_dalr_empty_local_gives_zero_g2l_and_resnet_needs_cma_off():
    st, te = batch(seed=13)
    te0 = TeacherInputs(image=te.image, clip_text=te.clip_text, text_teachers=te.text_teachers)
    out = compute_objective(settings("dalr"), st, te0)
    assert out["g2l"].item() == 0.0
    ref = dalr_ref(st, te)
    assert close(out["total"], dalr_total(ref, set(ref) - {"g2l"}))
    st, te = batch(seed=13, dv=10)  # a "ResNet" feature: 10-d, student 6-d
    with pytest.raises(ValueError, match="use_cma=False"):
        compute_objective(settings("dalr"), st, te)
    out = compute_objective(settings("dalr", use_cma=False), st, te)
    assert torch.isfinite(out["total"])


def test_input_errors():
    st, te = batch(seed=14)
    bad = TeacherInputs(
        image=te.image, text_teachers=te.text_teachers[:1], text_teacher_local=te.text_teacher_local
    )
    with pytest.raises(ValueError, match="teacher_weights has 2"):
        compute_objective(settings("dalr"), st, bad)
    none = TeacherInputs(image=te.image)
    with pytest.raises(ValueError, match="use_cma/use_ima/use_rank=False"):
        compute_objective(settings("dalr"), st, none)
    st.t = None
    with pytest.raises(ValueError, match="StudentOutputs.t"):
        compute_objective(settings("kdmcse"), st, te)
    te_no_text = TeacherInputs(image=te.image)
    with pytest.raises(ValueError, match="clip_text"):
        compute_objective(settings("mcse", threshold=0.5), st, te_no_text)


# ===================================================================== gradients and NaN
def test_gradcheck_composed_totals():
    st, te = batch(bs=4, d=3, g=2, seed=21)
    names = ("z1", "z2", "p1", "p2", "v", "t", "text_aligned", "image_aligned")
    leaves = tuple(getattr(st, n).clone().requires_grad_() for n in names)
    te = TeacherInputs(
        image=te.image,
        clip_text=te.clip_text,
        text_teachers=te.text_teachers,
        text_teacher_local=tuple(x[:, :, :3] for x in te.text_teacher_local),
    )
    for cfg in (settings("kdmcse", threshold=0.3), settings("dalr")):

        def f(*xs, cfg=cfg):
            s = StudentOutputs(
                **dict(zip(names, xs, strict=True)), attention_mask=st.attention_mask
            )
            return compute_objective(cfg, s, te, generator=torch.Generator().manual_seed(0))[
                "total"
            ]

        assert torch.autograd.gradcheck(f, leaves)



def test_identical_views_give_finite_totals_and_gradients():
    st, te = batch(seed=22)
    for method in ("kdmcse", "dalr"):
        z = st.z1.clone().requires_grad_()
        p = st.p1.clone().requires_grad_()
        s = StudentOutputs(
            z1=z,
            z2=z,
            p1=p,
            p2=p,
            v=st.p1,
            t=st.p1,
            text_aligned=st.text_aligned,
            image_aligned=st.image_aligned,
            attention_mask=st.attention_mask,
        )
        out = compute_objective(settings(method), s, te)
        out["total"].backward()
        assert (
            torch.isfinite(out["total"])
            and torch.isfinite(z.grad).all()
            and torch.isfinite(p.grad).all()
        )


def test_float32_and_autocast_run():
    st, te = batch(seed=23)
    s32 = StudentOutputs(
        **{
            k: (v.float() if v is not None and v.is_floating_point() else v)
            for k, v in vars(st).items()
        }
    )
    out64 = compute_objective(
        settings("dalr"), st, te, generator=torch.Generator().manual_seed(1)
    )
    out32 = compute_objective(
        settings("dalr"), s32, te, generator=torch.Generator().manual_seed(1)
    )
    assert abs(out32["total"].item() - out64["total"].item()) < 1e-4
    # under bf16 autocast the loss matrices stay float32: same value as without autocast
    cfg = settings("kdmcse", threshold=0.3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = compute_objective(cfg, s32, te)
    assert amp["total"].dtype != torch.bfloat16
    assert abs(amp["total"].item() - compute_objective(cfg, s32, te)["total"].item()) < 1e-5




# ====================================================================== get_config_dict
def test_config_dict_kdmcse():
    d = settings("kdmcse").get_config_dict()
    assert d == {
        "method": "kdmcse", "temperature": 0.05, "text_margin": 0.15, "lam": 0.01,
        "temperature_vl": 0.05, "adaptive_margin": True, "grounding_margin": 0.15,
        "clip_text_term": True, "paper_reading": False,
    }
    explicit = settings("kdmcse", grounding_margin=0.15, text_margin=0.15, lam=0.01, clip_text_term=True
    )
    assert explicit.get_config_dict() == d
    on = settings("kdmcse", threshold=0.8).get_config_dict()
    assert (on["threshold"], on["threshold_on"]) == (0.8, "dot")
    assert settings("kdmcse", paper_reading=True).get_config_dict()["paper_reading"]
    # without AdapACSE the grounding margin acts as 0 and is not named
    off = settings("kdmcse", adaptive_margin=False).get_config_dict()
    assert off["adaptive_margin"] is False and "grounding_margin" not in off
    assert off == settings("kdmcse", grounding_margin=0.0).get_config_dict()


def test_config_dict_mcse_and_simcse():
    d = settings("mcse").get_config_dict()
    assert d == {
        "method": "mcse", "temperature": 0.05, "text_margin": 0.0, "lam": 0.01,
        "temperature_vl": 0.05, "adaptive_margin": False, "clip_text_term": False,
        "paper_reading": False,
    }
    assert settings("mcse", threshold_on="cosine").get_config_dict() == d
    on = settings("mcse", threshold=0.5, clip_text_term=True).get_config_dict()
    assert (on["threshold"], on["threshold_on"], on["clip_text_term"]) == (0.5, "dot", True)
    # simcse: the text InfoNCE only
    s = settings("simcse")
    assert s.get_config_dict() == {"method": "simcse", "temperature": 0.05, "text_margin": 0.0}


def test_config_dict_dalr():
    d = settings("dalr").get_config_dict()
    assert d == {
        "method": "dalr", "temperature": 0.05, "text_margin": 0.18,
        "use_consistency": True, "use_cma": True, "use_info": True, "use_ima": True,
        "use_rank": True, "use_g2l": True, "lam": 0.1, "mu": 0.2, "paper_reading": False,
        "consistency_weight": 0.01, "consistency_margin": 0.2, "consistency_shift": 5,
        "temperature_vl": 0.05, "adaptive_margin": True, "grounding_margin": 0.18,
        "kl_student_temperature": 0.45, "kl_teacher_temperature": 0.5,
        "teacher_temperature": 0.05, "rank_gamma": 1.0, "rank_eps": 1e-7,
        "g2l_normalize": "tokens", "teacher_weights": (0.33, 0.67),
    }
    assert json.loads(json.dumps(d))["teacher_weights"] == [0.33, 0.67]  # loggable as is
    # a switched-off term takes its settings along
    no_cons = settings("dalr", use_consistency=False).get_config_dict()
    assert no_cons["use_consistency"] is False
    assert not {"consistency_weight", "consistency_margin", "consistency_shift"} & set(no_cons)
    # only L_Info left: no teacher, KL or ranking settings, and mu weighs nothing
    info = settings("dalr", use_consistency=False, use_cma=False, use_ima=False, use_rank=False,
        use_g2l=False,
    ).get_config_dict()
    assert info["lam"] == 0.1 and info["grounding_margin"] == 0.18
    assert not {"teacher_weights", "kl_student_temperature", "rank_gamma", "mu"} & set(info)
    # the paper reading has no g2l and an unweighted consistency term
    paper = settings("dalr", paper_reading=True).get_config_dict()
    assert paper["paper_reading"] is True
    assert not {"use_g2l", "g2l_normalize", "consistency_weight"} & set(paper)


@pytest.mark.parametrize(
    "a, b",
    [
        ({"method": "kdmcse", "adaptive_margin": False}, {"method": "kdmcse", "grounding_margin": 0.0}),
        ({"method": "mcse", "threshold_on": "cosine"}, {"method": "mcse"}),
        ({"method": "dalr", "use_consistency": False, "consistency_margin": 0.5},
         {"method": "dalr", "use_consistency": False}),
        ({"method": "dalr", "paper_reading": True, "consistency_weight": 0.5, "use_g2l": False},
         {"method": "dalr", "paper_reading": True}),
    ],
)
def test_equal_config_dicts_compute_equal_objectives(a, b):
    ca, cb = settings(**a), settings(**b)
    assert ca != cb and ca.get_config_dict() == cb.get_config_dict()
    st, te = batch(seed=25)
    out_a, out_b = (
        compute_objective(c, st, te, generator=torch.Generator().manual_seed(0)) for c in (ca, cb)
    )
    assert out_a.keys() == out_b.keys()
    assert torch.equal(out_a["total"], out_b["total"])
