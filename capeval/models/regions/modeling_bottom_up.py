"""The bottom-up attention Faster R-CNN (ResNet-101 C4, Visual Genome) on torch and torchvision ops.

Network arithmetic follows the converted checkpoint's reference implementation (the transformers research-project
``lxmert/modeling_frcnn.py``, a detectron2-style re-implementation of the Caffe test network): frozen batch norm,
res2-res4 backbone at stride 16, an RPN with one anchor set on res4, RoIPool 14x14 at scale 1/16, res5 run per
region (stride 1, dilation 2, as the Caffe ``test.prototxt``), the mean over the 14x14 map as the 2048-d region
feature ("pool5_flat"), then the class, box and attribute heads.

:meth:`BottomUpDetector.forward` returns, per image, every RPN proposal with its feature and head outputs; which
regions are kept is decided by :mod:`capeval.models.regions.postprocessing`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import nms, roi_pool

from capeval.models.regions.configuration import RESNET_BLOCKS, BottomUpConfig
from capeval.models.regions.resnet import Backbone, resnet_stage

BACKBONE_STRIDE = 16
"""res4 is 16 times coarser than the input: the stride of the anchors and the RoIPool scale."""

BOX_SCALE_CLAMP = math.log(1000.0 / 16)
"""Largest log-scale applied by box deltas (detectron2's default, used by the reference)."""


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


class RegionHeads(nn.Module):
    """Per-region class scores (background last), class-specific box deltas, and attribute scores conditioned on
    an embedding of the region's top class (background included in the argmax, as the reference)."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        dim = config.pooled_feature_dim
        self.cls_score = nn.Linear(dim, config.num_classes + 1)
        self.bbox_pred = nn.Linear(dim, config.num_classes * 4)
        self.cls_embedding = nn.Embedding(config.num_classes + 1, dim // 8)
        self.fc_attr = nn.Linear(dim + dim // 8, dim // 4)
        self.attr_score = nn.Linear(dim // 4, config.num_attributes + 1)

    def forward(self, pooled: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        class_logits = self.cls_score(pooled)
        box_deltas = self.bbox_pred(pooled)
        embedded = self.cls_embedding(class_logits.argmax(-1))
        attr_logits = self.attr_score(F.relu(self.fc_attr(torch.cat([pooled, embedded], -1))))
        return class_logits, attr_logits, box_deltas


def cell_anchors(config: BottomUpConfig) -> torch.Tensor:
    """(A, 4) anchors centred on (0, 0): for each size, for each aspect ratio h/w, area size**2."""
    anchors = []
    for size in config.anchor_sizes:
        for ratio in config.anchor_aspect_ratios:
            width = math.sqrt(size ** 2.0 / ratio)
            height = ratio * width
            anchors.append([-width / 2.0, -height / 2.0, width / 2.0, height / 2.0])
    return torch.tensor(anchors, dtype=torch.float32)


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
    areas and overlaps count ``x2 - x1 + 1`` pixels (obtained exactly by shifting x2 and y2 by one)."""
    if pixel_offset:
        boxes = boxes.clone()
        boxes[:, 2:] += pixel_offset
    return nms(boxes, scores, threshold)


def propose_boxes(scores: torch.Tensor, deltas: torch.Tensor, anchors: torch.Tensor, height: int, width: int, *,
                  pre_nms_topk: int, post_nms_topk: int, nms_threshold: float, min_size: float,
                  box_weights: Sequence[float], pixel_offset: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """(boxes, scores) of one image's proposals from one map: the top ``pre_nms_topk`` anchors by score, decoded,
    clipped to the image, small boxes dropped, NMS at ``nms_threshold``, the first ``post_nms_topk`` kept.
    ``pixel_offset`` 0 is detectron2's convention (boxes with a side <= ``min_size`` dropped); 1 is
    maskrcnn-benchmark's (+1 widths in decoding, clipping to ``size - 1``, sides ``x2 - x1 + 1 >= min_size`` kept,
    +1 IoU)."""
    order = scores.sort(descending=True, stable=True).indices[:pre_nms_topk]
    boxes = clip_boxes(decode_boxes(deltas[order], anchors[order], box_weights, pixel_offset), height, width,
                       pixel_offset)
    scores = scores[order]
    sides = torch.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) + pixel_offset
    large = sides >= min_size if pixel_offset else sides > min_size
    if not bool(large.all()):
        boxes, scores = boxes[large], scores[large]
    keep = nms_with_offset(boxes, scores, nms_threshold, pixel_offset)[:post_nms_topk]
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


class BottomUpDetector(nn.Module):
    """The detector; parameter names are listed against the checkpoint's in ``conversion/convert_regions.py``."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.config = config
        self.fingerprint = ""
        """Digest of the weight files this detector was loaded from (cache namespaces); set by ``load_detector``."""
        self.backbone = Backbone(config, num_stages=3)
        self.rpn = RegionProposalHead(config.res4_channels, config.rpn_hidden_channels, config.num_anchors)
        dilation = 1 if config.res5_halve else 2
        self.res5 = resnet_stage(RESNET_BLOCKS[config.depth][3], config.res4_channels,
                                 config.bottleneck_channels * 8, config.pooled_feature_dim,
                                 stride=2 if config.res5_halve else 1, dilation=dilation, config=config)
        self.heads = RegionHeads(config)
        self.register_buffer("cell_anchors", cell_anchors(config), persistent=False)

    def anchors(self, height: int, width: int) -> torch.Tensor:
        """(H*W*A, 4) anchors of an HxW res4 map, ordered by row, column, then cell anchor."""
        return shifted_anchors(self.cell_anchors, BACKBONE_STRIDE, height, width,
                               self.config.anchor_offset * BACKBONE_STRIDE)

    def propose(self, logits: torch.Tensor, deltas: torch.Tensor, anchors: torch.Tensor, height: int,
                width: int) -> torch.Tensor:
        """One image's proposals (see :func:`propose_boxes`), ranked by objectness logit."""
        config = self.config
        boxes, _ = propose_boxes(logits, deltas, anchors, height, width, pre_nms_topk=config.rpn_pre_nms_topk,
                                 post_nms_topk=config.rpn_post_nms_topk, nms_threshold=config.rpn_nms_threshold,
                                 min_size=config.rpn_min_box_size, box_weights=config.rpn_box_weights)
        return boxes

    def region_features(self, feature_map: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
        """(R, D): RoIPool on the res4 map of one image, res5, mean over the pooled grid."""
        pooled = roi_pool(feature_map, [proposals], output_size=self.config.pooler_resolution,
                          spatial_scale=1.0 / BACKBONE_STRIDE)
        return self.res5(pooled).mean(dim=(2, 3))

    @torch.inference_mode()
    def forward(self, pixels: torch.Tensor, image_height: int, image_width: int) -> List[ImageRegions]:
        """Regions of a batch of preprocessed images of one size, (N, 3, image_height, image_width): images are
        batched by size only, never padded, so each image's result equals its result alone."""
        feature_maps = self.backbone(pixels)[-1]
        logits, deltas = self.rpn(feature_maps)
        anchors = self.anchors(feature_maps.shape[2], feature_maps.shape[3])
        results = []
        for index in range(pixels.shape[0]):
            proposals = self.propose(logits[index], deltas[index], anchors, image_height, image_width)
            features = self.region_features(feature_maps[index:index + 1], proposals)
            class_logits, attr_logits, box_deltas = self.heads(features)
            results.append(ImageRegions(proposals, features, class_logits, attr_logits, box_deltas,
                                        image_height, image_width))
        return results
