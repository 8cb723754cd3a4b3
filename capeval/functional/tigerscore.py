"""TIGEr's maths (CapEval ``tiger.py`` and ``model_util.cap2img_grounding``) as float64 NumPy, in the original order.

``grounding`` is SCAN's ``func_attention`` with the image regions as queries and the caption's words as context,
followed by ``cosine_similarity``: one score per region. ``rrs`` is the original ``ndcg``, ``wds`` is
``1 - sigmoid(kld_softmax + absolute_distance, 1.5)``; both take the mean reference grounding ``r`` and the
candidate grounding ``c`` of each item as rows of ``(items, regions)`` arrays.

Where the original raises, the result is defined here and counted (see :class:`UndefinedCounts`):

* ``ndcg`` min-max normalises ``r`` and ``c``; a constant vector divides by zero. A constant ``r`` gives RRS = 1
  (every ranking of equally relevant regions is ideal); a constant ``c`` ranks no region above another, so the
  stable sort keeps region order (normalised values taken as 0).
* ``sigmoid`` calls ``math.exp(1.5 * x)``, which overflows for ``1.5 * x`` above about 709.78; the limit
  ``sigmoid = 1`` (WDS = 0) is used there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import numpy as np

LEAKY_SLOPE = 0.1
NORM_EPS = 1e-8
COSINE_EPS = 1e-8
WDS_TAU = 1.5


def grounding(regions: np.ndarray, words: np.ndarray, lambda_softmax: float) -> np.ndarray:
    """Per-region grounding ``s_i = cos(v_i, a_i)`` of one caption in one image (float64).

    ``regions`` ``(R, d)`` and ``words`` ``(W, d)`` are the SCAN embeddings. Scores ``v_i . w_j`` go through
    LeakyReLU(0.1), are L2-normalised across regions for each word (norm + 1e-8), and a softmax over words of
    ``lambda_softmax`` times them weights the words into ``a_i``; the norm product of the cosine is clamped at 1e-8.
    """
    regions = np.asarray(regions, dtype=np.float64)
    words = np.asarray(words, dtype=np.float64)
    scores = words @ regions.T  # (W, R), SCAN's bmm(context, query^T)
    scores = np.where(scores > 0, scores, scores * LEAKY_SLOPE)
    scores = scores / (np.sqrt(np.sum(scores ** 2, axis=1, keepdims=True)) + NORM_EPS)
    logits = scores.T * lambda_softmax  # (R, W)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights = weights / weights.sum(axis=1, keepdims=True)
    attended = weights @ words  # (R, d)
    dot = np.sum(regions * attended, axis=1)
    norms = np.linalg.norm(regions, axis=1) * np.linalg.norm(attended, axis=1)
    return dot / np.maximum(norms, COSINE_EPS)


def sequential_sum(terms: np.ndarray) -> np.ndarray:
    """Row sums accumulated left to right, as the original's Python loops add them."""
    return np.cumsum(terms, axis=1)[:, -1]


def _min_max(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(x - min) / (max - min)`` per row; constant rows give zeros. Returns the values and the constant-row mask."""
    low, high = values.min(axis=1, keepdims=True), values.max(axis=1, keepdims=True)
    constant = (high == low)[:, 0]
    span = np.where(high == low, 1.0, high - low)
    return np.where(high == low, 0.0, (values - low) / span), constant


def _dcg(relevance: np.ndarray, ranking_keys: np.ndarray) -> np.ndarray:
    """DCG of ``relevance`` with regions ranked by ``ranking_keys`` descending (stable: ties keep region order);
    discount ``log2(k + 1)`` computed as the original's ``math.log(k + 1, 2)`` = ``log(k + 1) / log(2)``."""
    order = np.argsort(-ranking_keys, axis=1, kind="stable")
    ranked = np.take_along_axis(relevance, order, axis=1)
    discounts = np.log(np.arange(2, relevance.shape[1] + 2, dtype=np.float64)) / np.log(2.0)
    discounts[0] = 1.0
    return sequential_sum(ranked / discounts)


def rrs(r: np.ndarray, c: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Region Rank Similarity per row: nDCG of the ranking by ``c`` with min-max normalised ``r`` as relevance.

    Returns the scores and the masks of rows where ``r`` resp. ``c`` is constant (the original divides by zero)."""
    relevance, r_constant = _min_max(r)
    candidate_keys, c_constant = _min_max(c)
    ideal = _dcg(relevance, relevance)
    actual = _dcg(relevance, candidate_keys)
    scores = np.where(r_constant, 1.0, actual / np.where(r_constant, 1.0, ideal))
    return scores, r_constant, c_constant


def _softmax_no_shift(values: np.ndarray) -> np.ndarray:
    """The original ``self_softmax``: ``exp(x) / sum(exp(x))`` without subtracting the maximum."""
    exps = np.exp(values)
    return exps / sequential_sum(exps)[:, None]


def kld_softmax(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``KL(softmax(r) || softmax(c))`` per row, skipping terms where either probability is 0 (as the original)."""
    p, q = _softmax_no_shift(r), _softmax_no_shift(c)
    usable = (p != 0.0) & (q != 0.0)
    safe_p, safe_q = np.where(usable, p, 1.0), np.where(usable, q, 1.0)
    return sequential_sum(np.where(usable, safe_p * np.log(safe_p / safe_q), 0.0))


def norm_log_ratio(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``log(||r|| / ||c||)`` per row, 0 when either norm is 0 (the original ``absolute_distance``)."""
    r_norm = np.sqrt(sequential_sum(r * r))
    c_norm = np.sqrt(sequential_sum(c * c))
    zero = (r_norm == 0.0) | (c_norm == 0.0)
    return np.where(zero, 0.0, np.log(np.where(zero, 1.0, r_norm) / np.where(zero, 1.0, c_norm)))


def wds(r: np.ndarray, c: np.ndarray, tau: float = WDS_TAU) -> Tuple[np.ndarray, np.ndarray]:
    """Weight Distribution Similarity per row: ``1 - sigmoid(tau * (KL + log-norm-ratio))`` with the original's
    ``exp(x) / (exp(x) + 1)``. Returns the scores and the mask of rows where ``exp`` overflows (WDS = 0 there)."""
    argument = tau * (kld_softmax(r, c) + norm_log_ratio(r, c))
    with np.errstate(over="ignore"):
        exps = np.exp(argument)
    overflow = np.isinf(exps)
    sigmoid = np.where(overflow, 1.0, exps / np.where(overflow, 1.0, exps + 1.0))
    return 1.0 - sigmoid, overflow


@dataclass(frozen=True)
class UndefinedCounts:
    """How many items hit a case where the original code raises, and got the result defined in the module doc."""

    constant_reference_grounding: int = 0
    constant_candidate_grounding: int = 0
    wds_overflow: int = 0

    def total(self) -> int:
        return self.constant_reference_grounding + self.constant_candidate_grounding + self.wds_overflow

    def __add__(self, other: "UndefinedCounts") -> "UndefinedCounts":
        return UndefinedCounts(self.constant_reference_grounding + other.constant_reference_grounding,
                               self.constant_candidate_grounding + other.constant_candidate_grounding,
                               self.wds_overflow + other.wds_overflow)


@dataclass(frozen=True)
class TigerScores:
    tiger: np.ndarray
    rrs: np.ndarray
    wds: np.ndarray
    undefined: UndefinedCounts


def tiger(r: np.ndarray, c: np.ndarray) -> TigerScores:
    """Per-item TIGEr ``0.5 * RRS + 0.5 * WDS`` of ``(items, regions)`` mean reference groundings ``r`` and candidate
    groundings ``c`` (float64)."""
    r = np.asarray(r, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if r.ndim != 2 or r.shape != c.shape or r.shape[1] < 1:
        raise ValueError(f"r and c must be (items, regions) arrays of one shape, got {r.shape} and {c.shape}")
    rank_scores, r_constant, c_constant = rrs(r, c)
    distribution_scores, overflow = wds(r, c)
    counts = UndefinedCounts(int(r_constant.sum()), int((c_constant & ~r_constant).sum()), int(overflow.sum()))
    return TigerScores(0.5 * rank_scores + 0.5 * distribution_scores, rank_scores, distribution_scores, counts)


def mean_reference_grounding(reference_groundings: Sequence[np.ndarray]) -> np.ndarray:
    """``r``: the mean over an item's references of their grounding vectors (``torch.stack(...).t().mean(1)``)."""
    return np.mean(np.stack(reference_groundings), axis=0)
