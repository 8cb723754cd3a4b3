"""Load the converted bottom-up detector (``model.safetensors`` + ``config.json``) from a hub id or a local folder."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import torch
from safetensors.torch import load_file

from capeval.hub import folder_fingerprint, resolve_model_folder
from capeval.models.regions.configuration import BottomUpConfig
from capeval.models.regions.modeling_bottom_up import BottomUpDetector

DEFAULT_DETECTOR = "capeval/bottom-up-frcnn-r101-vg"
"""Hub id of the converted ``unc-nlp/frcnn-vg-finetuned`` weights (see hub_models/capeval/bottom-up-frcnn-r101-vg)."""


def load_detector(model: Union[str, Path] = DEFAULT_DETECTOR, revision: Optional[str] = None,
                  device: Union[str, torch.device, None] = None) -> BottomUpDetector:
    """The detector in eval mode on ``device`` (CPU by default); every checkpoint tensor must match a parameter."""
    folder = resolve_model_folder(str(model), revision, ("config.json", "model.safetensors"),
                                  "conversion/convert_regions.py")
    config = BottomUpConfig.load(folder / "config.json")
    detector = BottomUpDetector(config)
    detector.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    detector.fingerprint = folder_fingerprint(folder)
    return detector.to(device or "cpu").eval()

