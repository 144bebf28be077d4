"""trainables.objectives.kdmcse: KDMCSE's (L_v, L_t) against the loop references."""

from __future__ import annotations

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
    ref_cos_matrix,
    rows,
)
from trainables.objectives.core import mcse_grounding_loss
from trainables.objectives.grounding import kdmcse_grounding_terms


@pytest.mark.parametrize("threshold_on", ["dot", "cosine"])
def test_kdmcse_grounding_parity(threshold_on):
    st, te = batch(seed=3)
    P1, P2, V, T = rows(st.p1), rows(st.p2), rows(st.v), rows(st.t)
    img, txt = rows(te.image), rows(te.clip_text)
    vv, cc = ref_cos_matrix(img, img), ref_cos_matrix(txt, txt)
    if threshold_on == "dot":  # raw dot products, as the collator pairs them
        cv = [[dot(txt[i], img[j]) for j in range(7)] for i in range(7)]
        vc = [[dot(img[i], txt[j]) for j in range(7)] for i in range(7)]
    else:
        cv, vc = ref_cos_matrix(txt, img), ref_cos_matrix(img, txt)
    thr = 0.3
    bv, bt = ref_bias(cv, thr), ref_bias(vc, thr)
    n_masked = sum(v != 0 for r in bv for v in r)
    assert 0 < n_masked < 42  # the filter does something, but not everything
    lv = (
        ref_ce(add(ref_arcsim(P1, V, 0.05, 0.15, vv), bv))
        + ref_ce(add(ref_arcsim(P2, V, 0.05, 0.15, vv), bv))
    ) / 2
    lt = (
        ref_ce(add(ref_arcsim(P1, T, 0.05, 0.15, cc), bt))
        + ref_ce(add(ref_arcsim(P2, T, 0.05, 0.15, cc), bt))
    ) / 2
    got_v, got_t = kdmcse_grounding_terms(
        st.p1, st.p2, st.v, st.t, te.image, te.clip_text, 0.15, thr, 0.05, threshold_on=threshold_on
    )
    assert close(got_v, lv) and close(got_t, lt)
    assert close(got_v + got_t, lv + lt)
    # no threshold, no text term, adaptive off
    lv0 = (
        ref_ce(ref_arcsim(P1, V, 0.05, 0.15, vv)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.15, vv))
    ) / 2
    got_v, got_t = kdmcse_grounding_terms(st.p1, st.p2, st.v, None, te.image, None)
    assert got_t is None and close(got_v, lv0)
    plain = (ref_ce(ref_arcsim(P1, V, 0.05, 0.0)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.0))) / 2
    got_v, got_t = kdmcse_grounding_terms(
        st.p1, st.p2, st.v, None, te.image, None, adaptive_margin=False
    )
    assert got_t is None and close(got_v, plain)
    assert close(mcse_grounding_loss(st.p1, st.p2, st.v), plain)


def test_input_errors():
    st, te = batch(seed=14)
    with pytest.raises(ValueError, match="clip_text"):
        kdmcse_grounding_terms(st.p1, st.p2, st.v, None, te.image, None, threshold=0.5)
    with pytest.raises(ValueError, match="clip_text"):
        kdmcse_grounding_terms(st.p1, st.p2, st.v, st.t, te.image, None)
    with pytest.raises(ValueError, match="threshold_on"):
        kdmcse_grounding_terms(
            st.p1, st.p2, st.v, st.t, te.image, te.clip_text, threshold=0.5, threshold_on="l2"
        )


def test_gradcheck_terms():
    st, te = batch(bs=4, d=3, g=3, seed=20)
    p1, p2, v, t = (x.clone().requires_grad_() for x in (st.p1, st.p2, st.v, st.t))
    assert torch.autograd.gradcheck(
        lambda a, b, c, d: sum(
            kdmcse_grounding_terms(a, b, c, d, te.image, te.clip_text, threshold=0.3)
        ),
        (p1, p2, v, t),
    )
