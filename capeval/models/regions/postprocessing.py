"""Which regions of an image are kept: the original ``generate_tsv.py`` rule or the LXMERT port's ``do_nms``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import nms

from capeval.models.regions.configuration import BottomUpConfig, ExtractionSettings
from capeval.models.regions.modeling_bottom_up import ImageRegions, clip_boxes, decode_boxes
from capeval.models.regions.preprocessing import ResizedImage


@dataclass
class Detections:
    """The kept regions of one image, in original-image pixels; ``scores`` is what ranked them."""

    boxes: np.ndarray  # (K, 4) float32 x1, y1, x2, y2
    features: np.ndarray  # (K, D) float32 pool5_flat
    scores: np.ndarray  # (K,) float32
    object_ids: np.ndarray  # (K,) int64, top Visual Genome class (background excluded)
    object_scores: np.ndarray  # (K,) float32
    attribute_ids: np.ndarray  # (K,) int64, top attribute ("no attribute" excluded, as the port)
    attribute_scores: np.ndarray  # (K,) float32
    image_size: tuple  # (width, height)


def bottom_up_confidence(boxes: torch.Tensor, class_scores: torch.Tensor, nms_threshold: float) -> torch.Tensor:
    """``generate_tsv.py``'s ``max_conf``: per class, NMS over all boxes with Caffe's +1 pixel IoU
    (``(x2 - x1 + 1) * (y2 - y1 + 1)``, obtained by shifting x2 and y2 by one); each box gets its highest score
    among the classes whose NMS kept it, 0 if none did. ``class_scores`` is (R, C) without background."""
    shifted = boxes.clone()
    shifted[:, 2:] += 1
    confidence = torch.zeros(boxes.shape[0], dtype=class_scores.dtype, device=boxes.device)
    for column in range(class_scores.shape[1]):
        scores = class_scores[:, column]
        keep = nms(shifted, scores, nms_threshold)
        confidence[keep] = torch.maximum(confidence[keep], scores[keep])
    return confidence


def bottom_up_keep(confidence: torch.Tensor, settings: ExtractionSettings) -> torch.Tensor:
    """Indices kept by ``generate_tsv.py``: those with confidence >= threshold, in proposal order, unless there are
    fewer than ``min_boxes`` or more than ``max_boxes``; then the top ``min_boxes`` / ``max_boxes`` by confidence,
    highest first (``np.argsort(c)[::-1]``; exact ties are taken later-proposal first, the reverse of a stable
    sort, where numpy's unstable sort may order them otherwise)."""
    above = torch.nonzero(confidence >= settings.confidence_threshold).flatten()
    descending = torch.sort(confidence, stable=True).indices.flip(0)
    if above.numel() < settings.min_boxes:
        return descending[:settings.min_boxes]
    if above.numel() > settings.max_boxes:
        return descending[:settings.max_boxes]
    return above


def select_regions(regions: ImageRegions, image: ResizedImage, config: BottomUpConfig,
                   settings: ExtractionSettings) -> Detections:
    """The kept regions of one image under ``settings.selection`` (see :class:`ExtractionSettings`)."""
    probabilities = torch.softmax(regions.class_logits, dim=-1)
    class_scores = probabilities[:, :-1]
    if settings.selection == "bottom-up":
        boxes = image.restore_boxes(regions.proposals)
        confidence = bottom_up_confidence(boxes, class_scores, settings.class_nms_threshold)
        keep = bottom_up_keep(confidence, settings)
        kept_boxes, scores = boxes[keep], confidence[keep]
    else:
        count = regions.proposals.shape[0]
        decoded = decode_boxes(regions.box_deltas, regions.proposals, config.box_weights)
        decoded = clip_boxes(decoded, regions.image_height, regions.image_width).view(count, -1, 4)
        best_scores, best_classes = class_scores.max(dim=1)
        best_boxes = decoded[torch.arange(count, device=decoded.device), best_classes]
        keep = nms(best_boxes, best_scores, config.detection_nms_threshold)[:settings.max_boxes]
        kept_boxes, scores = image.restore_boxes(best_boxes[keep]), best_scores[keep]
    object_scores, object_ids = class_scores[keep].max(dim=1)
    attribute_scores, attribute_ids = torch.softmax(regions.attr_logits[keep][:, :-1], dim=-1).max(dim=1)
    return Detections(
        boxes=kept_boxes.float().cpu().numpy(),
        features=regions.features[keep].float().cpu().numpy(),
        scores=scores.float().cpu().numpy(),
        object_ids=object_ids.cpu().numpy(),
        object_scores=object_scores.float().cpu().numpy(),
        attribute_ids=attribute_ids.cpu().numpy(),
        attribute_scores=attribute_scores.float().cpu().numpy(),
        image_size=image.original_size,
    )
