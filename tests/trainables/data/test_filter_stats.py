"""The threshold filter's effect, sampled from a store's features (trainables.data.filter_stats)."""

from __future__ import annotations

import numpy as np
import pytest

from trainables.data.filter_stats import sample_filter


def _clip_like(n: int, dim: int, norm: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw CLIP-like features: a direction shared by every row (what makes raw dot products all
    positive) plus per-row noise, scaled to ``norm``."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(dim)
    rows = [common + 0.5 * rng.standard_normal((n, dim)) for _ in range(2)]
    return tuple(norm * r / np.linalg.norm(r, axis=1, keepdims=True) for r in rows)


def test_raw_dot_products_of_large_norms_mask_everything_cosines_do_not():
    text, image = _clip_like(500, 64, norm=20.0)
    dot = sample_filter(text, image, 0.8, "dot")
    cos = sample_filter(text, image, 0.8, "cosine")
    assert dot.nearly_all and dot.masked == 1.0
    assert dot.text_norm == pytest.approx(20.0) and dot.image_norm == pytest.approx(20.0)
    assert not cos.nearly_all and cos.masked < 0.5
    assert sample_filter(text, image, dot.p99, "dot").masked == pytest.approx(0.01, abs=0.01)


def test_the_same_features_at_unit_norm_are_not_refused():
    text, image = _clip_like(500, 64, norm=1.0)
    s, c = sample_filter(text, image, 0.8, "dot"), sample_filter(text, image, 0.8, "cosine")
    assert s.masked == c.masked and s.median == pytest.approx(c.median)  # unit rows: dot == cos
    assert s.n_pairs == 4096 and not s.nearly_all


def test_memory_mapped_columns_and_bad_shapes(tmp_path):
    text, image = _clip_like(300, 16, norm=3.0)
    np.save(tmp_path / "t.npy", text.astype(np.float32))
    np.save(tmp_path / "v.npy", image.astype(np.float32))
    mapped = sample_filter(np.load(tmp_path / "t.npy", mmap_mode="r"),
                           np.load(tmp_path / "v.npy", mmap_mode="r"), 0.8)
    assert mapped.masked == pytest.approx(sample_filter(text, image, 0.8).masked, abs=1e-9)
    with pytest.raises(ValueError, match="one dimension"):
        sample_filter(text, image[:, :8], 0.8)
    with pytest.raises(ValueError, match="threshold_on"):
        sample_filter(text, image, 0.8, "angle")


def test_the_threshold_the_refusal_advises_is_the_lowest_that_passes():
    """Issue 33: the refusal advised 'a threshold above 1.13' (the 99th percentile) when anything
    above -0.05 passed; ``passes_above`` is the lowest threshold the check lets run."""
    import numpy as np

    from trainables.data.filter_stats import sample_filter

    rng = np.random.default_rng(0)
    common = rng.standard_normal(32)
    text, image = (20 * (common + 0.3 * rng.standard_normal((300, 32))) / 5.7 for _ in range(2))
    s = sample_filter(text, image, 0.8)
    assert s.nearly_all and s.passes_above < s.median < s.p99
    assert not sample_filter(text, image, s.passes_above + 1e-6).nearly_all
    assert sample_filter(text, image, s.passes_above - abs(s.passes_above) * 0.05 - 1e-3).nearly_all
