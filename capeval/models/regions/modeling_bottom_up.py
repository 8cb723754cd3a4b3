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
from typing import List, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import roi_pool

from capeval.models.regions.configuration import RESNET_BLOCKS, BottomUpConfig
from capeval.models.regions.proposals import ImageRegions, RegionProposalHead, propose_boxes, shifted_anchors
from capeval.models.regions.resnet import Backbone, resnet_stage

BACKBONE_STRIDE = 16
"""res4 is 16 times coarser than the input: the stride of the anchors and the RoIPool scale."""


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


class BottomUpDetector(nn.Module):
    """The detector; parameter names are listed against the checkpoint's in ``conversion/regions_converter.py``."""

    def __init__(self, config: BottomUpConfig) -> None:
        super().__init__()
        self.config = config
        self.name = config.model_type
        """Hub id or folder it was loaded from (the config's ``model_type`` until then); set by ``load_detector``."""
        self.fingerprint = ""
        """Digest of the weight files this detector was loaded from (cache namespaces); set by ``load_detector``."""
        self.revision: Optional[str] = None
        """Hub revision it was loaded at (``None``: a local folder); set by ``load_detector``."""
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
                width: int, min_proposals: int = 0) -> torch.Tensor:
        """One image's proposals (see :func:`propose_boxes`), ranked by objectness logit; at least
        ``min_proposals`` when the map has that many boxes (the NMS-suppressed ones fill up)."""
        config = self.config
        boxes, _ = propose_boxes(logits, deltas, anchors, height, width, pre_nms_topk=config.rpn_pre_nms_topk,
                                 post_nms_topk=config.rpn_post_nms_topk, nms_threshold=config.rpn_nms_threshold,
                                 min_size=config.rpn_min_box_size, box_weights=config.rpn_box_weights,
                                 min_kept=min_proposals)
        return boxes

    def region_features(self, feature_map: torch.Tensor, proposals: torch.Tensor) -> torch.Tensor:
        """(R, D): RoIPool on the res4 map of one image, res5, mean over the pooled grid."""
        pooled = roi_pool(feature_map, [proposals], output_size=self.config.pooler_resolution,
                          spatial_scale=1.0 / BACKBONE_STRIDE)
        return self.res5(pooled).mean(dim=(2, 3))

    @torch.inference_mode()
    def forward(self, pixels: torch.Tensor, image_height: int, image_width: int,
                min_proposals: int = 0) -> List[ImageRegions]:
        """Regions of a batch of preprocessed images of one size, (N, 3, image_height, image_width): images are
        batched by size only, never padded, so each image's result equals its result alone. ``min_proposals``: see
        :meth:`propose` (:attr:`ExtractionSettings.min_proposals
        <capeval.models.regions.configuration.ExtractionSettings.min_proposals>`)."""
        feature_maps = self.backbone(pixels)[-1]
        logits, deltas = self.rpn(feature_maps)
        anchors = self.anchors(feature_maps.shape[2], feature_maps.shape[3])
        results = []
        for index in range(pixels.shape[0]):
            proposals = self.propose(logits[index], deltas[index], anchors, image_height, image_width, min_proposals)
            features = self.region_features(feature_maps[index:index + 1], proposals)
            class_logits, attr_logits, box_deltas = self.heads(features)
            results.append(ImageRegions(proposals, features, class_logits, attr_logits, box_deltas,
                                        image_height, image_width))
        return results
