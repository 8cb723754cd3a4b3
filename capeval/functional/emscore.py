"""EMScore (Shi et al., CVPR 2022) as plain array maths, in the operation order of the reference code
(``ShiYaya/emscore``: ``emscore/scorer.py``, ``emscore/utils.py``). Video PAC-S and RefPAC-S (Sarto et al., 2023,
Sec. 3.2) are the same arithmetic on PAC-S's CLIP weights.

Inputs of one item, all from one CLIP:

* the candidate caption's projected token outputs ``(L, D)`` at every position from the start token to the end token
  (the README's ``encode_text(local=True)``: ``ln_final`` then ``@ text_projection`` at each position), its pooled
  embedding (the end token's row: the ordinary ``encode_text`` output) and its IDF weights ``(L,)``; each reference
  caption likewise. Rows are L2-normalised here, as ``encode_text`` in ``utils.py`` does;
* the video's frame embeddings ``(T, D)``, used **as given**: the reference L2-normalises each frame when it encodes a
  video file itself (``encode_video``), and so does ``extract_video_embeddings.py``, which made the released feature
  files, but it uses the rows of a feature cache (``vid_feat_cache``) without normalising them.

Scores (``sim`` = dot products of unit token rows with frame rows or unit reference token rows):

* fine-grained, candidate tokens ``x_i`` with weights ``w_i`` against targets ``y_j``: ``P = sum_i w_i max_j sim_ij /
  sum_i w_i``; against a reference ``R = sum_j u_j max_i sim_ij / sum_j u_j`` with the reference's own IDF weights
  ``u_j``, against a video ``R = sum_j max_i sim_ij / T`` (frames unweighted); ``F = 2PR / (P + R)``. The start and
  end tokens take part on both sides (with IDF the start token weighs 0, see :func:`idf_weights`).
* coarse-grained: ``cos(pooled candidate, pooled reference)``, or against a video ``cos(pooled candidate,
  normalise(mean of the frame rows))``.
* ``full_X = (figr_X + cogr) / 2`` for X in P, R, F.
* ``EMScore(X,X*)`` over several references: the maximum over the references of each of ``figr_P``, ``figr_R``,
  ``figr_F`` and ``cogr`` *separately* (they may come from different references), then ``full_*`` from those maxima.
  The PAC-S paper's Eq. 8 writes ``max_r Score(c, r)`` of the full score, which is never above the code's value.
* ``EMScore(X,V,X*)``: the mean of ``EMScore(X,V)`` and ``EMScore(X,X*)`` for each of ``figr_*`` and ``cogr``, then
  ``full_*`` from those means (equal to the mean of the two ``full_*``).

Each item is computed as if alone. The reference pads a batch's frames and tokens with zero rows that enter its
maxima (``sim * mask`` leaves 0, not ``-inf``): in the video matching, an item with fewer frames (a shorter
candidate) than the longest in its batch of 64 items gets ``max(max_j sim_ij, 0)`` for each token (``max(max_i
sim_ij, 0)`` for each frame); in the reference matching, batches of 64 (candidate, reference) pairs, the same holds
for shorter references and candidates. Its score then depends on its batch wherever such a row's real maximum is
negative: common with random weights; how often with trained CLIP weights is not measured here. Where the
reference's arithmetic is undefined, the result here is:

* ``F = 0`` where ``P + R == 0`` (the reference's 0/0 NaN, or +-inf);
* where one text's IDF weights sum to 0, its tokens are weighted equally (the ``idf=False`` weights); the reference
  gives NaN. That needs every document of the IDF corpus to hold the same set of tokens (so that every table value,
  and with them the end token's mean, is 0) and the text to hold no other token: one item with one reference, or
  one candidate and no references, with ``idf=True``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from capeval.functional.clipscore import harmonic_mean, l2_normalize
from capeval.registry import EMSCORE_KEYS

VIDEO = "EMScore(X,V)"
REFERENCES = "EMScore(X,X*)"
VIDEO_AND_REFERENCES = "EMScore(X,V,X*)"
VIEWS = (VIDEO, REFERENCES, VIDEO_AND_REFERENCES)
"""The reference's result keys: candidate against the video, against the references, against both."""

KEYS = EMSCORE_KEYS
"""The reference's keys within a view: fine-grained P/R/F, coarse-grained, and their means (full P/R/F)."""

CONTEXT_LENGTH = 77
PADDING_ID = 0
"""``clip.tokenize`` pads with id 0, which is also the BPE token ``!`` (as in ``!~``); see :func:`idf_weights`."""


@dataclass(frozen=True)
class IdfWeights:
    """Token id -> IDF weight, ``unseen`` for ids outside ``table``."""

    table: Mapping[int, float]
    unseen: float

    def __call__(self, token_ids: Sequence[int]) -> np.ndarray:
        """(L,) float64 weights of one caption's token ids."""
        return np.array([self.table.get(int(token), self.unseen) for token in token_ids], dtype=np.float64)


UNIFORM = IdfWeights({}, 1.0)
"""``idf=False``: every token, the start and end tokens included, weighs 1."""


def idf_weights(documents: Sequence[Sequence[int]], context_length: int = CONTEXT_LENGTH) -> IdfWeights:
    """The reference's ``get_idf_dict`` plus its end-token rule, from the token ids of N documents.

    Each document is one sentence's ids from the start token to the end token (unpadded). The reference counts the
    *set* of ids of the padded ``clip.tokenize`` output, so id 0 (padding, but also the token ``!``) is in every
    document shorter than ``context_length``: ``count(t)`` = the number of documents holding ``t``, and
    ``table[t] = log((N + 1) / (count(t) + 1))``; ids in no document weigh ``log(N + 1)``. The start token is in every
    document, so it weighs ``log(1) = 0``. Then the end token (the highest id seen) is given the mean of all table
    values, its own ``0`` and id 0's included. Documents are counted with repetition (the reference's corpus is the
    flattened list of all references, else of all candidates, or a user corpus).
    """
    if not documents:
        raise ValueError("the IDF corpus holds no document")  # the reference fails on max() of no ids
    counts: Counter = Counter()
    for token_ids in documents:
        present = {int(token) for token in token_ids}
        if len(token_ids) < context_length:
            present.add(PADDING_ID)
        counts.update(present)
    total = len(documents)
    table = {token: math.log((total + 1) / (count + 1)) for token, count in counts.items()}
    table[max(table)] = sum(table.values()) / len(table)
    return IdfWeights(table, math.log(total + 1))


@dataclass(frozen=True)
class Caption:
    """One caption as EMScore matches it: unit token rows ``(L, D)``, unit pooled embedding ``(D,)``, IDF weights
    ``(L,)`` in the rows' dtype."""

    tokens: np.ndarray
    pooled: np.ndarray
    weights: np.ndarray


def caption(token_embeddings: np.ndarray, weights: np.ndarray,
            pooled_embedding: Optional[np.ndarray] = None) -> Caption:
    """A :class:`Caption` from raw projected token outputs (start to end token) and their IDF weights; the pooled
    embedding defaults to the end token's row, which is what the reference uses."""
    tokens = np.asarray(token_embeddings)
    weights = np.asarray(weights)
    if tokens.ndim != 2 or len(tokens) < 1 or weights.shape != (len(tokens),):
        raise ValueError(f"token embeddings must be (L, D) with L >= 1 and weights (L,), got {tokens.shape} and "
                         f"{weights.shape}")
    pooled = tokens[-1] if pooled_embedding is None else np.asarray(pooled_embedding, dtype=tokens.dtype)
    return Caption(l2_normalize(tokens), l2_normalize(pooled[None])[0], weights.astype(tokens.dtype))


@dataclass(frozen=True)
class Video:
    """One video as EMScore matches it: frame rows ``(T, D)`` as given and the unit mean of those rows ``(D,)``."""

    frames: np.ndarray
    pooled: np.ndarray


def video(frame_embeddings: np.ndarray) -> Video:
    """A :class:`Video` from frame embeddings ``(T, D)``, ``T >= 1``, taken as given (not normalised)."""
    frames = np.asarray(frame_embeddings)
    if frames.ndim != 2 or len(frames) < 1:
        raise ValueError(f"frame embeddings must be (T, D) with T >= 1, got {frames.shape}")
    return Video(frames, l2_normalize(frames.mean(axis=0, keepdims=True))[0])


@dataclass(frozen=True)
class Match:
    """Fine-grained P, R, F and coarse-grained cosine of a candidate against one target, in :data:`KEYS` order
    (``values``, shape (4,)), and whether a result defined in the module doc was used."""

    values: np.ndarray
    equal_weights: bool
    zero_f: bool


def _normalised(weights: np.ndarray) -> Tuple[np.ndarray, bool]:
    """``w / sum(w)``; weights summing to 0 are taken equal (``1 / L``). Returns the weights and whether they were."""
    total = weights.sum()
    if total == 0:
        return np.full_like(weights, 1.0 / len(weights)), True
    return weights / total, False


def _match(candidate: Caption, targets: np.ndarray, target_weights: Optional[np.ndarray],
           target_pooled: np.ndarray) -> Match:
    """Greedy matching of the candidate's tokens with ``targets`` rows and the cosine of the pooled embeddings;
    ``target_weights`` None means the video rule (recall summed over the rows and divided by their number)."""
    if targets.shape[1] != candidate.tokens.shape[1]:
        raise ValueError(f"embedding widths differ: candidate {candidate.tokens.shape[1]}, target {targets.shape[1]}")
    sim = candidate.tokens @ targets.T
    word_precision = sim.max(axis=1)
    word_recall = sim.max(axis=0)
    candidate_scale, candidate_equal = _normalised(candidate.weights)
    precision = (word_precision * candidate_scale).sum()
    if target_weights is None:
        recall, target_equal = word_recall.sum() / len(targets), False
    else:
        target_scale, target_equal = _normalised(target_weights)
        recall = (word_recall * target_scale).sum()
    f = harmonic_mean(np.asarray(precision), np.asarray(recall))
    coarse = np.dot(candidate.pooled, target_pooled.astype(candidate.pooled.dtype))
    values = np.array([precision, recall, f, coarse], dtype=sim.dtype)
    return Match(values, candidate_equal or target_equal, bool(precision + recall == 0))


def video_match(candidate: Caption, target: Video) -> Match:
    """The candidate against a video: ``EMScore(X,V)``'s figr_P, figr_R, figr_F, cogr."""
    return _match(candidate, target.frames, None, target.pooled)


def reference_match(candidate: Caption, reference: Caption) -> Match:
    """The candidate against one reference caption."""
    return _match(candidate, reference.tokens, reference.weights, reference.pooled)


def references_match(candidate: Caption, references: Sequence[Caption]) -> Match:
    """The candidate against its references: the maximum over them of each of figr_P, figr_R, figr_F and cogr."""
    if not references:
        raise ValueError("an item scored against references needs at least one")  # the reference fails here too
    matches = [reference_match(candidate, reference) for reference in references]
    return Match(np.max([m.values for m in matches], axis=0), any(m.equal_weights for m in matches),
                 any(m.zero_f for m in matches))


def with_full(fine_and_coarse: np.ndarray) -> np.ndarray:
    """(4,) figr_P, figr_R, figr_F, cogr -> (7,) in :data:`KEYS` order, ``full_X = (figr_X + cogr) / 2``."""
    return np.concatenate([fine_and_coarse, (fine_and_coarse[:3] + fine_and_coarse[3]) / 2])


@dataclass(frozen=True)
class ItemScores:
    """One item's scores: view -> (7,) values in :data:`KEYS` order, for the views its inputs allow."""

    scores: Dict[str, np.ndarray]
    equal_weights: bool
    zero_f: bool


def item_scores(candidate: Caption, target: Optional[Video] = None,
                references: Optional[Sequence[Caption]] = None) -> ItemScores:
    """``EMScore(X,V)`` with a video, ``EMScore(X,X*)`` with references, and ``EMScore(X,V,X*)`` with both."""
    matches: Dict[str, Match] = {}
    if target is not None:
        matches[VIDEO] = video_match(candidate, target)
    if references is not None:
        matches[REFERENCES] = references_match(candidate, references)
    if not matches:
        raise ValueError("an item needs a video, references, or both")
    values = {view: match.values for view, match in matches.items()}
    if len(values) == 2:
        values[VIDEO_AND_REFERENCES] = (values[VIDEO] + values[REFERENCES]) / 2
    return ItemScores({view: with_full(value) for view, value in values.items()},
                      any(m.equal_weights for m in matches.values()), any(m.zero_f for m in matches.values()))


@dataclass(frozen=True)
class EMScores:
    """Per-item scores as the reference returns them (``scores[view][key]``, arrays of shape (N,)) and how many items
    got a result defined in the module doc."""

    scores: Dict[str, Dict[str, np.ndarray]]
    equal_weight_items: int
    zero_f_items: int


def collect(items: Sequence[ItemScores]) -> EMScores:
    """Stack per-item scores into the reference's layout; every item must have the same views."""
    if not items:
        raise ValueError("no items")
    views = list(items[0].scores)
    if any(list(item.scores) != views for item in items):
        raise ValueError("items have different views")
    scores = {view: dict(zip(KEYS, np.stack([item.scores[view] for item in items], axis=1))) for view in views}
    return EMScores(scores, sum(item.equal_weights for item in items), sum(item.zero_f for item in items))
