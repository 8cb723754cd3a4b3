"""Polos's arithmetic after the towers, as the wheel's ``PolosEstimator.forward`` computes it, item by item.

For each reference ``r`` of a candidate ``c`` of image ``v`` (sentence embeddings ``c, r``; CLIP features, raw and
not normalised, ``V`` of the image and ``C, R`` of the prompted captions)::

    x = [r, c, |c - r|, c * r, V, C, |V - C|, V * C, |R - C|, R * C]
    score(c, r) = sigmoid(FF(x))

and the item's score is the maximum over its references. ``FF`` is the wheel's ``FeedForward``: linear layers with
the hidden activation between them (dropout is off at inference) and the optional final activation.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

Layer = Tuple[np.ndarray, np.ndarray]
"""A linear layer's ``(weight (out, in), bias (out,))``, as ``torch.nn.Linear`` stores them."""


def sigmoid(values: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``, without overflow warnings for large negative ``x``."""
    return np.exp(-np.logaddexp(0.0, -values))


ACTIVATIONS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Tanh": np.tanh, "Sigmoid": sigmoid, "ReLU": lambda values: np.maximum(values, 0.0)}
"""``torch.nn`` activation name -> its NumPy function."""


def pair_features(candidate: np.ndarray, reference: np.ndarray, image_clip: np.ndarray, candidate_clip: np.ndarray,
                  reference_clip: np.ndarray) -> np.ndarray:
    """The regressor's input rows ``(N, 4 * hidden + 6 * clip)`` of ``N`` candidate-reference pairs, in the wheel's
    concatenation order."""
    return np.concatenate(
        (reference, candidate, np.abs(candidate - reference), candidate * reference,
         image_clip, candidate_clip, np.abs(image_clip - candidate_clip), image_clip * candidate_clip,
         np.abs(reference_clip - candidate_clip), reference_clip * candidate_clip), axis=1)


def feed_forward(features: np.ndarray, layers: Sequence[Layer], activation: str,
                 final_activation: Optional[str]) -> np.ndarray:
    """``(N,)`` sigmoid outputs of the regressor: ``layers`` with ``activation`` between them, ``final_activation``
    (or none) after the last, then the estimator's sigmoid."""
    hidden = features
    for index, (weight, bias) in enumerate(layers):
        hidden = hidden @ weight.T + bias
        if index < len(layers) - 1:
            hidden = ACTIVATIONS[activation](hidden)
    if final_activation is not None:
        hidden = ACTIVATIONS[final_activation](hidden)
    return sigmoid(hidden[:, 0])


def max_over_references(pair_scores: np.ndarray, reference_counts: Sequence[int]) -> np.ndarray:
    """Per item, the maximum of its references' pair scores (``pair_scores`` holds item 0's pairs, then item 1's...;
    every item has at least one reference)."""
    bounds = np.concatenate([[0], np.cumsum(reference_counts)]).astype(int)
    if bounds[-1] != len(pair_scores) or min(reference_counts, default=1) < 1:
        raise ValueError("reference_counts does not match the pair scores")
    return np.array([pair_scores[start:end].max() for start, end in zip(bounds[:-1], bounds[1:])])


def polos_scores(candidates: np.ndarray, references: np.ndarray, image_clip: np.ndarray, candidate_clip: np.ndarray,
                 reference_clip: np.ndarray, reference_counts: Sequence[int], layers: Sequence[Layer],
                 activation: str, final_activation: Optional[str]) -> np.ndarray:
    """Per-item Polos of ``N`` items: candidate rows ``(N, ...)``, image rows ``(N, clip)``, reference rows of item 0,
    then item 1, ... (``reference_counts[i]`` of them for item ``i``)."""
    owner = np.repeat(np.arange(len(candidates)), reference_counts)
    features = pair_features(candidates[owner], references, image_clip[owner], candidate_clip[owner], reference_clip)
    return max_over_references(feed_forward(features, layers, activation, final_activation), reference_counts)
