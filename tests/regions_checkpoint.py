"""A random checkpoint in the key layout of ``unc-nlp/frcnn-vg-finetuned`` at reduced width, built from a seed.

``tests/data/regions/reference_layout.json`` lists the checkpoint's keys, shapes and dtypes (taken from the
reference implementation at the reduced widths of ``tests/data/regions/config.yaml``); every tensor is drawn here
in that order from one seeded generator, with scales that keep activations of order one through the 101 layers.
The same function built the checkpoint behind the goldens (see ``tests/data/regions/NOTE.md``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import torch

REGIONS_DATA = Path(__file__).resolve().parent / "data" / "regions"
SEED = 20240614


def synthetic_reference_state_dict(anchors: torch.Tensor, seed: int = SEED) -> Dict[str, torch.Tensor]:
    """The reference-layout state dict: conv / linear weights N(0, 1/fan_in) (box and anchor deltas N(0, 0.01)),
    biases N(0, 0.1), batch-norm weight U(0.5, 1), bias N(0, 0.1), mean N(0, 0.1), variance U(0.5, 2) (times
    60**2 in the stem, whose input is raw pixels), embeddings N(0, 1), ``cell_anchors.0`` = ``anchors``."""
    layout = json.loads((REGIONS_DATA / "reference_layout.json").read_text())
    generator = torch.Generator().manual_seed(seed)
    state: Dict[str, torch.Tensor] = {}
    for key, shape, dtype in layout:
        if key.endswith("num_batches_tracked"):
            state[key] = torch.zeros(shape, dtype=getattr(torch, dtype))
        elif key.endswith("cell_anchors.0"):
            state[key] = anchors.clone()
        elif key.endswith("running_var"):
            variance = torch.rand(shape, generator=generator) * 1.5 + 0.5
            state[key] = variance * 3600.0 if ".stem." in key else variance
        elif ".norm." in key and key.endswith(".weight"):
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
