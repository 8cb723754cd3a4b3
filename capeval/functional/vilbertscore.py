"""ViLBERTScore's greedy token matching (Lee et al. 2020), in the operation order of the reference's
``utils.bert_score`` and ``compute_bert_score``.

For one (candidate, reference) pair over the same image, both texts' token states (the text output of ViLBERT's
last co-attention block) are unit-normalised and ``sim = cand · refᵀ`` is taken over the *window* of token
positions ``1 .. len-2`` of each side. The reference code weights that window with the text mask shifted by one
(``mask[:, 1:]`` against ``sim[:, 1:-1, 1:-1]``, off by one because of the task token at position 1), so:

* with a task token the matched tokens are the task token plus every wordpiece; ``[CLS]``, ``[SEP]`` and padding are
  not matched; a 37-token caption (no padding, its ``[SEP]`` cut by truncation) also leaves out its last wordpiece;
* masked entries of ``sim`` are 0 and still take part in the maxima: a side with padding contributes a 0 to every
  maximum over it (``max(0, .)``), a side without padding (37 tokens) does not.

``P`` = mean over matched candidate tokens of their maximum over the reference window, ``R`` the reverse,
``F = 2PR / (P + R)``; no idf weighting, no baseline rescaling. An item's P, R and F are each the mean over its
references (the reference code reads exactly 5; any number >= 1 is accepted here).

Without a task token (``pretrained_model.bin``) the reference's slicing fails with a shape error. capeval keeps the
same rule one position earlier: window ``1 .. len-2`` weighted by ``mask[:, 2:]``, i.e. every wordpiece but none of
``[CLS]``, ``[SEP]`` or padding, with the same masked zeros.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from capeval.functional.clipscore import harmonic_mean


def window_weights(attention_mask: np.ndarray, has_task_token: bool) -> np.ndarray:
    """(N, L) 0/1 text masks -> (N, W) 0/1 weights of the matching window (``W = L - 1`` with a task token,
    ``L - 2`` without): ``mask[:, 1:]`` or ``mask[:, 2:]``."""
    return np.asarray(attention_mask)[:, 1:] if has_task_token else np.asarray(attention_mask)[:, 2:]


def states_needed(attention_mask: np.ndarray, has_task_token: bool) -> np.ndarray:
    """(N, L) 0/1 text masks -> (N,) how many leading token states :func:`greedy_match` reads for each text:
    ``[CLS]`` and the matching window up to its last weighted position. Later states meet weight 0 only."""
    return 1 + window_weights(attention_mask, has_task_token).sum(axis=1)


def padded_states(leading_states: Sequence[np.ndarray], length: int) -> np.ndarray:
    """(B, length, H) states of B texts from their :func:`states_needed` leading states ((n_i, H) each).

    The positions after them are filled with ones. In :func:`greedy_match` they take part only through entries of
    ``sim`` multiplied by weight 0, which are 0 for any finite vector, and ``sim`` over the kept positions is the
    same product of the same rows: P, R and F equal those of the full states (up to the sign of a zero).
    """
    hidden = leading_states[0].shape[1]
    states = np.ones((len(leading_states), length, hidden), dtype=leading_states[0].dtype)
    for row, leading in enumerate(leading_states):
        states[row, :len(leading)] = leading
    return states


def greedy_match(candidate_states: np.ndarray, reference_states: np.ndarray, candidate_weights: np.ndarray,
                 reference_weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pair ``(P, R, F)`` of B (candidate, reference) pairs.

    ``*_states``: (B, E, H) token states (E = text length + 1 with a task token); ``*_weights``: (B, E - 2) 0/1
    window weights from :func:`window_weights`. Where ``P + R == 0`` (the reference's 0/0 NaN) F is 0.
    """
    candidates = candidate_states / np.linalg.norm(candidate_states, axis=-1, keepdims=True)
    references = reference_states / np.linalg.norm(reference_states, axis=-1, keepdims=True)
    sim = np.matmul(candidates, np.swapaxes(references, 1, 2))[:, 1:-1, 1:-1]
    candidate_weights = np.asarray(candidate_weights, dtype=sim.dtype)
    reference_weights = np.asarray(reference_weights, dtype=sim.dtype)
    sim = sim * (candidate_weights[:, :, None] * reference_weights[:, None, :])
    word_precision = sim.max(axis=2)
    word_recall = sim.max(axis=1)
    precision = (word_precision * (candidate_weights / candidate_weights.sum(axis=1, keepdims=True))).sum(axis=1)
    recall = (word_recall * (reference_weights / reference_weights.sum(axis=1, keepdims=True))).sum(axis=1)
    return precision, recall, harmonic_mean(precision, recall)


def average_over_references(values: np.ndarray, reference_counts: Sequence[int]) -> np.ndarray:
    """Per-item mean of per-pair values; pairs are ordered item by item, ``reference_counts[i]`` pairs for item i."""
    bounds = np.concatenate([[0], np.cumsum(reference_counts)]).astype(int)
    if bounds[-1] != len(values):
        raise ValueError("reference_counts does not match the number of pairs")
    return np.array([np.mean(values[bounds[i]:bounds[i + 1]]) for i in range(len(reference_counts))],
                    dtype=values.dtype)
