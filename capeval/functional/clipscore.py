"""Functional core: the score formulas as plain array maths, in the reference code's operation order.

Arrays keep their dtype: float64 features give exact scores, float16 features reproduce the published CLIP-S
arithmetic (the reference script normalised and multiplied fp16 NumPy arrays). Features are the raw projected
outputs of the backbone; normalisation happens here, as in the reference code.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def l2_normalize(features: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm: ``x / sqrt(sum(x**2, axis=1))``."""
    return features / np.sqrt(np.sum(features ** 2, axis=1, keepdims=True))


def clip_s(image_features: np.ndarray, text_features: np.ndarray, weight: float) -> np.ndarray:
    """Per-item ``weight * max(cos(image, text), 0)`` (CLIP-S with weight 2.5, PAC-S with 2.0)."""
    images, texts = l2_normalize(image_features), l2_normalize(text_features)
    return weight * np.clip(np.sum(images * texts, axis=1), 0, None)


def max_reference_cosine(
    candidate_features: np.ndarray, reference_features: np.ndarray, reference_counts: Sequence[int]
) -> np.ndarray:
    """Per-item maximum raw cosine between a candidate and its references (no clipping, no weight).

    ``reference_features`` holds the references of item 0, then item 1, ...; ``reference_counts[i]`` says how many
    rows belong to item ``i``. Each item is a ``dot`` of its candidate with its references, as in the reference code.
    """
    candidates, references = l2_normalize(candidate_features), l2_normalize(reference_features)
    bounds = np.concatenate([[0], np.cumsum(reference_counts)])
    if bounds[-1] != len(references) or len(reference_counts) != len(candidates):
        raise ValueError("reference_counts does not match the feature arrays")
    return np.array(
        [np.max(candidates[i].dot(references[bounds[i]:bounds[i + 1]].T)) for i in range(len(candidates))],
        dtype=candidates.dtype,
    )


def harmonic_mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-item ``2ab / (a + b)``; where ``a + b == 0`` (the reference code's 0/0 NaN) the result is 0."""
    total = a + b
    safe = np.where(total == 0, np.ones_like(total), total)
    return np.where(total == 0, np.zeros_like(total), 2 * a * b / safe)


def ref_clip_s(clip_scores: np.ndarray, reference_cosines: np.ndarray) -> np.ndarray:
    """RefCLIP-S / RefPAC-S per item: harmonic mean of the weighted, clipped image score and the raw reference cosine."""
    return harmonic_mean(clip_scores, reference_cosines)
