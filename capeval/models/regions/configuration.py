"""Configurations of the region detectors and of how their regions are extracted.

- :class:`BottomUpConfig`: the bottom-up attention detector (Anderson et al., 2018) for TIGEr: Faster R-CNN,
  ResNet-101 C4, Visual Genome 1,600 objects and 400 attributes, as the ``config.yaml`` published beside the
  weights in ``unc-nlp/frcnn-vg-finetuned`` states it.
- :class:`X152FpnConfig`: the detector released with vilbert-multi-task for ViLBERT (12-in-1) and ViLBERTScore:
  Faster R-CNN, ResNeXt-152 32x8d FPN, 2-MLP box head, Visual Genome 1,600 objects, as its maskrcnn-benchmark
  ``detectron_config.yaml`` states it.

Both are written to / read from capeval's ``config.json``; ``conversion/regions_converter.py`` reads the original yaml
files. The extraction settings of the original feature files are separate: :class:`ExtractionSettings`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar, Dict, Tuple

from capeval.configuration import JsonConfig

RESNET_BLOCKS: Dict[int, Tuple[int, int, int, int]] = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
"""Bottleneck blocks in res2, res3, res4 and res5 per ResNet depth."""


@dataclass(frozen=True)
class ResNetConfig(JsonConfig):
    """Backbone and input constants every detector has; subclasses add their heads and test-time settings."""

    depth: int = 101  # RESNETS.DEPTH / BACKBONE.CONV_BODY
    stem_out_channels: int = 64  # RESNETS.STEM_OUT_CHANNELS
    res2_out_channels: int = 256  # RESNETS.RES2_OUT_CHANNELS
    num_groups: int = 1  # RESNETS.NUM_GROUPS: groups of the 3x3 convolutions (ResNeXt when > 1)
    bottleneck_channels: int = 64  # RESNETS.NUM_GROUPS * RESNETS.WIDTH_PER_GROUP
    stride_in_1x1: bool = True  # RESNETS.STRIDE_IN_1X1: MSRA/Caffe ResNets stride in the first 1x1 conv
    caffe_maxpool: bool = False  # MODEL.MAX_POOL: Caffe's ceil-mode unpadded 3x3 max pool instead of padding 1
    batch_norm_eps: float = 1e-5  # frozen batch norm epsilon
    pixel_mean: Tuple[float, float, float] = (102.9801, 115.9465, 122.7717)  # BGR
    pixel_std: Tuple[float, float, float] = (1.0, 1.0, 1.0)
    min_size_test: int = 600  # INPUT.MIN_SIZE_TEST
    max_size_test: int = 1000  # INPUT.MAX_SIZE_TEST
    size_divisibility: int = 0  # DATALOADER.SIZE_DIVISIBILITY: zero padding of the input to a multiple (0: none)


@dataclass(frozen=True)
class BottomUpConfig(ResNetConfig):
    """Architecture and test-time constants of the bottom-up detector; fields are named after ``config.yaml`` keys
    (frozen batch norm = Caffe BatchNorm + Scale with global statistics)."""

    rpn_hidden_channels: int = 512  # PROPOSAL_GENERATOR.HIDDEN_CHANNELS
    anchor_sizes: Tuple[float, ...] = (64.0, 128.0, 256.0, 512.0)  # ANCHOR_GENERATOR.SIZES[0]
    anchor_aspect_ratios: Tuple[float, ...] = (0.5, 1.0, 2.0)  # ANCHOR_GENERATOR.ASPECT_RATIOS[0]
    anchor_offset: float = 0.0  # ANCHOR_GENERATOR.OFFSET
    rpn_box_weights: Tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)  # RPN.BBOX_REG_WEIGHTS
    rpn_pre_nms_topk: int = 6000  # RPN.PRE_NMS_TOPK_TEST
    rpn_post_nms_topk: int = 300  # RPN.POST_NMS_TOPK_TEST
    rpn_nms_threshold: float = 0.7  # RPN.NMS_THRESH
    rpn_min_box_size: float = 0.0  # PROPOSAL_GENERATOR.MIN_SIZE
    pooler_resolution: int = 14  # ROI_BOX_HEAD.POOLER_RESOLUTION (RoIPool, stride 16)
    res5_halve: bool = False  # ROI_BOX_HEAD.RES5HALVE: False = res5 at stride 1 with dilation 2, as in Caffe
    num_classes: int = 1600  # ROI_HEADS.NUM_CLASSES (+1 background, stored last)
    num_attributes: int = 400  # ROI_BOX_HEAD.NUM_ATTRS (+1 "no attribute", stored last)
    box_weights: Tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)  # ROI_BOX_HEAD.BBOX_REG_WEIGHTS
    detection_nms_threshold: float = 0.6  # ROI_HEADS.NMS_THRESH_TEST (the LXMERT port's selection only)
    model_type: ClassVar[str] = "bottom-up-frcnn"

    @property
    def res4_channels(self) -> int:
        return self.res2_out_channels * 4

    @property
    def pooled_feature_dim(self) -> int:
        """Width of the pooled res5 output ("pool5_flat"): 2048 for the released model."""
        return self.res2_out_channels * 8

    @property
    def num_anchors(self) -> int:
        return len(self.anchor_sizes) * len(self.anchor_aspect_ratios)


@dataclass(frozen=True)
class X152FpnConfig(ResNetConfig):
    """Architecture and test-time constants of vilbert-multi-task's detector (vqa-maskrcnn-benchmark); defaults are
    maskrcnn-benchmark's ``config/defaults.py`` values and the ResNeXt-152 32x8d FPN / 2048-d MLP / 1,601-class
    layout its file name ``e2e_faster_rcnn_X-152-32x8d-FPN_1x_MLP_2048_FPN_512`` states; the yaml overrides them.

    maskrcnn-benchmark conventions kept: frozen batch norm without epsilon, the stride in the 3x3 conv, the max pool
    padded by 1, boxes with the +1 pixel width, background as class 0."""

    depth: int = 152
    num_groups: int = 32
    bottleneck_channels: int = 256  # 32 groups x 8
    stride_in_1x1: bool = False
    batch_norm_eps: float = 0.0
    min_size_test: int = 800
    max_size_test: int = 1333
    size_divisibility: int = 32
    fpn_channels: int = 512  # BACKBONE.OUT_CHANNELS (RESNETS.BACKBONE_OUT_CHANNELS in later maskrcnn-benchmark)
    anchor_sizes: Tuple[float, ...] = (32.0, 64.0, 128.0, 256.0, 512.0)  # RPN.ANCHOR_SIZES, one per level
    anchor_strides: Tuple[int, ...] = (4, 8, 16, 32, 64)  # RPN.ANCHOR_STRIDE: P2-P6
    anchor_aspect_ratios: Tuple[float, ...] = (0.5, 1.0, 2.0)  # RPN.ASPECT_RATIOS
    rpn_pre_nms_topk: int = 6000  # RPN.PRE_NMS_TOP_N_TEST, per level
    rpn_post_nms_topk: int = 1000  # RPN.POST_NMS_TOP_N_TEST, per level
    rpn_fpn_post_nms_topk: int = 2000  # RPN.FPN_POST_NMS_TOP_N_TEST, per image over all levels
    rpn_nms_threshold: float = 0.7  # RPN.NMS_THRESH
    rpn_min_box_size: float = 0.0  # RPN.MIN_SIZE
    pooler_resolution: int = 7  # ROI_BOX_HEAD.POOLER_RESOLUTION
    pooler_scales: Tuple[float, ...] = (0.25, 0.125, 0.0625, 0.03125)  # ROI_BOX_HEAD.POOLER_SCALES: P2-P5
    pooler_sampling_ratio: int = 2  # ROI_BOX_HEAD.POOLER_SAMPLING_RATIO
    mlp_head_dim: int = 2048  # ROI_BOX_HEAD.MLP_HEAD_DIM: width of fc6, fc7 and the region feature
    num_classes: int = 1601  # ROI_BOX_HEAD.NUM_CLASSES, background (class 0) included
    feature_after_relu: bool = True  # the "fc6" feature is ReLU(fc6(x)), as FPN2MLPFeatureExtractor computes it
    model_type: ClassVar[str] = "x152-fpn-frcnn"

    @property
    def num_anchors(self) -> int:
        """Anchors per position of each level: one size per level, every aspect ratio."""
        return len(self.anchor_aspect_ratios)

    @property
    def pooled_feature_dim(self) -> int:
        """Width of the region feature (fc6): 2048 for the released model."""
        return self.mlp_head_dim

    def __post_init__(self) -> None:
        if len(self.anchor_sizes) != len(self.anchor_strides):
            raise ValueError("the FPN RPN takes one anchor size per anchor stride (level)")
        levels = [-math.log2(scale) for scale in self.pooler_scales]
        if any(abs(level - round(level)) > 1e-6 for level in levels) or \
                [round(level) for level in levels] != list(range(round(levels[0]), round(levels[0]) + len(levels))):
            raise ValueError(f"pooler scales {self.pooler_scales} are not consecutive powers of 1/2")
        if [int(round(1 / s)) for s in self.pooler_scales] != list(self.anchor_strides[:len(self.pooler_scales)]):
            raise ValueError("the pooled levels must be the first RPN levels (P2-P5 of P2-P6)")


SAVE_SECONDS = 60.0
"""The time, in seconds, after which :func:`capeval.models.regions.extraction.extract_to_file` (``capeval regions``)
saves its progress at the latest (about: chunks are sized by the pace of the previous one, and one image is never
split), besides every ``chunk_size`` images."""

PREPROCESSING_MODES = ("caffe", "lxmert")
SELECTION_MODES = ("bottom-up", "lxmert", "vilbert")


@dataclass(frozen=True)
class ExtractionSettings:
    """How images become pixels and which regions are kept.

    ``preprocessing``:
      - ``"caffe"`` (default): the original pipelines (``fast_rcnn.test._get_image_blob``, and vilbert-multi-task's
        ``_image_transform`` which repeats it at 800 / 1333): BGR pixels as float32, means subtracted, resized by
        ``scale = min_size_test / shorter side`` (``max_size_test / longer side`` when the rounded longer side would
        exceed ``max_size_test``; 600 / 1000 for the bottom-up detector) with OpenCV's ``INTER_LINEAR`` arithmetic;
        boxes return to the original image by dividing by ``scale``.
      - ``"lxmert"``: the transformers research-project port (``processing_image.Preprocess``): torch bilinear
        resize of the raw pixels to the rounded size, then the means subtracted; its ``img_tensorize`` hands the
        network RGB channels although ``INPUT.FORMAT`` is BGR, and this mode reproduces that; boxes return by the
        per-axis ratio ``original / resized``.
    ``selection``:
      - ``"bottom-up"`` (default): ``generate_tsv.py``: per-class NMS (IoU 0.3, Caffe's +1 pixel convention) over
        the RPN proposals, each proposal scored by its highest class confidence among the classes that kept it; the
        boxes are the proposals themselves (no box regression). Those with confidence >= ``confidence_threshold``
        are kept in proposal order, unless fewer than ``min_boxes`` or more than ``max_boxes`` pass: then the
        ``min_boxes`` / ``max_boxes`` most confident, highest first. ``min_boxes = max_boxes = 36`` gives the fixed
        36-region files (TIGEr's); ``min_boxes=10, max_boxes=100`` the adaptive ones. The rule needs at least
        ``min_boxes`` proposals, which the original does not ensure (an image with fewer keeps every one, and
        SCAN's ``convert_data.py`` then fails to stack it with the 36-region images): the RPN here keeps at least
        ``min_boxes`` (:attr:`min_proposals`).
      - ``"lxmert"``: the port's ``do_nms``: class-specific regressed boxes of each proposal's best class, one
        class-agnostic NMS at ``detection_nms_threshold`` (0.6), the first ``max_boxes`` kept.
      - ``"vilbert"``: vilbert-multi-task's ``script/extract_features.py``: per-class NMS (``class_nms_threshold``
        0.5, maskrcnn-benchmark's +1 pixel IoU) over the RPN proposals in original pixels, background excluded;
        each proposal's confidence is its highest score above ``confidence_threshold`` (strictly) among the classes
        that kept it, 0 if none; the ``max_boxes`` most confident proposals are kept, highest first (exact ties in
        proposal order, where the script's unstable sort leaves them unspecified); no box regression.
    With the "caffe" preprocessing, images are zero-padded at the bottom and right to a multiple of the detector's
    ``size_divisibility`` (32 for the FPN detector, as the script's ``to_image_list(size_divisible=32)``).
    """

    preprocessing: str = "caffe"
    selection: str = "bottom-up"
    min_boxes: int = 36
    max_boxes: int = 36
    confidence_threshold: float = 0.2
    class_nms_threshold: float = 0.3

    def __post_init__(self) -> None:
        if self.preprocessing not in PREPROCESSING_MODES:
            raise ValueError(f"preprocessing must be one of {PREPROCESSING_MODES}, got {self.preprocessing!r}")
        if self.selection not in SELECTION_MODES:
            raise ValueError(f"selection must be one of {SELECTION_MODES}, got {self.selection!r}")
        if not 1 <= self.min_boxes <= self.max_boxes:
            raise ValueError(f"need 1 <= min_boxes <= max_boxes, got {self.min_boxes} and {self.max_boxes}")

    @property
    def min_proposals(self) -> int:
        """RPN proposals the bottom-up detector keeps at least: ``min_boxes`` under the bottom-up selection, 0 (the
        RPN as published) under the others. When its NMS leaves fewer, the proposals the NMS suppressed fill up,
        highest objectness first (:func:`~capeval.models.regions.proposals.propose_boxes`), so that the selection
        keeps ``min_boxes`` regions of every image, where the original keeps fewer. At the published input size
        (600 / 1000 pixels) the RPN proposes 300 boxes for ordinary images (at least 170 for 1000:1 images with the
        tests' random weights); fewer than 36 were met at a reduced input size (the tests' 64 pixels)."""
        return self.min_boxes if self.selection == "bottom-up" else 0

    def regions_per_image(self) -> str:
        """How many regions these settings keep: ``"36"``, or ``"10 to 100"``."""
        if self.min_boxes == self.max_boxes:
            return str(self.max_boxes)
        return f"{self.min_boxes} to {self.max_boxes}"

    def signature(self) -> str:
        """A stable string naming these settings, part of every cache namespace."""
        return ",".join(f"{key}={value}" for key, value in sorted(asdict(self).items()))


ADAPTIVE = ExtractionSettings(min_boxes=10, max_boxes=100)
"""The original adaptive mode: 10 to 100 regions, those with confidence >= 0.2."""

VILBERT = ExtractionSettings(selection="vilbert", min_boxes=100, max_boxes=100, confidence_threshold=0.0,
                             class_nms_threshold=0.5)
"""vilbert-multi-task's feature files: the 100 most confident proposals (``--num_features 100``, threshold 0)."""
