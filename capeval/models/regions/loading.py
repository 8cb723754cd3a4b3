"""Load a converted region detector (``model.safetensors`` + ``config.json``) from a hub id or a local folder; the
config's ``model_type`` says which detector it is (see :mod:`capeval.models.regions.detectors`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import torch
from safetensors.torch import load_file
from torch import nn

from capeval.hub import folder_fingerprint, resolve_model_folder

if TYPE_CHECKING:
    from capeval.models.regions.detectors import DetectorSpec

def load_detector(model: Union[str, Path], revision: Optional[str] = None,
                  device: Union[str, torch.device, None] = None,
                  expected: Optional["DetectorSpec"] = None) -> nn.Module:
    """The detector in eval mode on ``device`` (CPU by default); every checkpoint tensor must match a parameter.
    With ``expected``, a folder holding another detector is refused."""
    from capeval.models.regions.detectors import spec_for_model_type

    folder = resolve_model_folder(str(model), revision, ("config.json", "model.safetensors"),
                                  "conversion/convert_regions.py")
    values = json.loads((folder / "config.json").read_text())
    spec = spec_for_model_type(values.get("model_type", "bottom-up-frcnn"))
    if expected is not None and spec.name != expected.name:
        raise ValueError(f"{model} holds the {spec.name!r} detector, not {expected.name!r}")
    detector = spec.model_class()(spec.config_class.from_dict(values))
    detector.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    detector.fingerprint = folder_fingerprint(folder)
    return detector.to(device or "cpu").eval()

