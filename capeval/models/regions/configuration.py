"""Configuration of the bottom-up attention detector (Anderson et al., 2018): Faster R-CNN, ResNet-101 C4, Visual
Genome 1,600 objects and 400 attributes.

:class:`BottomUpConfig` holds the architecture and test-time settings that the converted checkpoint needs, read from
the ``config.yaml`` published beside the weights in ``unc-nlp/frcnn-vg-finetuned`` (:meth:`from_reference_yaml`)
and written to / read from capeval's ``config.json``. The extraction settings of the original feature files
(``tools/generate_tsv.py`` of peteanderson80/bottom-up-attention) are separate: :class:`ExtractionSettings`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple, Union

RESNET_BLOCKS: Dict[int, Tuple[int, int, int]] = {50: (3, 4, 6), 101: (3, 4, 23), 152: (3, 8, 36)}
"""Bottleneck blocks in res2, res3 and res4 per ResNet depth; res5 (3 blocks) is the RoI head."""

RES5_BLOCKS = 3


@dataclass(frozen=True)
class BottomUpConfig:
    """Architecture and test-time constants of the detector; every field is named after its ``config.yaml`` key."""

    depth: int = 101  # RESNETS.DEPTH
    stem_out_channels: int = 64  # RESNETS.STEM_OUT_CHANNELS
    res2_out_channels: int = 256  # RESNETS.RES2_OUT_CHANNELS
    bottleneck_channels: int = 64  # RESNETS.NUM_GROUPS * RESNETS.WIDTH_PER_GROUP
    stride_in_1x1: bool = True  # RESNETS.STRIDE_IN_1X1: MSRA/Caffe ResNets stride in the first 1x1 conv
    caffe_maxpool: bool = False  # MODEL.MAX_POOL: Caffe's ceil-mode unpadded 3x3 max pool instead of padding 1
    batch_norm_eps: float = 1e-5  # frozen batch norm (Caffe BatchNorm + Scale with global statistics)
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
    pixel_mean: Tuple[float, float, float] = (102.9801, 115.9465, 122.7717)  # MODEL.PIXEL_MEAN, BGR
    pixel_std: Tuple[float, float, float] = (1.0, 1.0, 1.0)  # MODEL.PIXEL_STD
    min_size_test: int = 600  # INPUT.MIN_SIZE_TEST
    max_size_test: int = 1000  # INPUT.MAX_SIZE_TEST
    model_type: str = field(default="bottom-up-frcnn", repr=False)

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

    def to_dict(self) -> Dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "BottomUpConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown BottomUpConfig fields: {unknown}")
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in values.items()})

    def save(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "BottomUpConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def from_reference_yaml(cls, config: Mapping[str, Any]) -> "BottomUpConfig":
        """The fields of the parsed ``config.yaml`` of ``unc-nlp/frcnn-vg-finetuned``, whose sections (RESNETS,
        RPN, ROI_HEADS, ...) sit at the top level beside MODEL and INPUT; a missing key is an error."""
        resnets, rpn, generator = config["RESNETS"], config["RPN"], config["PROPOSAL_GENERATOR"]
        anchors, roi_heads, box_head = config["ANCHOR_GENERATOR"], config["ROI_HEADS"], config["ROI_BOX_HEAD"]
        model = config["MODEL"]
        if list(rpn["IN_FEATURES"]) != ["res4"] or list(resnets["OUT_FEATURES"]) != ["res4"]:
            raise ValueError("only the C4 layout (RPN and RoI pooling on res4) is supported")
        if resnets["NORM"] not in ("BN", "FrozenBN"):
            raise ValueError(f"RESNETS.NORM {resnets['NORM']!r} is not a (frozen) batch norm")
        if resnets["RES5_DILATION"] != 1 or box_head["CLS_AGNOSTIC_BBOX_REG"] or not box_head["ATTR"]:
            raise ValueError("RES5_DILATION 1, class-specific box regression and the attribute head are the "
                             "supported layout")
        if len(anchors["SIZES"]) != 1 or len(anchors["ASPECT_RATIOS"]) != 1:
            raise ValueError("one feature map (res4) takes one list of anchor sizes and aspect ratios")
        return cls(
            depth=int(resnets["DEPTH"]),
            stem_out_channels=int(resnets["STEM_OUT_CHANNELS"]),
            res2_out_channels=int(resnets["RES2_OUT_CHANNELS"]),
            bottleneck_channels=int(resnets["NUM_GROUPS"]) * int(resnets["WIDTH_PER_GROUP"]),
            stride_in_1x1=bool(resnets["STRIDE_IN_1X1"]),
            caffe_maxpool=bool(model["MAX_POOL"]),
            rpn_hidden_channels=int(generator["HIDDEN_CHANNELS"]),
            anchor_sizes=tuple(float(s) for s in anchors["SIZES"][0]),
            anchor_aspect_ratios=tuple(float(r) for r in anchors["ASPECT_RATIOS"][0]),
            anchor_offset=float(anchors["OFFSET"]),
            rpn_box_weights=tuple(float(w) for w in rpn["BBOX_REG_WEIGHTS"]),  # type: ignore[arg-type]
            rpn_pre_nms_topk=int(rpn["PRE_NMS_TOPK_TEST"]),
            rpn_post_nms_topk=int(rpn["POST_NMS_TOPK_TEST"]),
            rpn_nms_threshold=float(rpn["NMS_THRESH"]),
            rpn_min_box_size=float(generator["MIN_SIZE"]),
            pooler_resolution=int(box_head["POOLER_RESOLUTION"]),
            res5_halve=bool(box_head["RES5HALVE"]),
            num_classes=int(roi_heads["NUM_CLASSES"]),
            num_attributes=int(box_head["NUM_ATTRS"]),
            box_weights=tuple(float(w) for w in box_head["BBOX_REG_WEIGHTS"]),  # type: ignore[arg-type]
            detection_nms_threshold=float(roi_heads["NMS_THRESH_TEST"]),
            pixel_mean=tuple(float(m) for m in model["PIXEL_MEAN"]),  # type: ignore[arg-type]
            pixel_std=tuple(float(s) for s in model["PIXEL_STD"]),  # type: ignore[arg-type]
            min_size_test=int(config["INPUT"]["MIN_SIZE_TEST"]),
            max_size_test=int(config["INPUT"]["MAX_SIZE_TEST"]),
        )


PREPROCESSING_MODES = ("caffe", "lxmert")
SELECTION_MODES = ("bottom-up", "lxmert")


@dataclass(frozen=True)
class ExtractionSettings:
    """How images become pixels and which regions are kept.

    ``preprocessing``:
      - ``"caffe"`` (default): the original pipeline (``fast_rcnn.test._get_image_blob``): BGR pixels as float32,
        means subtracted, resized by ``scale = 600 / shorter side`` (``1000 / longer side`` when the rounded longer
        side would exceed 1000) with OpenCV's ``INTER_LINEAR`` arithmetic; boxes return to the original image by
        dividing by ``scale``.
      - ``"lxmert"``: the transformers research-project port (``processing_image.Preprocess``): torch bilinear
        resize of the raw pixels to the rounded size, then the means subtracted; its ``img_tensorize`` hands the
        network RGB channels although ``INPUT.FORMAT`` is BGR, and this mode reproduces that; boxes return by the
        per-axis ratio ``original / resized``.
    ``selection``:
      - ``"bottom-up"`` (default): ``generate_tsv.py``: per-class NMS (IoU 0.3, Caffe's +1 pixel convention) over
        the RPN proposals, each proposal scored by its highest class confidence among the classes that kept it; the
        boxes are the proposals themselves (no box regression). ``min_boxes = max_boxes = 36`` gives the fixed
        36-region files; ``min_boxes=10, max_boxes=100`` the adaptive ones.
      - ``"lxmert"``: the port's ``do_nms``: class-specific regressed boxes of each proposal's best class, one
        class-agnostic NMS at ``detection_nms_threshold`` (0.6), the first ``max_boxes`` kept.
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

    def signature(self) -> str:
        """A stable string naming these settings, part of every cache namespace."""
        return ",".join(f"{key}={value}" for key, value in sorted(asdict(self).items()))


ADAPTIVE = ExtractionSettings(min_boxes=10, max_boxes=100)
"""The original adaptive mode: 10 to 100 regions, those with confidence >= 0.2."""
