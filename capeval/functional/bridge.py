"""BRIDGE's score (Sarto et al., 2024, Eq. 4) as plain array maths.

``BRIDGE(I, c) = 0.5 * (CLIP-S(I, c) + w * max(cos(t*, c), 0))`` where t* is the mean of the image's pseudo-caption
embeddings. Both terms are :func:`capeval.functional.clipscore.clip_s` (the second with t* in place of the image).
"""
from __future__ import annotations

import numpy as np

from capeval.functional.clipscore import clip_s, l2_normalize


def mean_pseudo_caption(pseudo_features: np.ndarray, normalize_first: bool = True) -> np.ndarray:
    """t* of one image: the mean of its pseudo-caption embeddings ``(n, d)``, each L2-normalised first unless
    ``normalize_first`` is false."""
    rows = l2_normalize(pseudo_features) if normalize_first else pseudo_features
    return rows.mean(axis=0)


def bridge_score(image_features: np.ndarray, text_features: np.ndarray, pseudo_features: np.ndarray,
                 weight: float) -> np.ndarray:
    """Per-item ``0.5 * (w * max(cos(image, text), 0) + w * max(cos(t*, text), 0))``; ``pseudo_features`` holds each
    item's t*."""
    return 0.5 * (clip_s(image_features, text_features, weight) + clip_s(pseudo_features, text_features, weight))
