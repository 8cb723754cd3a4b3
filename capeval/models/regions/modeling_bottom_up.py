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
from typing import List, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import nms, roi_pool

from capeval.models.regions.configuration import RES5_BLOCKS, RESNET_BLOCKS, BottomUpConfig

BACKBONE_STRIDE = 16
"""res4 is 16 times coarser than the input: the stride of the anchors and the RoIPool scale."""

BOX_SCALE_CLAMP = math.log(1000.0 / 16)
"""Largest log-scale applied by box deltas (detectron2's default, used by the reference)."""


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with fixed statistics and affine terms (Caffe BatchNorm with global stats + Scale)."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 residual block, each conv without bias and followed by frozen batch norm."""

    def __init__(self, in_channels: int, bottleneck_channels: int, out_channels: int, *, stride: int, dilation: int,
                 stride_in_1x1: bool, eps: float) -> None:
        super().__init__()
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(in_channels, bottleneck_channels, 1, stride=stride_1x1, bias=False)
        self.norm1 = FrozenBatchNorm2d(bottleneck_channels, eps)
        self.conv2 = nn.Conv2d(bottleneck_channels, bottleneck_channels, 3, stride=stride_3x3, padding=dilation,
                               dilation=dilation, bias=False)
        self.norm2 = FrozenBatchNorm2d(bottleneck_channels, eps)
        self.conv3 = nn.Conv2d(bottleneck_channels, out_channels, 1, bias=False)
        self.norm3 = FrozenBatchNorm2d(out_channels, eps)
        self.shortcut = None
        self.shortcut_norm = None
        if in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
            self.shortcut_norm = FrozenBatchNorm2d(out_channels, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = F.relu(self.norm2(self.conv2(out)))
        out = self.norm3(self.conv3(out))
        shortcut = x if self.shortcut is None else self.shortcut_norm(self.shortcut(x))
        return F.relu(out + shortcut)


def _stage(num_blocks: int, in_channels: int, bottleneck_channels: int, out_channels: int, *, stride: int,
           dilation: int, config: BottomUpConfig) -> nn.Sequential:
    blocks = []
    for index in range(num_blocks):
        blocks.append(Bottleneck(in_channels if index == 0 else out_channels, bottleneck_channels, out_channels,
                                 stride=stride if index == 0 else 1, dilation=dilation,
                                 stride_in_1x1=config.stride_in_1x1, eps=config.batch_norm_eps))
    return nn.Sequential(*blocks)


class Stem(nn.Module):
    """7x7/2 conv, frozen batch norm, ReLU, 3x3/2 max pool (Caffe's ceil-mode unpadded pool or padding 1)."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.caffe_maxpool = config.caffe_maxpool
        self.conv = nn.Conv2d(3, config.stem_out_channels, 7, stride=2, padding=3, bias=False)
        self.norm = FrozenBatchNorm2d(config.stem_out_channels, config.batch_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        if self.caffe_maxpool:
            return F.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=True)
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class Backbone(nn.Module):
    """Stem and res2-res4 of the ResNet: the stride-16 feature map shared by the RPN and RoI pooling."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.stem = Stem(config)
        blocks = RESNET_BLOCKS[config.depth]
        in_channels, bottleneck, out_channels = config.stem_out_channels, config.bottleneck_channels, \
            config.res2_out_channels
        for stage, (num_blocks, stride) in enumerate(zip(blocks, (1, 2, 2)), start=2):
            self.add_module(f"res{stage}", _stage(num_blocks, in_channels, bottleneck, out_channels, stride=stride,
                                                  dilation=1, config=config))
            in_channels, bottleneck, out_channels = out_channels, bottleneck * 2, out_channels * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res4(self.res3(self.res2(self.stem(x))))


class RegionProposalHead(nn.Module):
    """3x3 conv + ReLU, then per-anchor objectness logits and box deltas."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.conv = nn.Conv2d(config.res4_channels, config.rpn_hidden_channels, 3, padding=1)
        self.objectness = nn.Conv2d(config.rpn_hidden_channels, config.num_anchors, 1)
        self.anchor_deltas = nn.Conv2d(config.rpn_hidden_channels, config.num_anchors * 4, 1)

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


def decode_boxes(deltas: torch.Tensor, boxes: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """Apply (dx, dy, dw, dh) deltas, (R, 4k), to (R, 4) boxes: centre shift by d * size, size scaled by exp(d);
    deltas are divided by ``weights`` and the log-scales clamped at log(1000/16)."""
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
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
    decoded[:, 2::4] = pred_ctr_x + 0.5 * pred_w
    decoded[:, 3::4] = pred_ctr_y + 0.5 * pred_h
    return decoded


def clip_boxes(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Boxes (R, 4k) clamped to [0, width] x [0, height]."""
    clipped = boxes.clone()
    clipped[:, 0::2] = clipped[:, 0::2].clamp(min=0, max=width)
    clipped[:, 1::2] = clipped[:, 1::2].clamp(min=0, max=height)
    return clipped


@dataclass
class ImageRegions:
    """All RPN proposals of one image and what the heads say about them, in resized-image pixels."""

    proposals: torch.Tensor  # (R, 4) x1, y1, x2, y2
    features: torch.Tensor  # (R, D) mean-pooled res5 output ("pool5_flat")
    class_logits: torch.Tensor  # (R, C + 1), background last
    attr_logits: torch.Tensor  # (R, num_attributes + 1), "no attribute" last
    box_deltas: torch.Tensor  # (R, 4C)
    image_height: int  # resized image
    image_width: int


class BottomUpDetector(nn.Module):
    """The detector; parameter names are listed against the checkpoint's in ``conversion/convert_regions.py``."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.config = config
        self.fingerprint = ""
        """Digest of the weight files this detector was loaded from (cache namespaces); set by ``load_detector``."""
        self.backbone = Backbone(config)
        self.rpn = RegionProposalHead(config)
        dilation = 1 if config.res5_halve else 2
        self.res5 = _stage(RES5_BLOCKS, config.res4_channels, config.bottleneck_channels * 8,
                           config.pooled_feature_dim, stride=2 if config.res5_halve else 1, dilation=dilation,
                           config=config)
        self.heads = RegionHeads(config)
        self.register_buffer("cell_anchors", cell_anchors(config), persistent=False)

    def anchors(self, height: int, width: int) -> torch.Tensor:
        """(H*W*A, 4) anchors of an HxW res4 map, ordered by row, column, then cell anchor."""
        offset = self.config.anchor_offset * BACKBONE_STRIDE
        device = self.cell_anchors.device
        shifts_x = torch.arange(offset, width * BACKBONE_STRIDE, step=BACKBONE_STRIDE, dtype=torch.float32,
                                device=device)
        shifts_y = torch.arange(offset, height * BACKBONE_STRIDE, step=BACKBONE_STRIDE, dtype=torch.float32,
                                device=device)
        grid_y, grid_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
        grid_x, grid_y = grid_x.reshape(-1), grid_y.reshape(-1)
        shifts = torch.stack((grid_x, grid_y, grid_x, grid_y), dim=1)
        return (shifts.view(-1, 1, 4) + self.cell_anchors.view(1, -1, 4)).reshape(-1, 4)

    def propose(self, logits: torch.Tensor, deltas: torch.Tensor, anchors: torch.Tensor, height: int,
                width: int) -> torch.Tensor:
        """One image's proposals: the top ``rpn_pre_nms_topk`` anchors by objectness, decoded, clipped to the
        image, boxes with a side <= ``rpn_min_box_size`` dropped, NMS, the first ``rpn_post_nms_topk`` kept."""
        config = self.config
        order = logits.sort(descending=True).indices[:config.rpn_pre_nms_topk]
        boxes = clip_boxes(decode_boxes(deltas[order], anchors[order], config.rpn_box_weights), height, width)
        scores = logits[order]
        nonempty = ((boxes[:, 2] - boxes[:, 0]) > config.rpn_min_box_size) & \
                   ((boxes[:, 3] - boxes[:, 1]) > config.rpn_min_box_size)
        if not bool(nonempty.all()):
            boxes, scores = boxes[nonempty], scores[nonempty]
        keep = nms(boxes, scores, config.rpn_nms_threshold)[:config.rpn_post_nms_topk]
        return boxes[keep]

    def region_features(self, feature_map: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
        """(R, D): RoIPool on the res4 map of one image, res5, mean over the pooled grid."""
        pooled = roi_pool(feature_map, [proposals], output_size=self.config.pooler_resolution,
                          spatial_scale=1.0 / BACKBONE_STRIDE)
        return self.res5(pooled).mean(dim=(2, 3))

    @torch.inference_mode()
    def forward(self, pixels: torch.Tensor, image_height: int, image_width: int) -> List[ImageRegions]:
        """Regions of a batch of preprocessed images of one size, (N, 3, image_height, image_width): images are
        batched by size only, never padded, so each image's result equals its result alone."""
        feature_maps = self.backbone(pixels)
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
