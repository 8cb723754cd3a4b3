"""BRIDGE's training losses, as the paper writes them (Sarto et al., 2024, Sec. 3.3 and Appendix A, Eqs. 5-6).

Notation: N images in the batch; image ``i`` has ``N_i`` pseudo-captions ``t_ij`` (M in all); ``a_i`` is the anchor
of image ``i``: its CLIP image embedding ``v_i`` for L1, its ground-truth caption embedding ``t_i`` for L2;
``s = cos / tau``. The weighted contrastive loss is

    - 1/M sum_ij log( exp s(a_i, t_ij) / sum_{k != i} N_k exp s(a_k, t_ij) )
    - 1/M sum_ij N_i log( exp s(a_i, t_ij) / sum_{k != i} sum_h exp s(a_i, t_kh) )

(the positive is not in either denominator). L3 is a regular symmetric InfoNCE between ``C(t_ij)`` and CLIP's
embedding of "a photo of a <chunk>" (positive in the denominator, mean of both directions).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch
import torch.nn.functional as F


def _cosines(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    return F.normalize(left, dim=-1) @ F.normalize(right, dim=-1).T


def weighted_contrastive_loss(anchors: torch.Tensor, pseudo: torch.Tensor, owner: torch.Tensor,
                              weights: torch.Tensor, temperature: float) -> torch.Tensor:
    """The weighted, positive-free symmetric InfoNCE above.

    Args:
        anchors: ``(N, d)`` one anchor per image.
        pseudo: ``(M, d)`` pseudo-caption embeddings.
        owner: ``(M,)`` the image of each pseudo-caption (every image owns at least one).
        weights: ``(N,)`` the ``N_i`` of each image.
        temperature: tau.
    """
    images = anchors.shape[0]
    if images < 2:
        raise ValueError("the contrastive losses need at least two images in a batch (no negatives otherwise)")
    scores = _cosines(pseudo, anchors) / temperature  # (M, N): s(a_k, t_m)
    own = F.one_hot(owner, images).bool()  # (M, N): k == owner(m)
    positive = scores[own]  # s(a_i, t_ij), in pseudo-caption order
    weights = weights.to(scores.dtype)
    to_anchors = torch.logsumexp((scores + weights.log()[None, :]).masked_fill(own, float("-inf")), dim=1)
    to_pseudo = torch.logsumexp(scores.T.masked_fill(own.T, float("-inf")), dim=1)[owner]
    count = pseudo.shape[0]
    return -((positive - to_anchors).sum() + (weights[owner] * (positive - to_pseudo)).sum()) / count


def contrastive_loss(left: torch.Tensor, right: torch.Tensor, temperature: float) -> torch.Tensor:
    """Regular symmetric InfoNCE between rows of ``left`` and ``right`` (row ``m`` of each is a positive pair)."""
    logits = _cosines(left, right) / temperature
    targets = torch.arange(left.shape[0], device=left.device)
    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2


@dataclass(frozen=True)
class LossWeights:
    """lambda_1, lambda_2, lambda_3 (the paper's grid-searched 0.01, 1.0, 0.01) and tau."""

    image: float = 0.01
    caption: float = 1.0
    regularization: float = 0.01
    temperature: float = 0.07


def bridge_losses(image_embeddings: torch.Tensor, caption_embeddings: torch.Tensor, pseudo: torch.Tensor,
                  regularized: torch.Tensor, prompt_embeddings: torch.Tensor, owner: torch.Tensor,
                  weights: torch.Tensor, settings: LossWeights) -> Dict[str, torch.Tensor]:
    """L1 (pseudo-captions vs images), L2 (vs ground-truth captions), L3 (``C(t_hat)`` vs chunk prompts) and their
    weighted sum ``loss``."""
    tau = settings.temperature
    l1 = weighted_contrastive_loss(image_embeddings, pseudo, owner, weights, tau)
    l2 = weighted_contrastive_loss(caption_embeddings, pseudo, owner, weights, tau)
    l3 = contrastive_loss(regularized, prompt_embeddings, tau)
    total = settings.image * l1 + settings.caption * l2 + settings.regularization * l3
    return {"loss": total, "l1": l1, "l2": l2, "l3": l3}
