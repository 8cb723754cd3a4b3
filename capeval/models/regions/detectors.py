"""The region detectors capeval knows, by name (what a metric or ``capeval regions --detector NAME`` loads), and
their loading from a converted folder (``model.safetensors`` + ``config.json``) or hub id.

Each :class:`DetectorSpec` holds the config and model classes and the extraction settings of the original feature
files; its default weights are the registry's (:data:`capeval.registry.MODELS`, ``detector:<name>``), loaded at
their pinned revision. :meth:`DetectorSpec.load` loads lazily (nothing is read, and torch is not imported, before a
metric asks for regions). Which metric family reads which detector is the registry's
(:attr:`capeval.registry.MetricFamily.detector`: ``"bottom-up"`` for TIGEr, ``"x152-fpn"`` for ViLBERTScore).
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Type, Union

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.folder_kinds import check_folder_kind
from capeval.hub import check_weights, folder_fingerprint, loaded_revision, model_name, pinned_model_folder, \
    pinned_revision
from capeval.models.regions.configuration import VILBERT, BottomUpConfig, ExtractionSettings, ResNetConfig, \
    X152FpnConfig
from capeval.registry import MetricFamily, default_model

if TYPE_CHECKING:
    import torch
    from torch import nn



@dataclass(frozen=True)
class DetectorSpec:
    """One detector: its classes, its default weights and how its original feature files were extracted."""

    name: str
    description: str
    """What it is, in a few words (``capeval regions --help``)."""
    config_class: Type[ResNetConfig]
    model_path: str
    """``module:Class`` of the detector, imported on first use (so that naming detectors imports no torch)."""
    settings: ExtractionSettings
    cpu_seconds_per_image: float
    """Rough CPU cost of the full-size detector per image on 2 cores (shown by ``capeval regions`` on CPU)."""

    @property
    def hub_id(self) -> str:
        """Hub id of the converted weights loaded by default."""
        return default_model(f"detector:{self.name}")

    def model_class(self) -> "Type[nn.Module]":
        """The detector's torch module class (imported now)."""
        module, name = self.model_path.split(":")
        return getattr(importlib.import_module(module), name)

    def load(self, model: Union[str, Path, None] = None, revision: Optional[str] = None,
             device: Union[str, "torch.device", None] = None, parameter: str = "model") -> "nn.Module":
        """The detector from ``model`` (a hub id or local folder; this detector's hub id by default); ``parameter``
        names the argument that took ``model``, for the error when it cannot be had."""
        return load_detector(self.hub_id if model is None else model, revision=revision, device=device, expected=self,
                             parameter=parameter)


DETECTORS: Dict[str, DetectorSpec] = {
    "bottom-up": DetectorSpec("bottom-up", "the bottom-up attention Faster R-CNN, ResNet-101 on Visual Genome",
                              BottomUpConfig, "capeval.models.regions.modeling_bottom_up:BottomUpDetector",
                              ExtractionSettings(), cpu_seconds_per_image=50),
    "x152-fpn": DetectorSpec("x152-fpn", "vilbert-multi-task's ResNeXt-152 FPN Faster R-CNN on Visual Genome",
                             X152FpnConfig, "capeval.models.regions.modeling_x152_fpn:X152FpnDetector",
                             VILBERT, cpu_seconds_per_image=100),
}


def family_detector(family: MetricFamily) -> DetectorSpec:
    """The detector that makes the regions ``family``'s scorer reads from images (:attr:`MetricFamily.detector`)."""
    if family.detector is None:
        raise ValueError(f"{family.label} reads no image regions")
    return DETECTORS[family.detector]


def spec_for_model_type(model_type: Optional[str]) -> DetectorSpec:
    """The detector whose ``config.json`` carries ``model_type``."""
    for spec in DETECTORS.values():
        if spec.config_class.model_type == model_type:
            return spec
    raise ValueError(f"config.json model_type {model_type!r} is not a known region detector "
                     f"({', '.join(DETECTORS)})")


def detector_folder(model: Union[str, Path], revision: Optional[str] = None, parameter: str = "model") -> Path:
    """The folder of a detector (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_detector` reads, downloaded or converted now if need be; ``parameter`` names the argument that
    took ``model`` in the error when it cannot be had."""
    return pinned_model_folder(model, revision, (CONFIG_NAME, WEIGHTS_NAME), "conversion/convert_regions.py", parameter)


def build_detector(folder: Path) -> "Tuple[DetectorSpec, nn.Module]":
    """The detector a folder's ``config.json`` describes (its ``model_type`` says which), built with fresh weights on
    torch's current device (the meta device builds it without memory)."""
    values = json.loads((Path(folder) / CONFIG_NAME).read_text(encoding="utf-8"))
    spec = spec_for_model_type(values.get("model_type"))
    return spec, spec.model_class()(spec.config_class.from_dict(values, complete=True))


def load_detector(model: Union[str, Path], revision: Optional[str] = None,
                  device: Union[str, "torch.device", None] = None,
                  expected: Optional[DetectorSpec] = None, parameter: str = "model") -> "nn.Module":
    """The detector in eval mode on ``device`` (CPU by default), from a hub id (at ``revision``, else capeval's pinned
    one) or a local folder; the config's ``model_type`` says which detector it is, and every checkpoint tensor must
    match a parameter. With ``expected``, a folder holding another detector is refused. ``parameter`` names the
    argument that took ``model`` (``regions`` for a scorer's), for the error when it cannot be had."""
    from safetensors.torch import load_file

    revision = pinned_revision(str(model), revision)
    folder = detector_folder(model, revision, parameter)
    check_folder_kind(folder, *(spec.config_class.model_type for spec in DETECTORS.values()
                                if expected is None or spec is expected))
    spec, detector = build_detector(folder)
    check_weights(folder, [WEIGHTS_NAME])
    detector.load_state_dict(load_file(str(folder / WEIGHTS_NAME)), strict=True)
    detector.name = model_name(model)
    detector.fingerprint = folder_fingerprint(folder)
    detector.revision = loaded_revision(folder, revision)
    return detector.to(device or "cpu").eval()
