"""Random checkpoints in the key layouts of the published region detectors at reduced width, built from a seed.

A layout file (``tests/data/regions/reference_layout.json`` for ``unc-nlp/frcnn-vg-finetuned``,
``tests/data/regions/x152-fpn/reference_layout.json`` for vilbert-multi-task's maskrcnn-benchmark detector) lists
the checkpoint's keys, shapes and dtypes, taken from the reference implementation at the reduced widths of the
``config.yaml`` beside it; every tensor is drawn here in that order from one seeded generator, with scales that keep
activations of order one through the deep bodies. The same function built the checkpoints behind the goldens (see
the NOTE.md files there).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Mapping, Tuple

import torch

REGIONS_DATA = Path(__file__).resolve().parent / "data" / "regions"
X152_DATA = REGIONS_DATA / "x152-fpn"
SEED = 20240614


def synthetic_reference_state_dict(anchors: Mapping[str, torch.Tensor], layout: Path = REGIONS_DATA /
                                   "reference_layout.json", seed: int = SEED) -> Dict[str, torch.Tensor]:
    """The reference-layout state dict: conv / linear weights N(0, 1/fan_in) (box and anchor deltas N(0, 0.01)),
    biases N(0, 0.1), batch-norm weight U(0.5, 1), bias N(0, 0.1), mean N(0, 0.1), variance U(0.5, 2) (times
    60**2 in the stem, whose input is raw pixels), embeddings N(0, 1); the anchor buffers are ``anchors``
    (checkpoint key -> tensor)."""
    rows = json.loads(layout.read_text())
    norms = {key[:-len("running_var")] for key, _, _ in rows if key.endswith("running_var")}
    generator = torch.Generator().manual_seed(seed)
    state: Dict[str, torch.Tensor] = {}
    for key, shape, dtype in rows:
        module = key.rsplit(".", 1)[0] + "."
        if key.endswith("num_batches_tracked"):
            state[key] = torch.zeros(shape, dtype=getattr(torch, dtype))
        elif key in anchors:
            state[key] = anchors[key].clone()
        elif key.endswith("running_var"):
            variance = torch.rand(shape, generator=generator) * 1.5 + 0.5
            state[key] = variance * 3600.0 if ".stem." in key else variance
        elif module in norms and key.endswith(".weight"):
            state[key] = torch.rand(shape, generator=generator) * 0.5 + 0.5
        elif key.endswith("running_mean") or key.endswith(".bias"):
            state[key] = torch.randn(shape, generator=generator) * 0.1
        elif key.endswith("cls_embedding.weight"):
            state[key] = torch.randn(shape, generator=generator)
        elif "anchor_deltas" in key or "bbox_pred" in key:
            state[key] = torch.randn(shape, generator=generator) * 0.01
        else:
            fan_in = 1
            for size in shape[1:]:
                fan_in *= size
            state[key] = torch.randn(shape, generator=generator) / fan_in ** 0.5
    return state


def assert_conversion_refuses(convert, state: Mapping[str, torch.Tensor], anchor_key: str, required_key: str,
                              required_name: str) -> None:
    """``convert(state)`` must refuse changed anchors and a missing ``required_key`` (naming ``required_name``)."""
    import pytest

    broken = dict(state)
    broken[anchor_key] = broken[anchor_key] + 1
    with pytest.raises(ValueError, match="anchors"):
        convert(broken)
    broken = dict(state)
    del broken[required_key]
    with pytest.raises(ValueError, match=required_name):
        convert(broken)


def detector_folder_and_images(detector: torch.nn.Module, root: Path) -> Tuple[Path, Path]:
    """(converted detector folder, folder of two random 40x32 JPEGs ``x`` and ``y``) under ``root``."""
    import numpy as np
    from PIL import Image
    from safetensors.torch import save_file

    model_dir, images = root / "model", root / "images"
    model_dir.mkdir()
    images.mkdir()
    save_file({k: v.contiguous() for k, v in detector.state_dict().items()}, str(model_dir / "model.safetensors"))
    detector.config.save(model_dir)
    rng = np.random.default_rng(3)
    for name in ("x", "y"):
        Image.fromarray(rng.integers(0, 255, (32, 40, 3), dtype=np.uint8)).save(images / f"{name}.jpg")
    return model_dir, images


def converted_detector(model_class: type, state: Mapping[str, torch.Tensor], config: object) -> torch.nn.Module:
    """``model_class(config)`` in eval mode holding ``state`` converted by ``conversion/convert_regions.py``."""
    from conversion.convert_regions import convert_state_dict

    converted, _ = convert_state_dict(state, config)
    model = model_class(config)
    model.load_state_dict(converted, strict=True)
    return model.eval()
