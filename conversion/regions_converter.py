"""The conversion of a published region detector into capeval's detector folder (``model.safetensors`` +
``config.json``); its command line is ``python -m conversion.convert_regions``.

``--detector bottom-up`` (default): the bottom-up attention detector of ``unc-nlp/frcnn-vg-finetuned``
(``pytorch_model.bin`` + ``config.yaml``) for
:class:`capeval.models.regions.modeling_bottom_up.BottomUpDetector`.
``--detector x152-fpn``: vilbert-multi-task's ``detectron_model.pth`` + ``detectron_config.yaml``
(vqa-maskrcnn-benchmark) for :class:`capeval.models.regions.modeling_x152_fpn.X152FpnDetector`.
Checkpoints are read with ``torch.load(weights_only=True)``; a maskrcnn-benchmark checkpoint's ``"model"`` entry
is the state dict (its optimizer / scheduler entries are ignored) and a leading ``module.`` is removed. The original
yaml becomes capeval's ``config.json`` (:func:`bottom_up_config`, :func:`x152_fpn_config`).

Bottom-up: every checkpoint key is either renamed (:func:`capeval_key`) or listed as dropped with the reason:

* ``backbone.stem.conv1.weight`` -> ``backbone.stem.conv.weight``; ``backbone.stem.conv1.norm.*`` ->
  ``backbone.stem.norm.*``;
* ``...{res2,res3,res4}.N.convK.weight`` unchanged; ``...convK.norm.*`` -> ``...normK.*``;
  ``...shortcut.norm.*`` -> ``...shortcut_norm.*``; the same inside ``roi_heads.res5.N`` -> ``res5.N``;
* ``proposal_generator.rpn_head.{conv,objectness_logits,anchor_deltas}.*`` -> ``rpn.{conv,objectness,anchor_deltas}.*``;
* ``roi_heads.box_predictor.*`` -> ``heads.*``;
* Caffe-style ``gamma`` / ``beta`` names are read as ``weight`` / ``bias`` (the reference loader does the same);
* dropped: ``*.num_batches_tracked`` (batch norm counters, unused at test time) and
  ``proposal_generator.anchor_generator.cell_anchors.0`` (recomputed from the config; checked equal first).

ResNeXt-152 FPN (:func:`fpn_key`):

* ``backbone.body.stem.conv1.weight`` -> ``backbone.stem.conv.weight``, ``backbone.body.stem.bn1.*`` ->
  ``backbone.stem.norm.*``;
* ``backbone.body.layer{1,2,3,4}.N.*`` -> ``backbone.res{2,3,4,5}.N.*`` with ``bnK`` -> ``normK``,
  ``downsample.0`` -> ``shortcut``, ``downsample.1`` -> ``shortcut_norm``;
* ``backbone.fpn.fpn_inner{1-4}.*`` -> ``fpn.lateral.{0-3}.*``; ``backbone.fpn.fpn_layer{1-4}.*`` ->
  ``fpn.output.{0-3}.*``;
* ``rpn.head.{conv,cls_logits,bbox_pred}.*`` -> ``rpn.{conv,objectness,anchor_deltas}.*``;
* ``roi_heads.box.feature_extractor.{fc6,fc7}.*`` and ``roi_heads.box.predictor.cls_score.*`` -> ``box_head.*``;
* dropped: ``rpn.anchor_generator.cell_anchors.N`` (recomputed from the config; checked equal first),
  ``roi_heads.box.predictor.bbox_pred.*`` (class-specific box regression: the feature files keep the RPN proposals
  themselves) and the vqa fork's attribute head ``roi_heads.box.predictor.{cls_embed,attr_linear1,attr_linear2}.*``
  (not run by ``extract_features.py``).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import torch
import yaml

from capeval.fetch import reading
from capeval.hub import save_weights
from capeval.models.regions.configuration import RESNET_BLOCKS, BottomUpConfig, X152FpnConfig
from capeval.models.regions.modeling_bottom_up import BottomUpDetector, cell_anchors
from capeval.models.regions.modeling_x152_fpn import X152FpnDetector, legacy_cell_anchors
from conversion.convert_regions import BOTTOM_UP, X152_FPN

CELL_ANCHORS_KEY = "proposal_generator.anchor_generator.cell_anchors.0"

_PREFIXES: Tuple[Tuple[str, str], ...] = (
    ("proposal_generator.rpn_head.objectness_logits.", "rpn.objectness."),
    ("proposal_generator.rpn_head.", "rpn."),
    ("roi_heads.box_predictor.", "heads."),
    ("roi_heads.res5.", "res5."),
)
_NORM = re.compile(r"\.conv([123])\.norm\.")


def capeval_key(key: str) -> Optional[str]:
    """The capeval parameter name of a checkpoint key, or ``None`` for keys that are dropped (see module doc)."""
    if key.endswith(".num_batches_tracked") or key == CELL_ANCHORS_KEY:
        return None
    key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key))
    for old, new in _PREFIXES:
        if key.startswith(old):
            key = new + key[len(old):]
            break
    key = key.replace("backbone.stem.conv1.norm.", "backbone.stem.norm.")
    key = key.replace("backbone.stem.conv1.weight", "backbone.stem.conv.weight")
    key = key.replace(".shortcut.norm.", ".shortcut_norm.")
    return _NORM.sub(r".norm\1.", key)


_FPN_PREFIXES: Tuple[Tuple[str, str], ...] = (
    ("backbone.body.stem.conv1.", "backbone.stem.conv."),
    ("backbone.body.stem.bn1.", "backbone.stem.norm."),
    ("rpn.head.cls_logits.", "rpn.objectness."),
    ("rpn.head.bbox_pred.", "rpn.anchor_deltas."),
    ("rpn.head.", "rpn."),
    ("roi_heads.box.feature_extractor.", "box_head."),
    ("roi_heads.box.predictor.cls_score.", "box_head.cls_score."),
)
_FPN_DROPPED = re.compile(r"^(rpn\.anchor_generator\.cell_anchors\.\d+|roi_heads\.box\.predictor\."
                          r"(bbox_pred|cls_embed|attr_linear1|attr_linear2)\.\w+)$")
_FPN_ANCHORS = re.compile(r"^rpn\.anchor_generator\.cell_anchors\.(\d+)$")


def fpn_key(key: str) -> Optional[str]:
    """The capeval parameter name of a ResNeXt-152 FPN checkpoint key, or ``None`` if dropped (see module doc)."""
    if _FPN_DROPPED.match(key):
        return None
    for old, new in _FPN_PREFIXES:
        if key.startswith(old):
            return new + key[len(old):]
    layer = re.match(r"^backbone\.body\.layer([1-4])\.(.*)$", key)
    if layer:
        rest = re.sub(r"(^|\.)bn([123])\.", r"\1norm\2.", layer.group(2))
        rest = rest.replace("downsample.0.", "shortcut.").replace("downsample.1.", "shortcut_norm.")
        return f"backbone.res{int(layer.group(1)) + 1}.{rest}"
    pyramid = re.match(r"^backbone\.fpn\.fpn_(inner|layer)([1-4])\.(.*)$", key)
    if pyramid:
        part = "lateral" if pyramid.group(1) == "inner" else "output"
        return f"fpn.{part}.{int(pyramid.group(2)) - 1}.{pyramid.group(3)}"
    return key


def load_checkpoint(path: Path) -> Dict[str, torch.Tensor]:
    """The checkpoint's state dict (a maskrcnn-benchmark checkpoint's ``"model"`` entry, ``module.`` removed);
    files holding anything but tensors and plain containers are refused (``weights_only=True``)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, Mapping) and isinstance(state.get("model"), Mapping):
        state = state["model"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} is not a flat state dict of tensors")
    return {key[len("module."):] if key.startswith("module.") else key: value for key, value in state.items()}


def _expected_anchors(config: Union[BottomUpConfig, X152FpnConfig]) -> Dict[str, torch.Tensor]:
    """The stored anchor buffers a checkpoint of this config must hold, recomputed from the config."""
    if isinstance(config, BottomUpConfig):
        return {CELL_ANCHORS_KEY: cell_anchors(config)}
    return {f"rpn.anchor_generator.cell_anchors.{level}": legacy_cell_anchors(stride, size,
                                                                              config.anchor_aspect_ratios)
            for level, (stride, size) in enumerate(zip(config.anchor_strides, config.anchor_sizes))}


def convert_state_dict(state: Mapping[str, torch.Tensor], config: Union[BottomUpConfig, X152FpnConfig]
                       ) -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """(capeval state dict, dropped checkpoint keys) for the detector of ``config``; raises if a key is unknown,
    missing or of the wrong shape, or if stored cell anchors differ from those the config gives."""
    bottom_up = isinstance(config, BottomUpConfig)
    rename: Callable[[str], Optional[str]] = capeval_key if bottom_up else fpn_key
    with torch.device("meta"):  # names and shapes only
        expected = (BottomUpDetector(config) if bottom_up else X152FpnDetector(config)).state_dict()
    converted: Dict[str, torch.Tensor] = {}
    dropped: List[str] = []
    unexpected: List[str] = []
    for key, tensor in state.items():
        name = rename(key)
        if name is None:
            dropped.append(key)
            continue
        if name not in expected:
            unexpected.append(key)
            continue
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise ValueError(f"{key} -> {name}: shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
        converted[name] = tensor.detach().to(torch.float32).contiguous()
    missing = sorted(set(expected) - set(converted))
    if unexpected or missing:
        raise ValueError(f"checkpoint does not match the config: unexpected keys {unexpected}, missing {missing}")
    for key, anchors in _expected_anchors(config).items():
        if key in state and not torch.equal(state[key].float(), anchors):
            raise ValueError(f"{key} differs from the anchors of the config's sizes and aspect ratios")
    return converted, dropped


def _floats(values: Iterable[Any]) -> Tuple[float, ...]:
    return tuple(float(value) for value in values)


def _yacs_tuple(value: Any) -> Tuple[Any, ...]:
    """A yacs-style value as a tuple: yaml lists, or strings such as ``"(0.5, 1.0, 2.0)"``."""
    if isinstance(value, str):
        value = ast.literal_eval(value)
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _check_bottom_up_layout(config: Mapping[str, Any]) -> None:
    """Refuse a ``config.yaml`` of another layout than the C4 detector with the attribute head."""
    resnets, rpn = config["RESNETS"], config["RPN"]
    anchors, box_head = config["ANCHOR_GENERATOR"], config["ROI_BOX_HEAD"]
    if list(rpn["IN_FEATURES"]) != ["res4"] or list(resnets["OUT_FEATURES"]) != ["res4"]:
        raise ValueError("only the C4 layout (RPN and RoI pooling on res4) is supported")
    if resnets["NORM"] not in ("BN", "FrozenBN"):
        raise ValueError(f"RESNETS.NORM {resnets['NORM']!r} is not a (frozen) batch norm")
    if resnets["RES5_DILATION"] != 1 or box_head["CLS_AGNOSTIC_BBOX_REG"] or not box_head["ATTR"]:
        raise ValueError("RES5_DILATION 1, class-specific box regression and the attribute head are the "
                         "supported layout")
    if len(anchors["SIZES"]) != 1 or len(anchors["ASPECT_RATIOS"]) != 1:
        raise ValueError("one feature map (res4) takes one list of anchor sizes and aspect ratios")


def bottom_up_config(config: Mapping[str, Any]) -> BottomUpConfig:
    """The config of the parsed ``config.yaml`` of ``unc-nlp/frcnn-vg-finetuned``, whose sections (RESNETS, RPN,
    ROI_HEADS, ...) sit at the top level beside MODEL and INPUT; a missing key is an error."""
    _check_bottom_up_layout(config)
    resnets, rpn, generator = config["RESNETS"], config["RPN"], config["PROPOSAL_GENERATOR"]
    anchors, roi_heads, box_head = config["ANCHOR_GENERATOR"], config["ROI_HEADS"], config["ROI_BOX_HEAD"]
    model = config["MODEL"]
    return BottomUpConfig(
        depth=int(resnets["DEPTH"]),
        stem_out_channels=int(resnets["STEM_OUT_CHANNELS"]),
        res2_out_channels=int(resnets["RES2_OUT_CHANNELS"]),
        num_groups=int(resnets["NUM_GROUPS"]),
        bottleneck_channels=int(resnets["NUM_GROUPS"]) * int(resnets["WIDTH_PER_GROUP"]),
        stride_in_1x1=bool(resnets["STRIDE_IN_1X1"]),
        caffe_maxpool=bool(model["MAX_POOL"]),
        rpn_hidden_channels=int(generator["HIDDEN_CHANNELS"]),
        anchor_sizes=_floats(anchors["SIZES"][0]),
        anchor_aspect_ratios=_floats(anchors["ASPECT_RATIOS"][0]),
        anchor_offset=float(anchors["OFFSET"]),
        rpn_box_weights=_floats(rpn["BBOX_REG_WEIGHTS"]),  # type: ignore[arg-type]
        rpn_pre_nms_topk=int(rpn["PRE_NMS_TOPK_TEST"]),
        rpn_post_nms_topk=int(rpn["POST_NMS_TOPK_TEST"]),
        rpn_nms_threshold=float(rpn["NMS_THRESH"]),
        rpn_min_box_size=float(generator["MIN_SIZE"]),
        pooler_resolution=int(box_head["POOLER_RESOLUTION"]),
        res5_halve=bool(box_head["RES5HALVE"]),
        num_classes=int(roi_heads["NUM_CLASSES"]),
        num_attributes=int(box_head["NUM_ATTRS"]),
        box_weights=_floats(box_head["BBOX_REG_WEIGHTS"]),  # type: ignore[arg-type]
        detection_nms_threshold=float(roi_heads["NMS_THRESH_TEST"]),
        pixel_mean=_floats(model["PIXEL_MEAN"]),  # type: ignore[arg-type]
        pixel_std=_floats(model["PIXEL_STD"]),  # type: ignore[arg-type]
        min_size_test=int(config["INPUT"]["MIN_SIZE_TEST"]),
        max_size_test=int(config["INPUT"]["MAX_SIZE_TEST"]),
    )


def _x152_fpn_depth(model: Mapping[str, Any]) -> int:
    """The ResNet depth of a maskrcnn-benchmark ``MODEL`` section; layouts other than a ResNe(X)t FPN with the
    2-MLP box head and class-specific FPN predictor are refused."""
    body = str(model.get("BACKBONE", {}).get("CONV_BODY", ""))
    depth = body[2:-4] if body.startswith("R-") and body.endswith("-FPN") else ""
    if not depth.isdigit() or int(depth) not in RESNET_BLOCKS:
        raise ValueError(f"BACKBONE.CONV_BODY {body!r} is not a ResNet/ResNeXt FPN body (R-50/101/152-FPN)")
    _check_fpn_heads(model)
    _check_frozen_bottlenecks(model.get("RESNETS", {}))
    return int(depth)


def _check_fpn_heads(model: Mapping[str, Any]) -> None:
    """Refuse FPN, RPN and box head variants other than the released ones."""
    box_head = model.get("ROI_BOX_HEAD", {})
    if not (model.get("RPN", {}).get("USE_FPN") and model.get("ROI_HEADS", {}).get("USE_FPN")):
        raise ValueError("RPN.USE_FPN and ROI_HEADS.USE_FPN must be set: this is the FPN detector")
    expected = {"FEATURE_EXTRACTOR": "FPN2MLPFeatureExtractor", "PREDICTOR": "FPNPredictor"}
    if any(box_head.get(key) != value for key, value in expected.items()) or \
            model.get("CLS_AGNOSTIC_BBOX_REG") or model.get("RPN_ONLY") or model.get("MASK_ON"):
        raise ValueError(f"the box head must be {expected} without class-agnostic regression, masks or RPN-only")
    if model.get("FPN", {}).get("USE_GN") or model.get("FPN", {}).get("USE_RELU") or box_head.get("USE_GN"):
        raise ValueError("FPN / box head group norm or ReLU variants are not the released layout")


def _check_frozen_bottlenecks(resnets: Mapping[str, Any]) -> None:
    """Refuse ResNet blocks other than frozen-batch-norm bottlenecks without dilation or deformable convs."""
    if resnets.get("RES5_DILATION", 1) != 1 or resnets.get("TRANS_FUNC", "BottleneckWithFixedBatchNorm") != \
            "BottleneckWithFixedBatchNorm" or resnets.get("STEM_FUNC", "StemWithFixedBatchNorm") != \
            "StemWithFixedBatchNorm" or any(_yacs_tuple(resnets.get("STAGE_WITH_DCN", ()))):
        raise ValueError("only frozen-batch-norm bottlenecks without dilation or deformable convs are supported")


def x152_fpn_config(config: Mapping[str, Any]) -> X152FpnConfig:
    """The network fields of a parsed maskrcnn-benchmark yaml (its ``MODEL`` section); a key the yaml leaves out
    keeps maskrcnn-benchmark's default. Tuples may be written as yacs strings such as ``"(4, 8, 16)"``. The input
    constants (BGR means, 800 / 1333, padding to 32) are not read: ``script/extract_features.py`` hard-codes them
    and feeds the network directly, bypassing the yaml's INPUT transforms."""
    model = config["MODEL"]
    depth = _x152_fpn_depth(model)
    backbone, resnets = model.get("BACKBONE", {}), model.get("RESNETS", {})
    rpn, box_head = model.get("RPN", {}), model.get("ROI_BOX_HEAD", {})
    groups = int(resnets.get("NUM_GROUPS", 1))
    return X152FpnConfig(
        depth=depth,
        stem_out_channels=int(resnets.get("STEM_OUT_CHANNELS", 64)),
        res2_out_channels=int(resnets.get("RES2_OUT_CHANNELS", 256)),
        num_groups=groups,
        bottleneck_channels=groups * int(resnets.get("WIDTH_PER_GROUP", 64)),
        stride_in_1x1=bool(resnets.get("STRIDE_IN_1X1", True)),
        fpn_channels=int(backbone.get("OUT_CHANNELS", resnets.get("BACKBONE_OUT_CHANNELS", 256))),
        anchor_sizes=_floats(_yacs_tuple(rpn.get("ANCHOR_SIZES", X152FpnConfig.anchor_sizes))),
        anchor_strides=tuple(int(s) for s in _yacs_tuple(rpn.get("ANCHOR_STRIDE", X152FpnConfig.anchor_strides))),
        anchor_aspect_ratios=_floats(_yacs_tuple(rpn.get("ASPECT_RATIOS", X152FpnConfig.anchor_aspect_ratios))),
        rpn_pre_nms_topk=int(rpn.get("PRE_NMS_TOP_N_TEST", 6000)),
        rpn_post_nms_topk=int(rpn.get("POST_NMS_TOP_N_TEST", 1000)),
        rpn_fpn_post_nms_topk=int(rpn.get("FPN_POST_NMS_TOP_N_TEST", 2000)),
        rpn_nms_threshold=float(rpn.get("NMS_THRESH", 0.7)),
        rpn_min_box_size=float(rpn.get("MIN_SIZE", 0)),
        pooler_resolution=int(box_head.get("POOLER_RESOLUTION", 14)),
        pooler_scales=_floats(_yacs_tuple(box_head.get("POOLER_SCALES", (1.0 / 16,)))),
        pooler_sampling_ratio=int(box_head.get("POOLER_SAMPLING_RATIO", 0)),
        mlp_head_dim=int(box_head.get("MLP_HEAD_DIM", 1024)),
        num_classes=int(box_head.get("NUM_CLASSES", 81)),
    )


CONFIG_READERS: Dict[str, Callable[[Mapping[str, Any]], Union[BottomUpConfig, X152FpnConfig]]] = {
    BOTTOM_UP: bottom_up_config, X152_FPN: x152_fpn_config}
"""``--detector`` -> the reader of its original yaml."""


def convert_checkpoint(checkpoint: Path, config_yaml: Path, out_dir: Path, detector: str = BOTTOM_UP) -> List[str]:
    """Write ``model.safetensors`` and ``config.json`` to ``out_dir``; returns the dropped checkpoint keys."""
    with reading(config_yaml):
        config = CONFIG_READERS[detector](yaml.safe_load(config_yaml.read_text()))
    with reading(checkpoint):
        state = load_checkpoint(checkpoint)
    converted, dropped = convert_state_dict(state, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_weights(converted, out_dir, metadata={"format": "pt"})
    config.save(out_dir)
    return dropped
