"""The reference side of parity tests: the CLIPScore / PAC-S reference transform and prompt, built from torchvision."""
from __future__ import annotations

from typing import Sequence

from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Normalize, Resize, ToTensor

PROMPT = "A photo depicts "


def reference_transform(mean: Sequence[float], std: Sequence[float]) -> Compose:
    """The image transform of the CLIPScore / PAC-S reference code."""
    return Compose([Resize(224, interpolation=InterpolationMode.BICUBIC), CenterCrop(224),
                    lambda image: image.convert("RGB"), ToTensor(), Normalize(mean, std)])
