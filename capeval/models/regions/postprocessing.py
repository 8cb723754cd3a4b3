"""Which regions of an image are kept: the bottom-up ``generate_tsv.py`` rule, the LXMERT port's ``do_nms``, or
vilbert-multi-task's ``extract_features.py`` rule (see :class:`ExtractionSettings`)."""
from __future__ import annotations

from dataclasses import dataclass

from typing import Optional, Union

import numpy as np
import torch

from capeval.models.regions.configuration import BottomUpConfig, ExtractionSettings, X152FpnConfig
from capeval.models.regions.proposals import ImageRegions, clip_boxes, decode_boxes, nms_with_offset
from capeval.models.regions.preprocessing import ResizedImage


@dataclass
class Detections:
    """The kept regions of one image, in original-image pixels; ``scores`` is what ranked them."""

    boxes: np.ndarray  # (K, 4) float32 x1, y1, x2, y2
    features: np.ndarray  # (K, D) float32 region features (bottom-up: pool5_flat; FPN: fc6)
    scores: np.ndarray  # (K,) float32
    object_ids: np.ndarray  # (K,) int64, top Visual Genome class (0-based, background excluded)
    object_scores: np.ndarray  # (K,) float32
    attribute_ids: np.ndarray  # (K,) int64, top attribute ("no attribute" excluded, as the port); -1 without
    attribute_scores: np.ndarray  # (K,) float32; 0 for a detector without an attribute head
    image_size: tuple  # (width, height)


def bottom_up_confidence(boxes: torch.Tensor, class_scores: torch.Tensor, nms_threshold: float,
                         floor: Optional[float] = None) -> torch.Tensor:
    """``generate_tsv.py``'s (and ``extract_features.py``'s) ``max_conf``: per class, NMS over all boxes with the
    +1 pixel IoU (``(x2 - x1 + 1) * (y2 - y1 + 1)``); each box gets its highest score among the classes whose NMS
    kept it, 0 if none did; with ``floor``, only scores strictly above it count. ``class_scores`` is (R, C) without
    background."""
    confidence = torch.zeros(boxes.shape[0], dtype=class_scores.dtype, device=boxes.device)
    for column in range(class_scores.shape[1]):
        scores = class_scores[:, column]
        keep = nms_with_offset(boxes, scores, nms_threshold, pixel_offset=1.0)
        candidates = scores[keep]
        if floor is not None:
            candidates = torch.where(candidates > floor, candidates, torch.zeros_like(candidates))
        confidence[keep] = torch.maximum(confidence[keep], candidates)
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


def select_regions(regions: ImageRegions, image: ResizedImage, config: Union[BottomUpConfig, X152FpnConfig],
                   settings: ExtractionSettings) -> Detections:
    """The kept regions of one image under ``settings.selection`` (see :class:`ExtractionSettings`)."""
    class_scores = regions.foreground_scores()
    if settings.selection == "bottom-up":
        boxes = image.restore_boxes(regions.proposals)
        confidence = bottom_up_confidence(boxes, class_scores, settings.class_nms_threshold)
        keep = bottom_up_keep(confidence, settings)
        kept_boxes, scores = boxes[keep], confidence[keep]
    elif settings.selection == "vilbert":
        boxes = image.restore_boxes(regions.proposals)
        confidence = bottom_up_confidence(boxes, class_scores, settings.class_nms_threshold,
                                          floor=settings.confidence_threshold)
        keep = torch.sort(confidence, descending=True, stable=True).indices[:settings.max_boxes]
        kept_boxes, scores = boxes[keep], confidence[keep]
    else:
        if regions.box_deltas is None:
            raise ValueError("the lxmert selection needs box regression, which this detector does not compute")
        count = regions.proposals.shape[0]
        decoded = decode_boxes(regions.box_deltas, regions.proposals, config.box_weights)
        decoded = clip_boxes(decoded, regions.image_height, regions.image_width).view(count, -1, 4)
        best_scores, best_classes = class_scores.max(dim=1)
        best_boxes = decoded[torch.arange(count, device=decoded.device), best_classes]
        keep = nms_with_offset(best_boxes, best_scores, config.detection_nms_threshold)[:settings.max_boxes]
        kept_boxes, scores = image.restore_boxes(best_boxes[keep]), best_scores[keep]
    object_scores, object_ids = class_scores[keep].max(dim=1)
    if regions.attr_logits is None:
        attribute_ids = torch.full_like(object_ids, -1)
        attribute_scores = torch.zeros_like(object_scores)
    else:
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
