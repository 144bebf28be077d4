"""The pre-start step of a method (trainables.arrays.method_check): every shipped method and the
plug-in test methods build at real sizes; a head that does not fit its loss is named."""

from __future__ import annotations

import pytest

import tests.trainables.misfit_method  # noqa: F401  (registers "misfit")
import tests.trainables.plugin_method  # noqa: F401  (registers "auxhead")
from tests.trainables.arrays.harness import cfg
from trainables.arrays.method_check import try_method


@pytest.mark.parametrize("method", ["simcse", "mcse", "kdmcse", "dalr", "auxhead"])
def test_every_method_builds_one_step(method, tiny_bert, tmp_path):
    try_method(cfg(tiny_bert, tmp_path, method), 32, 32, 40, [32])  # CMA, DALR: = hidden


def test_a_head_that_does_not_fit_its_loss_is_named_with_the_sizes(tiny_bert, tmp_path):
    with pytest.raises(ValueError) as e:
        try_method(cfg(tiny_bert, tmp_path, "misfit"), 384, 512, 512)
    msg = str(e.value)
    assert msg.startswith("method 'misfit' fails one text batch") and "\n" not in msg
    assert "aux (linear z 384->7)" in msg and "hidden 384" in msg
    assert "The size of tensor a (7) must match the size of tensor b (384)" in msg
