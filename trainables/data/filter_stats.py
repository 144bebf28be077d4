"""What KDMCSE's threshold filter would do to a store's features, from a sample (numpy only).

The filter (docs/official-code.md §5.4) masks every in-batch negative whose score exceeds the
threshold: raw dot products of the stored, unnormalised CLIP features in the code, cosines in the
paper's reading. Whether 0.8 masks a few negatives or all of them depends on the features' norms
(§9): on CLIP ViT-L/14 outputs, whose norms are far above 1, nearly every raw dot product
exceeds 0.8, every negative is masked, and both grounding terms are exactly 0. A sample of random
(caption, image) pairs shows which, before any run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_PAIRS = 4096
NEARLY_ALL = 0.95
"""a filter masking more than this share of negatives leaves the grounding terms (nearly) empty"""
MOST = 0.5
"""a filter masking more than this share of negatives is allowed, but said up front"""


@dataclass(frozen=True)
class FilterSample:
    """The threshold filter on ``n_pairs`` random (caption i, image j != i) pairs of a store."""

    masked: float
    """share of the sampled negatives the filter masks"""
    n_pairs: int
    text_norm: float
    """mean L2 norm of the sampled clip_text rows"""
    image_norm: float
    median: float
    """median score of the sampled pairs"""
    p99: float
    """99th percentile of the sampled scores: a threshold above it masks about 1%"""
    passes_above: float = float("-inf")
    """the score quantile at 1 - NEARLY_ALL: a threshold above it masks at most NEARLY_ALL of the
    negatives, so the pre-start check lets it run"""

    @property
    def nearly_all(self) -> bool:
        return self.masked > NEARLY_ALL

    @property
    def most(self) -> bool:
        return self.masked > MOST


def sample_filter(text: np.ndarray, image: np.ndarray, threshold: float, on: str = "dot",
                  n_pairs: int = SAMPLE_PAIRS, seed: int = 0) -> FilterSample:
    """Score ``n_pairs`` random off-diagonal (caption i, image j) pairs as the filter does.

    ``text`` and ``image`` are the store's (rows, d) ``clip_text`` and image columns (memory-
    mapped arrays are fine: only the sampled rows are read). ``on`` is 'dot' (raw dot products,
    the code) or 'cosine' (the paper's reading), as the settings' ``threshold_on`` (MCSE/KDMCSE).
    """
    if on not in ("dot", "cosine"):
        raise ValueError(f"threshold_on={on!r}; use 'dot' or 'cosine'")
    n = len(text)
    if n < 2 or len(image) != n or text.shape[1] != image.shape[1]:
        raise ValueError(f"need >= 2 row-aligned rows of one dimension, got text {text.shape}, "
                         f"image {image.shape}")
    rng = np.random.default_rng(seed)
    i = np.sort(rng.integers(0, n, n_pairs))
    j = (i + rng.integers(1, n, n_pairs)) % n  # any other row: a negative
    t = np.asarray(text[i], dtype=np.float64)
    order = np.argsort(j)  # gather in file order from a memory map, then restore
    v = np.empty((n_pairs, image.shape[1]))
    v[order] = np.asarray(image[j[order]], dtype=np.float64)
    tn, vn = np.linalg.norm(t, axis=1), np.linalg.norm(v, axis=1)
    scores = (t * v).sum(axis=1)
    if on == "cosine":
        scores = scores / np.maximum(tn * vn, 1e-12)
    return FilterSample(float((scores > threshold).mean()), n_pairs, float(tn.mean()),
                        float(vn.mean()), float(np.median(scores)), float(np.quantile(scores, 0.99)),
                        float(np.quantile(scores, 1 - NEARLY_ALL)))
