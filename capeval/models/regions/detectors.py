"""The region detectors capeval knows, by name: what a metric or ``capeval regions --detector NAME`` loads.

Each :class:`DetectorSpec` holds the default hub id of the converted weights, the config and model classes, and the
extraction settings of the original feature files; :meth:`DetectorSpec.load` loads lazily (nothing is read before
a metric asks for regions). ``"bottom-up"`` serves TIGEr, ``"x152-fpn"`` ViLBERTScore.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Type, Union

from capeval.models.regions.configuration import VILBERT, BottomUpConfig, ExtractionSettings, ResNetConfig, \
    X152FpnConfig

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class DetectorSpec:
    """One detector: where its converted weights live and how its original feature files were extracted."""

    name: str
    hub_id: str
    config_class: Type[ResNetConfig]
    model_path: str
    """``module:Class`` of the detector, imported on first use (so that naming detectors imports no torch)."""
    settings: ExtractionSettings
    cpu_seconds_per_image: float
    """Rough CPU cost of the full-size detector per image on 2 cores (shown by ``capeval regions`` on CPU)."""

    def model_class(self) -> "Type[nn.Module]":
        """The detector's torch module class (imported now)."""
        module, name = self.model_path.split(":")
        return getattr(importlib.import_module(module), name)

    def load(self, model: Union[str, Path, None] = None, revision: Optional[str] = None,
             device: Union[str, "torch.device", None] = None) -> "nn.Module":
        """The detector from ``model`` (a hub id or local folder; this detector's hub id by default)."""
        from capeval.models.regions.loading import load_detector

        return load_detector(self.hub_id if model is None else model, revision=revision, device=device,
                             expected=self)


DETECTORS: Dict[str, DetectorSpec] = {
    "bottom-up": DetectorSpec("bottom-up", "capeval/bottom-up-frcnn-r101-vg", BottomUpConfig,
                              "capeval.models.regions.modeling_bottom_up:BottomUpDetector", ExtractionSettings(),
                              cpu_seconds_per_image=50),
    "x152-fpn": DetectorSpec("x152-fpn", "capeval/vilbert-detector-x152-fpn", X152FpnConfig,
                             "capeval.models.regions.modeling_x152_fpn:X152FpnDetector", VILBERT,
                             cpu_seconds_per_image=100),
}


def spec_for_model_type(model_type: str) -> DetectorSpec:
    """The detector whose ``config.json`` carries ``model_type``."""
    for spec in DETECTORS.values():
        if spec.config_class.model_type == model_type:
            return spec
    raise ValueError(f"config.json model_type {model_type!r} is not a known region detector "
                     f"({', '.join(DETECTORS)})")
