"""What both region detectors share between backbone and heads: the RPN head, anchors, box decoding and clipping,
NMS, one map's proposals, and :class:`ImageRegions`, the per-image output the selection rules read.

Two box conventions meet here: detectron2's (the bottom-up port: a box is ``x2 - x1`` wide) and Detectron's /
maskrcnn-benchmark's (the FPN detector: ``x2 - x1 + 1`` wide in decoding, clipping, sizes and IoU), chosen by
``pixel_offset`` 0 or 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

BOX_SCALE_CLAMP = math.log(1000.0 / 16)
"""Largest log-scale applied by box deltas (detectron2's and maskrcnn-benchmark's ``bbox_xform_clip``)."""


class RegionProposalHead(nn.Module):
    """3x3 conv + ReLU, then per-anchor objectness logits and box deltas (shared by every level of a pyramid)."""

    def __init__(self, in_channels: int, hidden_channels: int, num_anchors: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, hidden_channels, 3, padding=1)
        self.objectness = nn.Conv2d(hidden_channels, num_anchors, 1)
        self.anchor_deltas = nn.Conv2d(hidden_channels, num_anchors * 4, 1)

    def forward(self, features: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, H*W*A) and deltas (N, H*W*A, 4), ordered by row, column, then anchor."""
        hidden = F.relu(self.conv(features))
        logits = self.objectness(hidden)
        batch, anchors, height, width = logits.shape
        deltas = self.anchor_deltas(hidden).view(batch, anchors, 4, height, width).permute(0, 3, 4, 1, 2)
        return logits.permute(0, 2, 3, 1).reshape(batch, -1), deltas.reshape(batch, -1, 4)


def decode_boxes(deltas: torch.Tensor, boxes: torch.Tensor, weights: Sequence[float],
                 pixel_offset: float = 0.0) -> torch.Tensor:
    """Apply (dx, dy, dw, dh) deltas, (R, 4k), to (R, 4) boxes: centre shift by d * size, size scaled by exp(d);
    deltas are divided by ``weights`` and the log-scales clamped at log(1000/16). ``pixel_offset`` 1 is the
    Detectron / maskrcnn-benchmark convention (a box's width is ``x2 - x1 + 1``, and 1 comes off the new x2, y2)."""
    widths = boxes[:, 2] - boxes[:, 0] + pixel_offset
    heights = boxes[:, 3] - boxes[:, 1] + pixel_offset
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = deltas[:, 0::4] / wx, deltas[:, 1::4] / wy
    dw = torch.clamp(deltas[:, 2::4] / ww, max=BOX_SCALE_CLAMP)
    dh = torch.clamp(deltas[:, 3::4] / wh, max=BOX_SCALE_CLAMP)
    pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
    pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
    pred_w = torch.exp(dw) * widths[:, None]
    pred_h = torch.exp(dh) * heights[:, None]
    decoded = torch.empty_like(deltas)
    decoded[:, 0::4] = pred_ctr_x - 0.5 * pred_w
    decoded[:, 1::4] = pred_ctr_y - 0.5 * pred_h
    decoded[:, 2::4] = pred_ctr_x + 0.5 * pred_w - pixel_offset
    decoded[:, 3::4] = pred_ctr_y + 0.5 * pred_h - pixel_offset
    return decoded


def clip_boxes(boxes: torch.Tensor, height: int, width: int, pixel_offset: float = 0.0) -> torch.Tensor:
    """Boxes (R, 4k) clamped to [0, width - pixel_offset] x [0, height - pixel_offset]."""
    clipped = boxes.clone()
    clipped[:, 0::2] = clipped[:, 0::2].clamp(min=0, max=width - pixel_offset)
    clipped[:, 1::2] = clipped[:, 1::2].clamp(min=0, max=height - pixel_offset)
    return clipped


def shifted_anchors(cell: torch.Tensor, stride: int, height: int, width: int, offset: float = 0.0) -> torch.Tensor:
    """(H*W*A, 4) copies of the (A, 4) ``cell`` anchors centred on every position of an HxW map of the given
    stride (first position at ``offset`` pixels), ordered by row, column, then cell anchor."""
    shifts_x = torch.arange(offset, width * stride, step=stride, dtype=torch.float32, device=cell.device)
    shifts_y = torch.arange(offset, height * stride, step=stride, dtype=torch.float32, device=cell.device)
    grid_y, grid_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
    grid_x, grid_y = grid_x.reshape(-1), grid_y.reshape(-1)
    shifts = torch.stack((grid_x, grid_y, grid_x, grid_y), dim=1)
    return (shifts.view(-1, 1, 4) + cell.view(1, -1, 4)).reshape(-1, 4)


def nms_with_offset(boxes: torch.Tensor, scores: torch.Tensor, threshold: float,
                    pixel_offset: float = 0.0) -> torch.Tensor:
    """``torchvision.ops.nms``; ``pixel_offset`` 1 gives the Caffe / Detectron / maskrcnn-benchmark IoU, whose
    areas and overlaps count ``x2 - x1 + 1`` pixels (obtained exactly by shifting x2 and y2 by one). torchvision is
    imported by the first call: scoring precomputed regions never imports it."""
    from torchvision.ops import nms

    if pixel_offset:
        boxes = boxes.clone()
        boxes[:, 2:] += pixel_offset
    return nms(boxes, scores, threshold)


def propose_boxes(scores: torch.Tensor, deltas: torch.Tensor, anchors: torch.Tensor, height: int, width: int, *,
                  pre_nms_topk: int, post_nms_topk: int, nms_threshold: float, min_size: float,
                  box_weights: Sequence[float], pixel_offset: float = 0.0,
                  min_kept: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """(boxes, scores) of one image's proposals from one map: the top ``pre_nms_topk`` anchors by score, decoded,
    clipped to the image, small boxes dropped, NMS at ``nms_threshold``, the first ``post_nms_topk`` kept.
    ``pixel_offset`` 0 is detectron2's convention (boxes with a side <= ``min_size`` dropped); 1 is
    maskrcnn-benchmark's (+1 widths in decoding, clipping to ``size - 1``, sides ``x2 - x1 + 1 >= min_size`` kept,
    +1 IoU).

    When NMS keeps fewer than ``min_kept`` (at most ``post_nms_topk``) boxes, the boxes it suppressed follow them,
    highest score first, up to that number (as many as there are): capeval's rule for an image whose proposals
    cannot give the regions a feature file must hold (see :attr:`ExtractionSettings.min_proposals
    <capeval.models.regions.configuration.ExtractionSettings.min_proposals>`)."""
    order = scores.sort(descending=True, stable=True).indices[:pre_nms_topk]
    boxes = clip_boxes(decode_boxes(deltas[order], anchors[order], box_weights, pixel_offset), height, width,
                       pixel_offset)
    scores = scores[order]
    sides = torch.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) + pixel_offset
    large = sides >= min_size if pixel_offset else sides > min_size
    if not bool(large.all()):
        boxes, scores = boxes[large], scores[large]
    keep = nms_with_offset(boxes, scores, nms_threshold, pixel_offset)[:post_nms_topk]
    wanted = min(min_kept, post_nms_topk)
    if keep.numel() < wanted:  # boxes are in descending score order, so the suppressed ones are too
        suppressed = torch.ones(boxes.shape[0], dtype=torch.bool, device=boxes.device)
        suppressed[keep] = False
        keep = torch.cat([keep, torch.nonzero(suppressed).flatten()[:wanted - keep.numel()]])
    return boxes[keep], scores[keep]


@dataclass
class ImageRegions:
    """All RPN proposals of one image and what the heads say about them, in resized-image pixels."""

    proposals: torch.Tensor  # (R, 4) x1, y1, x2, y2
    features: torch.Tensor  # (R, D) region features (bottom-up: mean-pooled res5 "pool5_flat"; FPN: fc6)
    class_logits: torch.Tensor  # (R, C + 1), background included
    attr_logits: Optional[torch.Tensor]  # (R, num_attributes + 1), "no attribute" last; None without that head
    box_deltas: Optional[torch.Tensor]  # (R, 4C); None when the detector's selection needs no box regression
    image_height: int  # resized image
    image_width: int
    background_first: bool = False  # background is class 0 (maskrcnn-benchmark) instead of the last class

    def foreground_scores(self) -> torch.Tensor:
        """(R, C) softmax class probabilities with the background column removed."""
        probabilities = torch.softmax(self.class_logits, dim=-1)
        return probabilities[:, 1:] if self.background_first else probabilities[:, :-1]
