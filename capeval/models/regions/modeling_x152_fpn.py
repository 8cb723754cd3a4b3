"""vilbert-multi-task's region detector (vqa-maskrcnn-benchmark Faster R-CNN, ResNeXt-152 32x8d FPN, Visual Genome)
on torch and torchvision ops.

The arithmetic is maskrcnn-benchmark's at test time: a ResNeXt body with frozen batch norm (no epsilon), an FPN
(1x1 lateral and 3x3 output convs, nearest 2x top-down upsampling, P6 by a 1x1 stride-2 max pool of P5), one RPN
head shared by P2-P6 with one anchor size per level (Detectron's rounded legacy anchors), per-level proposals
(top ``rpn_pre_nms_topk`` by sigmoid objectness, decoded with +1 widths, clipped to ``size - 1``, NMS 0.7 with +1
IoU, ``rpn_post_nms_topk`` kept) and the best ``rpn_fpn_post_nms_topk`` over all levels; each proposal is pooled
from the level ``floor(4 + log2(sqrt(area) / 224 + 1e-6))`` clamped to P2-P5 (area with +1 sides) by legacy
RoIAlign (``roi_align(aligned=False)``), then the two-MLP box head: fc6 + ReLU, fc7 + ReLU, class scores.

:meth:`X152FpnDetector.forward` returns, per image, every proposal with its fc6 feature and class logits
(background is class 0); :mod:`capeval.models.regions.postprocessing` decides which regions are kept.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import roi_align

from capeval.models.regions.configuration import X152FpnConfig
from capeval.models.regions.proposals import ImageRegions, RegionProposalHead, propose_boxes, shifted_anchors
from capeval.models.regions.resnet import Backbone

RPN_BOX_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
"""maskrcnn-benchmark's RPN box coder weights (fixed in its code, not in the config)."""

CANONICAL_SCALE, CANONICAL_LEVEL, LEVEL_EPS = 224.0, 4, 1e-6
"""The FPN level mapper's constants (Lin et al. 2017, eq. 1, as maskrcnn-benchmark's ``LevelMapper``)."""


def legacy_cell_anchors(stride: int, size: float, aspect_ratios: Sequence[float]) -> torch.Tensor:
    """(A, 4) anchors of one level as Detectron's ``generate_anchors``: a ``stride x stride`` box at the origin
    (corners 0 and ``stride - 1``), for each aspect ratio h/w its area kept with the width ``round(sqrt(area /
    ratio))`` and height ``round(width * ratio)`` (half to even), then scaled by ``size / stride`` about its
    centre; corners at ``centre -/+ 0.5 * (side - 1)``."""
    centre = 0.5 * (stride - 1)
    scale = size / stride
    anchors = []
    for ratio in aspect_ratios:
        width = float(round(math.sqrt(stride * stride / ratio)))
        height = float(round(width * ratio))
        width, height = width * scale, height * scale
        anchors.append([centre - 0.5 * (width - 1), centre - 0.5 * (height - 1),
                        centre + 0.5 * (width - 1), centre + 0.5 * (height - 1)])
    return torch.tensor(anchors, dtype=torch.float64).float()


class FeaturePyramid(nn.Module):
    """P2-P6 from res2-res5: 1x1 lateral convs, nearest 2x upsampling added top-down, 3x3 output convs, and P6 as
    the 1x1 stride-2 max pool of P5."""

    def __init__(self, in_channels: Sequence[int], out_channels: int) -> None:
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(channels, out_channels, 1) for channels in in_channels)
        self.output = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_channels)

    def forward(self, stages: List[torch.Tensor]) -> List[torch.Tensor]:
        merged = self.lateral[-1](stages[-1])
        levels = [self.output[-1](merged)]
        for index in range(len(stages) - 2, -1, -1):
            merged = self.lateral[index](stages[index]) + F.interpolate(merged, scale_factor=2, mode="nearest")
            levels.insert(0, self.output[index](merged))
        levels.append(F.max_pool2d(levels[-1], kernel_size=1, stride=2, padding=0))
        return levels


class BoxHead(nn.Module):
    """fc6 and fc7 (each + ReLU) over the flattened pooled grid, then the class scores (background first)."""

    def __init__(self, config: X152FpnConfig) -> None:
        super().__init__()
        self.fc6 = nn.Linear(config.fpn_channels * config.pooler_resolution ** 2, config.mlp_head_dim)
        self.fc7 = nn.Linear(config.mlp_head_dim, config.mlp_head_dim)
        self.cls_score = nn.Linear(config.mlp_head_dim, config.num_classes)
        self.feature_after_relu = config.feature_after_relu

    def forward(self, pooled: torch.Tensor) -> tuple:
        """(region features (R, D), class logits (R, C))."""
        fc6 = self.fc6(pooled.flatten(1))
        hidden = F.relu(fc6)
        class_logits = self.cls_score(F.relu(self.fc7(hidden)))
        return (hidden if self.feature_after_relu else fc6), class_logits


def pyramid_levels(boxes: torch.Tensor, num_levels: int, first_level: int) -> torch.Tensor:
    """Index (0 = finest pooled level) of the level each (R, 4) box is pooled from, by the FPN level mapper."""
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    levels = torch.floor(CANONICAL_LEVEL + torch.log2(torch.sqrt(areas) / CANONICAL_SCALE + LEVEL_EPS))
    return (levels.clamp(min=first_level, max=first_level + num_levels - 1) - first_level).to(torch.int64)


class X152FpnDetector(nn.Module):
    """The detector; parameter names are listed against the checkpoint's in ``conversion/regions_converter.py``."""

    def __init__(self, config: X152FpnConfig) -> None:
        super().__init__()
        self.config = config
        self.name = config.model_type
        """Hub id or folder it was loaded from (the config's ``model_type`` until then); set by ``load_detector``."""
        self.fingerprint = ""
        """Digest of the weight files this detector was loaded from (cache namespaces); set by ``load_detector``."""
        self.revision: Optional[str] = None
        """Hub revision it was loaded at (``None``: a local folder); set by ``load_detector``."""
        self.backbone = Backbone(config, num_stages=4)
        self.fpn = FeaturePyramid([config.res2_out_channels * 2 ** index for index in range(4)], config.fpn_channels)
        self.rpn = RegionProposalHead(config.fpn_channels, config.fpn_channels, config.num_anchors)
        self.box_head = BoxHead(config)
        for level, (stride, size) in enumerate(zip(config.anchor_strides, config.anchor_sizes)):
            self.register_buffer(f"cell_anchors_{level}", legacy_cell_anchors(stride, size,
                                                                              config.anchor_aspect_ratios),
                                 persistent=False)

    def cell_anchors(self, level: int) -> torch.Tensor:
        return getattr(self, f"cell_anchors_{level}")

    def propose(self, levels: List[torch.Tensor], index: int, image_height: int, image_width: int) -> torch.Tensor:
        """Proposals of image ``index`` of the batch: per level, then the best ``rpn_fpn_post_nms_topk`` by
        objectness over all levels, highest first."""
        config = self.config
        boxes, scores = [], []
        for level, feature_map in enumerate(levels):
            logits, deltas = self.rpn(feature_map[index:index + 1])
            anchors = shifted_anchors(self.cell_anchors(level), config.anchor_strides[level], feature_map.shape[2],
                                      feature_map.shape[3])
            level_boxes, level_scores = propose_boxes(
                torch.sigmoid(logits[0]), deltas[0], anchors, image_height, image_width,
                pre_nms_topk=config.rpn_pre_nms_topk, post_nms_topk=config.rpn_post_nms_topk,
                nms_threshold=config.rpn_nms_threshold, min_size=config.rpn_min_box_size,
                box_weights=RPN_BOX_WEIGHTS, pixel_offset=1.0)
            boxes.append(level_boxes)
            scores.append(level_scores)
        all_scores = torch.cat(scores)
        best = torch.topk(all_scores, min(config.rpn_fpn_post_nms_topk, all_scores.numel()), sorted=True).indices
        return torch.cat(boxes)[best]

    def pool(self, levels: List[torch.Tensor], index: int, proposals: torch.Tensor) -> torch.Tensor:
        """(R, C, S, S): each proposal's legacy RoIAlign on its level of image ``index``."""
        config = self.config
        first_level = round(-math.log2(config.pooler_scales[0]))
        assignment = pyramid_levels(proposals, len(config.pooler_scales), first_level)
        size = config.pooler_resolution
        pooled = proposals.new_zeros((proposals.shape[0], levels[0].shape[1], size, size))
        for level, scale in enumerate(config.pooler_scales):
            chosen = torch.nonzero(assignment == level).flatten()
            if chosen.numel():
                pooled[chosen] = roi_align(levels[level][index:index + 1], [proposals[chosen]], size,
                                           spatial_scale=scale, sampling_ratio=config.pooler_sampling_ratio,
                                           aligned=False)
        return pooled

    @torch.inference_mode()
    def forward(self, pixels: torch.Tensor, image_height: int, image_width: int) -> List[ImageRegions]:
        """Regions of a batch of preprocessed images of one padded size, (N, 3, H, W), whose content (before the
        zero padding at the bottom and right) is ``image_height x image_width``: each image's result equals its
        result alone."""
        levels = self.fpn(self.backbone(pixels))
        results = []
        for index in range(pixels.shape[0]):
            proposals = self.propose(levels, index, image_height, image_width)
            features, class_logits = self.box_head(self.pool(levels, index, proposals))
            results.append(ImageRegions(proposals, features, class_logits, None, None, image_height, image_width,
                                        background_first=True))
        return results
