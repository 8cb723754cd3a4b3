"""Load a converted region detector (``model.safetensors`` + ``config.json``) from a hub id or a local folder; the
config's ``model_type`` says which detector it is (see :mod:`capeval.models.regions.detectors`)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import torch
from safetensors.torch import load_file
from torch import nn

from capeval.backbones import resolve_model_folder

if TYPE_CHECKING:
    from capeval.models.regions.detectors import DetectorSpec

DEFAULT_DETECTOR = "capeval/bottom-up-frcnn-r101-vg"
"""Hub id of the converted ``unc-nlp/frcnn-vg-finetuned`` weights (see hub_models/capeval/bottom-up-frcnn-r101-vg)."""


def load_detector(model: Union[str, Path] = DEFAULT_DETECTOR, revision: Optional[str] = None,
                  device: Union[str, torch.device, None] = None,
                  expected: Optional["DetectorSpec"] = None) -> nn.Module:
    """The detector in eval mode on ``device`` (CPU by default); every checkpoint tensor must match a parameter.
    With ``expected``, a folder holding another detector is refused."""
    from capeval.models.regions.detectors import spec_for_model_type

    folder = resolve_model_folder(str(model), revision)
    values = json.loads((folder / "config.json").read_text())
    spec = spec_for_model_type(values.get("model_type", "bottom-up-frcnn"))
    if expected is not None and spec.name != expected.name:
        raise ValueError(f"{model} holds the {spec.name!r} detector, not {expected.name!r}")
    detector = spec.model_class(spec.config_class.from_dict(values))
    detector.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    detector.fingerprint = fingerprint(folder)
    return detector.to(device or "cpu").eval()


def fingerprint(folder: Path) -> str:
    """A digest of the weights and config files, naming the model in cache namespaces."""
    hasher = hashlib.blake2b(digest_size=12)
    for name in ("config.json", "model.safetensors"):
        with open(folder / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(block)
    return hasher.hexdigest()
